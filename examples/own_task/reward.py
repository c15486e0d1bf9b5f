"""The reward of examples/own_task, in TRL's form: ``completions`` and the dataset's ``solution`` column in,
one score per completion out."""

import re


def accuracy(completions, solution, **kwargs):
    """1.0 where the last integer in the completion is the solution, else 0.0."""
    scores = []
    for completion, answer in zip(completions, solution, strict=True):
        numbers = re.findall(r"-?\d+", completion)
        scores.append(1.0 if numbers and int(numbers[-1]) == int(answer) else 0.0)
    return scores
