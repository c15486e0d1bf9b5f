"""``algorithm=ppo`` config schema (a Hydra structured config)."""

from dataclasses import dataclass
from typing import ClassVar

from rlloom_algokit.choices import KL_ESTIMATORS
from rlloom_algokit.config import MiniBatchSchedule, PolicyLossConfig

KL_CTRL_TYPES = ("fixed", "adaptive")


@dataclass
class PPOConfig(PolicyLossConfig, MiniBatchSchedule):
    """PPO settings (verl's defaults). Units: *prompts* or *responses* (= prompts × ``n``) as stated.

    Sampling and schedule:

    - ``n``: responses sampled per prompt (PPO's critic supplies the baseline, so 1 by default).
    - ``ppo_epochs``: passes over each step's batch (actor and critic alike).
    - ``ppo_mini_batch_size``: *prompts* per optimizer step (× ``n`` responses); 0 = the whole
      step's batch is one mini-batch.
    - ``critic_warmup``: the first ``critic_warmup`` steps train only the critic (the actor and the
      rollout weights stay as they are). Note verl updates the actor once ``critic_warmup <= step``,
      i.e. one step earlier.

    Advantages (GAE, see :func:`rlloom_algokit.gae.gae_advantages`): ``gamma`` (discount) and ``lam``
    (GAE λ), both in [0, 1].

    Losses:

    - the policy loss's fields (:class:`rlloom_algokit.config.PolicyLossConfig`): the clip range
      ``clip_ratio_low`` / ``clip_ratio_high``, the dual clip ``clip_ratio_c``, ``loss_agg_mode``
      and ``loss_scale_factor`` (for the value losses too), ``entropy_coeff``, the KL loss
      ``use_kl_loss`` / ``kl_loss_coef`` / ``kl_loss_type``, and ``policy_loss``;
    - ``cliprange_value``: the value clip ε_v: v_clip = v_old + clip(v − v_old, ±ε_v).

    KL penalty in the reward (verl's ``use_kl_in_reward``):

    - ``use_kl_in_reward``: token_level_rewards = token_level_scores − β·kl_t, kl_t the estimator
      ``kl_penalty`` (see :data:`rlloom_algokit.losses.KL_ESTIMATORS`) of the behaviour vs reference
      log-probs.
    - ``kl_coef``: the initial (``fixed``: constant) β; ``kl_ctrl_type``: ``fixed`` or ``adaptive``
      (see :class:`rlloom_algokit.kl_control.AdaptiveKLController`, with ``kl_target`` and
      ``kl_horizon``, counted in responses).

    A reference model is loaded when ``use_kl_in_reward`` or ``use_kl_loss``.
    """

    limits: ClassVar[dict] = {
        "n": ">= 1", "gamma": "in [0, 1]", "lam": "in [0, 1]", "cliprange_value": "> 0", "ppo_epochs": ">= 1",
        "ppo_mini_batch_size": ">= 0", "critic_warmup": ">= 0", "kl_penalty": KL_ESTIMATORS, "kl_coef": ">= 0",
        "kl_ctrl_type": KL_CTRL_TYPES, "kl_target": "> 0", "kl_horizon": ">= 1",
    }

    n: int = 1
    gamma: float = 1.0  # discount of GAE's returns over response tokens
    lam: float = 1.0  # GAE's lambda (1: Monte-Carlo returns minus the value)
    cliprange_value: float = 0.5
    ppo_epochs: int = 1
    ppo_mini_batch_size: int = 0
    critic_warmup: int = 0
    use_kl_in_reward: bool = False
    kl_penalty: str = "kl"  # the KL estimator in the reward: k1 (kl), abs, k2 (mse), k3 (low_var_kl)
    kl_coef: float = 0.001
    kl_ctrl_type: str = "fixed"
    kl_target: float = 0.1  # adaptive KL control: the KL per token aimed at
    kl_horizon: int = 10000  # adaptive KL control: responses over which beta moves toward kl_target
