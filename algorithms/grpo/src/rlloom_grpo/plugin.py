"""Entry point ``grpo``: registers the GRPO family, ``algorithm=grpo`` and its presets (``cispo``,
``gspo``, ``rloo``, ``remax``, ``reinforce_pp``, ``reinforce_pp_baseline``: a config class each,
:mod:`rlloom_grpo.config`), and the family's advantage estimators and policy losses. GRPO's step,
its config, the estimator ``grpo`` and the policy loss ``vanilla`` are the algorithm kit's
(:mod:`rlloom_algokit`), which DAPO shares."""

import rlloom
from rlloom_algokit.grpo_config import GRPOConfig
from rlloom_grpo import config

ALGORITHMS = {
    # algorithm=<name>: (the algorithm class as "module:attribute", its config)
    "grpo": ("rlloom_algokit.grpo:GRPO", GRPOConfig),
    "cispo": ("rlloom_algokit.grpo:GRPO", config.CISPOConfig),
    "gspo": ("rlloom_algokit.grpo:GRPO", config.GSPOConfig),
    "rloo": ("rlloom_algokit.grpo:GRPO", config.RLOOConfig),
    "remax": ("rlloom_grpo.algorithm:ReMax", config.ReMaxConfig),
    "reinforce_pp": ("rlloom_grpo.algorithm:ReinforcePP", config.ReinforcePPConfig),
    "reinforce_pp_baseline": ("rlloom_grpo.algorithm:ReinforcePP", config.ReinforcePPBaselineConfig),
}


@rlloom.hookimpl
def register_algorithms(register):
    for name, (algorithm, schema) in ALGORITHMS.items():
        register(name, algorithm, config=schema)


@rlloom.hookimpl
def register_advantage_estimators(register):
    register("grpo_passk", "rlloom_grpo.advantages:passk_estimator")
    for name in ("rloo", "remax", "reinforce_pp", "reinforce_pp_baseline"):
        register(name, f"rlloom_grpo.advantages:{name}_estimator")


@rlloom.hookimpl
def register_policy_losses(register):
    register("cispo", "rlloom_grpo.losses:cispo_token_loss")
    register("gspo", "rlloom_grpo.losses:gspo_policy_loss")
