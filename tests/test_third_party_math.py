"""A third party's advantage estimator and policy loss: one registered function each, in a plugin
installed the way a stranger's package is (a ``.dist-info`` on ``sys.path`` naming its entry point),
used by the algorithms that choose them with ``algorithm.adv_estimator`` / ``algorithm.policy_loss``,
and checked against numbers computed here."""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
import textwrap

import numpy as np
import pytest
import torch
from rlloom.batch import Batch
from rlloom.config import ConfigError, compose_config
from rlloom.plugins import registry as registry_module
from rlloom.plugins.registry import Registry
from rlloom_algokit.advantages import compute_advantages
from rlloom_algokit.losses import mini_batch_stats
from rlloom_algokit import GRPO, PPO, GRPOConfig, PPOConfig
from rlloom_trainer.testing import train_tiny, training_rows

MODULE = "rlloom_test_third_party_math"

PLUGIN = '''
import torch

from rlloom import hookimpl
from rlloom.types import ClipLossTerms

CALLS = {"estimator": [], "loss": []}  # what the run handed the functions, for the test to recompute


def group_median(*, scores, group_ids, response_mask, **_):
    """A_i = r_i − the median score of its group (groups of odd size here), on every response token."""
    medians = {}
    for group in dict.fromkeys(group_ids):
        medians[group] = torch.median(scores[[i for i, g in enumerate(group_ids) if g == group]])
    advantages = torch.stack([scores[i] - medians[g] for i, g in enumerate(group_ids)])
    result = advantages[:, None] * response_mask.float()
    CALLS["estimator"].append((scores.clone(), list(group_ids), response_mask.clone(), result.clone()))
    return result


def plain_pg(log_probs, old_log_probs, advantages, response_mask, *, clip_ratio_low, clip_ratio_high,
             clip_ratio_c):
    """L_t = −A_t · log π_t: REINFORCE, no ratio and no clipping."""
    CALLS["loss"].append((clip_ratio_low, clip_ratio_high, clip_ratio_c))
    on = response_mask.bool()
    zero = torch.zeros_like(log_probs)
    return ClipLossTerms(loss=torch.where(on, -advantages * log_probs, zero), clipped=zero.detach(),
                         dual_clipped=zero.detach(), ppo_kl=torch.where(on, old_log_probs - log_probs, zero).detach())


@hookimpl
def register_advantage_estimators(register):
    register("group_median", group_median)


@hookimpl
def register_policy_losses(register):
    register("plain_pg", plain_pg)
'''

SCORES = np.array([1.0, 4.0, 2.0, 0.0, 3.0, 3.0, 5.0])
UIDS = ["a", "a", "a", "b", "b", "b", "c"]
MASK = np.array([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0], [0, 0, 0], [1, 0, 0], [1, 1, 1]])
# by hand: a = (1, 4, 2), median 2; b = (0, 3, 3), median 3; c = (5,), median 5
MEDIAN_ADVANTAGES = np.array([-1.0, 2.0, 0.0, -3.0, 0.0, 0.0, 0.0])
LOG_PROBS = np.array([[-0.5, -1.0, -7.0], [-2.0, -7.0, -7.0], [-0.1, -0.2, -0.3], [-1.5, -0.5, -7.0],
                      [-7.0, -7.0, -7.0], [-0.7, -7.0, -7.0], [-1.0, -1.0, -1.0]])


def install(folder, module: str, source: str, distribution: str) -> None:
    """``module`` (``source``) and a ``.dist-info`` naming it as entry point ``module`` of ``distribution``."""
    (folder / f"{module}.py").write_text(textwrap.dedent(source))
    info = folder / f"{distribution.replace('-', '_')}-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(f"[rlloom]\n{module} = {module}\n")


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """The plugin installed in a folder on ``sys.path``, and the process's registry reloaded with it."""
    install(tmp_path, MODULE, PLUGIN, "rlloom-third-party-math")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("RLLOOM_PLUGINS", raising=False)
    importlib.invalidate_caches()
    registry = Registry()
    monkeypatch.setattr(registry_module, "_REGISTRY", registry)
    yield sys.modules[MODULE]
    sys.modules.pop(MODULE, None)


def scored_batch() -> Batch:
    return Batch({"scores": torch.tensor(SCORES, dtype=torch.float32), "response_mask": torch.tensor(MASK)},
                 {"uid": np.array(UIDS, dtype=object)})


def own_status(registry: Registry):
    """This test's plugin's load status (another installed plugin, broken or not, is not this test's)."""
    (status,) = [status for status in registry.statuses if status.distribution == "rlloom-third-party-math"]
    return status


def test_one_function_each_is_registered_under_its_distribution(plugin):
    registry = registry_module.get_registry()
    assert own_status(registry).status == "loaded"
    for kind, name in (("advantage_estimator", "group_median"), ("policy_loss", "plain_pg")):
        component = registry.get(kind, name)
        assert (component.distribution, component.version) == ("rlloom-third-party-math", "0.1.0")
    assert {"grpo", "group_median", "rloo"} <= set(registry.choices("advantage_estimator"))
    assert {"vanilla", "plain_pg", "cispo"} <= set(registry.choices("policy_loss"))


def test_a_broken_plugin_installed_beside_it_changes_nothing_here(plugin, tmp_path, monkeypatch):
    other = tmp_path / "other"
    other.mkdir()
    install(other, "rlloom_test_broken_plugin", "raise ImportError('this plugin is broken')\n", "rlloom-broken")
    monkeypatch.syspath_prepend(str(other))
    importlib.invalidate_caches()
    registry = Registry()
    assert "rlloom-broken" in [status.distribution for status in registry.failed()]
    assert own_status(registry).status == "loaded"
    assert registry.get("advantage_estimator", "group_median").distribution == "rlloom-third-party-math"


def test_compute_advantages_calls_the_registered_estimator(plugin):
    out = compute_advantages("group_median", scores=torch.tensor(SCORES), group_ids=UIDS,
                             response_mask=torch.tensor(MASK))
    np.testing.assert_allclose(out.numpy(), MEDIAN_ADVANTAGES[:, None] * MASK)


@pytest.mark.parametrize("estimator", ["group_median", "grpo"])
def test_grpo_trains_with_the_third_party_estimator_and_loss(plugin, estimator):
    algorithm = GRPO(GRPOConfig(n=3, adv_estimator=estimator, policy_loss="plain_pg", norm_adv_by_std=False))
    batch = scored_batch()
    advantages = algorithm.compute_advantages(batch)
    if estimator == "group_median":
        expected = MEDIAN_ADVANTAGES
    else:  # Dr.GRPO's group mean: a = 7/3, b = 2, c alone keeps its score
        expected = SCORES - np.array([7 / 3] * 3 + [2.0] * 3 + [0.0])
    np.testing.assert_allclose(advantages.numpy(), expected[:, None] * MASK, rtol=1e-6)

    batch["advantages"] = advantages
    batch["old_log_probs"] = torch.tensor(LOG_PROBS) - 0.25  # the ratio is e^0.25 > 1.2: vanilla would clip
    log_probs = torch.tensor(LOG_PROBS, requires_grad=True)
    loss, metrics = algorithm.loss_fn(batch, {"log_probs": log_probs}, mini_batch_stats(torch.tensor(MASK)))
    loss.backward()
    tokens = MASK.sum()
    a = expected[:, None] * MASK
    assert loss.item() == pytest.approx((-a * LOG_PROBS).sum() / tokens, rel=1e-6)  # token-mean of −A·log π
    np.testing.assert_allclose(log_probs.grad.numpy(), -a / tokens, rtol=1e-6, atol=1e-12)
    assert metrics["pg_clipfrac"] == 0.0 and metrics["ppo_kl"] == pytest.approx(-0.25)
    assert plugin.CALLS["loss"] == [(0.2, 0.2, 3.0)]  # the config's clip settings, by keyword


def test_ppo_takes_the_policy_loss_by_name(plugin):
    batch = Batch({"advantages": torch.tensor([[2.0, -1.0]]), "response_mask": torch.ones(1, 2)})
    log_probs = torch.tensor([[-0.5, -2.0]], requires_grad=True)
    loss, _ = PPO(PPOConfig(policy_loss="plain_pg")).policy_loss_fn(batch, {"log_probs": log_probs},
                                                                    mini_batch_stats(torch.ones(1, 2)))
    assert loss.item() == pytest.approx((2.0 * 0.5 - 1.0 * 2.0) / 2)  # (−2·−0.5 + 1·−2) / 2 tokens


def test_config_time_choices_include_the_plugin_and_refuse_a_typo(plugin):
    resolved = compose_config(["preset=tiny", "algorithm.adv_estimator=group_median",
                               "algorithm.policy_loss=plain_pg"])
    assert (resolved.sections["algorithm"].adv_estimator, resolved.sections["algorithm"].policy_loss) == (
        "group_median", "plain_pg")
    with pytest.raises(ConfigError, match=r"^algorithm\.adv_estimator=group_mediam: .*Installed choices: group_median, "
                                          r"grpo, grpo_passk, .* Did you mean 'group_median'\?"):
        compose_config(["preset=tiny", "algorithm.adv_estimator=group_mediam"])
    with pytest.raises(ConfigError, match=r"^algorithm\.policy_loss=nope: .*Installed choices: cispo, gspo, "
                                          r"plain_pg, vanilla\."):
        compose_config(["preset=tiny", "algorithm=ppo", "algorithm.policy_loss=nope"])


def test_a_tiny_run_uses_them(plugin, tmp_path):
    steps = 2
    rows = train_tiny(
        tmp_path / "run", "algorithm=grpo", "algorithm.n=3", "algorithm.adv_estimator=group_median",
        "algorithm.policy_loss=plain_pg", "algorithm.clip_ratio_high=0.3", f"trainer.total_steps={steps}",
        f"trainer.test_freq={steps}", cache_dir=tmp_path / "cache")
    calls = plugin.CALLS["estimator"]
    assert len(calls) == steps  # one advantage computation per training step
    for scores, group_ids, mask, advantages in calls:
        assert len(set(group_ids)) == 4 and len(group_ids) == 12  # train_batch_size 4 prompts × n 3
        groups = {g: np.median(scores.numpy()[[i for i, h in enumerate(group_ids) if h == g]]) for g in group_ids}
        expected = (scores.numpy() - np.array([groups[g] for g in group_ids]))[:, None] * mask.numpy()
        np.testing.assert_allclose(advantages.numpy(), expected, atol=1e-6)
    assert plugin.CALLS["loss"] and set(plugin.CALLS["loss"]) == {(0.2, 0.3, 3.0)}
    training = training_rows(rows, "actor/pg_clipfrac")
    assert len(training) == steps and all(row["actor/pg_clipfrac"] == 0.0 for row in training)
