"""Errors a plugin raises to end a command with the run-failed exit status (1) and one paragraph, no
traceback: :class:`RunFailedError`. A role's failures are :mod:`rlloom.controller.roles`'s, a bad
config's :class:`rlloom.config.ConfigError`."""


class RunFailedError(RuntimeError):
    """A run stopped itself (too many non-finite steps) or could not write or read its state (a
    checkpoint); the message says why and where to look."""
