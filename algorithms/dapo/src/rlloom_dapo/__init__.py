"""DAPO for rlloom (``algorithm=dapo``): clip-higher, dynamic sampling, overlong reward shaping."""

from rlloom.lazy import lazy_exports

__all__ = ["DAPO", "DAPOConfig", "apply_overlong_penalty", "overlong_penalty", "varied_groups"]

__getattr__ = lazy_exports(__name__, {  # imported on first use: the plugin registers without torch
    "DAPO": ".algorithm",
    "DAPOConfig": ".config",
    "varied_groups": ".sampling",
    "apply_overlong_penalty": ".shaping",
    "overlong_penalty": ".shaping",
})
