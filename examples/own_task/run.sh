#!/usr/bin/env bash
# GRPO on your own task: this folder's JSONL questions, scored by the TRL-form reward function in reward.py
# (docs/your-own-task.md). Run from the repository root; extra arguments are Hydra overrides.
#   examples/own_task/run.sh              # SmolLM2-135M-Instruct, 15 steps
#   examples/own_task/run.sh --short      # the tiny random model, 2 steps (CI runs it)
set -euo pipefail
HERE=$(dirname "$0")
SETTINGS=(
    data=files "data.train_files=$HERE/task.jsonl"
    data.prompt_column=question data.ground_truth_column=solution "data.extra_columns=[solution]"
    data.val_fraction=0.3
    reward=python "reward.function=$HERE/reward.py:accuracy"
)
if [[ ${1:-} == --short ]]; then
    shift
    SETTINGS=(preset=tiny "${SETTINGS[@]}" trainer.total_steps=2)
fi
exec rlloom train "${SETTINGS[@]}" "$@"
