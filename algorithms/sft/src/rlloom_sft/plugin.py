"""Entry point ``sft``: registers ``algorithm=sft`` (the algorithm module, which imports torch, is
imported when the algorithm is first built)."""

import rlloom
from rlloom_sft.config import SFTConfig


@rlloom.hookimpl
def register_algorithms(register):
    register("sft", "rlloom_sft.algorithm:SFT", config=SFTConfig)
