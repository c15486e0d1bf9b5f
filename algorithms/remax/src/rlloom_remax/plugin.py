"""Entry point ``remax``: registers ``algorithm=remax``."""

import rlloom
from rlloom_remax.config import ReMaxConfig


@rlloom.hookimpl
def register_algorithms(register):
    register("remax", "rlloom_remax.algorithm:ReMax", config=ReMaxConfig)
