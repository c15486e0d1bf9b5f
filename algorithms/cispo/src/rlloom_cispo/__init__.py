"""CISPO for rlloom: ``algorithm=cispo``."""

from rlloom_cispo.algorithm import CISPO
from rlloom_cispo.config import CISPOConfig
from rlloom_cispo.loss import cispo_token_loss

__all__ = ["CISPO", "CISPOConfig", "cispo_token_loss"]
