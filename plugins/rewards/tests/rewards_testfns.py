"""User reward functions for the tests, loaded by file path (``reward.function=<this file>:<name>``).

Behaviour is chosen by the response text, so that a test knows each row's expected outcome.
"""

import os


def by_prefix(response, ground_truth, extra):
    """"raise..." raises; otherwise {"score": len(response) * ground_truth, "length": len(response)}."""
    if response.startswith("raise"):
        raise ValueError("asked to raise")
    return {"score": len(response) * ground_truth, "length": len(response)}


def extra_value(response, ground_truth, extra):
    """The float in ``extra["value"]``."""
    return float(extra["value"])


def pid(response, ground_truth, extra):
    """The id of the process this call ran in."""
    return float(os.getpid())


not_callable = 3
