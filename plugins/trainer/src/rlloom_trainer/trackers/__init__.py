"""The trackers (``trainer.trackers=[...]``): ``console`` (a live view) and ``jsonl`` (``metrics.jsonl``, the run
folder's own record: on whatever the list says), a run's default, and ``tensorboard``, ``wandb`` and ``mlflow``, whose libraries are rlloom-trainer's extras of the
same names (a missing one is named as ``pip install 'wandb>=0.17'``), imported when the tracker starts
(:func:`.common.library`)."""
