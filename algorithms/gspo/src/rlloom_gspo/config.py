"""``algorithm=gspo`` config schema (a Hydra structured config)."""

from dataclasses import dataclass
from typing import ClassVar

from rlloom_grpo.config import GRPOConfig


@dataclass
class GSPOConfig(GRPOConfig):
    """GRPO's fields (see :class:`rlloom_grpo.config.GRPOConfig`) with GSPO's defaults: the clip
    range applies to the *sequence* ratio (the policy loss ``gspo``,
    :func:`rlloom_gspo.loss.gspo_policy_loss`) and is small (``clip_ratio_low=3e-4``,
    ``clip_ratio_high=4e-4``, the paper's values), aggregation ``seq-mean-token-mean``.
    Advantages are GRPO's (``adv_estimator``, ``norm_adv_by_std``)."""

    algorithm_name: ClassVar[str] = "gspo"

    clip_ratio_low: float = 3e-4
    clip_ratio_high: float = 4e-4
    loss_agg_mode: str = "seq-mean-token-mean"
    policy_loss: str = "gspo"
