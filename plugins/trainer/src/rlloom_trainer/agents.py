"""The run's agent runner: built when ``agent`` is a multi-turn loop (not ``single_turn``), it generates
in place of the rollout engine's batch call (``Roles.agent_rollout``; :mod:`rlloom_agentkit.runner`)."""

from __future__ import annotations

from typing import Any

from rlloom.config import ConfigError
from rlloom.config.compose import ResolvedConfig
from rlloom.plugins.registry import Registry


def multi_turn(resolved: ResolvedConfig) -> bool:
    """Whether the run's ``agent`` is a multi-turn loop; a ConfigError when its launcher would place the
    rollout engine outside the trainer's process."""
    from rlloom_agentkit.config import SingleTurnConfig

    if isinstance(resolved.sections["agent"], SingleTurnConfig):
        return False
    if resolved.choices["launcher"] != "local":
        raise ConfigError(f"agent={resolved.choices['agent']} drives the rollout engine from the trainer's "
                           f"process, which launcher={resolved.choices['launcher']} does not allow yet: use "
                           "launcher=local (rollout=server reaches servers on other machines)")
    return True


def start_agent_runner(resolved: ResolvedConfig, registry: Registry, rollout: Any, tokenizer: Any,
                       model_path: str) -> Any:
    """An :class:`~rlloom_agentkit.runner.AgentRunner` over the in-process ``rollout`` engine for the run's
    multi-turn ``agent`` (:func:`multi_turn`)."""
    cfg, name = resolved.sections["agent"], resolved.choices["agent"]
    from rlloom_agentkit.runner import AgentRunner
    from rlloom_agentkit.template import TurnTemplate
    from rlloom_enginekit.prompts import model_token_ids

    stop_ids, pad_id = model_token_ids(model_path)

    def build_loop(loop: str) -> Any:
        config = cfg if loop == name else registry.get("agent", loop).config()
        return registry.build("agent", loop, config, registry)

    return AgentRunner(rollout, TurnTemplate(tokenizer, stop_ids), pad_id, build_loop, name, cfg)
