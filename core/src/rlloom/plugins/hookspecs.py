"""The hooks a plugin implements. This module is the public plugin API.

A plugin is a module (or object) with functions decorated ``@rlloom.hookimpl`` named after the hooks
below, exposed as an entry point in group ``rlloom``::

    [project.entry-points.rlloom]
    my_plugin = "my_package.plugin"

Every ``register_<kind>s`` hook receives ``register(name, factory, config=None)``:

- ``name``: what users type in config (``algorithm=<name>``),
- ``factory``: a callable building the component (signatures below), or the string
  ``"module:attribute"`` naming it, imported when the component is first built: register heavy
  components (engines, algorithms, rewards that import torch) this way, so that loading the
  registry — and reporting a config error — stays fast (a test holds every in-tree plugin to it),
- ``config``: a dataclass type: the component's typed config schema with defaults. It becomes the
  option ``<name>`` of the kind's Hydra config group; Hydra rejects unknown keys and wrong types.
  Its ``__post_init__`` validates values (a ValueError is a config error). A tool's config is no
  group's option: ``agent.tool_settings.<name>`` holds its settings (:func:`register_tools`).
  Configs may have abilities the core asks for (:mod:`rlloom.protocols`): an engine config's
  ``check_model`` (:class:`~rlloom.protocols.ChecksModel`), an algorithm config's
  ``optimizer_steps_per_step`` (:class:`~rlloom.protocols.PlansOptimizerSteps`).

The ``register`` callbacks are typed below (:class:`RegisterComponent`, :class:`RegisterFunction`,
:class:`RegisterConfig`, :class:`RegisterPreset`).

Factory signatures (``cfg`` is an instance of the registered config dataclass):

==================  =================  ==========================================================
hook                config group       factory
==================  =================  ==========================================================
train engines       ``train_engine``   ``factory(cfg, spec: EngineSpec) -> TrainEngine``
rollout engines     ``rollout``        ``factory(cfg, spec: EngineSpec) -> RolloutEngine``
resharders          ``resharder``      ``factory(cfg) -> Resharder``
reward fns          ``reward``         ``factory(cfg) -> RewardFn``
algorithms          ``algorithm``      ``factory(cfg) -> Algorithm``
advantage estimators  (``algorithm.adv_estimator``)  the function (:class:`~rlloom.protocols.AdvantageEstimator`)
policy losses       (``algorithm.policy_loss``)  the function (:class:`~rlloom.protocols.PolicyLoss`)
trackers            (``trainer.trackers`` list)  ``factory(run_dir: str, config: dict) -> Tracker``
launchers           ``launcher``       ``factory(cfg) -> Launcher``
datasets            ``data``           ``factory(cfg, seed: int) -> PromptDataset``
models              ``model``          ``factory(cfg) -> str`` (path of a local Hugging Face folder)
agent loops         ``agent``          ``factory(cfg, registry: Registry) -> AgentLoop``
tools               (``agent.tools`` list)  ``factory(cfg) -> Tool`` with a config, else ``factory()`` (once per run)
environments        (``agent.environment``)  ``factory() -> Environment`` (one per episode)
dispatch modes      (engine methods)   ``factory() -> DispatchMode`` (see :mod:`rlloom.controller.dispatch`)
commands            (``rlloom <name>``)  ``factory(parser: argparse.ArgumentParser) -> run(args) -> int``
==================  =================  ==========================================================
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import pluggy

hookspec = pluggy.HookspecMarker("rlloom")
hookimpl = pluggy.HookimplMarker("rlloom")


def provides(kind: str, group: bool = True) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Marks a ``register_*`` hook with the kind of component it registers: the registry's name for
    them (``registry.get(kind, name)``) and, with ``group``, the config group whose options they are
    (``rollout=hf``). The registry's kinds are read from these marks."""

    def mark(spec: Callable[..., None]) -> Callable[..., None]:
        spec.rlloom_kind, spec.rlloom_group = kind, group
        return spec

    return mark


class RegisterComponent(Protocol):
    """The ``register`` callback of the component hooks (engines, resharders, rewards, algorithms,
    trackers, launchers, datasets, models, dispatch modes, commands): ``factory``'s signature per kind
    and ``config`` are in the module doc."""

    def __call__(self, name: str, factory: Callable[..., Any] | str, config: Any = None) -> None:
        ...


class RegisterFunction(Protocol):
    """The ``register`` callback of ``register_advantage_estimators`` / ``register_policy_losses``:
    a function (:class:`~rlloom.protocols.AdvantageEstimator`, :class:`~rlloom.protocols.PolicyLoss`) or
    ``"module:attribute"`` naming one."""

    def __call__(self, name: str, function: Callable[..., Any] | str) -> None:
        ...


class RegisterConfig(Protocol):
    """The ``register`` callback of ``register_configs``: option ``name`` of config group ``group``."""

    def __call__(self, group: str, name: str, node: Any) -> None:
        ...


class RegisterPreset(Protocol):
    """The ``register`` callback of ``register_presets``."""

    def __call__(self, name: str, overrides: list[str], description: str = "") -> None:
        ...


@hookspec
@provides("train_engine")
def register_train_engines(register: RegisterComponent) -> None:
    """Register :class:`~rlloom.protocols.TrainEngine` factories."""


@hookspec
@provides("rollout")
def register_rollout_engines(register: RegisterComponent) -> None:
    """Register :class:`~rlloom.protocols.RolloutEngine` factories."""


@hookspec
@provides("resharder")
def register_resharders(register: RegisterComponent) -> None:
    """Register :class:`~rlloom.protocols.Resharder` factories."""


@hookspec
@provides("reward")
def register_reward_fns(register: RegisterComponent) -> None:
    """Register :class:`~rlloom.protocols.RewardFn` factories."""


@hookspec
@provides("algorithm")
def register_algorithms(register: RegisterComponent) -> None:
    """Register :class:`~rlloom.protocols.Algorithm` factories."""


@hookspec
@provides("advantage_estimator", group=False)
def register_advantage_estimators(register: RegisterFunction) -> None:
    """Register advantage estimators (``register(name, function)``): the choices of
    ``algorithm.adv_estimator``, each a function with the one signature of
    :class:`rlloom.protocols.AdvantageEstimator` (or ``"module:attribute"`` naming it)."""


@hookspec
@provides("policy_loss", group=False)
def register_policy_losses(register: RegisterFunction) -> None:
    """Register per-token policy losses (``register(name, function)``): the choices of
    ``algorithm.policy_loss``, each a function with the signature of
    :class:`rlloom.protocols.PolicyLoss` (or ``"module:attribute"`` naming it)."""


@hookspec
@provides("tracker", group=False)
def register_trackers(register: RegisterComponent) -> None:
    """Register :class:`~rlloom.protocols.Tracker` factories (``register(name, factory)``)."""


@hookspec
@provides("launcher")
def register_launchers(register: RegisterComponent) -> None:
    """Register launchers: how worker groups are placed (in-process, Ray, …)."""


@hookspec
@provides("data")
def register_datasets(register: RegisterComponent) -> None:
    """Register prompt datasets (``data=<name>``); see :class:`rlloom.protocols.PromptDataset`."""


@hookspec
@provides("model")
def register_models(register: RegisterComponent) -> None:
    """Register model sources (``model=<name>``): factories returning a local HF folder path."""


@hookspec
@provides("agent")
def register_agent_loops(register: RegisterComponent) -> None:
    """Register :class:`~rlloom.protocols.AgentLoop` factories (``agent=<name>``; ``single_turn``, one
    sampled answer per prompt, is the default)."""


@hookspec
@provides("tool", group=False)
def register_tools(register: RegisterComponent) -> None:
    """Register :class:`~rlloom.protocols.Tool` factories (``register(name, factory, config=None)``):
    the names an agent loop's ``tools`` list may hold. With ``config`` (a dataclass type: the tool's
    settings and their defaults), the factory is called ``factory(cfg)``, ``cfg`` built from
    ``agent.tool_settings.<name>`` over the defaults and checked when the run's config is composed
    (:mod:`rlloom_agentkit.settings`); without, ``factory()``."""


@hookspec
@provides("environment", group=False)
def register_environments(register: RegisterComponent) -> None:
    """Register :class:`~rlloom.protocols.Environment` factories (``register(name, factory)``): the
    names an agent loop's ``environment`` setting may hold."""


@hookspec
@provides("dispatch_mode", group=False)
def register_dispatch_modes(register: RegisterComponent) -> None:
    """Register dispatch modes (``register(name, factory)``): how a launcher spreads an engine
    method's call over a worker group's ranks; engines name them with ``@rlloom.dispatch(name)``."""


@hookspec
@provides("command", group=False)
def register_commands(register: RegisterComponent) -> None:
    """Register ``rlloom`` subcommands (``register(name, factory)``): ``factory(parser)`` adds the
    command's arguments to its argparse parser and returns ``run(args) -> exit status``; the command's
    help line is the factory's docstring's first line."""


@hookspec
def register_configs(register: RegisterConfig) -> None:
    """Register extra config group options: ``register(group, name, node)`` where ``node`` is a
    dataclass type or instance (e.g. a ``trainer`` option)."""


@hookspec
def register_presets(register: RegisterPreset) -> None:
    """Register presets: ``register(name, overrides, description)``; ``preset=<name>`` on the command
    line prepends ``overrides`` (a list of Hydra override strings) to the user's own, which win."""
