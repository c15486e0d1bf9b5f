"""compose_config: defaults, group choices, unknown keys, types, consistency, presets, plugin checks.

The registry holds the core's real entry point plus a test plugin that registers a schema for every
default option of every group, so these tests do not depend on which rlloom plugins are installed.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import re
import sys
import textwrap
from pathlib import Path
from typing import ClassVar

import pytest
import torch

CHECKOUT = Path(__file__).resolve().parents[2]  # our distributions install from its folders (not on PyPI yet)
from omegaconf import OmegaConf
from rlloom.config import ConfigError, compose_config
from rlloom.config.compose import check_registered_names, run_sections
from rlloom.config.roles import role_groups
from rlloom.config.schema import SamplingConfig, TrainerConfig
from rlloom.plugins.registry import Registry
from rlloom.types import Role
from rlloom_algokit.config import PolicyLossConfig

SCHEMAS = """
from dataclasses import dataclass
from typing import ClassVar, Optional

from rlloom import hookimpl
from rlloom.types import Role
from rlloom_algokit.config import MiniBatchSchedule


@dataclass
class GrpoConfig(MiniBatchSchedule):
    n: int = 4
    ppo_epochs: int = 1
    ppo_mini_batch_size: int = 2
    clip_ratio: float = 0.2


@dataclass
class HfConfig:
    micro_batch_size: int = 8


@dataclass
class FsdpConfig:
    lr: float = 1e-6
    grad_clip: float = 1.0


@dataclass
class RewardConfig:
    correct_score: float = 1.0


@dataclass
class ArithmeticDataConfig:
    max_operand: int = 9


@dataclass
class DigitsConfig:
    num_digits: int = 2

    def __post_init__(self):
        if self.num_digits < 1:
            raise ValueError(f"num_digits must be >= 1, got {self.num_digits}")


@dataclass
class ModelConfig:
    path: Optional[str] = None


def build(cfg, *args):
    return cfg


@dataclass
class ConstrainedConfig(GrpoConfig):
    extra_roles: ClassVar[tuple] = (Role("cost", kind="reward"),
                                    Role("cost_critic", kind="train_engine", serves_as="critic"))


@hookimpl
def register_algorithms(register):
    register("grpo", build, config=GrpoConfig)
    register("constrained", build, config=ConstrainedConfig)


@hookimpl
def register_rollout_engines(register):
    register("hf", build, config=HfConfig)


@hookimpl
def register_train_engines(register):
    register("fsdp", build, config=FsdpConfig)


@hookimpl
def register_reward_fns(register):
    register("arithmetic", build, config=RewardConfig)
    register("format", build, config=RewardConfig)


@hookimpl
def register_datasets(register):
    register("arithmetic", build, config=ArithmeticDataConfig)
    register("digits", build, config=DigitsConfig)


@hookimpl
def register_models(register):
    register("smollm2-135m", build, config=ModelConfig)
    register("tiny", build, config=ModelConfig)


@hookimpl
def register_presets(register):
    register(
        "quick",
        ["model=tiny", "data=digits", "reward=format", "algorithm.n=8", "trainer.total_steps=20",
         "trainer.val_greedy=false", "sampling.max_new_tokens=4", "train_engine.lr=3e-3"],
        "a test preset",
    )
"""

PLUGIN_MODULE = "rlloom_test_config_schemas"


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    folder = tmp_path_factory.mktemp("config_plugin")
    (folder / f"{PLUGIN_MODULE}.py").write_text(textwrap.dedent(SCHEMAS))
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(folder))
        loaded = Registry(entry_points=[
            importlib.metadata.EntryPoint(name="core", value="rlloom.builtins", group="rlloom"),
            importlib.metadata.EntryPoint(name="trainer", value="rlloom_trainer.plugin", group="rlloom"),  # trackers
            # the estimator grpo and the policy loss vanilla
            importlib.metadata.EntryPoint(name="algokit", value="rlloom_algokit.plugin", group="rlloom"),
            importlib.metadata.EntryPoint(name="agentkit", value="rlloom_agentkit.plugin", group="rlloom"),  # single_turn
            importlib.metadata.EntryPoint(name="enginekit", value="rlloom_enginekit.plugin", group="rlloom"),  # in_process
            importlib.metadata.EntryPoint(name="schemas", value=PLUGIN_MODULE, group="rlloom"),
        ])
        assert loaded.failed() == [], loaded.failed()[0].traceback
        yield loaded
    sys.modules.pop(PLUGIN_MODULE, None)


def error_for(overrides: list[str], registry: Registry) -> str:
    with pytest.raises(ConfigError) as info:
        compose_config(overrides, registry)
    return str(info.value)


# ------------------------------------------------------------------------------ defaults
def test_defaults_compose(registry):
    resolved = compose_config([], registry)
    assert resolved.choices == {
        "algorithm": "grpo", "rollout": "hf", "train_engine": "fsdp", "resharder": "in_process",
        "reward": "arithmetic", "data": "arithmetic", "model": "smollm2-135m", "launcher": "local",
        "trainer": "default", "agent": "single_turn", "cost": "none",  # the group of the role the test plugin's `constrained` declares
    }
    sections = resolved.sections
    assert type(sections["algorithm"]).__name__ == "GrpoConfig"
    assert (sections["algorithm"].n, sections["algorithm"].ppo_mini_batch_size) == (4, 2)
    assert sections["train_engine"].lr == 1e-6 and sections["model"].path is None
    # the core's defaults, field by field; the run is named after its algorithm, data and model
    assert sections["trainer"] == TrainerConfig(run_name="grpo-arithmetic-smollm2-135m")
    assert resolved.cfg.trainer.run_name == "grpo-arithmetic-smollm2-135m"
    assert sections["trainer"].trackers == ["console", "jsonl"]
    assert sections["sampling"] == SamplingConfig(temperature=1.0, top_p=1.0, top_k=-1, max_new_tokens=16)
    assert "defaults" not in resolved.cfg
    assert f"total_steps: {TrainerConfig().total_steps}" in resolved.to_yaml()
    assert OmegaConf.is_readonly(resolved.cfg)


def test_overrides_reach_the_sections(registry):
    resolved = compose_config(
        ["data=digits", "data.num_digits=3", "algorithm.n=6", "trainer.trackers=[jsonl]", "sampling.top_k=5",
         "trainer.run_dir=/tmp/run"],
        registry,
    )
    assert resolved.choices["data"] == "digits" and resolved.sections["data"].num_digits == 3
    assert resolved.sections["algorithm"].n == 6
    assert resolved.sections["trainer"].trackers == ["jsonl"]
    assert resolved.sections["trainer"].run_dir == "/tmp/run"
    assert resolved.sections["sampling"].top_k == 5


# ------------------------------------------------------------------------------ group choices
def test_unknown_group_option_lists_installed_choices(registry):
    assert error_for(["algorithm=nope"], registry) == (
        "algorithm=nope: no installed plugin provides algorithm 'nope'. Installed choices: constrained, grpo.")
    assert "Installed choices: arithmetic, digits." in error_for(["data=nope"], registry)
    assert error_for(["trainer=fast"], registry) == "trainer=fast: no such option. Valid options: default."


def test_known_but_uninstalled_option_names_the_package(registry):
    message = error_for(["rollout=vllm"], registry)
    assert message.startswith("rollout=vllm: no installed plugin provides rollout 'vllm'.")
    assert "Installed choices: hf." in message and message.endswith(f"pip install -e {CHECKOUT}/backends/vllm")
    assert error_for(["launcher=ray"], registry).endswith(f"pip install -e {CHECKOUT}/plugins/ray")


# ------------------------------------------------------------------------------ keys and types
TRAINER_KEYS = ", ".join(field.name for field in dataclasses.fields(TrainerConfig))


def test_unknown_key_names_it_and_lists_valid_keys(registry):
    assert error_for(["trainer.total_stepz=1"], registry) == (
        f"trainer.total_stepz: no such key in trainer=default. Valid keys of trainer: {TRAINER_KEYS}. "
        "Did you mean 'total_steps'?")
    expected = "algorithm.foo: no such key in algorithm=grpo. Valid keys of algorithm: n, ppo_epochs, ppo_mini_batch_size, clip_ratio."
    assert error_for(["algorithm.foo=1"], registry) == expected
    assert error_for(["+algorithm.foo=1"], registry) == expected
    assert error_for(["+trainer.foo=1"], registry).startswith("trainer.foo: no such key in trainer=default.")
    top_level = error_for(["foo.bar=1"], registry)
    assert top_level.startswith("foo") and "Top-level sections are: algorithm, rollout," in top_level
    assert error_for(["trainr.seed=1"], registry).endswith("Did you mean 'trainer'?")


def test_a_misspelt_option_gets_a_suggestion(registry):
    assert error_for(["algorithm=gpro"], registry).endswith(
        "Installed choices: constrained, grpo. Did you mean 'grpo'?")
    assert error_for(["trainer=defualt"], registry) == (
        "trainer=defualt: no such option. Valid options: default. Did you mean 'default'?")


@pytest.mark.parametrize("override", ["+foo=1", "+sampling.foo=1"])
def test_added_key_outside_groups_is_rejected(registry, override):
    assert "foo" in error_for([override], registry)


@pytest.mark.parametrize(
    ("override", "key", "expected"),
    [
        ("trainer.total_steps=abc", "trainer.total_steps", "(expected int)"),
        ("algorithm.n=2.5", "algorithm.n", "(expected int)"),
        ("algorithm.clip_ratio=abc", "algorithm.clip_ratio", "(expected float)"),
        ("trainer.val_greedy=maybe", "trainer.val_greedy", "(expected bool)"),
    ],
)
def test_wrong_type_names_key_and_expected_type(registry, override, key, expected):
    message = error_for([override], registry)
    assert message.startswith(f"{key}: invalid value {expected}")


@pytest.mark.parametrize("override", ["~algorithm", "~sampling"])
def test_deleting_a_section_is_a_config_error(registry, override):
    assert override[1:] in error_for([override], registry)


# ------------------------------------------------------------------------------ consistency
def test_batch_sizes_must_divide(registry):
    message = error_for(["algorithm.ppo_mini_batch_size=3"], registry)
    assert "algorithm.ppo_mini_batch_size=3" in message and "trainer.train_batch_size=4" in message
    assert "must divide" in message
    message = error_for(["trainer.train_batch_size=6", "algorithm.ppo_mini_batch_size=4"], registry)
    assert "algorithm.ppo_mini_batch_size=4" in message and "trainer.train_batch_size=6" in message
    ok = compose_config(["trainer.train_batch_size=6", "algorithm.ppo_mini_batch_size=3"], registry)
    assert ok.sections["trainer"].train_batch_size == 6


def test_out_of_range_values(registry):
    assert error_for(["trainer.total_steps=0"], registry) == "trainer.total_steps=0: must be >= 1"
    assert error_for(["sampling.max_new_tokens=0"], registry) == "sampling.max_new_tokens=0: must be >= 1"
    assert error_for(["trainer.keep_last_n=-1"], registry) == "trainer.keep_last_n=-1: must be >= 0"
    assert error_for(["trainer.device=tpu"], registry).startswith("trainer.device='tpu': choose one of")
    # algorithm.n belongs to the algorithm's config, which checks it (tests/test_bad_input.py): the core reads no
    # algorithm key by name, so this test algorithm's n=0 composes
    assert compose_config(["algorithm.n=0"], registry).sections["algorithm"].n == 0
    assert "top_p=0.0" in error_for(["sampling.top_p=0"], registry)
    assert "temperature=-1.0" in error_for(["sampling.temperature=-1"], registry)


@pytest.mark.parametrize("cls, key, bad, good", [
    (SamplingConfig, "top_p", [0.0, -0.5, 1.0 + 1e-9, float("nan")], [1e-9, 0.5, 1.0]),
    (SamplingConfig, "top_k", [0, -2, -7], [-1, 1, 50]),
    (SamplingConfig, "temperature", [-1e-9, float("nan"), float("inf")], [0.0, 2.0]),
    (TrainerConfig, "seed", [-1, 2**32], [0, 2**32 - 1]),
    (TrainerConfig, "val_temperature", [-1.0, float("nan")], [0.0, 1.5]),
    (TrainerConfig, "test_freq", [-3, -1], [0, 7]),
])
def test_range_checks_at_their_edges(cls, key, bad, good):
    """The schemas' own range checks, each side of each bound (the command line reaches them through these)."""
    for value in good:
        assert getattr(cls(**{key: value}), key) == value
    for value in bad:
        with pytest.raises(ValueError, match=f"^{cls.section}.{key}={value}: must be "):
            cls(**{key: value})


# ------------------------------------------------------------------------------ presets
def test_preset_expands_and_user_override_wins(registry):
    resolved = compose_config(["preset=quick"], registry)
    assert (resolved.choices["model"], resolved.choices["data"], resolved.choices["reward"]) == (
        "tiny", "digits", "format")
    assert resolved.sections["algorithm"].n == 8
    assert resolved.sections["trainer"].total_steps == 20 and resolved.sections["trainer"].val_greedy is False
    assert resolved.sections["train_engine"].lr == 3e-3
    assert resolved.sections["sampling"].max_new_tokens == 4

    mine = compose_config(["preset=quick", "trainer.total_steps=5", "model=smollm2-135m"], registry)
    assert mine.sections["trainer"].total_steps == 5 and mine.choices["model"] == "smollm2-135m"
    assert mine.sections["algorithm"].n == 8  # the rest of the preset still applies


def test_user_override_before_the_preset_still_wins(registry):
    resolved = compose_config(["trainer.total_steps=5", "preset=quick"], registry)
    assert resolved.sections["trainer"].total_steps == 5


def test_unknown_preset_lists_presets(registry):
    message = error_for(["preset=huge"], registry)
    assert message.startswith("preset=huge: no such preset. Installed presets: ")
    assert "quick" in message.split("Installed presets: ")[1].rstrip(".").split(", ")


# ------------------------------------------------------------------------------ plugin checks
def test_plugin_post_init_error_names_the_group(registry):
    assert error_for(["data=digits", "data.num_digits=0"], registry) == (
        "data=digits: num_digits must be >= 1, got 0")


# ------------------------------------------------------------------------------ devices
def test_trainer_device_is_checked_before_anything_starts(registry):
    assert error_for(["trainer.device=gpu"], registry) == (
        "trainer.device='gpu': choose one of ['auto', 'cpu', 'cuda'] (or cuda:<index>)")
    assert compose_config(["trainer.device=cpu"], registry).sections["trainer"].device == "cpu"
    assert compose_config([], registry).sections["trainer"].device == "auto"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_trainer_device_cuda_without_a_gpu_is_a_config_error(registry):
    message = error_for(["trainer.device=cuda"], registry)
    assert message.startswith("trainer.device=cuda: this machine has no usable CUDA device")
    assert message.endswith("use trainer.device=cpu or trainer.device=auto")


# ------------------------------------------------------------------------------ declared roles
def test_a_declared_reward_role_is_a_group_offering_every_reward_function(registry):
    resolved = compose_config(["algorithm=constrained", "cost=format", "cost.correct_score=2.0"], registry)
    assert resolved.choices["cost"] == "format" and resolved.sections["cost"].correct_score == 2.0
    assert resolved.choices["reward"] == "arithmetic"  # the reward keeps its own choice and settings
    assert error_for(["cost=nope"], registry) == (
        "cost=nope: no such option. Valid options: arithmetic, format, none. Did you mean 'none'?")


def test_an_algorithm_that_declares_a_reward_role_needs_its_function(registry):
    assert error_for(["algorithm=constrained"], registry) == (
        "algorithm=constrained declares the role cost: choose the function that scores it with cost=<name>, "
        "any installed reward function: arithmetic, format.")


def test_a_role_function_without_an_algorithm_that_declares_it_is_refused(registry):
    assert error_for(["cost=format"], registry) == (
        "cost=format: algorithm=grpo has no role cost; remove the override (cost=none) or choose an algorithm "
        "that declares it: constrained.")


def test_a_run_saves_the_declared_group_as_a_section(registry):
    resolved = compose_config(["algorithm=constrained", "cost=format"], registry)
    assert "cost" in resolved.cfg and resolved.cfg.cost.correct_score == 1.0
    assert run_sections(registry) == ["algorithm", "rollout", "train_engine", "resharder", "reward", "data", "model",
                                      "launcher", "trainer", "agent", "sampling", "cost"]


@pytest.mark.parametrize(("role", "message"), [
    ({"name": "critic", "kind": "train_engine", "serves_as": "critic"}, "role 'critic': a declared role needs a new"),
    ({"name": "judge", "kind": "rollout"}, "role 'judge': kind 'rollout'; kinds are train_engine, reward"),
    ({"name": "twin", "kind": "train_engine"}, "role 'twin' (train_engine): serves_as=None; choose one of actor, "),
    ({"name": "cost", "kind": "reward", "serves_as": "critic"}, "a reward function serves as none"),
])
def test_a_bad_role_declaration_names_the_role(role, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        Role(**role)


def test_a_reward_role_may_not_take_the_name_of_a_section():
    @dataclasses.dataclass
    class Clashing:
        extra_roles: ClassVar[tuple] = (Role("trainer", kind="reward"),)

    with pytest.raises(ConfigError, match="algorithm=clash declares the role 'trainer', whose config group would "
                                          "replace the section trainer"):
        role_groups({"clash": Clashing}, {"trainer"})


# ------------------------------------------------------------------------------ registered functions
def test_estimator_and_policy_loss_keys_name_registered_functions(registry):
    @dataclasses.dataclass
    class SharedMathConfig(PolicyLossConfig):
        adv_estimator: str = "grpo"

    check_registered_names({"algorithm": SharedMathConfig()}, registry)  # the algorithm kit's estimator and loss
    with pytest.raises(ConfigError) as info:
        check_registered_names({"algorithm": SharedMathConfig(adv_estimator="rloo")}, registry)
    assert str(info.value) == (
        "algorithm.adv_estimator=rloo: no installed plugin provides advantage_estimator 'rloo'. Installed choices: "
        f"grpo. It is provided by the package rlloom-grpo: pip install -e {CHECKOUT}/algorithms/grpo")
    with pytest.raises(ConfigError) as info:
        check_registered_names({"algorithm": SharedMathConfig(policy_loss="vanila")}, registry)
    assert str(info.value) == (
        "algorithm.policy_loss=vanila: no installed plugin provides policy_loss 'vanila'. Installed choices: "
        "vanilla. Did you mean 'vanilla'?")
    # a config without the keys (the test plugin's GrpoConfig) is not checked
    assert compose_config(["algorithm.n=2"], registry).sections["algorithm"].n == 2


def test_a_model_given_by_path_names_the_run_after_its_folder(tmp_path):
    """Two ``model=hf`` runs of different folders do not share ``runs/<name>``."""
    names = {compose_config(["model=hf", f"model.path={tmp_path / folder}"]).sections["trainer"].run_name
             for folder in ("Qwen2.5-0.5B", "other-model/")}
    assert names == {"grpo-arithmetic-Qwen2.5-0.5B", "grpo-arithmetic-other-model"}
    assert compose_config(["model=hf", "model.path=Org/Name", "trainer.run_name=mine"]).sections["trainer"].run_name \
        == "mine"
