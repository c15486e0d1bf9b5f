"""Decoupled PPO (AReaL) for ``trainer.async_mode=fully_async``: the behaviour policy (the rollout's
log-probs, possibly several versions old) and the proximal policy (the actor's log-probs recomputed before
the update, ``old_log_probs``) kept apart. It is rollout correction at token level in mask mode with no
lower bound: loss_t = w_t · 1[w_t <= cap] · PPO-clip_t(π_θ / π_prox), w_t = π_prox / π_behav. Checked on
hand values."""

import math

import pytest
import torch
from rlloom.batch import Batch
from rlloom.types import MiniBatchStats
from rlloom_algokit.config import PolicyLossConfig
from rlloom_algokit.policy_loss import apply_rollout_correction, make_policy_loss_fn

DECOUPLED = PolicyLossConfig(rollout_is="token", rollout_is_mode="mask", rollout_is_threshold=5.0,
                             rollout_is_threshold_lower=0.0, clip_ratio_c=None)
# One response of three tokens, advantage 1, and probabilities:
#   token  π_behav  π_prox  π_θ     w = π_prox/π_behav   r = π_θ/π_prox   PPO-clip (ε = 0.2)
#   1      0.5      0.5     0.55    1                    1.1              -min(1.1, 1.1) = -1.1
#   2      0.2      0.4     0.6     2                    1.5              -min(1.5, 1.2) = -1.2
#   3      0.05     0.4     0.4     8 > cap 5: masked    1                -1
BEHAVIOUR, PROXIMAL, CURRENT = [0.5, 0.2, 0.05], [0.5, 0.4, 0.4], [0.55, 0.6, 0.4]
STATS = MiniBatchStats(num_tokens=3, num_seqs=1, num_nonempty_seqs=1, max_response_len=3)


def logs(probs):
    return torch.tensor([[math.log(p) for p in probs]], dtype=torch.float64)


def decoupled_loss(cfg, behaviour=BEHAVIOUR):
    micro = Batch({"old_log_probs": logs(PROXIMAL), "rollout_log_probs": logs(behaviour),
                   "advantages": torch.ones(1, 3, dtype=torch.float64), "response_mask": torch.ones(1, 3)})
    metrics = apply_rollout_correction(micro, cfg)
    loss, _ = make_policy_loss_fn(cfg)(micro, {"log_probs": logs(CURRENT)}, STATS)
    return loss.item(), metrics, micro


def test_the_decoupled_loss_equals_the_hand_values():
    loss, metrics, micro = decoupled_loss(DECOUPLED)
    assert micro["rollout_is_weights"][0].tolist() == pytest.approx([1.0, 2.0, 0.0])
    assert loss == pytest.approx((1 * -1.1 + 2 * -1.2 + 0 * -1.0) / 3, rel=1e-12)
    assert metrics["rollout_corr/masked_fraction"] == pytest.approx(1 / 3)
    assert metrics["rollout_corr/is_weight_max"] == pytest.approx(8.0)


def test_without_the_behaviour_weight_the_stale_tokens_count_as_on_policy():
    # the recomputed "old" log-probs alone: every token weighs 1, whatever policy sampled it
    loss, metrics, _ = decoupled_loss(PolicyLossConfig(clip_ratio_c=None))
    assert metrics == {} and loss == pytest.approx((-1.1 - 1.2 - 1.0) / 3, rel=1e-12)


def test_when_behaviour_and_proximal_agree_the_loss_is_plain_ppo():
    corrected, _, _ = decoupled_loss(DECOUPLED, behaviour=PROXIMAL)
    plain, _, _ = decoupled_loss(PolicyLossConfig(clip_ratio_c=None), behaviour=PROXIMAL)
    assert corrected == plain
