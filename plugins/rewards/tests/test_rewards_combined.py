"""``reward=combined``: weighted sums of registered rewards, built from Hydra overrides."""

from __future__ import annotations

from pathlib import Path

import pytest
from rlloom import Batch
from rlloom.config import compose_config
from rlloom.plugins.registry import UnknownPluginError, get_registry
from rlloom_rewards.combined import CombinedReward, CombinedRewardConfig

FNS = str(Path(__file__).with_name("rewards_testfns.py"))


def test_weighted_sum_and_per_reward_components():
    reward = CombinedReward(CombinedRewardConfig(
        components={"python": 1.0, "format": 0.5},
        options={"python": {"function": f"{FNS}:by_prefix", "error_score": -1.0}, "format": {"pattern": "a+"}},
    ))
    batch = Batch(objects={"response_text": ["aa", "ab", "raise"], "ground_truth": [3.0, 3.0, 3.0]})
    result = reward(batch)
    # python: len * 3 (error -1); format: 1 when the whole response is a run of "a".
    python, fmt = [6.0, 6.0, -1.0], [1.0, 0.0, 0.0]
    assert result.scores.tolist() == [p + 0.5 * f for p, f in zip(python, fmt, strict=True)]
    assert sorted(result.components) == ["format", "format/format", "python", "python/length"]
    assert result.components["python"].tolist() == python
    assert result.components["format"].tolist() == fmt
    assert result.components["python/length"].tolist() == [2.0, 2.0, 0.0]
    assert result.num_errors == 1
    assert result.info["python/status"] == ["ok", "ok", "error"]


def test_composed_from_command_line_overrides():
    resolved = compose_config([
        "reward=combined",
        "++reward.components={python: 1.0, digit_fraction: 0.0}",
        f"+reward.options.python.function={FNS}:by_prefix",
    ])
    reward = get_registry().build("reward", "combined", resolved.sections["reward"])
    result = reward(Batch(objects={"response_text": ["12ab"], "ground_truth": [1.0]}))
    assert result.scores.tolist() == [4.0]  # digit_fraction is logged but weighs nothing
    assert result.components["digit_fraction"].tolist() == [0.5]


@pytest.mark.parametrize(("cfg", "error", "message"), [
    (CombinedRewardConfig(), ValueError, "needs reward.components"),
    (CombinedRewardConfig(components={"no_such_reward": 1.0}), UnknownPluginError, "no_such_reward"),
    (CombinedRewardConfig(components={"format": 1.0}, options={"math": {}}), ValueError, r"\['math'\]"),
    (CombinedRewardConfig(components={"format": 1.0}, options={"format": {"patern": "x"}}), ValueError,
     "reward.options.format"),
    (CombinedRewardConfig(components={"format": 1.0}, options={"format": {"match_score": "high"}}), ValueError,
     "reward.options.format"),
])
def test_config_errors_name_the_field(cfg, error, message):
    with pytest.raises(error, match=message):
        CombinedReward(cfg)
