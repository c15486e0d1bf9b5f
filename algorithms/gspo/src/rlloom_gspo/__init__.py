"""GSPO for rlloom (``algorithm=gspo``): sequence-level importance ratio and clipping."""

from rlloom_gspo.algorithm import GSPO
from rlloom_gspo.config import GSPOConfig
from rlloom_gspo.loss import make_gspo_loss_fn

__all__ = ["GSPO", "GSPOConfig", "make_gspo_loss_fn"]
