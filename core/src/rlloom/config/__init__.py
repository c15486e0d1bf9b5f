"""The run config: core schemas and the Hydra composition + validation of plugin-provided groups."""

from rlloom.config.compose import ResolvedConfig, compose_config
from rlloom.errors import ConfigError

__all__ = ["ConfigError", "ResolvedConfig", "compose_config"]
