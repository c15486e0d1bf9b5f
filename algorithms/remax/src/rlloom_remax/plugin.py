"""Entry point ``remax``: registers ``algorithm=remax``."""

import rlloom
from rlloom_remax.algorithm import ReMax
from rlloom_remax.config import ReMaxConfig


@rlloom.hookimpl
def register_algorithms(register):
    register("remax", ReMax, config=ReMaxConfig)
