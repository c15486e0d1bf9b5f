"""LoRA settings every train engine shares (``train_engine.lora.*``), the names of LoRA tensors, and the
reference policy a LoRA actor serves itself (its adapters switched off).

LoRA (Hu et al., 2021) freezes each targeted linear layer's weight W0 [out, in] and trains two small
matrices A [r, in] and B [out, r] (B starts at zero), so the layer computes

    y = W0 x + (alpha / r) · B (A dropout(x))

and the policy's weight is W = W0 + (alpha / r) · B A. A train engine that takes LoRA holds W0 once:
the reference policy is the same module with the adapters off (y = W0 x), so no reference engine is
built (:func:`reference_role`). Torch-free: composing a config imports this module.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

from rlloom.config.limits import Limited
from rlloom.controller.futures import submit
from rlloom.protocols import Future

ALL_LINEAR = "all-linear"
"""``train_engine.lora.target_modules`` shortcut: every linear layer of the decoder (PEFT's
``all-linear``: the output layer, the LM head, is left out)."""

ADAPTER_NAME = "default"
"""The one adapter a train engine holds (PEFT's default adapter name)."""


@dataclass
class LoraConfig(Limited):
    """``train_engine.lora``: LoRA adapters in place of full fine-tuning (module docstring).

    ``rank`` r: 0 turns LoRA off (every weight trains); ``alpha``: the scale numerator, the update is
    (alpha / r) · B A; ``target_modules``: ``all-linear`` or a list of module names, each matched as
    the last parts of a module's dotted name (``q_proj`` matches ``model.layers.0.self_attn.q_proj``),
    every one of which must name a linear layer of the model; ``dropout``: on the adapters' input
    while training; ``adapter_path``: a PEFT adapter folder (``adapter_config.json``,
    ``adapter_model.safetensors``, as ``rlloom export`` writes) to start from, whose rank and targets
    must match these settings.
    """

    section: ClassVar[str] = "train_engine.lora"
    limits: ClassVar[dict] = {"rank": ">= 0", "alpha": "> 0", "dropout": "in [0, 1)"}

    rank: int = 0  # r, the adapters' rank; 0: LoRA off (every weight trains)
    alpha: float = 16.0  # the update is (alpha / rank) · B A
    target_modules: Any = ALL_LINEAR  # all-linear (every linear layer but the LM head) or a list: [q_proj,v_proj]
    dropout: float = 0.0  # probability, on the adapters' input while training
    adapter_path: str | None = None  # a PEFT adapter folder to start from (what rlloom export writes)

    def __post_init__(self) -> None:
        super().__post_init__()
        targets = self.target_modules
        if isinstance(targets, str) and targets != ALL_LINEAR:
            targets = [targets]
        if not isinstance(targets, str):
            targets = list(targets)
            if not targets or not all(isinstance(target, str) and target for target in targets):
                raise ValueError(f"train_engine.lora.target_modules={targets}: give {ALL_LINEAR} or a list of module "
                                 "names (e.g. [q_proj,v_proj])")
        self.target_modules = targets
        if self.adapter_path is not None and self.rank == 0:
            raise ValueError(f"train_engine.lora.adapter_path={self.adapter_path}: needs train_engine.lora.rank > 0 "
                             "(rank 0 turns LoRA off); set the adapter's rank")

    @property
    def enabled(self) -> bool:
        """Whether LoRA is on (``rank > 0``)."""
        return self.rank > 0

    @property
    def scaling(self) -> float:
        """alpha / r, the factor of B A in the merged weight."""
        return self.alpha / self.rank


def matches_target(module_name: str, target: str) -> bool:
    """Whether ``target`` names the module ``module_name``: equal, or its last dotted parts."""
    return module_name == target or module_name.endswith("." + target)


def unknown_targets(targets: list[str], linear_names: Iterable[str]) -> list[str]:
    """The entries of ``targets`` that match none of the model's linear layers ``linear_names``."""
    names = list(linear_names)
    return [target for target in targets if not any(matches_target(name, target) for name in names)]


def check_targets(targets: Any, linear_names: Iterable[str]) -> None:
    """ValueError naming every entry of ``targets`` (a list; ``all-linear`` always fits) that matches no linear
    layer of the model, and the linear layers' short names the model has."""
    if isinstance(targets, str):
        return
    names = list(linear_names)
    unknown = unknown_targets(targets, names)
    if unknown:
        short = sorted({name.rsplit(".", 1)[-1] for name in names})
        raise ValueError(f"train_engine.lora.target_modules: {unknown} match no linear layer of the model; its "
                         f"linear layers are named {short} (or use {ALL_LINEAR})")


def peft_key(name: str) -> str:
    """An engine's adapter tensor name (``model.layers.0.self_attn.q_proj.lora_A.default.weight``) as PEFT's
    adapter files name it (``base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight``)."""
    return "base_model.model." + name.replace(f".{ADAPTER_NAME}.", ".")


def engine_key(key: str) -> str:
    """The inverse of :func:`peft_key`."""
    name = key.removeprefix("base_model.model.")
    for part in ("lora_A", "lora_B"):
        name = name.replace(f".{part}.", f".{part}.{ADAPTER_NAME}.")
    return name


@runtime_checkable
class SavesAdapter(Protocol):
    """Optional ability of a train engine that trains LoRA adapters (``rlloom export`` without ``--merge``)."""

    def save_adapter(self, out_dir: str, base_model: str) -> str:
        """Write the adapters as a PEFT folder ``out_dir`` (``adapter_config.json`` naming ``base_model``,
        ``adapter_model.safetensors``) that ``peft.PeftModel.from_pretrained`` loads; returns ``out_dir``."""


@runtime_checkable
class ServesReference(Protocol):
    """Optional ability of a train-engine config: whether its actor serves the reference policy itself."""

    def reference_from_actor(self) -> bool:
        """True when the actor's ``compute_ref_log_probs`` gives the reference's log-probs (LoRA: adapters off)."""


class ActorReference:
    """The ``ref`` role of a run whose actor serves the reference (:class:`ServesReference`): a
    :class:`~rlloom.protocols.RemoteHandle` whose ``compute_log_probs`` is the actor's
    ``compute_ref_log_probs``, on the actor's workers. It holds no weights: offloading and closing are the
    actor's."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    def submit_call(self, method: str, args: tuple, kwargs: dict) -> Future:
        """``compute_log_probs`` as the actor's ``compute_ref_log_probs`` (the only method a reference serves)."""
        if method != "compute_log_probs":
            raise AttributeError(f"the reference served by the actor has no method {method!r}")
        return submit(self.actor, "compute_ref_log_probs", *args, **kwargs)

    def offload(self) -> None:
        """Nothing of its own to move: the actor offloads the shared weights."""


def reference_role(engine_config: Any, actor: Any) -> ActorReference | None:
    """The ``ref`` role served by ``actor`` when ``engine_config`` says its actor serves the reference (LoRA
    on), else None (the run builds a reference engine)."""
    if isinstance(engine_config, ServesReference) and engine_config.reference_from_actor():
        return ActorReference(actor)
    return None
