"""``algorithm=safe_rlhf``: Safe-RLHF (Dai et al. 2023, "Safe RLHF: Safe Reinforcement Learning from
Human Feedback"): PPO on the Lagrangian of "maximise reward subject to expected cost <= limit", with
a reward model (``reward=...``), a cost model (``cost=...``), a critic for each and a Lagrange
multiplier λ learned by gradient ascent on the constraint violation. See ``docs/safe-rlhf.md``."""
