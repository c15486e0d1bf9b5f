"""The hooks a plugin implements, the public plugin API: a module with functions decorated ``@rlloom.hookimpl``
named after the hooks below, exposed as an entry point in group ``rlloom``::

    [project.entry-points.rlloom]
    my_plugin = "my_package.plugin"

Every ``register_<kind>s`` hook receives ``register(name, factory, config=None)``: ``name``, what users type
(``algorithm=<name>``); ``factory``, a callable with the hook's signature (``cfg``: an instance of the
registered config), or ``"module:attribute"`` naming it, imported when first built (so loading the registry,
and reporting a config error, stays fast: register heavy components so; a test holds every in-tree plugin
to it); ``config``, the component's config dataclass with defaults, the option ``<name>`` of the kind's Hydra
config group, whose ``__post_init__`` validates values (a ValueError is a config error) and which may have
the abilities the core asks for (:mod:`rlloom.protocols`: ``ChecksModel``, ``PlansOptimizerSteps``, …). A
tool's config is no group's option: ``agent.tool_settings.<name>`` holds its settings (:func:`register_tools`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import pluggy

hookspec = pluggy.HookspecMarker("rlloom")
hookimpl = pluggy.HookimplMarker("rlloom")


def provides(kind: str, group: bool = True) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """A ``register_*`` hook spec, marked with the registry's kind of what it registers (``registry.get(kind,
    name)``) and, with ``group``, as the options of the config group ``kind`` (``rollout=hf``)."""

    def mark(spec: Callable[..., None]) -> Callable[..., None]:
        spec.rlloom_kind, spec.rlloom_group = kind, group
        return hookspec(spec)

    return mark


class RegisterComponent(Protocol):
    """The ``register`` callback of the component hooks; ``factory``'s signature is in each hook's docstring."""

    def __call__(self, name: str, factory: Callable[..., Any] | str, config: Any = None) -> None: ...


class RegisterFunction(Protocol):
    """The ``register`` callback of ``register_advantage_estimators`` / ``register_policy_losses``."""

    def __call__(self, name: str, function: Callable[..., Any] | str) -> None: ...


class RegisterConfig(Protocol):
    """The ``register`` callback of ``register_configs``: option ``name`` of config group ``group``."""

    def __call__(self, group: str, name: str, node: Any) -> None: ...


class RegisterPreset(Protocol):
    """The ``register`` callback of ``register_presets``."""

    def __call__(self, name: str, overrides: list[str], description: str = "") -> None: ...


@provides("train_engine")
def register_train_engines(register: RegisterComponent) -> None:
    """``train_engine=<name>``: ``factory(cfg, spec: EngineSpec) -> TrainEngine``."""


@provides("rollout")
def register_rollout_engines(register: RegisterComponent) -> None:
    """``rollout=<name>``: ``factory(cfg, spec: EngineSpec) -> RolloutEngine``."""


@provides("resharder")
def register_resharders(register: RegisterComponent) -> None:
    """``resharder=<name>``: ``factory(cfg) -> Resharder``."""


@provides("reward")
def register_reward_fns(register: RegisterComponent) -> None:
    """``reward=<name>``: ``factory(cfg) -> RewardFn``."""


@provides("algorithm")
def register_algorithms(register: RegisterComponent) -> None:
    """``algorithm=<name>``: ``factory(cfg) -> Algorithm``."""


@provides("advantage_estimator", group=False)
def register_advantage_estimators(register: RegisterFunction) -> None:
    """The choices of ``algorithm.adv_estimator``: ``register(name, function)``, a function with the one
    signature of :class:`rlloom.protocols.AdvantageEstimator` (or ``"module:attribute"`` naming it)."""


@provides("policy_loss", group=False)
def register_policy_losses(register: RegisterFunction) -> None:
    """The choices of ``algorithm.policy_loss``: ``register(name, function)``, a per-token loss with the
    signature of :class:`rlloom.protocols.PolicyLoss` (or ``"module:attribute"`` naming it)."""


@provides("tracker", group=False)
def register_trackers(register: RegisterComponent) -> None:
    """The names ``trainer.trackers`` may list: ``factory(run_dir: str, config: dict) -> Tracker``."""


@provides("launcher")
def register_launchers(register: RegisterComponent) -> None:
    """``launcher=<name>``, how roles are placed (in-process, Ray, …): ``factory(cfg) -> Launcher``."""


@provides("data")
def register_datasets(register: RegisterComponent) -> None:
    """``data=<name>``: ``factory(cfg, seed: int) -> PromptDataset``."""


@provides("model")
def register_models(register: RegisterComponent) -> None:
    """``model=<name>``: ``factory(cfg) -> str``, the path of a local Hugging Face folder."""


@provides("agent")
def register_agent_loops(register: RegisterComponent) -> None:
    """``agent=<name>`` (default ``single_turn``: one sampled answer per prompt):
    ``factory(cfg, registry: Registry) -> AgentLoop``."""


@provides("tool", group=False)
def register_tools(register: RegisterComponent) -> None:
    """The names ``agent.tools`` may list: ``factory() -> Tool``, or with ``config`` (a dataclass of the tool's
    settings) ``factory(cfg) -> Tool``, ``cfg`` built from ``agent.tool_settings.<name>`` over the defaults
    and checked when the config is composed (:mod:`rlloom_agentkit.settings`); built once per run."""


@provides("environment", group=False)
def register_environments(register: RegisterComponent) -> None:
    """The names ``agent.environment`` may hold: ``factory() -> Environment`` (one per episode)."""


@provides("dispatch_mode", group=False)
def register_dispatch_modes(register: RegisterComponent) -> None:
    """How a launcher spreads an engine method's call over a worker group's ranks (engines name them with
    ``@rlloom.dispatch(name)``): ``factory() -> DispatchMode``."""


@provides("command", group=False)
def register_commands(register: RegisterComponent) -> None:
    """``rlloom <name>``: ``factory(parser: argparse.ArgumentParser) -> run(args) -> int`` adds the command's
    arguments and returns what runs it; the help line is the factory's docstring's first line."""


@hookspec
def register_configs(register: RegisterConfig) -> None:
    """Register extra config group options: ``register(group, name, node)`` where ``node`` is a
    dataclass type or instance (e.g. a ``trainer`` option)."""


@hookspec
def register_presets(register: RegisterPreset) -> None:
    """Register presets: ``register(name, overrides, description)``; ``preset=<name>`` on the command
    line prepends ``overrides`` (a list of Hydra override strings) to the user's own, which win."""
