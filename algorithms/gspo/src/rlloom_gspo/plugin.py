"""Entry point ``gspo``: registers ``algorithm=gspo``."""

import rlloom
from rlloom_gspo.config import GSPOConfig


@rlloom.hookimpl
def register_algorithms(register):
    register("gspo", "rlloom_gspo.algorithm:GSPO", config=GSPOConfig)
