"""``reward=combined``: a weighted sum of other registered rewards.

Config, on the command line (``++`` because the keys are new to the empty default dicts)::

    rlloom train reward=combined "++reward.components={math: 1.0, format: 0.1}" \\
        "++reward.options.format.pattern='(?s).*<answer>.*</answer>'"

``components``: reward name -> weight; ``options`` (optional): reward name -> its config overrides.

Each name in ``components`` is a ``reward=<name>`` option of an installed plugin; it is built with
its own config schema (defaults, overridden by ``options.<name>``, type-checked like any Hydra
config) through the plugin registry. Per row, ``score = Σ weight_i · score_i``.

Components of the result: ``<name>`` (that reward's own score, unweighted) and
``<name>/<component>`` for each of its components, so the trainer logs ``reward/<name>/mean`` and
``reward/<name>/<component>/mean``. A weight of 0 keeps a reward for logging only.
``num_errors`` / ``num_timeouts`` are summed over the rewards (a sample that fails in two rewards
counts twice); ``info`` keys are prefixed ``<name>/``. Token-level rewards of the parts are not
combined: their scores (row sums) are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException
from rlloom.plugins.registry import Registry, get_registry
from rlloom.protocols import Closable

if TYPE_CHECKING:  # annotations only: the plugin registers without torch
    from rlloom import Batch, RewardResult


@dataclass
class CombinedRewardConfig:
    """Options of ``reward=combined`` (see the module doc)."""

    components: dict[str, float] = field(default_factory=dict)  # reward name -> weight
    options: dict[str, Any] = field(default_factory=dict)  # reward name -> its config overrides


def build_component(registry: Registry, name: str, options: Any) -> Any:
    """The reward ``name`` built from its registered schema with ``options`` applied."""
    component = registry.get("reward", name)
    try:
        node = OmegaConf.merge(OmegaConf.structured(component.config), options if options is not None else {})
        cfg = OmegaConf.to_object(node)
    except (OmegaConfBaseException, ValueError, TypeError) as exc:
        message = str(exc).strip().splitlines()[0]
        raise ValueError(f"reward.options.{name} is not valid for reward={name}: {message}") from None
    return component.factory(cfg)


class CombinedReward:
    """See the module doc. ``ValueError`` names the offending field when the config is wrong."""

    def __init__(self, cfg: CombinedRewardConfig, registry: Registry | None = None) -> None:
        registry = registry or get_registry()
        if not cfg.components:
            raise ValueError(
                "reward=combined needs reward.components, e.g. '++reward.components={math: 1.0, format: 0.1}'"
            )
        unused = sorted(set(cfg.options) - set(cfg.components))
        if unused:
            raise ValueError(
                f"reward.options has {unused}, which are not in reward.components {sorted(cfg.components)}"
            )
        self.weights = {name: float(weight) for name, weight in cfg.components.items()}
        self.rewards = {name: build_component(registry, name, cfg.options.get(name)) for name in self.weights}

    def __call__(self, batch: Batch) -> RewardResult:
        import torch
        from rlloom import RewardResult

        total = torch.zeros(len(batch), dtype=torch.float32)
        components: dict[str, torch.Tensor] = {}
        info: dict[str, list] = {}
        errors = timeouts = 0
        for name, reward in self.rewards.items():
            result = reward(batch)
            scores = result.scores.float()
            total += self.weights[name] * scores
            components[name] = scores
            components.update({f"{name}/{sub}": values.float() for sub, values in result.components.items()})
            info.update({f"{name}/{key}": values for key, values in result.info.items()})
            errors += result.num_errors
            timeouts += result.num_timeouts
        return RewardResult(scores=total, components=components, num_errors=errors, num_timeouts=timeouts, info=info)

    def close(self) -> None:
        """Close every part that has worker processes to stop."""
        for reward in self.rewards.values():
            if isinstance(reward, Closable):
                reward.close()
