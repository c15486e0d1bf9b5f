"""The run config: core schemas and the Hydra composition + validation of plugin-provided groups."""

from rlloom.config.compose import ConfigError, ResolvedConfig, compose_config

__all__ = ["ConfigError", "ResolvedConfig", "compose_config"]
