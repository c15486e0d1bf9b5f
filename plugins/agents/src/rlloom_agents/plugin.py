"""The entry point ``agents``: registers the agent loops ``tools`` and ``environment``, the tools
``calculator`` and ``retrieval``, the calculator's dataset and preset ``calculator``, the environment and
dataset ``guess_number`` and the reward ``agent``."""

import rlloom
from rlloom_agents.config import (AgentRewardConfig, CalculatorDataConfig, EnvironmentLoopConfig,
                                  GuessNumberDataConfig, RetrievalToolConfig, ToolLoopConfig)


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
    register("calculator", "rlloom_agents.calculator_task:build_calculator", config=CalculatorDataConfig)


@rlloom.hookimpl
def register_presets(register):
    register(
        "calculator",
        ["agent=tools", "data=calculator", "reward=arithmetic", "algorithm.n=8", "trainer.train_batch_size=2",
         "sampling.max_new_tokens=40", "agent.max_response_tokens=120", "agent.max_turns=3", "trainer.total_steps=8",
         "trainer.test_freq=4", "trainer.val_max_prompts=16", "trainer.val_n=2", "trainer.val_greedy=false",
         "trainer.max_prompt_length=640"],
        "SmolLM2 learns to multiply 3-digit numbers with the calculator tool (docs/agents.md)",
    )


@rlloom.hookimpl
def register_reward_fns(register):
    register("agent", "rlloom_agents.reward:AgentReward", config=AgentRewardConfig)
