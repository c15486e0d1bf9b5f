"""The GRPO family for rlloom: ``algorithm=grpo`` (and Dr.GRPO), ``cispo``, ``gspo``, ``rloo``,
``remax``, ``reinforce_pp`` and ``reinforce_pp_baseline``: the configs that make the presets
(:mod:`.config`), the two steps that differ from GRPO's (:mod:`.algorithm`), their advantage
estimators (:mod:`.advantages`) and policy losses (:mod:`.losses`). GRPO's step and config, the
group-relative advantage and the clipped policy loss are the algorithm kit's (:mod:`rlloom_algokit`),
which DAPO shares."""

from rlloom.lazy import lazy_exports

__all__ = [
    "CISPOConfig",
    "GSPOConfig",
    "RLOOConfig",
    "ReMax",
    "ReMaxConfig",
    "ReinforcePP",
    "ReinforcePPBaselineConfig",
    "ReinforcePPConfig",
    "cispo_token_loss",
    "gspo_policy_loss",
    "passk_advantages",
    "reinforce_pp_advantages",
    "reinforce_pp_baseline_advantages",
    "remax_advantages",
    "rloo_advantages",
]

__getattr__ = lazy_exports(__name__, {  # imported on first use: the plugin registers without torch
    **dict.fromkeys(["passk_advantages", "reinforce_pp_advantages", "reinforce_pp_baseline_advantages",
                     "remax_advantages", "rloo_advantages"], ".advantages"),
    **dict.fromkeys(["ReMax", "ReinforcePP"], ".algorithm"),
    **dict.fromkeys(["CISPOConfig", "GSPOConfig", "RLOOConfig", "ReMaxConfig", "ReinforcePPBaselineConfig",
                     "ReinforcePPConfig"], ".config"),
    **dict.fromkeys(["cispo_token_loss", "gspo_policy_loss"], ".losses"),
})
