"""``rlloom_trainer.train`` with ``train_engine=megatron``: the tiny GRPO run in this process (TP = 1), and
GRPO and PPO over Ray with tensor parallelism 2 (a pool of two workers, actor, reference, critic
and rollout colocated), each learning and syncing its weights into the rollout engine (hf, and
vLLM); the TP = 2 checkpoint exports to a Hugging Face folder; a megatron run killed with SIGKILL
resumes from its checkpoint as if it had never stopped."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
import torch
from lifecycle_helpers import RLLOOM, metric_rows, run, run_env, train_command
from rlloom_trainer.export import export_checkpoint
from rlloom_trainer.testing import train_tiny, training_rows
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

MEGATRON = ["train_engine=megatron"]
TP2_ON_RAY = [*MEGATRON, "train_engine.tensor_parallel_size=2", "launcher=ray", "+launcher.resource_pools.global=2"]


def assert_learns_and_syncs(rows: list[dict]) -> None:
    assert [row["step"] for row in rows] == list(range(1, 21))
    first = sum(row["critic/score/mean"] for row in rows[:3]) / 3
    last = sum(row["critic/score/mean"] for row in rows[-3:]) / 3
    assert last > first + 0.5, (first, last)
    for row in rows:
        # the rollout engine scores its samples with the weights the trainer just synced
        assert row["training/rollout_probs_diff_mean"] < 1e-4, row
        assert row["perf/weight_sync_bytes"] > 0


@pytest.mark.slow
def test_tiny_grpo_learns_on_megatron_in_process(tmp_path):
    assert_learns_and_syncs(training_rows(train_tiny(tmp_path / "run", *MEGATRON, cache_dir=tmp_path / "cache")))


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_tiny_run_learns_on_megatron_tp2_over_ray(ray_cluster, tmp_path, algorithm):
    rows = training_rows(train_tiny(tmp_path / "run", *TP2_ON_RAY, f"algorithm={algorithm}",
                                    cache_dir=tmp_path / "cache"))
    assert_learns_and_syncs(rows)
    if algorithm == "ppo":
        assert all("critic/vf_loss" in row for row in rows)
        return
    # `rlloom export` reads the TP = 2 checkpoint in one process (recut to TP = 1): the same weights
    # as the final model the TP = 2 run wrote from its gathered slices, and the same logits.
    exported = export_checkpoint(str(tmp_path / "run" / "checkpoints" / "global_step_20"), str(tmp_path / "hf"))
    final = str(tmp_path / "run" / "final_model")
    got, want = load_file(f"{exported}/model.safetensors"), load_file(f"{final}/model.safetensors")
    assert sorted(got) == sorted(want) and all(torch.equal(got[name], want[name]) for name in want)
    ids = torch.arange(1, 20)[None]
    with torch.no_grad():
        logits = [AutoModelForCausalLM.from_pretrained(path)(ids).logits for path in (exported, final)]
    assert torch.equal(*logits)
    # The TP = 2 run resumes at TP = 1 (on one Ray worker): its checkpoints do not depend on the layout.
    tp1 = [*MEGATRON, "launcher=ray", "+launcher.resource_pools.global=1", "trainer.total_steps=21"]
    resumed = training_rows(train_tiny(tmp_path / "run", *tp1, cache_dir=tmp_path / "cache"))
    assert [row["step"] for row in resumed] == list(range(1, 22))


@pytest.mark.slow
def test_tp2_trainer_syncs_into_vllm_over_ray(ray_cluster, tmp_path):
    """Each rank gathers the TP slices into Hugging Face tensors and loads them into its vLLM engine
    (head size 32 and two KV heads: vLLM's CPU kernels and TP = 2 both need them)."""
    vllm = ["rollout=vllm", "model.num_heads=2", "model.num_kv_heads=2", "rollout.max_model_len=256"]
    assert_learns_and_syncs(training_rows(train_tiny(tmp_path / "run", *TP2_ON_RAY, *vllm, cache_dir=tmp_path / "cache")))


@pytest.mark.slow
def test_tp2_trainer_syncs_into_a_rollout_on_its_own_pool(ray_cluster, tmp_path):
    """Split placement: the TP = 2 trainer on two workers, the rollout on a third; the gathered
    weights go from train rank 0 to the rollout over a broadcast group (resharder=broadcast)."""
    split = ["launcher.num_cpus=4", "+launcher.resource_pools.gen=1", "+launcher.mapping.rollout=gen",
             "resharder=broadcast"]
    assert_learns_and_syncs(training_rows(train_tiny(tmp_path / "run", *TP2_ON_RAY, *split, cache_dir=tmp_path / "cache")))


@pytest.fixture(scope="module")
def megatron_run(tmp_path_factory) -> tuple[str, str, subprocess.CompletedProcess]:
    """``rlloom train`` (a real subprocess) on train_engine=megatron, uninterrupted, on the lifecycle schedule
    (6 steps, checkpoints after steps 2, 4 and 6): its run folder, its model cache and the finished command."""
    root = tmp_path_factory.mktemp("megatron")
    run_dir, cache = str(root / "reference"), str(root / "cache")
    result = run(train_command(run_dir, cache, *MEGATRON))
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir, cache, result


@pytest.mark.slow
def test_a_killed_megatron_run_resumes_as_if_never_stopped(megatron_run, tmp_path):
    """SIGKILL after global_step_4 was written (before the ``latest`` pointer moved); the re-run
    resumes from that DCP checkpoint (weights, AdamW moments, RNG and data position) and ends with
    the uninterrupted run's records and final weights, bitwise (CPU, one thread)."""
    reference, cache, _ = megatron_run
    run_dir = str(tmp_path / "run")
    command = train_command(run_dir, cache, *MEGATRON)
    assert run(command, run_env(RLLOOM_TEST_KILL_AT="before_latest:4")).returncode == -9
    result = run(command)
    assert result.returncode == 0, result.stderr[-3000:]
    checkpoint = os.path.join(run_dir, "checkpoints", "global_step_4")
    assert f"rlloom: resumed from {checkpoint} (step 4)" in result.stderr
    assert os.path.isfile(os.path.join(checkpoint, "actor", ".metadata"))  # the engine's DCP folder
    assert metric_rows(run_dir) == metric_rows(reference)
    ours = load_file(os.path.join(run_dir, "final_model", "model.safetensors"))
    theirs = load_file(os.path.join(reference, "final_model", "model.safetensors"))
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[name], theirs[name]) for name in theirs)


@pytest.mark.slow
def test_a_megatron_run_prints_no_notices_of_megatron_core(megatron_run):
    """megatron-core's notices (rlloom_megatron.model.MEGATRON_NOTICES and MEGATRON_LOG_NOTICES: no
    TransformerEngine / apex kernels, deprecations of its own and of the collectives its DDP calls)
    say nothing about the run; the command's output (training, validation, checkpoints, the final model)
    has no warning at all."""
    _, _, result = megatron_run
    assert "Warning" not in result.stderr, result.stderr


@pytest.mark.slow
def test_a_checkpoint_in_the_earlier_per_rank_format_is_refused_in_one_paragraph(megatron_run, tmp_path):
    """A run dir whose last checkpoint holds the per-rank tp<rank>.pt files megatron wrote before its DCP
    checkpoints (a complete checkpoint by its manifest): resuming and exporting it end with exit 2 and
    the one-paragraph reason, no traceback."""
    reference, cache, _ = megatron_run
    run_dir = tmp_path / "run"
    shutil.copytree(reference, run_dir)
    checkpoint = run_dir / "checkpoints" / "global_step_6"
    for written in (checkpoint / "actor").glob("*.distcp"):
        written.unlink()
    (checkpoint / "actor" / ".metadata").unlink()
    old_file = checkpoint / "actor" / "tp0.pt"
    torch.save({}, old_file)
    manifest = json.loads((checkpoint / "manifest.json").read_text())
    kept = {name: size for name, size in manifest["files"].items()
            if not name.startswith("actor/") or name == "actor/engine_state.json"}
    manifest["files"] = kept | {"actor/tp0.pt": old_file.stat().st_size}
    (checkpoint / "manifest.json").write_text(json.dumps(manifest))
    for command in (train_command(str(run_dir), cache, *MEGATRON, "trainer.total_steps=8"),
                    [str(RLLOOM), "export", str(checkpoint), "--out", str(tmp_path / "hf")]):
        result = run(command)
        assert result.returncode == 2, result.stderr[-3000:]
        last = result.stderr.strip().splitlines()[-1]
        assert last.startswith("rlloom: error: ") and "per-rank tp<rank>.pt files" in last, result.stderr[-3000:]
        assert "Traceback" not in result.stderr
