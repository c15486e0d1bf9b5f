"""Entry point ``dapo``: registers ``algorithm=dapo``."""

import rlloom
from rlloom_dapo.algorithm import DAPO
from rlloom_dapo.config import DAPOConfig


@rlloom.hookimpl
def register_algorithms(register):
    register("dapo", DAPO, config=DAPOConfig)
