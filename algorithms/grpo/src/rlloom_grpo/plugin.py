"""Entry point ``grpo``: registers ``algorithm=grpo``."""

import rlloom
from rlloom_grpo.config import GRPOConfig


@rlloom.hookimpl
def register_algorithms(register):
    register("grpo", "rlloom_grpo.algorithm:GRPO", config=GRPOConfig)
