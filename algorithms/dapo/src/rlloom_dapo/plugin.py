"""Entry point ``dapo``: registers ``algorithm=dapo``."""

import rlloom
from rlloom_dapo.config import DAPOConfig


@rlloom.hookimpl
def register_algorithms(register):
    register("dapo", "rlloom_dapo.algorithm:DAPO", config=DAPOConfig)
