"""The Lagrange multiplier λ of Safe-RLHF's constraint E[cost] <= d."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from typing import Any, Optional


class LagrangeMultiplier:
    """λ = exp(log λ), raised while the recent mean cost J_c exceeds the limit d and lowered below it.

    Each :meth:`update` takes one gradient-ascent step on log λ of λ·(J_c − d) (Safe-RLHF's
    ``lambda_loss = −(J_c − d)·λ``, minimised by SGD):

        log λ ← min(log λ + lr·(J_c − d)·λ, log λ_max)

    J_c is the mean of the last ``window`` costs passed to :meth:`observe`.
    """

    def __init__(self, init: float, lr: float, limit: float, window: int, maximum: Optional[float] = None) -> None:
        self.log_value = math.log(init)
        self.lr = lr
        self.limit = limit
        self.log_max = math.log(maximum) if maximum is not None else None
        self.costs: deque[float] = deque(maxlen=window)

    @property
    def value(self) -> float:
        """λ."""
        return math.exp(self.log_value)

    def observe(self, costs: Iterable[float]) -> None:
        """Add one cost per response to the window J_c is measured on."""
        self.costs.extend(float(cost) for cost in costs)

    def episode_cost(self) -> float:
        """J_c: the mean cost over the window (0 before any cost was observed)."""
        return sum(self.costs) / len(self.costs) if self.costs else 0.0

    def update(self) -> float:
        """One step of log λ (formula in the class doc); returns the violation J_c − d it used."""
        violation = self.episode_cost() - self.limit
        self.log_value += self.lr * violation * self.value
        if self.log_max is not None:
            self.log_value = min(self.log_value, self.log_max)
        return violation

    def state_dict(self) -> dict[str, Any]:
        return {"log_lambda": self.log_value, "episode_costs": list(self.costs)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.log_value = float(state["log_lambda"])
        self.costs.clear()
        self.costs.extend(state["episode_costs"])
