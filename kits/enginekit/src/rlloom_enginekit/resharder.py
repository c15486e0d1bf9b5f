"""``resharder=in_process``, the default: weight sync between engines living in the same process."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Optional, Protocol, runtime_checkable

from rlloom.config.limits import Limited
from rlloom.types import SyncStats

from rlloom_enginekit.lora import (ADAPTER, ADAPTER_WEIGHTS, LORA_SYNCS, MERGED, LoadsAdapters, SyncsAdapters,
                                   write_adapter_files)

if TYPE_CHECKING:  # this module is imported to register the resharder: keep it free of torch
    import torch

    from rlloom.protocols import RolloutEngine, TrainEngine


@runtime_checkable
class LabelsWeights(Protocol):
    """A rollout engine whose ``update_weights(named_tensors, version)`` takes the label of the weights it loads:
    ``version``, the trainer's step after which they are (the async pipeline's version, docs/async.md); None when
    the caller has none. It says so with ``labels_weights = True`` (``rollout=server`` names each push with it)."""

    labels_weights: bool

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]],
                       version: Optional[int] = None) -> None: ...


class VersionLabel:
    """A :class:`LabelsWeights` engine as a resharder's rollout side: each ``update_weights(named_tensors)`` is
    labelled ``version``; every other attribute is the engine's own (:func:`labelled`)."""

    def __init__(self, engine: LabelsWeights, version: int) -> None:
        self._engine, self._version = engine, version

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        self._engine.update_weights(named_tensors, version=self._version)

    def __getattr__(self, name: str) -> object:
        return getattr(self._engine, name)


def labelled(engine: RolloutEngine, version: int | None) -> RolloutEngine:
    """``engine`` with its weight loads labelled ``version`` (:class:`VersionLabel`) when it labels its weights
    and ``version`` is known; else ``engine`` itself. What the rollout process and a Ray rollout worker load the
    async pipeline's syncs into."""
    return VersionLabel(engine, version) if version is not None and isinstance(engine, LabelsWeights) else engine


@dataclass
class InProcessResharderConfig(Limited):
    """Tensors stream from the train engine straight into the rollout engine.

    ``lora_sync`` (train_engine.lora.rank > 0; docs/lora.md): ``merged`` streams W0 + (alpha / r) · B A
    under the base model's names at every sync; ``adapter`` sends W0 at the first sync and then only the
    adapters A and B, as a PEFT folder the rollout engine loads (:class:`AdapterSync`; rollout=vllm with
    rollout.max_lora_rank >= the rank, rollout=server), under launcher=local or ray, in every trainer.async_mode
    but partial rollouts. ``adapter_dir``: where the adapter folders go (servers on other machines must read it);
    None: a temporary folder, removed when the run ends.
    """

    section: ClassVar[str] = "resharder"
    limits: ClassVar[dict] = {"lora_sync": LORA_SYNCS}

    lora_sync: str = MERGED  # with LoRA: merged (W0 + (alpha/r)·B·A every sync) or adapter (W0 once, then A, B)
    adapter_dir: str | None = None  # lora_sync=adapter: where the adapter folders go; null: a temporary folder


class _Counter:
    def __init__(self, tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        self._tensors = tensors
        self.num_tensors = 0
        self.num_bytes = 0
        self.max_tensor_bytes = 0

    def add(self, size: int) -> None:
        self.num_tensors += 1
        self.num_bytes += size
        self.max_tensor_bytes = max(self.max_tensor_bytes, size)

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        for name, tensor in self._tensors:
            self.add(tensor.numel() * tensor.element_size())
            yield name, tensor


class InProcessResharder:
    """Colocated sync: ``rollout.update_weights(train.named_weights())``, no copy to disk.

    Full tensors stream one at a time, so peak extra memory is one tensor, not a second model. With
    ``lora_sync=adapter`` the adapters go as a folder instead (:class:`AdapterSync`).
    """

    def __init__(self, cfg: InProcessResharderConfig) -> None:
        self.config = cfg
        self.adapters = AdapterSync(cfg.adapter_dir) if cfg.lora_sync == ADAPTER else None

    def sync(self, train: TrainEngine, rollout: RolloutEngine) -> SyncStats:
        from rlloom_enginekit.devices import CudaPeak

        if self.adapters is not None:
            return self.adapters.sync(train, rollout)
        start = time.perf_counter()
        counter = _Counter(train.named_weights())
        with CudaPeak() as peak:
            rollout.update_weights(counter)
        return SyncStats(counter.num_tensors, counter.num_bytes, time.perf_counter() - start,
                         counter.max_tensor_bytes, peak.extra_bytes)

    def close(self) -> None:
        """Remove the adapter folders this resharder wrote in a temporary folder."""
        if self.adapters is not None:
            self.adapters.close()


class AdapterSync:
    """``resharder.lora_sync=adapter``: the first sync sends the train engine's frozen base weights W0
    (:meth:`~rlloom_enginekit.lora.SyncsAdapters.base_weights`) through ``update_weights``; every sync then
    writes the adapters as a PEFT folder (:class:`AdapterFolders`) and has the rollout engine load it
    (:class:`~rlloom_enginekit.lora.LoadsAdapters`) under ``name = rlloom-<random id>-<k>``, new at every sync,
    so an engine never serves a cached older adapter. ``SyncStats`` counts the tensor bytes sent: W0's (first
    sync only) plus the adapter file's.

    Where it runs: in the process of both engines (``launcher=local``; each rank of a colocated Ray pool, every
    rank writing a folder of its own), or in a rollout worker of its own Ray pool with the train side a
    :class:`StoredAdapter` (what train rank 0 put in the object store). A rollout engine in another process
    (``trainer.async_mode`` under ``launcher=local``) reads the folder's files when it is handed the folder
    and loads its own copy between generations (``rlloom_trainer.rollout_process``)."""

    def __init__(self, directory: str | None) -> None:
        self.folders = AdapterFolders(directory)
        self.base_sent = False

    def sync(self, train: TrainEngine, rollout: RolloutEngine) -> SyncStats:
        from rlloom_enginekit.devices import CudaPeak

        if not isinstance(train, SyncsAdapters):
            raise ValueError(f"resharder.lora_sync=adapter: the train engine {type(train).__name__} has no LoRA "
                             "adapters to send (train_engine=fsdp with train_engine.lora.rank > 0 has)")
        if not isinstance(rollout, LoadsAdapters):
            raise ValueError(f"resharder.lora_sync=adapter: the rollout engine {type(rollout).__name__} cannot load "
                             "adapters (rollout=vllm with rollout.max_lora_rank, rollout=server can)")
        start = time.perf_counter()
        counter = _Counter(train.base_weights() if not self.base_sent else ())
        with CudaPeak() as peak:
            if not self.base_sent:
                rollout.update_weights(counter)
                self.base_sent = True
            name = self.folders.next_name()
            folder = self.folders.folder(name)
            rollout.load_adapter(train.write_adapter(folder), name)
        for size in adapter_tensor_bytes(folder):
            counter.add(size)
        self.folders.loaded(folder)
        return SyncStats(counter.num_tensors, counter.num_bytes, time.perf_counter() - start,
                         counter.max_tensor_bytes, peak.extra_bytes)

    def close(self) -> None:
        self.folders.close()


class AdapterFolders:
    """The adapter folders one process hands its rollout engine: ``<root>/rlloom-<random id>-<k>``, the root
    ``directory`` (made if missing) or a temporary folder. The folder loaded before is removed once the next one
    is loaded (an engine reads its adapter when it loads it)."""

    def __init__(self, directory: str | None) -> None:
        self.directory = directory
        self.root: str | None = None
        self.prefix = f"rlloom-{uuid.uuid4().hex[:8]}"
        self.count = 0
        self.current: str | None = None  # the folder the rollout engine loaded last

    def next_name(self) -> str:
        """The adapter name of the next load, new at every call."""
        self.count += 1
        return f"{self.prefix}-{self.count}"

    def folder(self, name: str) -> str:
        """The folder of the adapter ``name`` (not yet written)."""
        if self.root is None:
            self.root = self.directory or tempfile.mkdtemp(prefix="rlloom-adapters-")
            os.makedirs(self.root, exist_ok=True)
        return os.path.join(self.root, name)

    def loaded(self, folder: str) -> None:
        """``folder`` is loaded: remove the one before."""
        if self.current is not None:
            shutil.rmtree(self.current, ignore_errors=True)
        self.current = folder

    def load(self, rollout: LoadsAdapters, files: dict[str, bytes], name: str) -> None:
        """Write ``files`` (:func:`~rlloom_enginekit.lora.read_adapter_files`) as the folder of ``name`` and have
        ``rollout`` load it under that name."""
        folder = self.folder(name)
        rollout.load_adapter(write_adapter_files(files, folder), name)
        self.loaded(folder)

    def close(self) -> None:
        """Remove the loaded folder, and the temporary root when ``directory`` is None."""
        if self.current is not None:
            shutil.rmtree(self.current, ignore_errors=True)
            self.current = None
        if self.directory is None and self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None


class StoredAdapter:
    """The train side of an :class:`AdapterSync` run in a process without the train engine (a rollout worker of
    its own Ray pool): the adapter folder's ``files`` (:func:`~rlloom_enginekit.lora.read_adapter_files`) and, for
    the first sync, the base weights ``base`` (``(name, tensor)`` pairs), as train rank 0 put them in the object
    store (:class:`~rlloom_enginekit.lora.SyncsAdapters`)."""

    def __init__(self, files: dict[str, bytes], base: list[tuple[str, torch.Tensor]] | None) -> None:
        self.files, self.base = files, base

    def base_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        if self.base is None:
            raise ValueError("resharder.lora_sync=adapter: the first sync into this rollout worker came without the "
                             "base weights")
        return iter(self.base)

    def write_adapter(self, out_dir: str) -> str:
        return write_adapter_files(self.files, out_dir)


def adapter_tensor_bytes(folder: str) -> list[int]:
    """The bytes of each tensor in the PEFT folder's ``adapter_model.safetensors`` (read from its header:
    an 8-byte little-endian length, then JSON giving each tensor's ``data_offsets``)."""
    import json
    import struct

    with open(os.path.join(folder, ADAPTER_WEIGHTS), "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(length))
    return [end - begin for key, entry in header.items() if key != "__metadata__"
            for begin, end in [entry["data_offsets"]]]
