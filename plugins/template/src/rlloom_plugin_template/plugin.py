"""Entry point module: the hooks rlloom calls to learn what this plugin provides."""

from __future__ import annotations

from rlloom import hookimpl

from rlloom_plugin_template.algorithm import ToyReinforce, ToyReinforceConfig
from rlloom_plugin_template.reward import ToyLengthReward, ToyLengthRewardConfig


@hookimpl
def register_algorithms(register):
    register("toy_reinforce", ToyReinforce, config=ToyReinforceConfig)


@hookimpl
def register_reward_fns(register):
    register("toy_length", ToyLengthReward, config=ToyLengthRewardConfig)
