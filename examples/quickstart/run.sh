#!/usr/bin/env bash
# The quickstart: GRPO on SmolLM2-135M-Instruct learning single-digit addition on the CPU (rlloom train's
# defaults; README "The two commands"). Extra arguments are Hydra overrides and win over the settings below.
#   examples/quickstart/run.sh            # 15 steps, a few minutes on two CPU cores
#   examples/quickstart/run.sh --short    # the same pipeline on the tiny random model, in seconds (CI runs it)
set -euo pipefail
SETTINGS=()
if [[ ${1:-} == --short ]]; then
    shift
    SETTINGS=(preset=tiny trainer.total_steps=2)
fi
exec rlloom train "${SETTINGS[@]}" "$@"
