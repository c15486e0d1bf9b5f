"""The ``rlloom`` commands of rlloom-trainer, one module each, registered by :mod:`rlloom_trainer.plugin`:
``train`` (:mod:`.train`) and the commands that work on what a run wrote — ``eval`` (:mod:`.evaluate`),
``generate`` and ``chat`` with a trained model, ``export`` a checkpoint, ``plot`` the metrics. What a model
path names (a run folder, a checkpoint, a Hugging Face folder) is :mod:`.targets`."""
