"""Entry point ``rloo``: registers ``algorithm=rloo``."""

import rlloom
from rlloom_rloo.config import RLOOConfig


@rlloom.hookimpl
def register_algorithms(register):
    register("rloo", "rlloom_rloo.algorithm:RLOO", config=RLOOConfig)
