"""GRPO for rlloom: group-relative advantages and the clipped policy loss (``algorithm=grpo``)."""

from rlloom_grpo.advantages import group_relative_advantages, passk_advantages
from rlloom_grpo.algorithm import GRPO
from rlloom_grpo.config import GRPOConfig
from rlloom_grpo.loss import make_policy_loss_fn

__all__ = ["GRPO", "GRPOConfig", "group_relative_advantages", "make_policy_loss_fn", "passk_advantages"]
