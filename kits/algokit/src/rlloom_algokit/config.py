"""The policy-loss settings every clipped-policy algorithm shares: a torch-free Hydra structured
config that algorithm configs extend (``GRPOConfig``, ``PPOConfig``, …)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from rlloom.config.limits import limit_problems
from rlloom_algokit.choices import AGG_MODES, KL_ESTIMATORS, ROLLOUT_IS_LEVELS, ROLLOUT_IS_MODES

DEFAULT_POLICY_LOSS = "vanilla"
"""The policy loss this kit registers (:mod:`rlloom_algokit.plugin`): PPO's clipped surrogate with
dual clip (:func:`rlloom_algokit.policy_loss.vanilla_policy_loss`, verl's ``vanilla``)."""


class MiniBatchSchedule:
    """For algorithm configs with ``ppo_epochs`` (passes over a step's batch) and
    ``ppo_mini_batch_size`` (*prompts* per optimizer step; 0: the whole step's): their
    :class:`~rlloom.protocols.PlansOptimizerSteps` ability, ``epochs × train_batch_size / mini``."""

    def optimizer_steps_per_step(self, train_batch_size: int) -> int:
        mini = self.ppo_mini_batch_size or train_batch_size
        if train_batch_size % mini:
            raise ValueError(
                f"algorithm.ppo_mini_batch_size={mini} must divide trainer.train_batch_size={train_batch_size} "
                "(both count prompts): each step is split into equal mini-batches."
            )
        return train_batch_size // mini * self.ppo_epochs


@dataclass
class PolicyLossConfig:
    """The fields :func:`rlloom_algokit.policy_loss.make_policy_loss_fn` reads.

    - ``clip_ratio_low`` / ``clip_ratio_high``: PPO clip range [1 − low, 1 + high] of the ratio.
    - ``clip_ratio_c``: dual-clip bound c (> 1) for negative advantages (verl's default 3); None
      disables it.
    - ``loss_agg_mode``: one of :data:`rlloom_algokit.choices.AGG_MODES` (Dr.GRPO pairs with
      ``seq-mean-token-sum-norm``); used for the policy, entropy and KL terms alike.
    - ``loss_scale_factor``: the constant length L that ``seq-mean-token-sum-norm`` divides by
      (with the number of sequences); None: the step's ``sampling.max_new_tokens``. A constant, as
      Dr.GRPO and verl (its ``loss_scale_factor``, else its fixed ``response_length``) have it, so
      a token's weight does not change with the step's longest response.
    - ``use_kl_loss`` / ``kl_loss_coef`` / ``kl_loss_type``: add β·agg(KL(π ‖ π_ref)) to the loss,
      with estimator ``kl_loss_type`` (see :data:`rlloom_algokit.choices.KL_ESTIMATORS`); needs a
      reference model.
    - ``entropy_coeff``: subtract coef·agg(entropy) (0 disables the bonus).
    - ``policy_loss``: the per-token loss, by name: any function a plugin registers with the
      ``register_policy_losses`` hook (this kit's ``vanilla``: PPO's clipped surrogate); checked
      against the installed ones when the config is composed.
    - ``skip_zero_advantage_rows``: when the loss has no KL and no entropy term, rows whose
      advantages are 0 on every token (GRPO groups whose samples all scored the same) have zero
      gradient, and the train engine leaves them out of its forward and backward passes: the same
      update for less compute (:class:`rlloom.protocols.NamesInertRows`). The loss's metrics
      (``pg_clipfrac``, ``entropy``, ``training/rollout_probs_diff_mean``, …) then cover the
      trained rows; ``actor/skipped_rows`` is the fraction left out. False trains every row.

    Rollout correction (verl's vocabulary; off by default, which is the plain loss bit for bit): the
    rollout engine samples from π_rollout, which differs from the train engine's π_old even on-policy
    (bf16 vs fp32, other kernels) and, in asynchronous runs, by staleness.

    - ``rollout_is``: the level of the importance weight w = π_old / π_rollout
      (:func:`rlloom_algokit.losses.rollout_is_weights`): ``token``, ``sequence`` (the product over
      the response's sampled tokens) or ``geometric`` (their geometric mean); None: no correction.
      The step computes ``old_log_probs`` whenever it is set.
    - ``rollout_is_mode``: ``truncate`` (TIS: w clipped at ``rollout_is_threshold``) or ``mask``
      (masked IS: weight 0 where w is outside [``rollout_is_threshold_lower``,
      ``rollout_is_threshold``], w inside; at sequence and geometric level whole responses).
      The weight multiplies the per-token policy loss, as a constant (no gradient).
    - ``rollout_is_threshold``: the upper threshold; ``rollout_is_threshold_lower``: the lower
      (``mask`` only; None: 1 / upper). IcePop is ``rollout_is=token rollout_is_mode=mask`` with
      its two-sided range (e.g. lower 0.5, upper 5). AReaL's decoupled PPO (for
      ``trainer.async_mode=fully_async``: π_old is the proximal policy, recomputed before the update,
      π_rollout the behaviour policy, possibly versions older) is ``rollout_is=token rollout_is_mode=mask
      rollout_is_threshold_lower=0`` with its cap as ``rollout_is_threshold``.
    - ``bypass_mode``: the rollout log-probs serve as π_old: no recomputation pass, the PPO ratio is
      π / π_rollout, and no importance weight is needed (so ``rollout_is`` must be None).

    Each key's range or choices are its ``limits`` (:mod:`rlloom.config.limits`; subclasses add
    theirs); checks across keys extend :meth:`problems`.
    """

    limits: ClassVar[dict] = {"clip_ratio_low": ">= 0", "clip_ratio_high": ">= 0", "clip_ratio_c": "> 1",
                              "loss_scale_factor": ">= 1", "loss_agg_mode": AGG_MODES, "kl_loss_type": KL_ESTIMATORS,
                              "kl_loss_coef": ">= 0", "rollout_is": ROLLOUT_IS_LEVELS,
                              "rollout_is_mode": ROLLOUT_IS_MODES, "rollout_is_threshold": "> 0",
                              "rollout_is_threshold_lower": ">= 0"}

    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2
    clip_ratio_c: Optional[float] = 3.0
    loss_agg_mode: str = "token-mean"
    loss_scale_factor: Optional[int] = None
    use_kl_loss: bool = False
    kl_loss_coef: float = 0.001
    kl_loss_type: str = "k3"
    entropy_coeff: float = 0.0
    policy_loss: str = DEFAULT_POLICY_LOSS
    skip_zero_advantage_rows: bool = True
    rollout_is: Optional[str] = None
    rollout_is_mode: str = "truncate"
    rollout_is_threshold: float = 2.0
    rollout_is_threshold_lower: Optional[float] = None
    bypass_mode: bool = False

    def __post_init__(self) -> None:
        problems = limit_problems(self, "algorithm") + self.problems()
        if problems:
            raise ValueError("; ".join(problems))

    def problems(self) -> list[str]:
        """What is wrong across keys (each key alone is checked by its ``limits``), one phrase each."""
        problems = [] if self.policy_loss else ["algorithm.policy_loss='': must name a registered policy loss"]
        lower = self.rollout_is_threshold_lower
        if lower is not None and self.rollout_is_mode != "mask":
            problems.append(f"algorithm.rollout_is_threshold_lower={lower}: only rollout_is_mode=mask has a lower "
                            "threshold (truncate clips at the upper one)")
        elif lower is not None and lower >= self.rollout_is_threshold:
            problems.append(f"algorithm.rollout_is_threshold_lower={lower}: must be below "
                            f"algorithm.rollout_is_threshold={self.rollout_is_threshold}")
        if self.bypass_mode and self.rollout_is is not None:
            problems.append(f"algorithm.rollout_is={self.rollout_is}: with algorithm.bypass_mode=true the rollout "
                            "log-probs are the old policy, so the importance weight is 1; set rollout_is=null")
        return problems
