"""``algorithm=grpo`` config schema (a Hydra structured config)."""

from dataclasses import dataclass
from typing import ClassVar, Optional

from rlloom.choices import AGG_MODES, KL_ESTIMATORS

ADV_ESTIMATORS: tuple[str, ...] = ("grpo", "grpo_passk")
"""Accepted values of ``GRPOConfig.adv_estimator``."""


@dataclass
class GRPOConfig:
    """GRPO / Dr.GRPO settings. Units: *prompts* or *responses* (= prompts × ``n``) as stated.

    - ``n``: responses sampled per prompt (the group size).
    - ``norm_adv_by_std``: divide advantages by the group std (GRPO); False gives Dr.GRPO.
    - ``clip_ratio_low`` / ``clip_ratio_high``: PPO clip range [1 − low, 1 + high] of the ratio.
    - ``clip_ratio_c``: dual-clip bound c (> 1) for negative advantages (verl's default 3); None
      disables it.
    - ``loss_agg_mode``: one of :data:`rlloom.losses.AGG_MODES` (Dr.GRPO pairs with
      ``seq-mean-token-sum-norm``); used for the policy, entropy and KL terms alike.
    - ``loss_scale_factor``: the constant length L that ``seq-mean-token-sum-norm`` divides by
      (with the number of sequences); None: the step's ``sampling.max_new_tokens``. A constant, as
      Dr.GRPO and verl (its ``loss_scale_factor``, else its fixed ``response_length``) have it, so
      a token's weight does not change with the step's longest response.
    - ``use_kl_loss`` / ``kl_loss_coef`` / ``kl_loss_type``: add β·agg(KL(π ‖ π_ref)) to the loss,
      with estimator ``kl_loss_type`` (see :data:`rlloom.losses.KL_ESTIMATORS`); needs a
      reference model.
    - ``entropy_coeff``: subtract coef·agg(entropy) (0 disables the bonus).
    - ``ppo_epochs``: passes over each step's batch.
    - ``ppo_mini_batch_size``: *prompts* per optimizer step (× ``n`` responses); 0 = the whole
      step's batch is one mini-batch (one optimizer step per epoch).
    - ``adv_estimator``: one of :data:`ADV_ESTIMATORS`: ``grpo`` (group-relative, see
      :func:`rlloom_grpo.advantages.group_relative_advantages`) or ``grpo_passk`` (only each
      group's best sample learns, see :func:`rlloom_grpo.advantages.passk_advantages`; divided by
      the group std when ``norm_adv_by_std``; needs ``n`` >= 2, as verl's).
    - ``epsilon``: added to the group std before dividing.
    - ``recompute_old_log_probs``: compute behaviour log-probs with a separate forward pass even
      when the step takes a single optimizer step (then they equal the training forward's own
      log-probs, so by default that pass is skipped). With several optimizer steps per step
      (``ppo_epochs`` > 1 or mini-batches) they are always computed.
    """

    algorithm_name: ClassVar[str] = "grpo"  # the config group option, for error messages

    n: int = 8
    norm_adv_by_std: bool = True
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2
    clip_ratio_c: Optional[float] = 3.0
    loss_agg_mode: str = "token-mean"
    loss_scale_factor: Optional[int] = None
    use_kl_loss: bool = False
    kl_loss_coef: float = 0.001
    kl_loss_type: str = "k3"
    entropy_coeff: float = 0.0
    ppo_epochs: int = 1
    ppo_mini_batch_size: int = 0
    adv_estimator: str = "grpo"
    epsilon: float = 1e-6
    recompute_old_log_probs: bool = False

    def __post_init__(self) -> None:
        problems = []
        if self.n < 1:
            problems.append(f"n must be >= 1, got {self.n}")
        if self.clip_ratio_low < 0:
            problems.append(f"clip_ratio_low must be >= 0, got {self.clip_ratio_low}")
        if self.clip_ratio_high < 0:
            problems.append(f"clip_ratio_high must be >= 0, got {self.clip_ratio_high}")
        if self.clip_ratio_c is not None and self.clip_ratio_c <= 1:
            problems.append(f"clip_ratio_c must be > 1 (or null to disable dual clip), got {self.clip_ratio_c}")
        if self.loss_scale_factor is not None and self.loss_scale_factor < 1:
            problems.append(f"loss_scale_factor must be >= 1 (or null: sampling.max_new_tokens), got "
                            f"{self.loss_scale_factor}")
        if self.adv_estimator == "grpo_passk" and self.n < 2:
            problems.append(f"adv_estimator=grpo_passk compares the best of a group with the second best and "
                            f"needs n >= 2, got n={self.n}")
        if self.loss_agg_mode not in AGG_MODES:
            problems.append(f"loss_agg_mode must be one of {list(AGG_MODES)}, got {self.loss_agg_mode!r}")
        if self.kl_loss_type not in KL_ESTIMATORS:
            problems.append(f"kl_loss_type must be one of {sorted(KL_ESTIMATORS)}, got {self.kl_loss_type!r}")
        if self.kl_loss_coef < 0:
            problems.append(f"kl_loss_coef must be >= 0, got {self.kl_loss_coef}")
        if self.ppo_epochs < 1:
            problems.append(f"ppo_epochs must be >= 1, got {self.ppo_epochs}")
        if self.ppo_mini_batch_size < 0:
            problems.append(f"ppo_mini_batch_size must be >= 0 (0 = whole batch), got {self.ppo_mini_batch_size}")
        if self.adv_estimator not in ADV_ESTIMATORS:
            problems.append(f"adv_estimator must be one of {list(ADV_ESTIMATORS)}, got {self.adv_estimator!r}")
        if not self.epsilon > 0:
            problems.append(f"epsilon must be > 0, got {self.epsilon}")
        if problems:
            raise ValueError(f"invalid algorithm={self.algorithm_name} config: " + "; ".join(problems))
