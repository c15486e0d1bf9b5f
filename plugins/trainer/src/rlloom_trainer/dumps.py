"""Rollout dumps: a few trained samples per step as JSON lines, for reading what the policy does."""

from __future__ import annotations

import json
import os

import torch

from rlloom.batch import Batch


def rollout_rows(batch: Batch, n: int) -> list[dict]:
    """The first ``n`` rows of a trained batch: ``uid``, ``data_source``, ``prompt``, ``response``,
    ``ground_truth``, ``reward`` (the sequence score), ``weight_version`` (the policy that sampled it; with
    partial rollouts the oldest of them, ``weight_version_max`` the newest),
    an agent's ``agent_turns`` and ``agent_finish_reason``, and ``advantages`` (one value per response
    token; absent when the batch has none). A field the batch lacks is None."""
    rows = []
    mask = batch["response_mask"].bool()
    for i in range(min(n, len(batch))):
        row = {
            "uid": batch["uid"][i] if "uid" in batch else None,
            "data_source": batch["data_source"][i] if "data_source" in batch else None,
            "prompt": batch["prompt_text"][i] if "prompt_text" in batch else None,
            "response": batch["response_text"][i] if "response_text" in batch else None,
            "ground_truth": batch["ground_truth"][i] if "ground_truth" in batch else None,
            "reward": float(batch["scores"][i]) if "scores" in batch else None,
            **{name: _plain(batch[name][i]) if name in batch else None
               for name in ("weight_version", "weight_version_max", "agent_turns", "agent_finish_reason")},
        }
        if "advantages" in batch:
            row["advantages"] = batch["advantages"][i][mask[i]].tolist()
        rows.append(row)
    return rows


def _plain(value: object) -> object:
    """A batch field's value as JSON takes it (a 0-d tensor as its number)."""
    return value.item() if isinstance(value, torch.Tensor) else value


def dump_rollouts(batch: Batch, n: int, run_dir: str, step: int) -> str:
    """Write :func:`rollout_rows` to ``<run_dir>/rollouts/step_<step>.jsonl``; returns the path."""
    folder = os.path.join(run_dir, "rollouts")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"step_{step}.jsonl")
    with open(path, "w", encoding="utf-8") as handle:
        for row in rollout_rows(batch, n):
            handle.write(json.dumps(row, default=str) + "\n")
    return path
