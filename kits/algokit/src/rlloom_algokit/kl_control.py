"""Controllers of the coefficient β of the KL penalty in the reward
(:func:`rlloom_algokit.losses.kl_penalized_rewards`)."""

from __future__ import annotations


class FixedKLController:
    """β stays at its initial value."""

    def __init__(self, kl_coef: float) -> None:
        self.value = kl_coef

    def update(self, current_kl: float, n_steps: int) -> None:
        """Nothing to adapt."""


class AdaptiveKLController:
    """β adapted towards a target KL (Ziegler et al. 2019, as in verl):

        β ← β · (1 + clip(KL / target − 1, −0.2, 0.2) · n_steps / horizon)

    with KL the batch's measured KL and ``n_steps`` the samples (responses) it was measured on.
    """

    def __init__(self, kl_coef: float, target: float, horizon: int) -> None:
        if not target > 0 or horizon < 1:
            raise ValueError(f"adaptive KL control needs target > 0 and horizon >= 1, got {target}, {horizon}")
        self.value = kl_coef
        self.target = target
        self.horizon = horizon

    def update(self, current_kl: float, n_steps: int) -> None:
        error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon
