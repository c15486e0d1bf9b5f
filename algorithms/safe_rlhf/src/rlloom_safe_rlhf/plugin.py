"""Entry point ``safe_rlhf``: registers ``algorithm=safe_rlhf``."""

import rlloom
from rlloom_safe_rlhf.config import SafeRLHFConfig


@rlloom.hookimpl
def register_algorithms(register):
    register("safe_rlhf", "rlloom_safe_rlhf.algorithm:SafeRLHF", config=SafeRLHFConfig)
