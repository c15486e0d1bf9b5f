"""Resume helpers: RNG state round trip, config compatibility, seeds per generate call, JSONL rewind,
non-finite guard, rollout dumps."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
import torch
from rlloom.batch import Batch
from rlloom.controller.step import derive_seed
from rlloom_trainer.dumps import dump_rollouts
from rlloom_trainer.guards import NonFiniteGuard, TrainingAborted, is_nonfinite_step
from rlloom_trainer.run_state import config_changes, rng_state, set_rng_state
from rlloom_trainer.trackers.jsonl import JsonlTracker


def draws() -> tuple:
    return random.random(), float(np.random.rand()), float(torch.rand(1))


def test_rng_state_round_trip_repeats_the_same_draws():
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    draws()
    state = rng_state()
    first = draws()
    draws()
    set_rng_state(state)
    assert draws() == first


def test_config_changes_ignore_resumable_keys_and_name_the_others():
    saved = {"choices": {"algorithm": "grpo"}, "trainer": {"total_steps": 5, "seed": 0, "trackers": ["jsonl"]},
             "algorithm": {"n": 8}, "launcher": {"num_threads": 1}, "model": {"cache_dir": "/a", "size": 2}}
    current = {"choices": {"algorithm": "dapo"}, "trainer": {"total_steps": 9, "seed": 1, "trackers": ["console"]},
               "algorithm": {"n": 8, "extra": 1}, "launcher": {"num_threads": 2}, "model": {"cache_dir": "/b",
                                                                                            "size": 2}}
    assert config_changes(saved, current) == [
        "algorithm.extra: '<absent>' -> 1",
        "choices.algorithm: 'grpo' -> 'dapo'",
        "trainer.seed: 0 -> 1",
    ]
    assert config_changes(saved, saved) == []


def test_a_megatron_tensor_parallel_change_resumes_and_other_engine_keys_do_not():
    saved = {"choices": {"train_engine": "megatron"}, "train_engine": {"tensor_parallel_size": 2, "lr": 0.01}}
    current = {"choices": {"train_engine": "megatron"}, "train_engine": {"tensor_parallel_size": 1, "lr": 0.02}}
    assert config_changes(saved, current) == ["train_engine.lr: 0.01 -> 0.02"]


def test_a_local_path_typed_relative_or_recorded_absolute_is_no_change(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rows.jsonl").write_text("{}\n")
    (tmp_path / "other.jsonl").write_text("{}\n")
    saved = {"data": {"train_files": [str(tmp_path / "rows.jsonl")]}}  # as the run recorded it
    assert config_changes(saved, {"data": {"train_files": ["rows.jsonl"]}}) == []
    assert config_changes(saved, {"data": {"train_files": ["other.jsonl"]}}) == [
        f"data.train_files: {[str(tmp_path / 'rows.jsonl')]!r} -> {[str(tmp_path / 'other.jsonl')]!r}"]


def test_derived_seeds_depend_on_every_part_and_nothing_else():
    seed = derive_seed(0, 3, "gen", 0)
    assert seed == derive_seed(0, 3, "gen", 0)
    assert 0 <= seed < 2**63
    others = {derive_seed(1, 3, "gen", 0), derive_seed(0, 4, "gen", 0), derive_seed(0, 3, "validation_gen", 0),
              derive_seed(0, 3, "gen", 1)}
    assert len(others) == 4 and seed not in others


def test_jsonl_rewind_drops_later_steps_and_a_torn_line(tmp_path):
    tracker = JsonlTracker(str(tmp_path), {})
    for step in range(4):
        tracker.log({"x": float(step)}, step)
    tracker.close()
    with open(tmp_path / "metrics.jsonl", "a") as handle:
        handle.write('{"step": 4, "x"')  # a kill in the middle of a write
    tracker = JsonlTracker(str(tmp_path), {})
    tracker.rewind(1)
    tracker.log({"x": 9.0}, 2)
    tracker.close()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows == [{"step": 0, "x": 0.0}, {"step": 1, "x": 1.0}, {"step": 2, "x": 9.0}]


def test_nonfinite_steps_are_recognised():
    assert not is_nonfinite_step({"actor/skipped_update": 0.0, "actor/pg_loss": 0.3})
    assert is_nonfinite_step({"actor/skipped_update": 0.5})
    assert is_nonfinite_step({"critic/skipped_update": 1.0})
    assert is_nonfinite_step({"actor/pg_loss": math.nan})


def test_guard_aborts_after_k_in_a_row_and_saves_the_diagnostics(tmp_path):
    guard = NonFiniteGuard(2, str(tmp_path))
    guard.check(1, {"actor/skipped_update": 1.0})
    guard.check(2, {"actor/skipped_update": 0.0})  # resets the count
    guard.check(3, {"actor/skipped_update": 1.0})
    with pytest.raises(TrainingAborted, match=r"step 4: 2 steps in a row .*max_nonfinite_steps=2"):
        guard.check(4, {"actor/skipped_update": 1.0, "actor/pg_loss": math.nan})
    saved = json.loads((tmp_path / "nonfinite_step_4.json").read_text())
    assert saved == {"step": 4, "metrics": {"actor/pg_loss": "nan", "actor/skipped_update": 1.0}}
    never = NonFiniteGuard(0, str(tmp_path))
    for step in range(10):
        never.check(step, {"actor/skipped_update": 1.0})
    assert never.consecutive == 10


def test_rollout_dump_writes_the_first_rows_with_per_token_advantages(tmp_path):
    batch = Batch(
        {"response_mask": torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1]]),
         "advantages": torch.tensor([[0.5, 0.5, 0.0], [-1.0, 0.0, 0.0], [2.0, 2.0, 2.0]]),
         "scores": torch.tensor([1.0, 0.0, 0.25]), "weight_version": torch.tensor([4, 4, 4]),
         "weight_version_max": torch.tensor([4, 5, 4]), "agent_turns": torch.tensor([2, 1, 3])},
        {"uid": ["u0", "u0", "u1"], "prompt_text": ["p0", "p0", "p1"], "response_text": ["ab", "c", "def"],
         "data_source": ["d"] * 3, "ground_truth": [3, 3, None], "agent_finish_reason": ["answer", "length", "x"]},
    )
    path = dump_rollouts(batch, 2, str(tmp_path), 7)
    assert path == str(tmp_path / "rollouts" / "step_7.jsonl")
    rows = [json.loads(line) for line in open(path)]
    assert rows == [
        {"uid": "u0", "data_source": "d", "prompt": "p0", "response": "ab", "ground_truth": 3, "reward": 1.0,
         "weight_version": 4, "weight_version_max": 4, "agent_turns": 2, "agent_finish_reason": "answer", "advantages": [0.5, 0.5]},
        {"uid": "u0", "data_source": "d", "prompt": "p0", "response": "c", "ground_truth": 3, "reward": 0.0,
         "weight_version": 4, "weight_version_max": 5, "agent_turns": 1, "agent_finish_reason": "length", "advantages": [-1.0]},
    ]
