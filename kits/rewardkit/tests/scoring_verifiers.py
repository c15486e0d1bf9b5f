"""Verifiers for the tests of :mod:`rlloom_rewardkit`, in a module of their own so that worker processes
import them by name (this folder is on ``sys.path`` under pytest, and spawned workers inherit it).

Behaviour is chosen by the response text, so that a test knows each row's expected outcome.
"""

import os
import time

from rlloom_rewardkit import SampleTimeout, Verdict


def by_prefix(response, ground_truth):
    """"raise..." raises, "sleep..." sleeps 60 s, "busy..." spins forever, "nan" scores NaN, "text"
    returns a string, "exit" kills its process, "deadline" raises :class:`SampleTimeout`; otherwise
    ``Verdict(len(response) * ground_truth, {"length": len(response)})``."""
    if response.startswith("raise"):
        raise ValueError("asked to raise")
    if response.startswith("sleep"):
        time.sleep(60)
    if response.startswith("busy"):
        while True:
            pass
    if response == "deadline":
        raise SampleTimeout("the verifier's own budget ran out")
    if response == "nan":
        return Verdict(float("nan"))
    if response == "text":
        return "not a number"
    if response == "exit":
        os._exit(3)
    return Verdict(len(response) * ground_truth, {"length": len(response)})


def swallows_everything(response, ground_truth):
    """Sleeps 60 s inside ``except Exception`` (a timeout must still end it); scores 5.0."""
    try:
        time.sleep(60)
    except Exception:  # noqa: BLE001 - the point of the test
        return Verdict(5.0)
    return Verdict(5.0)


def pid(response, ground_truth):
    """The id of the process this call ran in."""
    return Verdict(float(os.getpid()))
