"""Sharded checkpoints of an FSDP2 actor at world size 2 under ``launcher=ray``; a worker killed
mid-step leaves the last checkpoint intact, and ``trainer.resume=auto`` finishes the run exactly as an
uninterrupted one (fault injected with the worker's seam ``RLLOOM_RAY_FAULT``)."""

from __future__ import annotations

import json
import math
import os

import pytest
import torch
from ray_test_helpers import cpus_freed, run_tiny, seconds_since_last_row
from rlloom_trainer.testing import comparable_rows

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
ray = pytest.importorskip("ray")

from rlloom_ray import WorkerError  # noqa: E402
from rlloom_trainer.checkpoint import MANIFEST, Checkpoint, CheckpointManager, damage, read_step  # noqa: E402
from rlloom_trainer.testing import metric_rows  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from torch.distributed.checkpoint import FileSystemReader  # noqa: E402
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save  # noqa: E402

STEPS, SAVE_FREQ = 4, 2  # checkpoints after steps 2 and 4
WORLD = 2
FSDP2_SPLIT = [
    "launcher=ray", f"+launcher.resource_pools.global={WORLD}", "+launcher.resource_pools.gen=1",
    "+launcher.mapping.rollout=gen", "resharder=safetensors", f"trainer.save_freq={SAVE_FREQ}",
]
SHARD_FILES = {f"__{rank}_0.distcp" for rank in range(WORLD)}  # torch.distributed.checkpoint: one file per rank




@pytest.fixture(scope="module")
def reference(ray_cluster, cache, tmp_path_factory):
    """An uninterrupted world-size-2 run: its run dir and metrics rows."""
    run_dir = str(tmp_path_factory.mktemp("uninterrupted"))
    return run_dir, run_tiny(run_dir, cache, *FSDP2_SPLIT, steps=STEPS)


def files_under(root: str) -> dict[str, int]:
    """Relative path -> size of every file under ``root`` (written here, not taken from rlloom)."""
    return {os.path.relpath(os.path.join(folder, name), root): os.path.getsize(os.path.join(folder, name))
            for folder, _, names in os.walk(root) for name in names}


def full_state(actor_dir: str, out: str) -> dict[str, object]:
    """Every entry of a DCP checkpoint (tensors stitched from the rank shards, optimizer settings),
    flattened to dotted keys."""
    dcp_to_torch_save(actor_dir, out)
    flat: dict[str, object] = {}

    def walk(prefix: str, value) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), item)
        elif isinstance(value, list):
            for index, item in enumerate(value):
                walk(f"{prefix}.{index}", item)
        else:
            flat[prefix] = value

    walk("", torch.load(out, weights_only=False))
    return flat


@pytest.mark.slow
def test_world_size_2_checkpoints_hold_one_shard_per_rank(reference, tmp_path):
    run_dir, rows = reference
    # Rank 0 gathers the shards and hands the rollout (its own pool) the full weights as safetensors files: every
    # step's rollout samples with the weights the trainer just updated.
    trained = [row for row in rows if row["step"] > 0]
    assert len(trained) == STEPS and all(row["training/rollout_probs_diff_mean"] < 1e-4 for row in trained), trained
    assert all(row["perf/weight_sync_bytes"] > 0 for row in trained)
    root = os.path.join(run_dir, "checkpoints")
    assert sorted(os.listdir(root)) == ["global_step_2", "global_step_4", "latest"]
    with open(os.path.join(root, "latest")) as handle:
        assert handle.read().strip() == "global_step_4"
    for step in (2, 4):
        folder = os.path.join(root, f"global_step_{step}")
        assert sorted(os.listdir(os.path.join(folder, "actor"))) == sorted({".metadata", "engine_state.json",
                                                                             *SHARD_FILES})
        with open(os.path.join(folder, MANIFEST)) as handle:
            manifest = json.load(handle)
        on_disk = files_under(folder)
        del on_disk[MANIFEST]
        assert manifest["step"] == step  # every shard listed with its size and checksum
        assert {rel: entry["bytes"] for rel, entry in manifest["files"].items()} == on_disk
        assert damage(folder) is None
        assert read_step(folder) == step

    # Each parameter is cut along dim 0 (FSDP2 Shard(0)): rank r's chunk of a tensor with n rows
    # holds rows [r * ceil(n/2), min(n, (r+1) * ceil(n/2))) and lives in rank r's file.
    actor = os.path.join(root, "global_step_4", "actor")
    metadata = FileSystemReader(actor).read_metadata()
    final = load_file(os.path.join(run_dir, "final_model", "model.safetensors"))  # rank 0's full gather
    for name, tensor in final.items():
        entry = metadata.state_dict_metadata[f"model.{name}"]
        assert tuple(entry.size) == tuple(tensor.shape), name
        rows, per_rank = tensor.shape[0], math.ceil(tensor.shape[0] / WORLD)
        chunks = sorted(entry.chunks, key=lambda chunk: chunk.offsets[0])
        assert [(chunk.offsets[0], chunk.sizes[0]) for chunk in chunks] == [
            (rank * per_rank, min(rows, (rank + 1) * per_rank) - rank * per_rank) for rank in range(WORLD)], name
        files = {index.offset[0]: info.relative_path for index, info in metadata.storage_data.items()
                 if index.fqn == f"model.{name}"}
        assert files == {rank * per_rank: f"__{rank}_0.distcp" for rank in range(WORLD)}, name
    # The shards stitched together are the full weights the run exported after its last step.
    stitched = full_state(actor, str(tmp_path / "step4.pt"))
    for name, tensor in final.items():
        assert torch.equal(stitched[f"model.{name}"], tensor), name
    assert any(key.startswith("optimizer.state.") and key.endswith(".exp_avg_sq") for key in stitched)


@pytest.mark.slow
def test_killed_worker_leaves_the_checkpoint_intact_and_resume_finishes_the_run(
        reference, cache, tmp_path, monkeypatch):
    ref_dir, ref_rows = reference
    run_dir = str(tmp_path / "run")
    # train_step is called once per step (whole batch, one epoch): its 3rd call is inside step 3,
    # after global_step_2 was written and before global_step_4. Every actor rank exits there.
    monkeypatch.setenv("RLLOOM_RAY_FAULT", "actor:train_step:3:exit")
    with pytest.raises(WorkerError) as caught:
        run_tiny(run_dir, cache, *FSDP2_SPLIT, steps=STEPS)
    elapsed = seconds_since_last_row(run_dir)  # the workers exited in step 3, after step 2's row
    error = caught.value
    assert (error.role, error.method) == ("actor", "train_step") and error.rank in range(WORLD)
    assert str(error).startswith(f"Ray worker for role 'actor' rank {error.rank} died during train_step():")
    assert elapsed < 60, elapsed
    assert cpus_freed(4)  # the dead pool's placement group and the healthy rollout worker are released
    killed_rows = metric_rows(run_dir)
    assert [row["step"] for row in killed_rows] == [0, 1, 2]  # it died inside step 3

    # The last checkpoint is complete, named by `latest`, and holds what the uninterrupted run saved.
    root = os.path.join(run_dir, "checkpoints")
    assert sorted(os.listdir(root)) == ["global_step_2", "latest"]  # no partial global_step_4(.tmp)
    with open(os.path.join(root, "latest")) as handle:
        assert handle.read().strip() == "global_step_2"
    survivor = os.path.join(root, "global_step_2")
    assert CheckpointManager(run_dir).latest() == Checkpoint(survivor, 2)
    assert read_step(survivor) == 2
    expected_dir = os.path.join(ref_dir, "checkpoints", "global_step_2")
    ours, theirs = files_under(survivor), files_under(expected_dir)
    assert ours.keys() == theirs.keys()
    for name in (*SHARD_FILES, "engine_state.json"):  # .metadata, trainer_state, config name their folder
        assert ours[os.path.join("actor", name)] == theirs[os.path.join("actor", name)], name
    ours = full_state(os.path.join(survivor, "actor"), str(tmp_path / "ours.pt"))
    theirs = full_state(os.path.join(expected_dir, "actor"), str(tmp_path / "theirs.pt"))
    assert ours.keys() == theirs.keys() and any(key.startswith("optimizer.") for key in ours)
    for key, value in theirs.items():
        assert torch.equal(ours[key], value) if isinstance(value, torch.Tensor) else ours[key] == value, key

    # The same command resumes from global_step_2 and runs steps 3 and 4 only: rows 0-2 are still
    # the killed process's, timings included (a restart from scratch would have rewritten them).
    # Both runs shard and all-reduce over the same 2 ranks in the same order and the data position
    # and RNG states are restored, so the metrics equal the uninterrupted run's exactly; no
    # tolerance is needed (the rel 1e-4 of test_ray_launcher covers world size 2 vs 1 process).
    monkeypatch.delenv("RLLOOM_RAY_FAULT")
    rows = run_tiny(run_dir, cache, *FSDP2_SPLIT, "trainer.resume=auto", steps=STEPS)
    assert [row["step"] for row in rows] == [0, 1, 2, 3, 4]
    assert rows[:3] == killed_rows
    assert comparable_rows(rows) == comparable_rows(ref_rows)
    assert sorted(os.listdir(root)) == ["global_step_2", "global_step_4", "latest"]
    ours = load_file(os.path.join(run_dir, "final_model", "model.safetensors"))
    theirs = load_file(os.path.join(ref_dir, "final_model", "model.safetensors"))
    assert ours.keys() == theirs.keys()
    for name, tensor in theirs.items():
        assert torch.equal(ours[name], tensor), name
