"""Every algorithm that uses the shared policy loss takes its keys under the same names, and an
algorithm config carries no advantage knob its algorithm ignores."""

from __future__ import annotations

import pytest
from rlloom.config import ConfigError, compose_config

LOSS_ALGORITHMS = ["grpo", "ppo", "dapo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "remax", "gspo", "cispo",
                   "safe_rlhf"]


@pytest.mark.parametrize("name", LOSS_ALGORITHMS)
def test_policy_loss_keys_override_for_every_algorithm(name):
    cost = ["cost=forbidden_digits"] if name == "safe_rlhf" else []
    section = compose_config(["preset=tiny", f"algorithm={name}", *cost, "algorithm.clip_ratio_c=2.5",
                              "algorithm.loss_agg_mode=seq-mean-token-sum-norm", "algorithm.loss_scale_factor=6",
                              "algorithm.use_kl_loss=true", "algorithm.kl_loss_coef=0.01",
                              "algorithm.entropy_coeff=0.001", "algorithm.policy_loss=vanilla"]).sections["algorithm"]
    assert (section.clip_ratio_c, section.loss_agg_mode, section.loss_scale_factor, section.use_kl_loss,
            section.kl_loss_coef, section.entropy_coeff, section.policy_loss) == (
        2.5, "seq-mean-token-sum-norm", 6, True, 0.01, 0.001, "vanilla")
    with pytest.raises(ConfigError, match=r"^algorithm\.clip_ratio_c=0\.5: must be > 1 \(or null\)$"):
        compose_config(["preset=tiny", f"algorithm={name}", *cost, "algorithm.clip_ratio_c=0.5"])


@pytest.mark.parametrize("name", LOSS_ALGORITHMS)
def test_rollout_correction_keys_for_every_algorithm(name):
    cost = ["cost=forbidden_digits"] if name == "safe_rlhf" else []
    section = compose_config(["preset=tiny", f"algorithm={name}", *cost, "algorithm.rollout_is=sequence",
                              "algorithm.rollout_is_mode=mask", "algorithm.rollout_is_threshold=3",
                              "algorithm.rollout_is_threshold_lower=0.5"]).sections["algorithm"]
    assert (section.rollout_is, section.rollout_is_mode, section.rollout_is_threshold,
            section.rollout_is_threshold_lower, section.bypass_mode) == ("sequence", "mask", 3.0, 0.5, False)
    with pytest.raises(ConfigError, match=r"^algorithm\.rollout_is=seq: must be one of token, sequence, geometric"):
        compose_config(["preset=tiny", f"algorithm={name}", *cost, "algorithm.rollout_is=seq"])


@pytest.mark.parametrize("name", ["rloo", "remax", "reinforce_pp"])
@pytest.mark.parametrize("key", ["adv_estimator=grpo", "norm_adv_by_std=false", "epsilon=0.1"])
def test_advantage_knobs_an_algorithm_ignores_are_no_keys(name, key):
    field = key.partition("=")[0]
    with pytest.raises(ConfigError, match=f"^algorithm.{field}: no such key in algorithm={name}"):
        compose_config(["preset=tiny", f"algorithm={name}", f"algorithm.{key}"])
