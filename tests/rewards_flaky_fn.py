"""A user reward function that raises on about 20% of responses (for ``test_rewards_errors_e2e``).

A response raises when ``crc32(response) % 5 == 0``; otherwise its score is its share of digits.
Every call appends ``1`` (raised) or ``0`` to the file named by ``$RLLOOM_TEST_REWARD_LOG``, so the
test can count the errors of each step on its own.
"""

import os
import zlib


def flaky(response, ground_truth, extra):
    raises = zlib.crc32(response.encode("utf-8")) % 5 == 0
    with open(os.environ["RLLOOM_TEST_REWARD_LOG"], "a", encoding="utf-8") as log:
        log.write(f"{int(raises)}\n")
    if raises:
        raise RuntimeError("flaky verifier")
    return sum(c.isdigit() for c in response) / len(response) if response else 0.0
