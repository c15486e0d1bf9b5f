"""``algorithm=dapo`` config schema (a Hydra structured config)."""

from dataclasses import dataclass
from typing import ClassVar

from rlloom_algokit.grpo_config import GRPOConfig

FILTER_METRICS = ("acc", "score")
"""``algorithm.filter_groups_metric`` choices (see :func:`rlloom_dapo.sampling.filter_values`)."""


@dataclass
class DAPOConfig(GRPOConfig):
    """DAPO = GRPO's fields (see :class:`rlloom_algokit.grpo_config.GRPOConfig`) with DAPO's defaults
    (clip-higher ``clip_ratio_high=0.28``, ``token-mean`` aggregation, no KL loss) plus:

    - ``dynamic_sampling``: drop groups whose ``filter_groups_metric`` values are all equal and
      refill the batch with groups of new prompts (:meth:`rlloom_dapo.algorithm.DAPO.step`).
    - ``filter_groups_metric``: ``acc`` (default, verl's recipes' ``filter_groups.metric``): the
      reward's ``correct`` component, or the score before overlong shaping when the reward reports
      none; ``score``: the shaped score (a group all correct but of different lengths then counts
      as varied).
    - ``max_gen_rounds``: generation rounds per step at most (the first included); when the cap is
      hit the step trains on the groups it has (metric ``dapo/missing_groups``).
    - ``overlong_buffer_enable`` / ``overlong_buffer_len`` / ``overlong_penalty_factor``: overlong
      reward shaping (:func:`rlloom_dapo.shaping.overlong_penalty`); the buffer length is in
      tokens and must not exceed ``sampling.max_new_tokens``.
    """

    limits: ClassVar[dict] = {"filter_groups_metric": FILTER_METRICS, "max_gen_rounds": ">= 1",
                              "overlong_buffer_len": ">= 1", "overlong_penalty_factor": ">= 0"}

    clip_ratio_high: float = 0.28
    dynamic_sampling: bool = True
    filter_groups_metric: str = "acc"
    max_gen_rounds: int = 3
    overlong_buffer_enable: bool = False
    overlong_buffer_len: int = 4096
    overlong_penalty_factor: float = 1.0
