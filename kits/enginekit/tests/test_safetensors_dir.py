"""Safetensors directories: shards cut by size round-trip in order; duplicate names and empty
directories are refused."""

from __future__ import annotations

import os

import pytest
import torch
from rlloom_enginekit.safetensors_dir import read_safetensors_dir, tensor_buckets, write_safetensors_dir


def test_shards_round_trip(tmp_path):
    tensors = [(f"w{i}", torch.randn(10, 10)) for i in range(5)]  # 400 bytes each
    (tmp_path / "stale.safetensors").write_bytes(b"old")
    count, size = write_safetensors_dir(iter(tensors), str(tmp_path), max_shard_bytes=1000)
    assert (count, size) == (5, 2000)
    # 400 + 400 fit in 1000, a third would not: shards of 2, 2, 1
    assert sorted(os.listdir(tmp_path)) == [f"model-0000{i}.safetensors" for i in (1, 2, 3)]
    back = list(read_safetensors_dir(str(tmp_path)))
    assert [name for name, _ in back] == [name for name, _ in tensors]
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(back, tensors))


def test_duplicate_names_and_empty_directories_are_refused(tmp_path):
    with pytest.raises(ValueError, match="'w' appears twice"):
        write_safetensors_dir([("w", torch.zeros(1)), ("w", torch.zeros(1))], str(tmp_path), 100)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="no \\*.safetensors"):
        list(read_safetensors_dir(str(empty)))


def test_buckets_hold_at_most_max_bytes_unless_one_tensor_is_larger():
    sizes = [3, 3, 5, 1, 1]  # float32 elements: 12, 12, 20, 4, 4 bytes
    buckets = list(tensor_buckets(((f"t{i}", torch.zeros(n)) for i, n in enumerate(sizes)), max_bytes=16))
    assert [[name for name, _ in bucket] for bucket in buckets] == [["t0"], ["t1"], ["t2"], ["t3", "t4"]]
