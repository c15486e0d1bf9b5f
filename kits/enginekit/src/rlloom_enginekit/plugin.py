"""Entry point ``enginekit``: registers the data-parallel dispatch modes (:mod:`rlloom_enginekit.dispatch`)."""

from rlloom import hookimpl

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
