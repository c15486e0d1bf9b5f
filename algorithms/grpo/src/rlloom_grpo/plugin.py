"""Entry point ``grpo``: registers the GRPO family, ``algorithm=grpo`` and its presets (``cispo``,
``gspo``, ``rloo``, ``remax``, ``reinforce_pp``, ``reinforce_pp_baseline``: a config class each,
:mod:`rlloom_grpo.config`), and the family's advantage estimators and policy losses (the estimator
``grpo`` and the policy loss ``vanilla`` are the core's)."""

import rlloom
from rlloom_grpo import config

ALGORITHMS = {
    # algorithm=<name>: (the algorithm class, its config)
    "grpo": ("GRPO", config.GRPOConfig),
    "cispo": ("GRPO", config.CISPOConfig),
    "gspo": ("GRPO", config.GSPOConfig),
    "rloo": ("GRPO", config.RLOOConfig),
    "remax": ("ReMax", config.ReMaxConfig),
    "reinforce_pp": ("ReinforcePP", config.ReinforcePPConfig),
    "reinforce_pp_baseline": ("ReinforcePP", config.ReinforcePPBaselineConfig),
}


@rlloom.hookimpl
def register_algorithms(register):
    for name, (algorithm, schema) in ALGORITHMS.items():
        register(name, f"rlloom_grpo.algorithm:{algorithm}", config=schema)


@rlloom.hookimpl
def register_advantage_estimators(register):
    register("grpo_passk", "rlloom_grpo.advantages:passk_estimator")
    for name in ("rloo", "remax", "reinforce_pp", "reinforce_pp_baseline"):
        register(name, f"rlloom_grpo.advantages:{name}_estimator")


@rlloom.hookimpl
def register_policy_losses(register):
    register("cispo", "rlloom_grpo.losses:cispo_token_loss")
    register("gspo", "rlloom_grpo.losses:gspo_policy_loss")
