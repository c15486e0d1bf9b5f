"""The entry point ``rewards``: registers this package's reward functions, ``data=humaneval`` and the tool
``python`` (programs in the code reward's sandbox)."""

from __future__ import annotations

from rlloom import hookimpl

from rlloom_rewards.code.humaneval import HumanEvalDataConfig, build_humaneval
from rlloom_rewards.code.python_tool import PythonToolConfig
from rlloom_rewards.code.reward import CodeReward, CodeRewardConfig
from rlloom_rewards.combined import CombinedReward, CombinedRewardConfig
from rlloom_rewards.math_answer import MathReward, MathRewardConfig
from rlloom_rewards.model import ModelReward, ModelRewardConfig
from rlloom_rewards.python_fn import PythonReward, PythonRewardConfig


@hookimpl
def register_reward_fns(register):
    register("math", MathReward, config=MathRewardConfig)
    register("code", CodeReward, config=CodeRewardConfig)
    register("python", PythonReward, config=PythonRewardConfig)
    register("combined", CombinedReward, config=CombinedRewardConfig)
    register("model", ModelReward, config=ModelRewardConfig)


@hookimpl
def register_datasets(register):
    register("humaneval", build_humaneval, config=HumanEvalDataConfig)


@hookimpl
def register_tools(register):
    register("python", "rlloom_rewards.code.python_tool:PythonTool", config=PythonToolConfig)
