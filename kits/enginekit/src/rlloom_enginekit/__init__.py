"""rlloom-enginekit: helpers for the authors of rlloom engines (rollout and train), kept out of the
core, which needs none of them. Its entry point registers the data-parallel dispatch modes and the
default resharder, ``in_process`` (:mod:`rlloom_enginekit.plugin`).

- :mod:`~rlloom_enginekit.choices`: valid values of shared engine settings (torch-free).
- :mod:`~rlloom_enginekit.engine_config`: ``TrainEngineConfig`` and the LR schedule (torch-free).
- :mod:`~rlloom_enginekit.devices`: an engine's device and dtype, GPU metrics, offload / onload.
- :mod:`~rlloom_enginekit.sequences`: a train engine's prompt + response input and the logits that
  score the response.
- :mod:`~rlloom_enginekit.packing`: padding-free layouts and token-budget micro-batches.
- :mod:`~rlloom_enginekit.train_step`: the train-step driver every train engine shares, and the
  metric contract of ``train_step``.
- :mod:`~rlloom_enginekit.metrics`: loss metrics summed over micro-batches, read once a step.
- :mod:`~rlloom_enginekit.prompts`: stop and pad ids, left-padded prompts, prompt indices.
- :mod:`~rlloom_enginekit.batching`: per-request generation over an engine's batch call.
- :mod:`~rlloom_enginekit.resharder`: ``resharder=in_process``, weight sync within one process.
- :mod:`~rlloom_enginekit.threads`: each process's torch thread count, from its placement.
"""
