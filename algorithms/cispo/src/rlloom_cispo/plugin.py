"""Entry point ``cispo``: registers ``algorithm=cispo``."""

import rlloom
from rlloom_cispo.config import CISPOConfig


@rlloom.hookimpl
def register_algorithms(register):
    register("cispo", "rlloom_cispo.algorithm:CISPO", config=CISPOConfig)
