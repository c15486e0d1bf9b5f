"""The settings of ``agent=tools``, ``agent=environment``, the tool ``retrieval``, ``data=guess_number`` and
``reward=agent`` (torch-free)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, ClassVar

from rlloom.config.limits import Limited
from rlloom_agentkit.config import AgentConfig


@dataclass
class ToolLoopConfig(AgentConfig):
    """``agent=tools``: the shared settings (:class:`~rlloom_agentkit.config.AgentConfig`), the calculator by
    default."""

    tools: list[str] = field(default_factory=lambda: ["calculator"])

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.tools:
            raise ValueError("agent.tools=[]: agent=tools needs at least one tool (agent=single_turn has none)")


@dataclass
class EnvironmentLoopConfig(AgentConfig):
    """``agent=environment``: the shared settings and ``environment``, the name of a registered environment."""

    environment: str = "guess_number"  # a registered environment's name (rlloom plugins lists them)

    def check_installed(self, registry: Any) -> None:
        """The tools' checks, and ``environment`` is a registered environment."""
        from rlloom_agentkit.settings import check_names

        super().check_installed(registry)
        check_names(registry, "environment", [self.environment], f"{self.section}.environment")


@dataclass
class RetrievalToolConfig(Limited):
    """Settings of the tool ``retrieval`` (``+agent.tool_settings.retrieval.<key>=...``,
    :mod:`rlloom_agents.retrieval`): ``corpus``, the collection searched (a JSONL file of ``{"id",
    "text"}`` objects or a folder of ``.txt`` files; "": the invented passages shipped with this
    package), and ``top_k``, the passages one search shows. A ``corpus`` that does not exist is a
    config error naming it."""

    section: ClassVar[str] = "agent.tool_settings.retrieval"
    limits: ClassVar[dict[str, str]] = {"top_k": ">= 1"}

    corpus: str = ""  # a JSONL of {id, text} or a folder of .txt; "": the shipped passages
    top_k: int = 3  # passages one search shows

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.corpus and not os.path.exists(self.corpus):
            raise ValueError(f"{self.section}.corpus={self.corpus}: no such file or folder")


@dataclass
class GuessNumberDataConfig(Limited):
    """``data=guess_number`` (:mod:`rlloom_agents.guess_number`)."""

    section: ClassVar[str] = "data"
    limits: ClassVar[dict[str, str]] = {"high": ">= 2", "num_val": ">= 0", "num_train": ">= 0"}

    high: int = 100  # secrets are the integers 1..high
    num_val: int = 20  # validation secrets
    num_train: int = 0  # training secrets; 0: all the rest


@dataclass
class AgentRewardConfig:
    """Options of ``reward=agent`` (:mod:`rlloom_agents.reward`)."""

    unscored_score: float = 0.0  # score of an episode its environment left unscored (counted in reward/errors)


@dataclass
class CalculatorDataConfig(Limited):
    """``data=calculator`` (:mod:`rlloom_agents.calculator_task`)."""

    section: ClassVar[str] = "data"
    limits: ClassVar[dict[str, str]] = {"digits": "in [1, 3]", "shots": ">= 0", "num_val": ">= 0", "num_train": ">= 0"}

    digits: int = 3  # digits of each factor (1-3)
    shots: int = 3  # worked examples (with their tool calls) before each question
    num_val: int = 64  # validation questions
    num_train: int = 2000  # training questions after them
