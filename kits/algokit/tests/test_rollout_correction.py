"""Rollout correction (``algorithm.rollout_is`` / ``rollout_is_mode`` / thresholds / ``bypass_mode``):
the weights (:func:`rlloom_algokit.losses.rollout_is_weights`), the step's half
(:func:`rlloom_algokit.policy_loss.apply_rollout_correction`) and the loss, against numpy / hand values."""

import math

import numpy as np
import pytest
import torch
from rlloom.batch import Batch
from rlloom.types import MiniBatchStats
from rlloom_algokit.config import PolicyLossConfig
from rlloom_algokit.grpo import GRPO
from rlloom_algokit.grpo_config import GRPOConfig, GRPOStepConfig
from rlloom_algokit.losses import rollout_is_weights
from rlloom_algokit.policy_loss import apply_rollout_correction, make_policy_loss_fn

torch.set_num_threads(1)

# Row 0: four tokens; row 1: two tokens, then padding holding garbage; row 2: an agent's tool token
# (mask 0) in the middle of its response.
MASK = np.array([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 1, 1]])
ROLLOUT = np.array([[-1.0, -0.5, -2.0, -0.1], [-0.7, -1.5, 0.0, 0.0], [-0.2, -9.0, -1.0, -0.4]])
# log π_old − log π_rollout
DELTA = np.array([[0.3, -0.9, 1.2, -0.05], [0.2, 0.4, 99.0, -99.0], [-0.1, 50.0, 0.6, -1.0]])
OLD = ROLLOUT + DELTA
ADV = np.array([1.0, -0.5, 2.0])[:, None] * MASK


def t(array):
    return torch.tensor(array, dtype=torch.float64)


def weights(level, mode="truncate", upper=2.0, lower=None, old=OLD, mask=MASK):
    return rollout_is_weights(t(old), t(ROLLOUT), torch.tensor(mask), level, mode, upper, lower)


def numpy_log_w(level):
    delta = np.clip(DELTA, -20, 20) * MASK
    if level == "token":
        return delta
    row = delta.sum(axis=1, keepdims=True)
    if level == "geometric":
        row = row / MASK.sum(axis=1, keepdims=True)
    return np.broadcast_to(np.clip(row, -20, 20), DELTA.shape)


@pytest.mark.parametrize("level", ["token", "sequence", "geometric"])
def test_truncate_weights_are_min_of_w_and_the_threshold(level):
    weight, w, changed = weights(level)
    expected_w = np.exp(numpy_log_w(level)) * MASK
    np.testing.assert_allclose(w.numpy(), expected_w, rtol=1e-12)
    np.testing.assert_allclose(weight.numpy(), np.minimum(expected_w, 2.0), rtol=1e-12)
    np.testing.assert_array_equal(changed.numpy(), expected_w > 2.0)


def test_sequence_weight_is_the_product_over_the_sampled_tokens():
    _, w, _ = weights("sequence")
    assert w[1, 0].item() == pytest.approx(math.exp(0.2) * math.exp(0.4))  # padding's 99 and −99 left out
    assert w[0, 3].item() == pytest.approx(math.exp(0.3 - 0.9 + 1.2 - 0.05))
    assert w[2, 2].item() == pytest.approx(math.exp(-0.1 + 0.6 - 1.0))  # the tool token's 50 left out
    _, geometric, _ = weights("geometric")
    assert geometric[2, 0].item() == pytest.approx(math.exp((-0.1 + 0.6 - 1.0) / 3))


def test_mask_mode_zeroes_tokens_outside_the_default_range_one_over_upper_to_upper():
    weight, w, changed = weights("token", "mask", upper=2.0)
    expected_w = np.exp(np.clip(DELTA, -20, 20)) * MASK
    outside = (MASK == 1) & ((expected_w < 0.5) | (expected_w > 2.0))
    np.testing.assert_allclose(weight.numpy(), np.where(outside, 0.0, expected_w), rtol=1e-12)
    np.testing.assert_array_equal(changed.numpy(), outside)
    # by hand: e^-0.9 = 0.41 < 0.5 and e^1.2 = 3.3 > 2 are rejected; e^0.3 = 1.35 keeps its weight
    assert weight[0].tolist() == pytest.approx([math.exp(0.3), 0.0, 0.0, math.exp(-0.05)])


def test_mask_mode_at_sequence_level_rejects_whole_responses():
    weight, _, changed = weights("sequence", "mask", upper=2.0)
    # row sums: 0.55 (w 1.73, kept), 0.6 (w 1.82, kept), −0.5 (w 0.61, kept); with upper 1.75 row 1 goes
    assert weight[0].tolist() == pytest.approx([math.exp(0.55)] * 4)
    assert not changed.any()
    weight, _, changed = weights("sequence", "mask", upper=1.75)
    assert weight[1].tolist() == [0.0] * 4
    assert changed[1].tolist() == [True, True, False, False]  # padding is not counted as rejected
    assert weight[0].tolist() == pytest.approx([math.exp(0.55)] * 4)


def test_icepop_two_sided_range_keeps_w_inside_and_zeroes_it_outside():
    delta = np.log(np.array([[0.4, 0.51, 1.0, 4.9], [5.1, 4.99, 1.0, 1.0], [0.49, 1.0, 2.0, 3.0]]))
    weight, _, changed = weights("token", "mask", upper=5.0, lower=0.5, old=ROLLOUT + delta, mask=np.ones((3, 4)))
    expected = [[0.0, 0.51, 1.0, 4.9], [0.0, 4.99, 1.0, 1.0], [0.0, 1.0, 2.0, 3.0]]
    np.testing.assert_allclose(weight.numpy(), expected, rtol=1e-9)
    assert changed.sum().item() == 3


def test_padding_and_masked_tokens_get_weight_zero_even_when_they_hold_inf_or_nan():
    old = OLD.copy()
    old[1, 2], old[1, 3], old[2, 1] = np.inf, np.nan, -np.inf
    for level in ("token", "sequence", "geometric"):
        for mode in ("truncate", "mask"):
            weight, w, changed = weights(level, mode, old=old)
            assert torch.isfinite(weight).all() and torch.isfinite(w).all()
            assert (weight[torch.tensor(MASK) == 0] == 0).all() and not changed[torch.tensor(MASK) == 0].any()


def test_log_ratios_are_clamped_at_20_per_token_and_per_sequence():
    delta = np.full((1, 3), 15.0)  # each token e^15; the sequence's sum 45 is clamped to 20
    mask = np.ones((1, 3))
    _, w, _ = rollout_is_weights(t(delta), t(np.zeros((1, 3))), torch.tensor(mask), "sequence", "truncate", 1e12)
    assert w[0, 0].item() == pytest.approx(math.exp(20))
    _, w, _ = rollout_is_weights(t(np.full((1, 3), 50.0)), t(np.zeros((1, 3))), torch.tensor(mask), "token", "truncate",
                                 1e12)
    assert w[0].tolist() == pytest.approx([math.exp(20)] * 3)


def test_weights_carry_no_gradient():
    old = t(OLD).requires_grad_()
    weight, _, _ = rollout_is_weights(old, t(ROLLOUT), torch.tensor(MASK), "token", "truncate", 2.0)
    assert not weight.requires_grad


# The loss ---------------------------------------------------------------------------------------

LOG_RATIO = np.array([[0.05, -0.1, 0.02, 0.3], [-0.05, 0.1, 0.0, 0.0], [0.1, 0.0, -0.3, 0.15]])  # log π − log π_old


def stats(mask=MASK):
    return MiniBatchStats(num_tokens=int(mask.sum()), num_seqs=mask.shape[0],
                          num_nonempty_seqs=int((mask.sum(axis=1) > 0).sum()), max_response_len=mask.shape[1])


def batch(**extra):
    fields = {"old_log_probs": t(OLD), "rollout_log_probs": t(ROLLOUT), "advantages": t(ADV),
              "response_mask": torch.tensor(MASK)}
    fields.update(extra)
    return Batch({name: value for name, value in fields.items() if value is not None})


def run_loss(cfg, micro, log_probs=None):
    log_probs = t(OLD + LOG_RATIO if log_probs is None else log_probs).requires_grad_()
    loss, metrics = make_policy_loss_fn(cfg)(micro, {"log_probs": log_probs}, stats())
    loss.backward()
    return loss, metrics, log_probs.grad


def numpy_ppo_token_loss(log_ratio=LOG_RATIO, clip=0.2):
    ratio = np.exp(log_ratio)
    return np.maximum(-ADV * ratio, -ADV * np.clip(ratio, 1 - clip, 1 + clip)) * MASK


@pytest.mark.parametrize("level", ["token", "sequence", "geometric"])
@pytest.mark.parametrize("mode", ["truncate", "mask"])
def test_corrected_loss_is_the_token_mean_of_weight_times_the_ppo_loss(level, mode):
    cfg = PolicyLossConfig(rollout_is=level, rollout_is_mode=mode, clip_ratio_c=None)
    micro = batch()
    metrics = apply_rollout_correction(micro, cfg)
    loss, _, grad = run_loss(cfg, micro)
    w = np.exp(numpy_log_w(level)) * MASK
    weight = np.minimum(w, 2.0) if mode == "truncate" else np.where((w < 0.5) | (w > 2.0), 0.0, w)
    assert loss.item() == pytest.approx((weight * numpy_ppo_token_loss()).sum() / MASK.sum(), rel=1e-12)
    _, _, plain_grad = run_loss(PolicyLossConfig(clip_ratio_c=None), batch())
    np.testing.assert_allclose(grad.numpy(), weight * plain_grad.numpy(), rtol=1e-12)  # the weight is a constant
    on = MASK == 1
    assert metrics["rollout_corr/is_weight_mean"] == pytest.approx(w[on].mean())
    assert metrics["rollout_corr/is_weight_max"] == pytest.approx(w[on].max())
    assert metrics["rollout_corr/is_weight_min"] == pytest.approx(w[on].min())
    fraction = "clipped_fraction" if mode == "truncate" else "masked_fraction"
    assert metrics[f"rollout_corr/{fraction}"] == pytest.approx(((weight != w) & on).sum() / on.sum())


def test_correction_off_is_todays_loss_and_ignores_the_fields():
    cfg = PolicyLossConfig()
    assert apply_rollout_correction(micro := batch(), cfg) == {} and "rollout_is_weights" not in micro
    plain, plain_metrics, plain_grad = run_loss(cfg, batch(rollout_log_probs=None))
    loss, metrics, grad = run_loss(cfg, batch(rollout_is_weights=t(np.full(MASK.shape, 7.0))))
    assert torch.equal(loss, plain) and torch.equal(grad, plain_grad) and metrics.keys() == plain_metrics.keys()
    assert plain.item() == pytest.approx(numpy_ppo_token_loss().sum() / MASK.sum(), rel=1e-12)


def test_equal_engines_give_weight_one_and_the_uncorrected_loss_bit_for_bit():
    cfg = PolicyLossConfig(rollout_is="sequence")
    micro = batch(old_log_probs=t(ROLLOUT))
    metrics = apply_rollout_correction(micro, cfg)
    assert metrics["rollout_corr/is_weight_min"] == metrics["rollout_corr/is_weight_max"] == 1.0
    loss, _, grad = run_loss(cfg, micro, log_probs=ROLLOUT + LOG_RATIO)
    plain, _, plain_grad = run_loss(PolicyLossConfig(), batch(old_log_probs=t(ROLLOUT)), log_probs=ROLLOUT + LOG_RATIO)
    assert torch.equal(loss, plain) and torch.equal(grad, plain_grad)


def test_bypass_mode_with_rollout_log_probs_equal_to_the_actors_is_plain_grpo():
    bypass, _, bypass_grad = run_loss(PolicyLossConfig(bypass_mode=True), batch(old_log_probs=None))
    plain, _, plain_grad = run_loss(PolicyLossConfig(), batch(old_log_probs=t(ROLLOUT), rollout_log_probs=None),
                                    log_probs=OLD + LOG_RATIO)
    assert torch.equal(bypass, plain) and torch.equal(bypass_grad, plain_grad)
    # the ratio is π / π_rollout: with log π = log π_rollout + r, the loss of ratio e^r
    loss, _, _ = run_loss(PolicyLossConfig(bypass_mode=True, clip_ratio_c=None), batch(old_log_probs=None),
                          log_probs=ROLLOUT + LOG_RATIO)
    assert loss.item() == pytest.approx(numpy_ppo_token_loss().sum() / MASK.sum(), rel=1e-12)


def test_a_missing_field_is_named():
    with pytest.raises(Exception, match="rollout_is_weights"):
        run_loss(PolicyLossConfig(rollout_is="token"), batch())
    with pytest.raises(Exception, match="rollout_log_probs"):
        run_loss(PolicyLossConfig(bypass_mode=True), batch(rollout_log_probs=None))
    with pytest.raises(Exception, match="rollout_log_probs"):
        apply_rollout_correction(batch(rollout_log_probs=None), PolicyLossConfig(rollout_is="token"))


# The settings and the step ----------------------------------------------------------------------

@pytest.mark.parametrize(("overrides", "message"), [
    ({"rollout_is": "tokens"}, r"algorithm.rollout_is=tokens: must be one of token, sequence, geometric"),
    ({"rollout_is_mode": "clip"}, r"algorithm.rollout_is_mode=clip: must be one of truncate, mask"),
    ({"rollout_is_threshold": 0.0}, r"algorithm.rollout_is_threshold=0.0: must be > 0"),
    ({"rollout_is_threshold_lower": 0.5}, r"rollout_is_threshold_lower=0.5: only rollout_is_mode=mask"),
    ({"rollout_is_mode": "mask", "rollout_is_threshold_lower": 3.0},
     r"must be below algorithm.rollout_is_threshold=2.0"),
    ({"rollout_is": "token", "bypass_mode": True}, r"algorithm.rollout_is=token: with algorithm.bypass_mode=true"),
])
def test_invalid_settings_name_the_key(overrides, message):
    with pytest.raises(ValueError, match=message):
        PolicyLossConfig(**overrides)


def test_bypass_mode_and_recompute_old_log_probs_contradict():
    with pytest.raises(ValueError, match="recompute_old_log_probs=true: bypass_mode=true"):
        GRPOStepConfig(bypass_mode=True, recompute_old_log_probs=True)


@pytest.mark.parametrize(("settings", "needs"), [
    ({}, False),                                         # one update: its own forward is the behaviour one
    ({"rollout_is": "token"}, True),                     # the weight needs π_old, also with one update
    ({"ppo_epochs": 2}, True),
    ({"ppo_epochs": 2, "bypass_mode": True}, False),     # the rollout log-probs serve as π_old
])
def test_grpo_computes_old_log_probs_when_correction_needs_them(settings, needs):
    assert GRPO(GRPOConfig(**settings)).needs_old_log_probs(batch(), num_prompts=2) is needs
