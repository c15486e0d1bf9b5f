"""A reward function in TRL's form for tests/test_own_task_e2e.py: the share of digits in each completion,
and every call's ``solution`` column appended to the file ``RLLOOM_TEST_REWARD_LOG`` names."""

import json
import os


def digit_share(prompts, completions, solution, **kwargs):
    with open(os.environ["RLLOOM_TEST_REWARD_LOG"], "a") as log:
        log.write(json.dumps({"prompts": prompts, "solution": solution, "ids": kwargs["completion_ids"]}) + "\n")
    return [sum(ch.isdigit() for ch in text) / max(len(text), 1) for text in completions]
