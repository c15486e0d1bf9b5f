"""Entry point ``enginekit``: registers the data-parallel dispatch modes (:mod:`rlloom_enginekit.dispatch`) and
the default resharder, ``in_process`` (:mod:`rlloom_enginekit.resharder`)."""

from rlloom import hookimpl

from rlloom_enginekit.resharder import InProcessResharderConfig

MODES = {  # dispatch mode -> its factory in rlloom_enginekit.dispatch (imported when first used)
    "dp_split": "DataParallelSplit",
    "dp_split_uneven": "uneven_split",
    "dp_split_tokens": "TokenBalancedSplit",
    "dp_split_rollout": "RolloutSplit",
}


@hookimpl
def register_dispatch_modes(register):
    for name, factory in MODES.items():
        register(name, f"rlloom_enginekit.dispatch:{factory}")


@hookimpl
def register_resharders(register):
    register("in_process", "rlloom_enginekit.resharder:InProcessResharder", config=InProcessResharderConfig)
