"""The core's own plugins, registered through the same hooks (and entry point) as any other."""

from __future__ import annotations

from rlloom.config.schema import TrainerConfig
from rlloom.plugins.hookspecs import hookimpl

BUILTIN_MODES = {"one_to_all": "OneToAll", "rank_zero": "RankZero"}  # mode -> factory in rlloom.controller.dispatch


@hookimpl
def register_dispatch_modes(register):
    for name, factory in BUILTIN_MODES.items():
        register(name, f"rlloom.controller.dispatch:{factory}")


@hookimpl
def register_configs(register):
    register("trainer", "default", TrainerConfig)


@hookimpl
def register_presets(register):
    register(
        "tiny",
        [
            "model=tiny",
            "data=digits",
            "reward=digit_fraction",
            "algorithm.n=8",
            "trainer.total_steps=20",
            "trainer.train_batch_size=4",
            "trainer.test_freq=10",
            "trainer.val_n=2",
            "trainer.val_greedy=false",
            "sampling.max_new_tokens=4",
            "train_engine.lr=1e-2",
        ],
        "the tiny random-init model learning a format reward in about a minute (tests, smoke runs)",
    )
