"""Errors meant for the user: each message says what to do next, or names a remedy that each edge says in its own
words (the app's button, the command line's command, the HTTP API's endpoint)."""

from __future__ import annotations

from enum import StrEnum


class Remedy(StrEnum):
    """What the user does about a message that the core cannot say in one edge's words."""

    BUILD = "build"  # build the knowledge base: the files new or changed since the last build
    FULL_REBUILD = "full_rebuild"  # rebuild it whole: every file parsed and embedded anew


class CragError(Exception):
    """Base class. The message is shown to the user, followed by its ``remedy`` in the edge's words when it has
    one; without one, the message itself must name the fix."""

    remedy: Remedy | None = None

    def __init__(self, *args: object, remedy: Remedy | None = None) -> None:
        super().__init__(*args)
        if remedy is not None:
            self.remedy = remedy


def said(message: str, remedy: Remedy | None, words: dict[Remedy, str]) -> str:
    """A message with its remedy, in the words of the edge that shows it (``words``)."""
    return f"{message} {words[remedy]}" if remedy is not None else message


class ConfigError(CragError):
    """A setting is missing or contradicts another."""


class BackendUnavailable(CragError):
    """A model server or model that was asked for cannot be used."""


class IndexNotWritable(CragError):
    """The index folder cannot be written: no build can run."""


class BuildCancelled(CragError):
    """A build stopped on request; the previous index still answers."""
