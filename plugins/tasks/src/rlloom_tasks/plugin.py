"""The entry point ``tasks``: registers this package's datasets and reward functions."""

from __future__ import annotations

from rlloom import hookimpl

from rlloom_tasks.data.arithmetic import ArithmeticDataConfig, build_arithmetic
from rlloom_tasks.data.digits import DigitsDataConfig, build_digits
from rlloom_tasks.data.files import FilesDataConfig, build_files
from rlloom_tasks.data.gym import ReasoningGymDataConfig, build_reasoning_gym
from rlloom_tasks.rewards.arithmetic import ArithmeticReward, ArithmeticRewardConfig
from rlloom_tasks.rewards.digits import DigitFractionReward, DigitFractionRewardConfig
from rlloom_tasks.rewards.forbidden import ForbiddenDigitsReward, ForbiddenDigitsRewardConfig
from rlloom_tasks.rewards.format import FormatReward, FormatRewardConfig
from rlloom_tasks.rewards.gym import ReasoningGymReward, ReasoningGymRewardConfig


@hookimpl
def register_datasets(register):
    register("arithmetic", build_arithmetic, config=ArithmeticDataConfig)
    register("reasoning_gym", build_reasoning_gym, config=ReasoningGymDataConfig)
    register("digits", build_digits, config=DigitsDataConfig)
    register("files", build_files, config=FilesDataConfig)


@hookimpl
def register_reward_fns(register):
    register("arithmetic", ArithmeticReward, config=ArithmeticRewardConfig)
    register("format", FormatReward, config=FormatRewardConfig)
    register("reasoning_gym", ReasoningGymReward, config=ReasoningGymRewardConfig)
    register("digit_fraction", DigitFractionReward, config=DigitFractionRewardConfig)
    register("forbidden_digits", ForbiddenDigitsReward, config=ForbiddenDigitsRewardConfig)
