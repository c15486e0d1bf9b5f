"""Entry point ``grpo``: registers ``algorithm=grpo``."""

import rlloom
from rlloom_grpo.algorithm import GRPO
from rlloom_grpo.config import GRPOConfig


@rlloom.hookimpl
def register_algorithms(register):
    register("grpo", GRPO, config=GRPOConfig)
