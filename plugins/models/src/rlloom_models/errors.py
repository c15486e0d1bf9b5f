"""The error every model source raises when it cannot produce its folder."""


class ModelSourceError(RuntimeError):
    """A model source cannot produce its folder: missing package or file, bad path, failed conversion."""
