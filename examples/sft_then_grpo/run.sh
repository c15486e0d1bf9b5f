#!/usr/bin/env bash
# Two runs: supervised fine-tuning on the task's answers, then GRPO starting from the SFT run's final model
# (docs/sft.md). Both land under $RUNS (default runs/sft_then_grpo): $RUNS/sft and $RUNS/grpo. Extra
# arguments are Hydra overrides for both runs.
#   examples/sft_then_grpo/run.sh          # SmolLM2-135M-Instruct on single-digit addition
#   examples/sft_then_grpo/run.sh --short  # the tiny random model: 5 SFT steps, 2 GRPO steps (CI runs it)
set -euo pipefail
RUNS=${RUNS:-runs/sft_then_grpo}
SFT=(algorithm=sft algorithm.response_key=ground_truth trainer.total_steps=10)
GRPO=(trainer.total_steps=15)
if [[ ${1:-} == --short ]]; then
    shift
    SFT=(preset=tiny algorithm=sft reward=format trainer.total_steps=5)
    GRPO=(preset=tiny reward=format trainer.total_steps=2)
fi
rlloom train "${SFT[@]}" "trainer.run_dir=$RUNS/sft" "$@"
exec rlloom train "${GRPO[@]}" model=hf "model.path=$RUNS/sft/final_model" "trainer.run_dir=$RUNS/grpo" "$@"
