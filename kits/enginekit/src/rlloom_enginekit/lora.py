"""LoRA settings every train engine shares (``train_engine.lora.*``), the names of LoRA tensors, and the
reference policy a LoRA actor serves itself (its adapters switched off).

LoRA (Hu et al., 2021) freezes each targeted linear layer's weight W0 [out, in] and trains two small
matrices A [r, in] and B [out, r] (B starts at zero), so the layer computes

    y = W0 x + (alpha / r) · B (A dropout(x))

and the policy's weight is W = W0 + (alpha / r) · B A. A train engine that takes LoRA holds W0 once:
the reference policy is the same module with the adapters off (y = W0 x), so no reference engine is
built (:func:`reference_role`). Torch-free: composing a config imports this module.

Weight sync (``resharder.lora_sync``, :func:`check_weight_sync`): ``merged`` sends W per tensor under
the base names at every sync; ``adapter`` sends W0 once, then only the adapters, as a PEFT folder that
a rollout engine which :class:`LoadsAdapters` applies on top of W0.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

from rlloom.config.limits import Limited
from rlloom.controller.futures import submit
from rlloom.errors import ConfigError
from rlloom.protocols import Future

ALL_LINEAR = "all-linear"
"""``train_engine.lora.target_modules`` shortcut: every linear layer of the decoder (PEFT's
``all-linear``: the output layer, the LM head, is left out)."""

ADAPTER_NAME = "default"
"""The one adapter a train engine holds (PEFT's default adapter name)."""

ADAPTER_CONFIG, ADAPTER_WEIGHTS = "adapter_config.json", "adapter_model.safetensors"
"""The two files of a PEFT adapter folder."""

MERGED, ADAPTER = "merged", "adapter"
LORA_SYNCS = (MERGED, ADAPTER)
"""``resharder.lora_sync``: ``merged`` (W0 + (alpha / r) · B A under base names, every sync) or ``adapter``
(W0 at the first sync, then the adapters A, B alone under PEFT's names)."""


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

    def save_adapter(self, out_dir: str, base_model: str | None = None) -> str:
        """Write the adapters as a PEFT folder ``out_dir`` (``adapter_config.json`` naming ``base_model``, by
        default the engine's model folder; ``adapter_model.safetensors``) that ``peft.PeftModel.from_pretrained``
        loads; returns ``out_dir``."""


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


@runtime_checkable
class SyncsAdapters(Protocol):
    """Optional ability of a train engine with LoRA: what adapter-only sync (``resharder.lora_sync=adapter``) reads."""

    def base_weights(self) -> Iterator[tuple[str, Any]]:
        """The frozen base weights W0, full tensors under the base model's names, one at a time (as
        ``named_weights`` without the adapters' B A)."""

    def write_adapter(self, out_dir: str) -> str:
        """Write the adapters as the PEFT folder ``out_dir`` (as :meth:`SavesAdapter.save_adapter` does, naming the
        engine's model folder), on every rank: all ranks call it together (a collective) and each writes its own
        ``out_dir``, a folder of that process's rollout engine; returns ``out_dir``."""


def read_adapter_files(folder: str) -> dict[str, bytes]:
    """The two files of the PEFT adapter folder ``folder`` (:data:`ADAPTER_CONFIG`, :data:`ADAPTER_WEIGHTS`), read
    into memory: what crosses to a rollout engine in another process."""
    import os

    files = {}
    for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
        with open(os.path.join(folder, name), "rb") as handle:
            files[name] = handle.read()
    return files


def write_adapter_files(files: dict[str, bytes], folder: str) -> str:
    """Write :func:`read_adapter_files`' ``files`` as the folder ``folder`` (made if missing); returns ``folder``."""
    import os

    os.makedirs(folder, exist_ok=True)
    for name, content in files.items():
        with open(os.path.join(folder, name), "wb") as handle:
            handle.write(content)
    return folder


@runtime_checkable
class LoadsAdapters(Protocol):
    """Optional ability of a rollout engine: generate with the weights it holds plus a LoRA adapter."""

    def load_adapter(self, path: str, name: str) -> None:
        """Generate from now on with the PEFT adapter folder ``path`` (``adapter_config.json``,
        ``adapter_model.safetensors``) applied to the weights loaded so far: y = W0 x + (alpha / r) · B A x.
        ``name`` is new at every call (an engine keeps no adapter under it), so no cached older adapter
        is ever served; the previous adapter is dropped. ``path`` must stay until the next call."""


@runtime_checkable
class TakesAdapters(Protocol):
    """Optional ability of a rollout-engine config: whether its engine will take the run's adapters."""

    def adapter_refusal(self, lora: LoraConfig) -> str:
        """``""`` when the engine :class:`LoadsAdapters` of ``lora``'s rank and targets, else why not, naming
        the settings that would make it (``rollout.max_lora_rank=0 builds no LoRA slots``)."""


def check_weight_sync(sections: dict[str, Any], choices: dict[str, str]) -> None:
    """ConfigError, before anything loads, when the resharder cannot sync this run's LoRA policy:
    ``resharder=shared`` with LoRA (no parameter holds W0 + (alpha / r) · B A to lend), or
    ``resharder.lora_sync=adapter`` without LoRA, with a rollout engine that takes no adapters
    (:class:`TakesAdapters`), or with partial rollouts (``trainer.partial_rollout``)."""
    lora = getattr(sections["train_engine"], "lora", None)
    lora_on = lora is not None and lora.enabled
    if choices["resharder"] == "shared" and lora_on:
        raise ConfigError(f"resharder=shared lends the train engine's own parameters, and with LoRA "
                          f"(train_engine.lora.rank={lora.rank}) none holds the policy's weights W0 + (alpha/r)·B·A: "
                          "use resharder=in_process")
    if getattr(sections["resharder"], "lora_sync", MERGED) != ADAPTER:
        return
    key, rollout = f"resharder.lora_sync={ADAPTER}", sections["rollout"]
    if not lora_on:
        raise ConfigError(f"{key} needs LoRA adapters to send: set train_engine.lora.rank > 0 (or "
                          f"resharder.lora_sync={MERGED})")
    refusal = rollout.adapter_refusal(lora) if isinstance(rollout, TakesAdapters) else "loads full weights only"
    if refusal:
        raise ConfigError(f"{key}: rollout={choices['rollout']} {refusal}; or use resharder.lora_sync={MERGED}")
    if getattr(sections["trainer"], "partial_rollout", False):
        raise ConfigError(f"{key}: trainer.partial_rollout=true swaps the weights inside a generation, and the rollout "
                          "process loads an adapter between generations only; set trainer.partial_rollout=false or "
                          f"resharder.lora_sync={MERGED}")
