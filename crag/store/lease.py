"""One build at a time across machines: a lease record on the Chroma server, with an expiry.

A file lock covers the processes of one machine only. The lease is a record in a small collection,
taken only when there is none or it has expired, renewed by the running build (a heartbeat), released
at the end. A build killed with SIGKILL renews nothing: its lease expires by itself.

Chroma has no compare-and-set, but ``add`` of an id that exists is ignored: the first writer wins.
So each taking of the lease adds a new record, ``build-lease-<epoch>``, one epoch above the last;
two builds that race for the same epoch read back who won. The highest epoch is the lease.
Expiry is a Unix time by the holder's clock: machines that share a server keep their clocks in
step (NTP), which the lease's length forgives by seconds.
"""

from __future__ import annotations

import os
import secrets
import socket
import time
from dataclasses import dataclass
from typing import Any

from crag.store.common import BuildInProgress

PREFIX = "build-lease-"
UNIT = [[1.0]]  # Chroma stores a vector with every record; these records need none


@dataclass(frozen=True)
class LeaseRecord:
    epoch: int
    holder: str
    token: str
    expires: float  # Unix time

    def live(self) -> bool:
        return self.expires > time.time()


def _when(expires: float) -> str:
    return time.strftime("%H:%M:%S UTC", time.gmtime(expires))


def busy(record: LeaseRecord | None, ttl: float) -> BuildInProgress:
    """The refusal a second build gets: who builds, and until when the lease holds."""
    if record is None:
        return BuildInProgress("A knowledge-base build is already starting: wait for it to finish.")
    left = max(0, round(record.expires - time.time()))
    return BuildInProgress(
        f"A knowledge-base build is already running ({record.holder}); its lease on the Chroma server "
        f"expires at {_when(record.expires)} (in {left} s) unless that build renews it, as it does while it "
        f"runs: wait for it to finish. A build that was killed holds the lease until it expires "
        f"(CRAG_BUILD_LEASE_SECONDS, {ttl:g} s)."
    )


class Lease:
    """This process's claim on the build lease."""

    def __init__(self, collection: Any, ttl: float) -> None:
        self.collection = collection
        self.ttl = ttl
        self.token = secrets.token_hex(8)
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        self.holder = f"host {socket.gethostname()} pid {os.getpid()}, started {started}"
        self.epoch = 0

    def records(self) -> list[LeaseRecord]:
        got = self.collection.get(include=["metadatas"])
        out = []
        for rid, meta in zip(got["ids"], got["metadatas"], strict=True):
            if rid.startswith(PREFIX) and meta:
                out.append(LeaseRecord(int(rid[len(PREFIX) :]), meta["holder"], meta["token"], float(meta["expires"])))
        return sorted(out, key=lambda r: r.epoch)

    def _write(self, epoch: int, expires: float, *, new: bool) -> None:
        meta = {"holder": self.holder, "token": self.token, "expires": expires}
        write = self.collection.add if new else self.collection.upsert
        write(ids=[f"{PREFIX}{epoch:012d}"], embeddings=UNIT, metadatas=[meta])

    def acquire(self) -> None:
        """Take the lease, or raise ``BuildInProgress`` naming the build that holds it."""
        records = self.records()
        top = records[-1] if records else None
        if top is not None and top.live():
            raise busy(top, self.ttl)
        epoch = top.epoch + 1 if top else 1
        self._write(epoch, time.time() + self.ttl, new=True)  # ignored when another build added it first
        won = next((r for r in self.records() if r.epoch == epoch), None)
        if won is None or won.token != self.token:
            raise busy(won, self.ttl)
        self.epoch = epoch
        stale = [f"{PREFIX}{r.epoch:012d}" for r in records]  # nobody renews those any more
        if stale:
            self.collection.delete(ids=stale)

    def renew(self) -> bool:
        """Push the expiry on; False when another build has taken the lease since (this one expired)."""
        records = self.records()
        top = records[-1] if records else None
        if top is None or top.epoch != self.epoch or top.token != self.token:
            return False
        self._write(self.epoch, time.time() + self.ttl, new=False)
        return True

    def check(self) -> None:
        """Raise unless this build still holds the lease: called just before the index switches."""
        if not self.renew():
            raise BuildInProgress(
                f"This build lost its lease on the Chroma server: it was not renewed for {self.ttl:g} s "
                "(the server was unreachable, or the process stalled) and another build took over. "
                "Nothing was switched; the other build's index will answer. Run the build again if needed."
            )

    def release(self) -> None:
        if self.renew():
            self._write(self.epoch, 0.0, new=False)
