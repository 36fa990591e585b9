"""Errors meant for the user: each message says what to do next."""


class CragError(Exception):
    """Base class. The message is shown to the user as is, so it must name the fix."""


class ConfigError(CragError):
    """A setting is missing or contradicts another."""


class BackendUnavailable(CragError):
    """A model server or model that was asked for cannot be used."""


class IndexNotWritable(CragError):
    """The index folder cannot be written: no build can run."""


class BuildCancelled(CragError):
    """A build stopped on request; the previous index still answers."""
