"""The config schemas of GRPO's step (Hydra structured configs, torch-free): :class:`GRPOStepConfig`
(the policy loss's and the step's fields) and :class:`GRPOConfig` (and the advantage's), which the
GRPO family's presets (rlloom-grpo) and DAPO (rlloom-dapo) extend."""

from dataclasses import dataclass
from typing import ClassVar

from rlloom_algokit.config import MiniBatchSchedule, PolicyLossConfig


@dataclass
class GRPOStepConfig(PolicyLossConfig, MiniBatchSchedule):
    """The policy-loss fields (:class:`rlloom_algokit.config.PolicyLossConfig`: clip range, dual clip,
    aggregation, KL loss, entropy bonus, ``policy_loss``) and those of GRPO's step
    (:class:`rlloom_algokit.grpo.GRPO`). Units: *prompts* or *responses* (= prompts × ``n``) as
    stated.

    - ``n``: responses sampled per prompt (the group size).
    - ``ppo_epochs``: passes over each step's batch.
    - ``ppo_mini_batch_size``: *prompts* per optimizer step (× ``n`` responses); 0 = the whole
      step's batch is one mini-batch (one optimizer step per epoch).
    - ``recompute_old_log_probs``: compute behaviour log-probs with a separate forward pass even
      when the step takes a single optimizer step (then they equal the training forward's own
      log-probs, so by default that pass is skipped). With several optimizer steps per step
      (``ppo_epochs`` > 1 or mini-batches) or rollout correction (``rollout_is``) they are always
      computed; in ``bypass_mode`` never (the rollout log-probs take their place).

    A subclass names its advantage estimator as ``adv_estimator`` (module docstring).
    """

    limits: ClassVar[dict] = {"n": ">= 1", "ppo_epochs": ">= 1", "ppo_mini_batch_size": ">= 0"}

    n: int = 8
    ppo_epochs: int = 1
    ppo_mini_batch_size: int = 0
    recompute_old_log_probs: bool = False

    def problems(self) -> list[str]:
        problems = super().problems()
        if self.recompute_old_log_probs and self.bypass_mode:
            problems.append("algorithm.recompute_old_log_probs=true: bypass_mode=true uses the rollout log-probs as "
                            "the old policy and computes none")
        return problems


@dataclass
class GRPOConfig(GRPOStepConfig):
    """GRPO / Dr.GRPO settings: :class:`GRPOStepConfig`'s, and the advantage's:

    - ``norm_adv_by_std``: divide advantages by the group std (GRPO); False gives Dr.GRPO.
    - ``adv_estimator``: the advantage estimator, by name: ``grpo`` (group-relative, see
      :func:`rlloom_algokit.advantages.group_relative_advantages`), ``grpo_passk`` (only each
      group's best sample learns, see :func:`rlloom_grpo.advantages.passk_advantages`; divided by
      the group std when ``norm_adv_by_std``; needs ``n`` >= 2, as verl's), ``rloo``, ``remax``,
      ``reinforce_pp`` (:mod:`rlloom_grpo.advantages`), or any other a plugin registers
      (``rlloom plugins`` lists them); checked against the installed ones when the config is composed.
    - ``epsilon``: added to the group std before dividing.
    """

    limits: ClassVar[dict] = {"epsilon": "> 0"}

    norm_adv_by_std: bool = True
    adv_estimator: str = "grpo"
    epsilon: float = 1e-6

    def problems(self) -> list[str]:
        problems = super().problems()
        if self.adv_estimator == "grpo_passk" and self.n < 2:
            problems.append(f"algorithm.n={self.n}: adv_estimator=grpo_passk compares the best of a group with the "
                            "second best and needs n >= 2")
        return problems
