"""The clipped value loss, its loss function and explained variance, against hand computations."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlloom import Batch
from rlloom_algokit.losses import mini_batch_stats
from rlloom_algokit import clipped_value_loss, explained_variance, make_value_loss_fn

# Columns: clipped above (v moved +1 from v_old, target above), unclipped larger, inside the clip
# range, clipped below, and a masked position holding NaN.
V = [1.0, 1.0, 0.2, -1.0, float("nan")]
V_OLD = [0.0, 0.0, 0.0, 0.0, 0.0]
R = [2.0, 0.0, 1.0, -3.0, 5.0]
MASK = [1, 1, 1, 1, 0]
# by hand with ε = 0.5: v_clip = 0.5, 0.5, 0.2, -0.5
EXPECTED_LOSS = [0.5 * 2.25, 0.5 * 1.0, 0.5 * 0.64, 0.5 * 6.25, 0.0]
EXPECTED_CLIPPED = [1.0, 0.0, 0.0, 1.0, 0.0]
EXPECTED_GRAD = [0.0, 1.0, -0.8, 0.0, 0.0]  # d/dv: 0 where the clipped branch is the max


def test_clipped_value_loss_branches_and_gradients():
    values = torch.tensor([V], requires_grad=True)
    terms = clipped_value_loss(values, torch.tensor([V_OLD]), torch.tensor([R]), torch.tensor([MASK]), 0.5)
    torch.testing.assert_close(terms.loss, torch.tensor([EXPECTED_LOSS]))
    torch.testing.assert_close(terms.clipped, torch.tensor([EXPECTED_CLIPPED]))
    terms.loss.sum().backward()
    torch.testing.assert_close(values.grad, torch.tensor([EXPECTED_GRAD]))


def value_batch():
    return Batch({
        "values": torch.tensor([V_OLD, [0.0, 0.5, 0.0, 0.0, 0.0]]),
        "returns": torch.tensor([R, [1.0, 1.0, 0.0, 0.0, 0.0]]),
        "response_mask": torch.tensor([MASK, [1, 1, 0, 0, 0]]),
    })


def test_value_loss_fn_aggregates_over_the_mini_batch_and_reports_clipfrac():
    batch = value_batch()
    current = torch.tensor([V, [0.25, 2.0, 0.0, 0.0, 0.0]])
    # second row by hand: v_clip = 0.25, 1.0 -> losses ½·0.5625, ½·max(1, 0) = 0.5; clipped 0, 0
    row2 = [0.5 * 0.5625, 0.5]
    token_mean = (sum(EXPECTED_LOSS) + sum(row2)) / 6
    loss_fn = make_value_loss_fn(0.5, "token-mean")
    loss, metrics = loss_fn(batch, {"values": current}, mini_batch_stats(batch["response_mask"]))
    assert float(loss) == pytest.approx(token_mean, rel=1e-6)
    assert metrics["vf_loss"] == pytest.approx(token_mean, rel=1e-6)
    assert metrics["vf_clipfrac"] == pytest.approx(2 / 6)
    assert metrics["vpred_mean"] == pytest.approx((1.0 + 1.0 + 0.2 - 1.0 + 0.25 + 2.0) / 6)
    # micro-batch shares, normalised by the mini-batch counts, add up to the whole
    stats = mini_batch_stats(batch["response_mask"])
    shares = [loss_fn(batch.slice(i, i + 1), {"values": current[i : i + 1]}, stats)[0] for i in range(2)]
    assert float(sum(shares)) == pytest.approx(token_mean, rel=1e-6)
    seq_mean, _ = make_value_loss_fn(0.5, "seq-mean-token-sum")(batch, {"values": current}, stats)
    assert float(seq_mean) == pytest.approx((sum(EXPECTED_LOSS) + sum(row2)) / 2, rel=1e-6)


def test_value_loss_fn_needs_critic_outputs():
    with pytest.raises(KeyError, match="outputs\\['values'\\]"):
        make_value_loss_fn(0.5, "token-mean")(value_batch(), {"log_probs": torch.zeros(2, 5)}, None)


def test_explained_variance_matches_numpy():
    returns = torch.tensor([[1.0, 2.0, 3.0, 99.0], [0.0, -1.0, 4.0, 2.0]])
    values = torch.tensor([[0.5, 2.5, 2.0, -50.0], [0.0, 0.0, 3.0, 1.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    keep = mask.numpy().astype(bool)
    r, v = returns.numpy()[keep], values.numpy()[keep]
    expected = 1 - np.var(r - v) / np.var(r)
    assert explained_variance(returns, values, mask) == pytest.approx(expected, rel=1e-5)
    assert explained_variance(returns, returns, mask) == pytest.approx(1.0)
    assert np.isnan(explained_variance(torch.ones(2, 4), values, mask))


@pytest.mark.parametrize("extra", [0, 5, 35])
def test_dr_grpo_value_normaliser_does_not_depend_on_padding(extra):
    # The same two rows padded from width 5 by `extra` columns (as when a longer response elsewhere
    # in the step widens every row): loss, vf_loss and gradients stay Σ L / (seqs · max_new_tokens).
    narrow = value_batch()
    pad = (0, extra)
    batch = Batch({name: torch.nn.functional.pad(narrow[name], pad) for name in ("values", "returns", "response_mask")},
                  meta={"max_new_tokens": 8})
    current = torch.nn.functional.pad(torch.tensor([V, [0.25, 2.0, 0.0, 0.0, 0.0]]), pad).requires_grad_()
    loss_fn = make_value_loss_fn(0.5, "seq-mean-token-sum-norm")
    loss, metrics = loss_fn(batch, {"values": current}, mini_batch_stats(batch["response_mask"]))
    loss.backward()
    expected = (sum(EXPECTED_LOSS) + 0.5 * 0.5625 + 0.5) / (2 * 8)
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    assert float(metrics["vf_loss"]) == pytest.approx(expected, rel=1e-6)
    torch.testing.assert_close(current.grad[0, :5], torch.tensor(EXPECTED_GRAD) / 16)
    assert not current.grad[:, 5:].any()
    # An explicit loss_scale_factor wins over the step's max_new_tokens.
    scaled, _ = make_value_loss_fn(0.5, "seq-mean-token-sum-norm", loss_scale_factor=16)(
        batch, {"values": current}, mini_batch_stats(batch["response_mask"]))
    assert scaled.item() == pytest.approx(expected / 2, rel=1e-6)
