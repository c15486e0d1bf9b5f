"""Entry point ``gspo``: registers ``algorithm=gspo``."""

import rlloom
from rlloom_gspo.algorithm import GSPO
from rlloom_gspo.config import GSPOConfig


@rlloom.hookimpl
def register_algorithms(register):
    register("gspo", GSPO, config=GSPOConfig)
