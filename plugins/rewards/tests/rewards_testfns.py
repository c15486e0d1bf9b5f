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


def trl_accuracy(completions, solution, **kwargs):
    """TRL's form: 1.0 where the completion equals the row's ``solution`` column, and the call's keyword
    names in a component, so a test sees what was passed."""
    return [{"score": float(completion.strip() == answer), "kwargs": float(len(kwargs))}
            for completion, answer in zip(completions, solution, strict=True)]


def trl_named_only(prompts, completions, completion_ids):
    """TRL's form without **kwargs: the number of prompt characters plus completion tokens; None for an
    empty completion (TRL's "no reward applies")."""
    return [None if not ids else len(prompt) + len(ids) for prompt, ids in zip(prompts, completion_ids, strict=True)]


def trl_needs_a_missing_column(completions, answer_key):
    return [0.0 for _ in completions]


def trl_raises(completions, **kwargs):
    raise RuntimeError("batched reward failed")


def trl_wrong_length(completions, **kwargs):
    return [1.0]
