"""A build's time left comes from its own rates (``crag.jobs.Pace``): seconds per page read and per passage embedded,
times the pages and passages left. Judged here on builds simulated with a fake clock and rates that change from file
to file, as a real build's do (a Chinese manual makes more passages per page than an English one, a scan reads
slower); the figures of a real build are in docs/benchmarks.md."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from crag.jobs import ESTIMATE_AFTER_PAGES, Pace
from crag.types import Progress
from ui.text import time_left


@dataclass
class Clock:
    now: float = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class FakeBuild:
    """A build's progress as ``crag.ingest.build`` reports it, on a fake clock. Each file has its own seconds per page
    read, passages per page and seconds per passage embedded. ``ahead``: pages are read by workers while passages are
    embedded in batches of 64 (the app's builds); else a file is read whole, then embedded (a small build)."""

    files: list[tuple[int, float, float, float]]  # pages, seconds per page, passages per page, seconds per passage
    ahead: bool = True
    clock: Clock = field(default_factory=Clock)
    read: int = 0
    chunked: int = 0
    made: float = 0.0
    embedded: int = 0
    embed_seconds: float = 0.0

    def steps(self) -> Iterator[Progress]:
        total = sum(f[0] for f in self.files)
        for index, (pages, per_page, per_passage_made, per_passage) in enumerate(self.files, start=1):
            at = dict(file=f"f{index}.pdf", file_index=index, file_count=len(self.files))
            yield self._said(Progress(stage="parsing", **at), total)
            for page in range(1, pages + 1):
                self.clock.now += per_page
                self.read += 1
                if self.ahead:
                    self.chunked += 1
                    self.made += per_passage_made
                    while int(self.made) - self.embedded >= 64:
                        self._embed(64, per_passage)
                yield self._said(Progress(stage="parsing", page=page, page_count=pages, **at), total)
            if not self.ahead:
                self.chunked += pages
                self.made += pages * per_passage_made
            while int(self.made) > self.embedded:
                n = min(64, int(self.made) - self.embedded)
                yield self._said(Progress(stage="embedding", page=n, page_count=n, **at), total)
                self._embed(n, per_passage)
            yield self._said(Progress(stage="finished", **at), total)
        self.clock.now += 2.0
        yield self._said(Progress(stage="writing"), total)
        yield self._said(Progress(stage="done"), total)

    def _embed(self, n: int, per_passage: float) -> None:
        self.clock.now += n * per_passage
        self.embed_seconds += n * per_passage
        self.embedded += n

    def _said(self, p: Progress, total: int) -> Progress:
        return Progress(
            **{k: v for k, v in vars(p).items() if k in ("stage", "file", "file_index", "file_count", "page")},
            page_count=p.page_count,
            pages_total=total,
            pages_read=self.read,
            pages_chunked=self.chunked,
            passages=int(self.made),
            embedded=self.embedded,
            embed_seconds=self.embed_seconds,
        )


def estimates(build: FakeBuild) -> list[tuple[float, float | None]]:
    """(time, seconds left as the pace says then) at every step."""
    pace = Pace(clock=build.clock)
    seen = []
    for p in build.steps():
        pace.see(p)
        seen.append((build.clock.now, pace.left()))
    return seen


def files_like_a_real_folder(seed: int) -> list[tuple[int, float, float, float]]:
    """A short guide, then long manuals: rates from file to file up to twice as fast or slow as the first's."""
    rng = random.Random(seed)
    sizes = [2, rng.randint(150, 240), rng.randint(20, 60), rng.randint(80, 140)]
    return [(n, 0.3 * rng.uniform(0.7, 1.4), 3.5 * rng.uniform(0.7, 1.4), 0.08 * rng.uniform(0.7, 1.4)) for n in sizes]


@pytest.mark.parametrize("ahead", [True, False], ids=["workers", "in-process"])
@pytest.mark.parametrize("seed", range(6))
def test_after_a_fifth_of_the_build_the_estimate_is_within_half_the_real_time_left(seed: int, ahead: bool) -> None:
    build = FakeBuild(files_like_a_real_folder(seed), ahead=ahead)
    seen = estimates(build)
    end = seen[-1][0]
    # From a fifth of the build on, until its last twentieth: seconds, where the page says "less than a minute left".
    judged = [(t, left) for t, left in seen if 0.2 * end <= t <= 0.95 * end]
    assert len(judged) > 100
    for t, left in judged:
        assert left is not None, f"no estimate at {t / end:.0%} of the build"
        assert 0.5 <= left / (end - t) <= 1.5, (f"{t / end:.0%}", left, end - t)


def test_nothing_is_said_before_a_few_pages_are_read_and_passages_embedded() -> None:
    build = FakeBuild([(60, 0.5, 4.0, 0.1)])
    pace, said = Pace(clock=build.clock), []
    for p in build.steps():
        pace.see(p)
        said.append((p.pages_read, p.embedded, pace.left()))
    first = next(i for i, (_, _, left) in enumerate(said) if left is not None)
    pages, embedded, _ = said[first]
    assert pages > ESTIMATE_AFTER_PAGES and embedded > 0
    assert all(left is None for _, _, left in said[:first])
    assert said[-1][2] == 0.0, "done: nothing left"


def test_between_two_steps_the_estimate_counts_down_and_the_bar_never_goes_back() -> None:
    clock = Clock(100.0)
    pace = Pace(clock=clock)
    at = dict(stage="parsing", file="a.pdf", file_index=1, file_count=1, pages_total=100)
    pace.see(Progress(**at))
    clock.now = 110.0  # the first part, 8 pages, after the workers' start: the rates count from here
    pace.see(Progress(**at, page=8, pages_read=8, pages_chunked=8, passages=32))
    counts = dict(pages_read=28, pages_chunked=28, passages=112, embedded=80, embed_seconds=40.0)
    clock.now = 160.0  # 20 more pages in 50 s, 40 of them embedding 80 passages: 0.5 s a page, 0.5 s a passage
    pace.see(Progress(**at, page=28, **counts))
    assert pace.left() == pytest.approx(72 * 0.5 + (72 * 4 + 32) * 0.5)
    assert time_left(pace.left()) == "about 3 min left"
    shown = pace.share(0.05)
    assert shown == pytest.approx(60 / (60 + 196))
    clock.now = 170.0  # an embedding batch of 10 s, no step meanwhile
    assert pace.left() == pytest.approx(186.0)
    slower = dict(counts, embed_seconds=48.0)  # the next step: embedding turned out slower
    pace.see(Progress(**at, page=28, **slower))
    assert pace.left() > 186.0 and pace.share(0.05) == shown, "a longer estimate holds the bar, never moves it back"
    clock.now = 10_000.0
    assert pace.left() == 0.0 and time_left(pace.left()) == "less than a minute left"
