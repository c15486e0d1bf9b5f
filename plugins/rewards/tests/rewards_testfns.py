"""User reward functions for the tests, loaded by file path (``reward.function=<this file>:<name>``).

Behaviour is chosen by the response text, so that a test knows each row's expected outcome.
"""

import os
import time


def by_prefix(response, ground_truth, extra):
    """"raise..." raises, "sleep..." sleeps 60 s, "busy..." spins forever, "nan" returns NaN,
    "text" returns a string, "exit" kills its process; otherwise
    {"score": len(response) * ground_truth, "length": len(response)}."""
    if response.startswith("raise"):
        raise ValueError("asked to raise")
    if response.startswith("sleep"):
        time.sleep(60)
    if response.startswith("busy"):
        while True:
            pass
    if response == "nan":
        return float("nan")
    if response == "text":
        return "not a number"
    if response == "exit":
        os._exit(3)
    return {"score": len(response) * ground_truth, "length": len(response)}


def swallows_everything(response, ground_truth, extra):
    """Sleeps 60 s inside ``except Exception`` (a timeout must still end it); returns 5.0."""
    try:
        time.sleep(60)
    except Exception:  # noqa: BLE001 - the point of the test
        return 5.0
    return 5.0


def extra_value(response, ground_truth, extra):
    """The float in ``extra["value"]``."""
    return float(extra["value"])


def pid(response, ground_truth, extra):
    """The id of the process this call ran in."""
    return float(os.getpid())


not_callable = 3
