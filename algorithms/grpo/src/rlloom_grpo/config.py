"""The GRPO family's config schemas (Hydra structured configs), one per ``algorithm=<name>``: GRPO's
(:class:`GRPOConfig`) and its presets, GRPO's step with other defaults, another advantage estimator
or another policy loss (``cispo``, ``gspo``, ``rloo``, ``remax``, ``reinforce_pp``,
``reinforce_pp_baseline``).

The estimator a config's algorithm uses is its ``adv_estimator``: a key where the user chooses it
(:class:`GRPOConfig` and the presets built on it), a class attribute where the preset fixes it
(:class:`RLOOConfig`, :class:`ReMaxConfig`, :class:`ReinforcePPConfig`: no advantage key at all)."""

from dataclasses import dataclass
from typing import ClassVar, Optional

from rlloom_algokit.choices import KL_ESTIMATORS
from rlloom_algokit.grpo_config import GRPOConfig, GRPOStepConfig


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

    adv_estimator: ClassVar[str] = "rloo"


@dataclass
class ReMaxConfig(GRPOStepConfig):
    """``algorithm=remax``: the fields of GRPO's step (``n`` sampled responses per prompt, plus one
    greedy response per prompt for the baseline; the clipped policy loss, optional KL loss,
    mini-batches) and the estimator ``remax`` (:func:`rlloom_grpo.advantages.remax_advantages`).
    It has no advantage settings."""

    adv_estimator: ClassVar[str] = "remax"


@dataclass
class ReinforcePPConfig(GRPOStepConfig):
    """``algorithm=reinforce_pp``: the fields of GRPO's step plus:

    - ``gamma``: discount of the token-level return (``reinforce_pp`` only).
    - ``use_kl_in_reward`` / ``kl_coef`` / ``kl_penalty``: subtract β·KL_t (estimator
      ``kl_penalty``, see :data:`rlloom_algokit.choices.KL_ESTIMATORS`) from every response token's reward;
      needs a reference model.

    The estimator is ``reinforce_pp`` (:func:`rlloom_grpo.advantages.reinforce_pp_advantages`).
    """

    limits: ClassVar[dict] = {"gamma": "in [0, 1]", "kl_coef": ">= 0", "kl_penalty": KL_ESTIMATORS}
    adv_estimator: ClassVar[str] = "reinforce_pp"

    gamma: float = 1.0
    use_kl_in_reward: bool = False
    kl_coef: float = 0.001
    kl_penalty: str = "k1"


@dataclass
class ReinforcePPBaselineConfig(ReinforcePPConfig):
    """``algorithm=reinforce_pp_baseline``: :class:`ReinforcePPConfig`'s fields (``gamma`` unused)
    with the estimator ``reinforce_pp_baseline`` (group-centred scores, whitened:
    :func:`rlloom_grpo.advantages.reinforce_pp_baseline_advantages`)."""

    adv_estimator: ClassVar[str] = "reinforce_pp_baseline"
