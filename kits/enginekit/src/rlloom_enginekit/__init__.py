"""rlloom-enginekit: helpers for the authors of rlloom engines (rollout and train), kept out of the
core, which needs none of them. It registers no components.

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
"""
