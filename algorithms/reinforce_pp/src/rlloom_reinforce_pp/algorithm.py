"""The ``ReinforcePP`` and ``ReinforcePPBaseline`` algorithms: GRPO's step, REINFORCE++ advantages."""

from __future__ import annotations

from typing import Any

import torch

from rlloom.batch import Batch
from rlloom.losses import kl_penalized_rewards
from rlloom_grpo.algorithm import GRPO
from rlloom_reinforce_pp.config import ReinforcePPConfig


class ReinforcePP(GRPO):
    """REINFORCE++ (``algorithm=reinforce_pp``): whitened token-level returns (the estimator
    ``reinforce_pp``: :func:`rlloom_reinforce_pp.advantages.reinforce_pp_advantages` of
    :meth:`token_level_rewards`), no critic; a reference model when ``use_kl_in_reward`` or
    ``use_kl_loss``."""

    cfg: ReinforcePPConfig
    adv_estimator = "reinforce_pp"

    @property
    def needs_reference(self) -> bool:
        return self.cfg.use_kl_loss or self.cfg.use_kl_in_reward

    def needs_old_log_probs(self, batch: Batch, num_prompts: int) -> bool:
        """GRPO's rule, and also when the KL penalty in the reward needs behaviour log-probs and the
        rollout engine reported none (vLLM with top-k / top-p)."""
        missing = self.cfg.use_kl_in_reward and "rollout_log_probs" not in batch
        return missing or super().needs_old_log_probs(batch, num_prompts)

    def token_level_rewards(self, batch: Batch) -> torch.Tensor:
        """Sets and returns ``token_level_rewards``: ``token_level_scores``, minus the KL penalty
        when ``use_kl_in_reward`` (behaviour log-probs: ``old_log_probs`` when the step computed
        them, else the sampler's own ``rollout_log_probs``)."""
        batch.require("token_level_scores", "response_mask")
        rewards = batch["token_level_scores"]
        if self.cfg.use_kl_in_reward:
            batch.require("ref_log_probs")
            behaviour = batch.get("old_log_probs")
            if behaviour is None:
                batch.require("rollout_log_probs")
                behaviour = batch["rollout_log_probs"]
            rewards, _ = kl_penalized_rewards(rewards, behaviour, batch["ref_log_probs"], batch["response_mask"],
                                           self.cfg.kl_coef, self.cfg.kl_penalty)
        batch["token_level_rewards"] = rewards
        return rewards

    def advantage_options(self) -> dict[str, Any]:
        return {"gamma": self.cfg.gamma}


class ReinforcePPBaseline(ReinforcePP):
    """REINFORCE++-baseline (``algorithm=reinforce_pp_baseline``): group-centred scores, whitened
    (the estimator ``reinforce_pp_baseline``:
    :func:`rlloom_reinforce_pp.advantages.reinforce_pp_baseline_advantages`, groups: ``uid``)."""

    adv_estimator = "reinforce_pp_baseline"
