"""DAPO for rlloom (``algorithm=dapo``): clip-higher, dynamic sampling, overlong reward shaping."""

from rlloom_dapo.algorithm import DAPO
from rlloom_dapo.config import DAPOConfig
from rlloom_dapo.sampling import varied_groups
from rlloom_dapo.shaping import apply_overlong_penalty, overlong_penalty

__all__ = [
    "DAPO",
    "DAPOConfig",
    "apply_overlong_penalty",
    "overlong_penalty",
    "varied_groups",
]
