"""``resharder=broadcast``: weight sync over a torch.distributed group of its own (split placement).

The *sync group* (see :class:`rlloom.protocols.DistributedResharder`) has the train pool's rank 0 as
rank 0 and the rollout ranks as ranks 1..N. It is a separate ``ProcessGroupGloo`` (or
``ProcessGroupNCCL``) over a ``TCPStore`` that rank 0 hosts at ``host:port``: the default process
group, which FSDP engines shard over, is never touched.

The stream is self-describing, so receivers need no metadata in advance. Per tensor, rank 0
broadcasts three messages:

1. a header of :data:`HEADER_LEN` int64: ``[TENSOR, dtype code, name length, ndim, shape...]``
   (shape padded with zeros to :data:`MAX_NDIM` entries; dtype code = index in :data:`DTYPES`);
2. the name, UTF-8 encoded, as a uint8 tensor (skipped when empty);
3. the tensor's bytes (C-contiguous, viewed as uint8; skipped when it has no element).

After the last tensor comes a header ``[END, 0, ...]``. If the train engine or the encoding raises
before a tensor is broadcast, rank 0 broadcasts ``[ABORT, 0, ...]`` so receivers raise at once
instead of waiting out ``timeout_s``. One tensor is in flight at a time: peak extra memory is
one tensor on each side.
"""

from __future__ import annotations

import datetime
import math
import time
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from rlloom.protocols import RolloutEngine, TrainEngine
from rlloom.types import SyncStats
from rlloom_enginekit.devices import CudaPeak
from rlloom_enginekit.resharder import InProcessResharder, InProcessResharderConfig
from rlloom_resharders.config import BroadcastResharderConfig

DTYPES = (
    torch.float32, torch.bfloat16, torch.float16, torch.float64,
    torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool,
    torch.float8_e4m3fn, torch.float8_e5m2,
)
TENSOR, END, ABORT = 0, 1, 2
MAX_NDIM = 8
HEADER_LEN = 4 + MAX_NDIM
STORE_PREFIX = "rlloom-sync"


def resolve_backend(backend: str) -> str:
    """``auto`` -> ``nccl`` when CUDA is available, else ``gloo``; other names unchanged."""
    if backend == "auto":
        return "nccl" if torch.cuda.is_available() else "gloo"
    return backend


def encode_header(name: str, tensor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The header and the name bytes of ``tensor`` (see the module doc); ValueError naming the
    tensor when its dtype or rank cannot be sent."""
    if tensor.dtype not in DTYPES:
        raise ValueError(f"resharder=broadcast: {name!r} has dtype {tensor.dtype}, which it cannot send "
                         f"(supported: {', '.join(str(d) for d in DTYPES)})")
    if tensor.dim() > MAX_NDIM:
        raise ValueError(f"resharder=broadcast: {name!r} has {tensor.dim()} dimensions; at most {MAX_NDIM} are sent")
    name_bytes = torch.tensor(list(name.encode("utf-8")), dtype=torch.uint8)
    shape = list(tensor.shape) + [0] * (MAX_NDIM - tensor.dim())
    header = torch.tensor([TENSOR, DTYPES.index(tensor.dtype), name_bytes.numel(), tensor.dim(), *shape],
                          dtype=torch.int64)
    return header, name_bytes


def marker(tag: int) -> torch.Tensor:
    """A header carrying only ``tag`` (END or ABORT)."""
    header = torch.zeros(HEADER_LEN, dtype=torch.int64)
    header[0] = tag
    return header


class BroadcastResharder:
    """Implements :class:`rlloom.protocols.DistributedResharder` with broadcasts from sync rank 0."""

    def __init__(self, cfg: BroadcastResharderConfig) -> None:
        self.config = cfg
        self.group: Any = None  # the sync group's backend (ProcessGroupGloo / ProcessGroupNCCL) once connected
        self.rank = -1
        self.device = torch.device("cpu")

    def connect(self, rank: int, world_size: int, host: str, port: int) -> None:
        """Form the sync group: rank 0 hosts the TCPStore at ``host:port``; every member calls this
        at the same time. Returns when all ``world_size`` members have joined."""
        if self.group is not None:
            raise RuntimeError(f"resharder=broadcast: already connected as rank {self.rank}")
        nccl = resolve_backend(self.config.backend) == "nccl"
        if nccl and not dist.is_nccl_available():
            raise RuntimeError("resharder.backend=nccl: this torch build has no NCCL; use gloo or auto")
        timeout = datetime.timedelta(seconds=self.config.timeout_s)
        store = dist.TCPStore(host, port, world_size, is_master=rank == 0, timeout=timeout, wait_for_workers=False)
        store = dist.PrefixStore(STORE_PREFIX, store)
        if nccl:
            options = dist.ProcessGroupNCCL.Options()
            options._timeout = timeout
            self.device = torch.device("cuda", torch.cuda.current_device())
            self.group = dist.ProcessGroupNCCL(store, rank, world_size, options)
        else:
            self.group = dist.ProcessGroupGloo(store, rank, world_size, timeout=timeout)
        self.rank = rank
        self._broadcast(torch.zeros(1, dtype=torch.int64))  # returns once every member is in

    def send(self, train: TrainEngine) -> SyncStats:
        """Stream ``train.named_weights()`` to the group (sync rank 0). On a process that is not a
        member (another rank of the train pool) only iterate, since the gather is a collective."""
        if self.group is not None and self.rank != 0:
            raise RuntimeError(f"resharder=broadcast: send() runs on sync rank 0, this is rank {self.rank}")
        start = time.perf_counter()
        num_tensors = num_bytes = max_tensor_bytes = 0
        tensors = iter(train.named_weights())
        with CudaPeak() as peak:
            while True:
                try:
                    item = next(tensors, None)
                    packet = None if item is None else (*encode_header(*item), item[1].detach().contiguous())
                except BaseException:
                    if self.group is not None:
                        self._broadcast(marker(ABORT))
                    raise
                if packet is None:
                    break
                size = packet[2].numel() * packet[2].element_size()
                num_tensors, num_bytes, max_tensor_bytes = num_tensors + 1, num_bytes + size, max(max_tensor_bytes, size)
                if self.group is not None:
                    self._send_packet(*packet)
            if self.group is not None:
                self._broadcast(marker(END))
        return SyncStats(num_tensors, num_bytes, time.perf_counter() - start, max_tensor_bytes, peak.extra_bytes)

    def receive(self, rollout: RolloutEngine) -> SyncStats:
        """``rollout.update_weights`` with the tensors rank 0 sends, as they arrive. If the engine
        raises or stops early, the rest of the stream is still received (and dropped) so the
        group stays in step with the sender."""
        if self.group is None or self.rank == 0:
            raise RuntimeError("resharder=broadcast: receive() needs connect() with a rank >= 1 first")
        start = time.perf_counter()
        counts = [0, 0, 0]  # tensors, bytes, largest tensor's bytes
        stream = self._receive_stream(counts)
        try:
            rollout.update_weights(stream)
        finally:
            for _ in stream:
                pass
        return SyncStats(counts[0], counts[1], time.perf_counter() - start, counts[2])

    def sync(self, train: TrainEngine, rollout: RolloutEngine) -> SyncStats:
        """Both engines in this process: stream as ``resharder=in_process`` does, no group needed."""
        return InProcessResharder(InProcessResharderConfig()).sync(train, rollout)

    def close(self) -> None:
        """Leave the sync group (if connected); calling it again does nothing."""
        if self.group is not None:
            self.group.shutdown()
            self.group, self.rank = None, -1

    # ------------------------------------------------------------------------------ wire
    def _broadcast(self, tensor: torch.Tensor) -> torch.Tensor:
        """Broadcast ``tensor`` from sync rank 0; returns the copy on :attr:`device` that now holds
        rank 0's values (``tensor`` itself when it is already there)."""
        on_device = tensor.to(self.device)
        options = dist.BroadcastOptions()
        options.rootRank = 0
        self.group.broadcast([on_device], options).wait()
        return on_device

    def _send_packet(self, header: torch.Tensor, name_bytes: torch.Tensor, tensor: torch.Tensor) -> None:
        self._broadcast(header)
        if name_bytes.numel():
            self._broadcast(name_bytes)
        if tensor.numel():
            self._broadcast(tensor.reshape(-1).view(torch.uint8))

    def _receive_stream(self, counts: list[int]) -> Iterator[tuple[str, torch.Tensor]]:
        """The tensors of one send, on :attr:`device`; ``counts`` accumulates [tensors, bytes]."""
        while True:
            header = self._broadcast(marker(0)).tolist()
            if header[0] == END:
                return
            if header[0] == ABORT:
                raise RuntimeError("resharder=broadcast: the sender (sync rank 0) failed while streaming weights; "
                                   "see its error")
            _, dtype_code, name_len, ndim, *shape = header
            name = bytes(self._broadcast(torch.zeros(name_len, dtype=torch.uint8)).tolist()) if name_len else b""
            dtype, shape = DTYPES[dtype_code], shape[:ndim]
            numel = math.prod(shape)
            data = torch.empty(numel * dtype.itemsize, dtype=torch.uint8, device=self.device)
            if numel:
                data = self._broadcast(data)
            tensor = data.view(dtype).view(shape)
            counts[0] += 1
            counts[1] += numel * dtype.itemsize
            counts[2] = max(counts[2], numel * dtype.itemsize)
            yield name.decode("utf-8"), tensor
