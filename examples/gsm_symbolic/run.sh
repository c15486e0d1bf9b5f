#!/usr/bin/env bash
# GRPO on SmolLM2-135M-Instruct with reasoning-gym's gsm_symbolic problems, scored by reward=math.
# Extra arguments are Hydra overrides; they win over the settings below (e.g. trainer.total_steps=5).
set -euo pipefail
SETTINGS=(
    algorithm=grpo
    model=smollm2-135m
    data=reasoning_gym
    data.task=gsm_symbolic
    data.num_train=1000
    data.num_val=64
    "data.instruction=' Think step by step, then put the final number between <answer> and </answer> tags.'"
    reward=math
    reward.timeout_s=5
    trainer.max_prompt_length=512
    trainer.train_batch_size=4
    algorithm.n=8
    sampling.max_new_tokens=256
    trainer.total_steps=100
    trainer.test_freq=20
    trainer.val_n=1
)
exec rlloom train "${SETTINGS[@]}" "$@"
