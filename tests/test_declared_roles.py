"""An algorithm that needs a role nobody has written yet declares it and trains, with no change to the
core, the trainer or a launcher: a throwaway plugin defined here adds a reward role (``penalty``, its
own config group) and a critic-like train engine (``judge``), and trains them on the tiny model."""

from __future__ import annotations

import importlib.metadata
import os
import sys
import textwrap

import pytest
import torch
from rlloom.config import ConfigError, compose_config
from rlloom.plugins.registry import Registry

from rlloom_trainer.trainer import Trainer

PLUGIN_MODULE = "rlloom_test_judged_algorithm"
PLUGIN = '''
from dataclasses import dataclass
from typing import ClassVar

from rlloom import hookimpl
from rlloom.types import Role


@dataclass
class JudgedConfig:
    n: int = 4
    penalty_weight: float = 0.5
    extra_roles: ClassVar[tuple] = (Role("penalty", kind="reward"),
                                    Role("judge", kind="train_engine", serves_as="critic"))


def policy_gradient(batch, outputs, stats):
    mask = batch["response_mask"].float()
    loss = -(outputs["log_probs"] * batch["advantages"] * mask).sum() / stats.num_tokens
    return loss, {"pg_loss": loss.detach()}


def judge_loss(batch, outputs, stats):
    mask = batch["response_mask"].float()
    loss = ((outputs["values"] - batch["returns"]) ** 2 * mask).sum() / stats.num_tokens
    return loss, {"vf_loss": loss.detach()}


class Judged:
    """REINFORCE on reward − w·penalty with a group baseline; a judge (a value head) learns the net reward."""

    needs_reference = False
    needs_critic = False

    def __init__(self, cfg):
        self.config = cfg
        self.last = None

    def step(self, ctx, prompts):
        batch = ctx.generate(prompts, n=self.config.n)
        with ctx.concurrently() as run:
            run.score(batch)
            run.score(batch, role="penalty", into="penalties")
            run.values(batch, role="judge", into="judge_values")
        net = batch["scores"] - self.config.penalty_weight * batch["penalties"]
        groups = net.view(-1, self.config.n)
        mask = batch["response_mask"].float()
        batch["advantages"] = (groups - groups.mean(dim=1, keepdim=True)).reshape(-1, 1) * mask
        batch["returns"] = net.unsqueeze(1) * mask
        ctx.update("judge", batch, judge_loss, len(batch))
        ctx.update_actor(batch, policy_gradient, len(batch))
        ctx.sync_weights()
        self.last = batch
        return ctx.metrics


@hookimpl
def register_algorithms(register):
    register("judged", Judged, config=JudgedConfig)
'''
NEEDED = {"core", "tasks", "models", "hf", "fsdp", "trainer", "grpo", "algokit", "enginekit", "agentkit"}


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    folder = tmp_path_factory.mktemp("judged_plugin")
    (folder / f"{PLUGIN_MODULE}.py").write_text(textwrap.dedent(PLUGIN))
    installed = {(ep.dist.name if ep.dist else "", ep.name): ep
                 for ep in importlib.metadata.entry_points(group="rlloom") if ep.name in NEEDED}
    throwaway = importlib.metadata.EntryPoint(name="judged", value=PLUGIN_MODULE, group="rlloom")
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(folder))
        loaded = Registry(sorted(installed.values(), key=lambda ep: ep.name != "core") + [throwaway])
        assert loaded.failed() == [], loaded.failed()[0].traceback
        yield loaded
    sys.modules.pop(PLUGIN_MODULE, None)


def test_the_declared_reward_role_is_a_config_group_the_run_must_choose(registry):
    with pytest.raises(ConfigError, match="algorithm=judged declares the role penalty: choose the function that "
                                          "scores it with penalty=<name>"):
        compose_config(["preset=tiny", "algorithm=judged"], registry)
    with pytest.raises(ConfigError, match="penalty=format: algorithm=grpo has no role penalty"):
        compose_config(["preset=tiny", "penalty=format"], registry)


def test_a_throwaway_algorithm_with_new_roles_trains_on_the_tiny_model(registry, tmp_path):
    run_dir = tmp_path / "run"
    resolved = compose_config(["preset=tiny", "algorithm=judged", "penalty=forbidden_digits", "trainer.total_steps=3",
                               "trainer.test_freq=0", "trainer.val_before_train=false",
                               f"trainer.run_dir={run_dir}"], registry)
    trainer = Trainer(resolved, registry)
    try:
        final = trainer.fit()
        batch = trainer.algorithm.last
        judge = trainer.roles.get("judge")
        values = judge.compute_values(batch)["values"]
    finally:
        trainer.close()
    # the penalty is the chosen function's score, recomputed here by a fresh instance of it
    penalty_fn = registry.build("reward", "forbidden_digits", resolved.sections["penalty"])
    assert torch.equal(batch["penalties"], penalty_fn(batch).scores.float())
    assert final["penalty/score/mean"] == pytest.approx(float(batch["penalties"].mean()))
    assert "critic/score/mean" in final and "penalty/errors" in final
    # the judge is its own engine, trained (its loss, its update's timing) and checkpointed under its name
    assert judge is not trainer.roles.actor and values.shape == batch["response_mask"].shape
    assert {"judge/vf_loss", "timing_s/judge_values", "timing_s/update_judge", "actor/pg_loss"} <= set(final)
    assert torch.isfinite(torch.tensor(final["judge/vf_loss"]))
    assert {"actor", "judge"} <= set(os.listdir(run_dir / "checkpoints" / "global_step_3"))
