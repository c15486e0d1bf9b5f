#!/usr/bin/env bash
# Split placement on Ray: the trainer's roles (actor, reference) in the pool "global", the rollout engine in
# a pool "gen" of its own; weights cross between the pools after every update (docs/placement.md).
# Extra arguments are Hydra overrides and win over the settings below.
#   examples/ray_split/run.sh             # the quickstart's GRPO run, split over two Ray worker processes
#   examples/ray_split/run.sh --short     # the tiny random model, 2 steps (CI runs it)
set -euo pipefail
SETTINGS=(launcher=ray +launcher.resource_pools.gen=1 +launcher.mapping.rollout=gen)
if [[ ${1:-} == --short ]]; then
    shift
    SETTINGS=(preset=tiny "${SETTINGS[@]}" trainer.total_steps=2)
fi
exec rlloom train "${SETTINGS[@]}" "$@"
