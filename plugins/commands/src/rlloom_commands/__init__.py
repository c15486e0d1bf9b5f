"""rlloom-commands: the ``rlloom`` commands that work on what a run wrote — ``eval``, ``generate`` and ``chat``
with a trained model, ``export`` a checkpoint, ``plot`` the metrics — registered through ``register_commands``
(:mod:`rlloom_commands.plugin`). What a model path names is :mod:`rlloom_commands.targets`."""
