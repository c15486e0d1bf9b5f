#!/usr/bin/env bash
# The main job: `rlloom train` with the default config (GRPO on SmolLM2-135M-Instruct, single-digit
# addition, 2 CPU cores). Extra arguments are Hydra overrides, e.g. `scripts/train.sh preset=tiny`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
exec .venv/bin/rlloom train "$@"
