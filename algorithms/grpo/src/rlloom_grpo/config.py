"""The GRPO family's config schemas (Hydra structured configs), one per ``algorithm=<name>``: GRPO's
(:class:`GRPOConfig`) and its presets, GRPO's step with other defaults, another advantage estimator
or another policy loss (``cispo``, ``gspo``, ``rloo``, ``remax``, ``reinforce_pp``,
``reinforce_pp_baseline``).

The estimator a config's algorithm uses is its ``adv_estimator``: a key where the user chooses it
(:class:`GRPOConfig` and the presets built on it), a class attribute where the preset fixes it
(:class:`RLOOConfig`, :class:`ReMaxConfig`, :class:`ReinforcePPConfig`: no advantage key at all)."""

from dataclasses import dataclass
from typing import ClassVar, Optional

from rlloom.algos.config import MiniBatchSchedule, PolicyLossConfig
from rlloom.choices import KL_ESTIMATORS


@dataclass
class GRPOStepConfig(PolicyLossConfig, MiniBatchSchedule):
    """The policy-loss fields (:class:`rlloom.algos.config.PolicyLossConfig`: clip range, dual clip,
    aggregation, KL loss, entropy bonus, ``policy_loss``) and those of GRPO's step
    (:class:`rlloom_grpo.algorithm.GRPO`). Units: *prompts* or *responses* (= prompts × ``n``) as
    stated.

    - ``n``: responses sampled per prompt (the group size).
    - ``ppo_epochs``: passes over each step's batch.
    - ``ppo_mini_batch_size``: *prompts* per optimizer step (× ``n`` responses); 0 = the whole
      step's batch is one mini-batch (one optimizer step per epoch).
    - ``recompute_old_log_probs``: compute behaviour log-probs with a separate forward pass even
      when the step takes a single optimizer step (then they equal the training forward's own
      log-probs, so by default that pass is skipped). With several optimizer steps per step
      (``ppo_epochs`` > 1 or mini-batches) they are always computed.

    A subclass names its advantage estimator as ``adv_estimator`` (module docstring).
    """

    n: int = 8
    ppo_epochs: int = 1
    ppo_mini_batch_size: int = 0
    recompute_old_log_probs: bool = False

    def problems(self) -> list[str]:
        problems = super().problems()
        if self.n < 1:
            problems.append(f"n must be >= 1, got {self.n}")
        if self.ppo_epochs < 1:
            problems.append(f"ppo_epochs must be >= 1, got {self.ppo_epochs}")
        if self.ppo_mini_batch_size < 0:
            problems.append(f"ppo_mini_batch_size must be >= 0 (0 = whole batch), got {self.ppo_mini_batch_size}")
        return problems


@dataclass
class GRPOConfig(GRPOStepConfig):
    """GRPO / Dr.GRPO settings: :class:`GRPOStepConfig`'s, and the advantage's:

    - ``norm_adv_by_std``: divide advantages by the group std (GRPO); False gives Dr.GRPO.
    - ``adv_estimator``: the advantage estimator, by name: ``grpo`` (group-relative, see
      :func:`rlloom.algos.advantages.group_relative_advantages`), ``grpo_passk`` (only each
      group's best sample learns, see :func:`rlloom_grpo.advantages.passk_advantages`; divided by
      the group std when ``norm_adv_by_std``; needs ``n`` >= 2, as verl's), ``rloo``, ``remax``,
      ``reinforce_pp`` (:mod:`rlloom_grpo.advantages`), or any other a plugin registers
      (``rlloom plugins`` lists them); checked against the installed ones when the config is composed.
    - ``epsilon``: added to the group std before dividing.
    """

    algorithm_name: ClassVar[str] = "grpo"

    norm_adv_by_std: bool = True
    adv_estimator: str = "grpo"
    epsilon: float = 1e-6

    def problems(self) -> list[str]:
        problems = super().problems()
        if self.adv_estimator == "grpo_passk" and self.n < 2:
            problems.append(f"adv_estimator=grpo_passk compares the best of a group with the second best and "
                            f"needs n >= 2, got n={self.n}")
        if not self.epsilon > 0:
            problems.append(f"epsilon must be > 0, got {self.epsilon}")
        return problems


@dataclass
class CISPOConfig(GRPOConfig):
    """``algorithm=cispo``: GRPO's fields with CISPO's meaning of the clip range:
    ``clip_ratio_low`` / ``clip_ratio_high`` bound the importance-sampling *weight* to
    [1 − low, 1 + high], not the surrogate (the policy loss ``cispo``:
    :func:`rlloom_grpo.losses.cispo_token_loss`).

    Defaults: ``clip_ratio_low=1.0`` (no lower bound: the weight only has to stay ≥ 0; the paper
    sets ε_low large for the same reason), ``clip_ratio_high=4.0`` (our choice; the paper tunes
    ε_high, so set it for your run), ``token-mean`` aggregation (the paper's token-level
    objective), no dual clip (it belongs to the PPO surrogate).
    """

    algorithm_name: ClassVar[str] = "cispo"

    clip_ratio_low: float = 1.0
    clip_ratio_high: float = 4.0
    clip_ratio_c: Optional[float] = None
    policy_loss: str = "cispo"


@dataclass
class GSPOConfig(GRPOConfig):
    """``algorithm=gspo``: GRPO's fields with GSPO's defaults: the clip range applies to the
    *sequence* ratio (the policy loss ``gspo``, :func:`rlloom_grpo.losses.gspo_policy_loss`) and is
    small (``clip_ratio_low=3e-4``, ``clip_ratio_high=4e-4``, the paper's values), aggregation
    ``seq-mean-token-mean``. Advantages are GRPO's (``adv_estimator``, ``norm_adv_by_std``)."""

    algorithm_name: ClassVar[str] = "gspo"

    clip_ratio_low: float = 3e-4
    clip_ratio_high: float = 4e-4
    loss_agg_mode: str = "seq-mean-token-mean"
    policy_loss: str = "gspo"


@dataclass
class RLOOConfig(GRPOStepConfig):
    """``algorithm=rloo``: the fields of GRPO's step (``n`` responses per prompt, the clipped policy
    loss, optional KL loss, mini-batches) and the leave-one-out advantage (the estimator ``rloo``:
    :func:`rlloom_grpo.advantages.rloo_advantages`). It has no advantage settings: the
    leave-one-out baseline needs none."""

    algorithm_name: ClassVar[str] = "rloo"
    adv_estimator: ClassVar[str] = "rloo"


@dataclass
class ReMaxConfig(GRPOStepConfig):
    """``algorithm=remax``: the fields of GRPO's step (``n`` sampled responses per prompt, plus one
    greedy response per prompt for the baseline; the clipped policy loss, optional KL loss,
    mini-batches) and the estimator ``remax`` (:func:`rlloom_grpo.advantages.remax_advantages`).
    It has no advantage settings."""

    algorithm_name: ClassVar[str] = "remax"
    adv_estimator: ClassVar[str] = "remax"


@dataclass
class ReinforcePPConfig(GRPOStepConfig):
    """``algorithm=reinforce_pp``: the fields of GRPO's step plus:

    - ``gamma``: discount of the token-level return (``reinforce_pp`` only).
    - ``use_kl_in_reward`` / ``kl_coef`` / ``kl_penalty``: subtract β·KL_t (estimator
      ``kl_penalty``, see :data:`rlloom.choices.KL_ESTIMATORS`) from every response token's reward;
      needs a reference model.

    The estimator is ``reinforce_pp`` (:func:`rlloom_grpo.advantages.reinforce_pp_advantages`).
    """

    algorithm_name: ClassVar[str] = "reinforce_pp"
    adv_estimator: ClassVar[str] = "reinforce_pp"

    gamma: float = 1.0
    use_kl_in_reward: bool = False
    kl_coef: float = 0.001
    kl_penalty: str = "k1"

    def problems(self) -> list[str]:
        problems = super().problems()
        if not 0.0 <= self.gamma <= 1.0:
            problems.append(f"gamma must be in [0, 1], got {self.gamma}")
        if self.kl_coef < 0:
            problems.append(f"kl_coef must be >= 0, got {self.kl_coef}")
        if self.kl_penalty not in KL_ESTIMATORS:
            problems.append(f"kl_penalty must be one of {sorted(KL_ESTIMATORS)}, got {self.kl_penalty!r}")
        return problems


@dataclass
class ReinforcePPBaselineConfig(ReinforcePPConfig):
    """``algorithm=reinforce_pp_baseline``: :class:`ReinforcePPConfig`'s fields (``gamma`` unused)
    with the estimator ``reinforce_pp_baseline`` (group-centred scores, whitened:
    :func:`rlloom_grpo.advantages.reinforce_pp_baseline_advantages`)."""

    algorithm_name: ClassVar[str] = "reinforce_pp_baseline"
    adv_estimator: ClassVar[str] = "reinforce_pp_baseline"
