"""The error every config check raises."""


class ConfigError(ValueError):
    """A user error in the run config. ``str(error)`` is the one-paragraph message to print."""
