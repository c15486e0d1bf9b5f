"""Entry point ``trainer`` (group ``rlloom``): the command ``rlloom train`` and the trackers every run
writes by default, ``console`` and ``jsonl``. Factories are named as ``"module:attribute"``, imported
when first built."""

from __future__ import annotations

from rlloom import hookimpl


@hookimpl
def register_commands(register):
    register("train", "rlloom_trainer.command:command")


@hookimpl
def register_trackers(register):
    register("console", "rlloom_trainer.trackers.console:ConsoleTracker")
    register("jsonl", "rlloom_trainer.trackers.jsonl:JsonlTracker")
