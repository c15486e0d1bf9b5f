"""Entry point module: the hooks rlloom calls to learn what this plugin provides."""

from __future__ import annotations

from rlloom import hookimpl

from rlloom_plugin_template.config import ToyLengthRewardConfig, ToyReinforceConfig

# Factories as "module:attribute": their modules (which import torch) load only when a run builds them.


@hookimpl
def register_algorithms(register):
    register("toy_reinforce", "rlloom_plugin_template.algorithm:ToyReinforce", config=ToyReinforceConfig)


@hookimpl
def register_reward_fns(register):
    register("toy_length", "rlloom_plugin_template.reward:ToyLengthReward", config=ToyLengthRewardConfig)
