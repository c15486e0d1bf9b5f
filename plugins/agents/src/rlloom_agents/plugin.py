"""The entry point ``agents``: registers the agent loops ``tools`` and ``environment``, the tools
``calculator`` and ``retrieval``, the environment and dataset ``guess_number`` and the reward ``agent``."""

import rlloom
from rlloom_agents.config import (AgentRewardConfig, EnvironmentLoopConfig, GuessNumberDataConfig,
                                  RetrievalToolConfig, ToolLoopConfig)


@rlloom.hookimpl
def register_agent_loops(register):
    register("tools", "rlloom_agents.loops:ToolLoop", config=ToolLoopConfig)
    register("environment", "rlloom_agents.loops:EnvironmentLoop", config=EnvironmentLoopConfig)


@rlloom.hookimpl
def register_tools(register):
    register("calculator", "rlloom_agents.calculator:Calculator")
    register("retrieval", "rlloom_agents.retrieval:Retrieval", config=RetrievalToolConfig)


@rlloom.hookimpl
def register_environments(register):
    register("guess_number", "rlloom_agents.guess_number:GuessNumber")


@rlloom.hookimpl
def register_datasets(register):
    register("guess_number", "rlloom_agents.guess_number:build_guess_number", config=GuessNumberDataConfig)


@rlloom.hookimpl
def register_reward_fns(register):
    register("agent", "rlloom_agents.reward:AgentReward", config=AgentRewardConfig)
