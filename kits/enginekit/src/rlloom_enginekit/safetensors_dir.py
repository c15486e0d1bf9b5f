"""Weights as safetensors files in a directory, and tensors cut into buckets of bounded size: what
``resharder=safetensors``, ``rlloom serve``'s ``/update_weights_from_disk`` and ``rollout=sglang``'s
weight folders write and read, and what the HTTP clients send a request at a time.

A directory holds ``model-00001.safetensors``, ``model-00002.safetensors``, … of at most
``max_shard_bytes`` of tensors each (a larger single tensor gets a file of its own), written from
an iterable so that at most one shard is held in memory.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

import torch
from safetensors import safe_open
from safetensors.torch import save_file

SHARD_PATTERN = "model-{:05d}.safetensors"


def save_tensors(tensors: dict[str, torch.Tensor], path: str) -> None:
    """``safetensors``' ``save_file`` (format ``pt``), with the file's permissions those of any other file
    the process creates (0o666 less the umask: 0644 by default) instead of the library's 0600."""
    save_file(tensors, path, metadata={"format": "pt"})
    umask = os.umask(0o022)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)


def tensor_buckets(named_tensors: Iterable[tuple[str, torch.Tensor]], max_bytes: int
                   ) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Consecutive runs of ``named_tensors`` of at most ``max_bytes`` each (a larger single tensor
    gets a run of its own), so at most one run is held at a time."""
    bucket: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, tensor in named_tensors:
        nbytes = tensor.numel() * tensor.element_size()
        if bucket and size + nbytes > max_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, tensor))
        size += nbytes
    if bucket:
        yield bucket


def write_safetensors_dir(named_tensors: Iterable[tuple[str, torch.Tensor]], directory: str,
                          max_shard_bytes: int) -> tuple[int, int]:
    """Write the tensors as consecutive shards in ``directory`` (created; existing ``*.safetensors``
    removed first). Returns ``(num_tensors, num_bytes)``."""
    os.makedirs(directory, exist_ok=True)
    for name in os.listdir(directory):
        if name.endswith(".safetensors"):
            os.remove(os.path.join(directory, name))
    num_tensors = num_bytes = 0
    on_host = ((name, tensor.detach().to("cpu").contiguous()) for name, tensor in named_tensors)  # one at a time
    for files, bucket in enumerate(tensor_buckets(on_host, max_shard_bytes), start=1):
        shard: dict[str, torch.Tensor] = {}
        for name, tensor in bucket:
            if name in shard:
                raise ValueError(f"write_safetensors_dir: the tensor name {name!r} appears twice")
            shard[name] = tensor
            num_tensors += 1
            num_bytes += tensor.numel() * tensor.element_size()
        save_tensors(shard, os.path.join(directory, SHARD_PATTERN.format(files)))
    return num_tensors, num_bytes


def read_safetensors_dir(directory: str) -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor of every ``*.safetensors`` file in ``directory`` (files in name order), one at
    a time."""
    files = sorted(name for name in os.listdir(directory) if name.endswith(".safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors file in {directory}")
    for file_name in files:
        with safe_open(os.path.join(directory, file_name), framework="pt") as f:
            for name in f.keys():
                yield name, f.get_tensor(name)
