"""Entry point ``trainer`` (group ``rlloom``): ``preset=tiny``; ``launcher=local``, the default
(:mod:`rlloom_trainer.local`); the commands ``rlloom train``, ``eval``, ``generate``, ``chat``, ``export`` and
``plot`` (:mod:`rlloom_trainer.commands`); every in-tree tracker (:mod:`rlloom_trainer.trackers`): ``console`` and
``jsonl`` (a run's default), ``tensorboard``, ``wandb`` and ``mlflow`` (their libraries are the extras of the same
names).

Factories are named as ``"module:attribute"``, imported when first built; a command's is
``command(parser)``, which adds the command's arguments and returns the function that runs it (the
``register_commands`` hook's contract), its docstring's first line the help line.
"""

from __future__ import annotations

from rlloom import hookimpl

from rlloom_trainer.local import LocalLauncherConfig

COMMANDS = {
    "train": "rlloom_trainer.commands.train:command",
    "eval": "rlloom_trainer.commands.evaluate:command",
    "generate": "rlloom_trainer.commands.generate:command",
    "chat": "rlloom_trainer.commands.chat:command",
    "export": "rlloom_trainer.commands.export:command",
    "plot": "rlloom_trainer.commands.plot:command",
    "plugins": "rlloom_trainer.commands.plugins:command",
}
TRACKERS = {
    "console": "rlloom_trainer.trackers.console:ConsoleTracker",
    "jsonl": "rlloom_trainer.trackers.jsonl:JsonlTracker",
    "tensorboard": "rlloom_trainer.trackers.tensorboard:TensorBoardTracker",
    "wandb": "rlloom_trainer.trackers.wandb:WandbTracker",
    "mlflow": "rlloom_trainer.trackers.mlflow:MlflowTracker",
}


@hookimpl
def register_presets(register):
    register(
        "tiny",
        [
            "model=tiny",
            "model.num_heads=2",  # head size 64 / 2 = 32: vLLM's attention kernels (CPU and CUDA) have none for 16
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
        "the tiny random-init model learning a format reward in seconds (tests, smoke runs)",
    )


@hookimpl
def register_launchers(register):
    register("local", "rlloom_trainer.local:LocalLauncher", config=LocalLauncherConfig)


@hookimpl
def register_commands(register):
    for name, factory in COMMANDS.items():
        register(name, factory)


@hookimpl
def register_trackers(register):
    for name, factory in TRACKERS.items():
        register(name, factory)
