"""Entry point ``cispo``: registers ``algorithm=cispo`` and the policy loss ``cispo``."""

import rlloom
from rlloom_cispo.config import CISPOConfig


@rlloom.hookimpl
def register_algorithms(register):
    register("cispo", "rlloom_cispo.algorithm:CISPO", config=CISPOConfig)


@rlloom.hookimpl
def register_policy_losses(register):
    register("cispo", "rlloom_cispo.loss:cispo_token_loss")
