"""The clipped policy loss (`rlloom_algokit.policy_loss.make_policy_loss_fn`, policy_loss=vanilla) against a numpy
computation of its value and gradient."""

import numpy as np
import pytest
import torch
from rlloom.batch import Batch
from rlloom.types import MiniBatchStats
from rlloom_algokit.config import PolicyLossConfig
from rlloom_algokit.losses import AGG_MODES
from rlloom_algokit.policy_loss import make_policy_loss_fn

torch.set_num_threads(1)

# A [3, 4] micro-batch: row 1 has one token, row 2 three. Log-ratios hit every PPO branch.
MASK = np.array([[1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 1, 0]])
OLD = np.array([[-1.0, -2.0, -0.5, -1.2], [-0.3, 0.0, 0.0, 0.0], [-2.2, -1.1, -0.9, 0.0]])
LOG_RATIO = np.array([[0.1, 0.5, -0.6, 1.4], [-0.05, 0.0, 0.0, 0.0], [1.3, -0.4, 0.15, 0.0]])
NEW = OLD + LOG_RATIO
REF = OLD + np.array([[0.2, -0.3, 0.1, 0.5], [0.0, 0.0, 0.0, 0.0], [-0.25, 0.4, 0.05, 0.0]])
ADV = np.array([1.0, -0.5, -1.5])[:, None] * MASK
ENTROPY = np.array([[1.2, 0.8, 0.5, 0.3], [2.0, 0.0, 0.0, 0.0], [0.9, 1.1, 0.7, 0.0]])
MAX_NEW = 6  # the step's sampling.max_new_tokens (batch.meta): Dr.GRPO's constant length


def numpy_token_terms(clip_low=0.2, clip_high=0.2, c=None):
    """Per-token PPO loss, d loss / d log π, clipped and dual-clipped indicators."""
    ratio = np.exp(LOG_RATIO)
    unclipped = -ADV * ratio
    clipped_term = -ADV * np.clip(ratio, 1 - clip_low, 1 + clip_high)
    loss = np.maximum(unclipped, clipped_term)
    clipped = clipped_term > unclipped
    dual = np.zeros_like(clipped)
    if c is not None:
        dual = (ADV < 0) & (-ADV * c < loss)
        loss = np.where(dual, -ADV * c, loss)
    grad = np.where(clipped | dual, 0.0, -ADV * ratio)  # d(−A·e^{log π − log π_old}) / d log π
    return loss * MASK, grad * MASK, clipped * MASK, dual * MASK


def numpy_aggregate_weights(mode, mask=MASK):
    """w with agg(L) = Σ w·L over the whole batch (from the ALGORITHMS.md table)."""
    rows, width = mask.shape
    if mode == "token-mean":
        return mask / mask.sum()
    if mode == "seq-mean-token-sum":
        return mask / rows
    if mode == "seq-mean-token-mean":
        counts = mask.sum(axis=1, keepdims=True)
        nonempty = (counts > 0).sum()
        return np.where(counts > 0, mask / np.maximum(counts, 1), 0.0) / nonempty
    return mask / (rows * MAX_NEW)  # seq-mean-token-sum-norm: a constant length, not the padded width


def make_batch(mask=MASK):
    return Batch(
        {
            "old_log_probs": torch.tensor(OLD, dtype=torch.float64),
            "ref_log_probs": torch.tensor(REF, dtype=torch.float64),
            "advantages": torch.tensor(ADV, dtype=torch.float64),
            "response_mask": torch.tensor(mask),
        },
        meta={"max_new_tokens": MAX_NEW},
    )


def global_stats(mask=MASK):
    return MiniBatchStats(
        num_tokens=int(mask.sum()),
        num_seqs=mask.shape[0],
        num_nonempty_seqs=int((mask.sum(axis=1) > 0).sum()),
        max_response_len=mask.shape[1],
    )


def run_loss(cfg, batch, rows=slice(None), stats=None):
    log_probs = torch.tensor(NEW[rows], dtype=torch.float64, requires_grad=True)
    entropy = torch.tensor(ENTROPY[rows], dtype=torch.float64, requires_grad=True)
    loss, metrics = make_policy_loss_fn(cfg)(batch, {"log_probs": log_probs, "entropy": entropy},
                                             stats or global_stats())
    loss.backward()
    entropy_grad = np.zeros(entropy.shape) if entropy.grad is None else entropy.grad.numpy()
    return loss, metrics, log_probs.grad.numpy(), entropy_grad


@pytest.mark.parametrize("mode", AGG_MODES)
def test_loss_value_and_gradient_match_numpy_with_kl_and_entropy(mode):
    cfg = PolicyLossConfig(loss_agg_mode=mode, clip_ratio_c=3.0, use_kl_loss=True, kl_loss_coef=0.1,
                     kl_loss_type="k3", entropy_coeff=0.01)
    pg, pg_grad, clipped, dual = numpy_token_terms(c=3.0)
    assert clipped.sum() >= 2 and dual.sum() >= 1  # the example exercises both clips
    d = NEW - REF
    kl = (np.exp(-d) + d - 1) * MASK
    kl_grad = (1 - np.exp(-d)) * MASK
    w = numpy_aggregate_weights(mode)
    expected = (w * pg).sum() - 0.01 * (w * ENTROPY).sum() + 0.1 * (w * kl).sum()

    loss, metrics, grad, entropy_grad = run_loss(cfg, make_batch())
    assert loss.item() == pytest.approx(expected, rel=1e-10)
    np.testing.assert_allclose(grad, w * (pg_grad + 0.1 * kl_grad), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(entropy_grad, -0.01 * w, rtol=1e-10, atol=1e-14)
    assert metrics["pg_loss"] == pytest.approx((w * pg).sum())
    assert metrics["kl_loss"] == pytest.approx((w * kl).sum())
    assert metrics["entropy"] == pytest.approx((w * ENTROPY).sum())
    assert metrics["pg_clipfrac"] == pytest.approx(clipped.sum() / MASK.sum())
    assert metrics["pg_clipfrac_lower"] == pytest.approx(dual.sum() / MASK.sum())
    assert metrics["ppo_kl"] == pytest.approx((-LOG_RATIO * MASK).sum() / MASK.sum())
    assert all(isinstance(v, torch.Tensor) and v.dim() == 0 and not v.requires_grad for v in metrics.values())


def test_default_config_loss_and_gradient_signs():
    # Defaults: dual clip at verl's 3.0, no KL, no entropy bonus, token-mean.
    assert PolicyLossConfig().clip_ratio_c == 3.0
    pg, pg_grad, _, dual = numpy_token_terms(c=3.0)
    loss, metrics, grad, entropy_grad = run_loss(PolicyLossConfig(), make_batch())
    assert loss.item() == pytest.approx(pg.sum() / MASK.sum(), rel=1e-10)
    np.testing.assert_allclose(grad, pg_grad / MASK.sum(), rtol=1e-10, atol=1e-14)
    assert not entropy_grad.any() and "kl_loss" not in metrics
    # Row 2 (A = −1.5) has ratio e^1.3 = 3.67 > c: its loss is capped at −A·c = 4.5 (before: 5.5).
    assert dual.sum() >= 1 and metrics["pg_clipfrac_lower"] == pytest.approx(dual.sum() / MASK.sum())
    assert pg[2, 0] == pytest.approx(1.5 * 3.0)
    # Gradient descent raises log π where A > 0 and lowers it where A < 0 (unless clipped).
    unclipped = pg_grad != 0
    assert (grad[unclipped & (ADV > 0)] < 0).all() and (grad[unclipped & (ADV < 0)] > 0).all()


def test_dr_grpo_normaliser_does_not_depend_on_padding():
    # The same three responses, padded to width 4 and to width 40 (as when one long response
    # elsewhere in the step widens every row): the loss and gradients must not change.
    cfg = PolicyLossConfig(loss_agg_mode="seq-mean-token-sum-norm")
    narrow, _, narrow_grad, _ = run_loss(cfg, make_batch())
    wide_mask = np.pad(MASK, ((0, 0), (0, 36)))
    pad = ((0, 0), (0, 36))
    wide = Batch({"old_log_probs": torch.tensor(np.pad(OLD, pad)), "ref_log_probs": torch.tensor(np.pad(REF, pad)),
                  "advantages": torch.tensor(np.pad(ADV, pad)), "response_mask": torch.tensor(wide_mask)},
                 meta={"max_new_tokens": MAX_NEW})
    log_probs = torch.tensor(np.pad(NEW, pad), requires_grad=True)
    loss, _ = make_policy_loss_fn(cfg)(wide, {"log_probs": log_probs}, global_stats(wide_mask))
    loss.backward()
    pg, _, _, _ = numpy_token_terms(c=3.0)
    assert loss.item() == pytest.approx(narrow.item(), rel=1e-12)
    assert narrow.item() == pytest.approx(pg.sum() / (3 * MAX_NEW), rel=1e-10)  # Σ L / (seqs · L_max)
    np.testing.assert_allclose(log_probs.grad.numpy()[:, :4], narrow_grad, rtol=1e-12)
    # An explicit loss_scale_factor wins over the step's max_new_tokens.
    scaled, _, _, _ = run_loss(PolicyLossConfig(loss_agg_mode="seq-mean-token-sum-norm", loss_scale_factor=12),
                               make_batch())
    assert scaled.item() == pytest.approx(narrow.item() / 2, rel=1e-12)


def test_dr_grpo_normaliser_needs_a_constant_length():
    batch = make_batch()
    batch.meta.pop("max_new_tokens")
    with pytest.raises(KeyError, match="set algorithm.loss_scale_factor"):
        run_loss(PolicyLossConfig(loss_agg_mode="seq-mean-token-sum-norm"), batch)


@pytest.mark.parametrize("mode", AGG_MODES)
def test_micro_batches_sum_to_whole_batch(mode):
    cfg = PolicyLossConfig(loss_agg_mode=mode, clip_ratio_c=3.0, use_kl_loss=True, kl_loss_coef=0.1,
                     entropy_coeff=0.01)
    batch = make_batch()
    whole, _, whole_grad, _ = run_loss(cfg, batch)
    total, grads = 0.0, []
    for rows in (slice(0, 1), slice(1, 3)):
        loss, _, grad, _ = run_loss(cfg, batch.slice(rows.start, rows.stop), rows)
        total += loss.item()
        grads.append(grad)
    assert total == pytest.approx(whole.item(), rel=1e-12)
    np.testing.assert_allclose(np.concatenate(grads), whole_grad, rtol=1e-12, atol=1e-15)


def test_metrics_are_the_micro_batch_own_values():
    _, metrics, _, _ = run_loss(PolicyLossConfig(), make_batch().slice(1, 2), slice(1, 2))
    # Row 1 alone: one token, ratio e^−0.05 ∈ [0.8, 1.2], A = −0.5 → L = 0.5·e^−0.05.
    assert metrics["pg_loss"] == pytest.approx(0.5 * np.exp(-0.05))
    assert metrics["ppo_kl"] == pytest.approx(0.05)
    assert metrics["entropy"] == pytest.approx(2.0)


def test_missing_inputs_are_named():
    with pytest.raises(ValueError, match="ref_log_probs"):
        run_loss(PolicyLossConfig(use_kl_loss=True), make_batch().exclude("ref_log_probs"))
    loss_fn = make_policy_loss_fn(PolicyLossConfig(entropy_coeff=0.01))
    with pytest.raises(KeyError, match="entropy"):
        loss_fn(make_batch(), {"log_probs": torch.tensor(NEW)}, global_stats())
    with pytest.raises(KeyError, match="log_probs"):
        loss_fn(make_batch(), {}, global_stats())


def test_training_a_tiny_policy_follows_the_advantages():
    """A real (tiny) policy: per-position logits over 5 tokens. Two responses to one prompt with
    A = +1 and −1; a few Adam steps on the GRPO loss raise the first's log-prob and lower the second's."""
    torch.manual_seed(0)
    logits = torch.nn.Parameter(torch.randn(1, 3, 5) * 0.1)
    responses = torch.tensor([[1, 2, 3], [4, 0, 0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])

    def log_probs():
        log_p = torch.log_softmax(logits.expand(2, -1, -1), dim=-1)
        return log_p.gather(-1, responses.unsqueeze(-1)).squeeze(-1) * mask

    old = log_probs().detach()
    batch = Batch({"old_log_probs": old, "advantages": torch.tensor([[1.0], [-1.0]]) * mask, "response_mask": mask})
    loss_fn = make_policy_loss_fn(PolicyLossConfig())
    optimizer = torch.optim.Adam([logits], lr=0.02)
    for _ in range(5):
        optimizer.zero_grad()
        loss, _ = loss_fn(batch, {"log_probs": log_probs()}, global_stats(mask.numpy()))
        loss.backward()
        optimizer.step()
    new = log_probs().detach()
    assert (new[0] - old[0]).sum() > 0.05  # the positive-advantage response became likelier
    assert (new[1, :1] - old[1, :1]).sum() < -0.05  # the first token of the negative one, unshared, less likely


def test_on_policy_shortcut_without_old_log_probs():
    """No ``old_log_probs``: ratio ≡ 1, so L = −A per token and dL/dlog π = −A (token-mean: / tokens)."""
    loss, metrics, grad, _ = run_loss(PolicyLossConfig(), make_batch().exclude("old_log_probs"))
    assert loss.item() == pytest.approx((-ADV * MASK).sum() / MASK.sum(), rel=1e-12)
    np.testing.assert_allclose(grad, -ADV * MASK / MASK.sum(), rtol=1e-12, atol=1e-15)
    assert metrics["pg_clipfrac"] == 0.0 and metrics["ppo_kl"] == 0.0


def test_rollout_gap_metric():
    """Without old_log_probs (the update is the behaviour forward):
    training/rollout_probs_diff_mean = Σ |e^rollout − e^new|·m / Σ m."""
    rollout = NEW + np.array([[0.01, -0.02, 0.0, 0.03], [0.5, 9.0, 9.0, 9.0], [0.0, 0.0, -0.1, 9.0]])
    batch = make_batch().exclude("old_log_probs")
    batch["rollout_log_probs"] = torch.tensor(rollout, dtype=torch.float64)
    _, metrics, _, _ = run_loss(PolicyLossConfig(), batch)
    expected = (np.abs(np.exp(rollout) - np.exp(NEW)) * MASK).sum() / MASK.sum()
    assert metrics["training/rollout_probs_diff_mean"] == pytest.approx(expected, rel=1e-12)


def test_rollout_gap_is_not_reported_by_an_update_after_the_behaviour_pass():
    # With old_log_probs the gap was measured before any update; an update's log-probs include drift.
    batch = make_batch()
    batch["rollout_log_probs"] = torch.tensor(NEW + 0.5, dtype=torch.float64)
    _, metrics, _, _ = run_loss(PolicyLossConfig(), batch)
    assert "training/rollout_probs_diff_mean" not in metrics


# ---------------------------------------------------------------------------------- inert rows
def test_rows_with_all_zero_advantages_are_named_inert_when_nothing_else_reads_them():
    from rlloom.protocols import NamesInertRows

    batch = make_batch()
    batch["advantages"] = torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.0, 0.7, 0.0, 0.0], [0.0, 0.0, -1.0, 0.0]])
    loss_fn = make_policy_loss_fn(PolicyLossConfig())
    assert isinstance(loss_fn, NamesInertRows)
    # row 1's only non-zero advantage sits on padding: no token of it has a gradient
    assert loss_fn.inert_rows(batch).tolist() == [True, True, False]
    for other_terms in (dict(use_kl_loss=True), dict(entropy_coeff=0.01), dict(skip_zero_advantage_rows=False)):
        assert not isinstance(make_policy_loss_fn(PolicyLossConfig(**other_terms)), NamesInertRows), other_terms


@pytest.mark.parametrize("name", ["vanilla", "cispo", "gspo"])
def test_every_in_tree_policy_loss_has_no_gradient_where_the_advantage_is_zero(name):
    """The contract inert rows rely on (rlloom.protocols.PolicyLoss): loss and gradient 0 where A = 0."""
    from rlloom.plugins.registry import UnknownPluginError
    from rlloom_algokit.lookup import get_policy_loss

    try:
        token_loss = get_policy_loss(name)
    except UnknownPluginError as error:  # the plugin that registers it is not installed
        pytest.skip(f"policy_loss={name} is not installed: {error}")
    log_probs = torch.tensor(NEW, requires_grad=True)
    advantages = torch.tensor(ADV) * torch.tensor([[0.0], [1.0], [0.0]])  # rows 0 and 2: A = 0
    terms = token_loss(log_probs, torch.tensor(OLD), advantages, torch.tensor(MASK), clip_ratio_low=0.2,
                       clip_ratio_high=0.28, clip_ratio_c=3.0)
    (grad,) = torch.autograd.grad(terms.loss.sum(), log_probs)
    assert torch.all(terms.loss[[0, 2]] == 0) and torch.all(grad[[0, 2]] == 0)
    assert torch.any(grad[1] != 0)  # row 1's advantage does move its tokens
