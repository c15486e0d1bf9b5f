"""``algorithm=sft`` config schema (a Hydra structured config)."""

from dataclasses import dataclass
from typing import ClassVar

from rlloom.config.limits import Limited
from rlloom_algokit.choices import AGG_MODES

GROUND_TRUTH = "ground_truth"
"""The ``response_key`` that trains on ``str(PromptRecord.ground_truth)`` instead of an ``extra`` entry."""


@dataclass
class SFTConfig(Limited):
    """Supervised fine-tuning settings. Units: *prompts* (one demonstration each).

    - ``response_key``: the key of ``PromptRecord.extra`` holding each prompt's demonstration (a
      string); ``"ground_truth"``: ``str(PromptRecord.ground_truth)``. With ``data=files`` list the
      column in ``data.extra_columns``.
    - ``max_response_length``: demonstration tokens kept (EOS included), > 0; longer ones are cut
      on the right and so lose their EOS. Also the constant length L that
      ``seq-mean-token-sum-norm`` divides by.
    - ``loss_agg_mode``: one of :data:`rlloom_algokit.choices.AGG_MODES`, how the per-token NLL is reduced.
    - ``ppo_mini_batch_size``: prompts per optimizer step; 0 = the whole step's batch (one
      optimizer step per epoch). Must divide ``trainer.train_batch_size``.
    - ``ppo_epochs``: passes over each step's batch, >= 1.

    The last two carry the names every rlloom algorithm (and verl) gives its update schedule, so
    it is set the same way whichever algorithm runs (the trainer counts the run's optimizer steps,
    the LR schedule's length, from them).
    """

    section: ClassVar[str] = "algorithm"
    limits: ClassVar[dict] = {"max_response_length": ">= 1", "loss_agg_mode": AGG_MODES, "ppo_mini_batch_size": ">= 0",
                              "ppo_epochs": ">= 1"}

    response_key: str = "response"
    max_response_length: int = 256
    loss_agg_mode: str = "token-mean"
    ppo_mini_batch_size: int = 0
    ppo_epochs: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.response_key:
            raise ValueError("algorithm.response_key='': must name a key of the prompts' extra (or be 'ground_truth')")
