"""Entry point ``cispo``: registers ``algorithm=cispo``."""

import rlloom
from rlloom_cispo.algorithm import CISPO
from rlloom_cispo.config import CISPOConfig


@rlloom.hookimpl
def register_algorithms(register):
    register("cispo", CISPO, config=CISPOConfig)
