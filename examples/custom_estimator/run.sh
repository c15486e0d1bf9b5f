#!/usr/bin/env bash
# Install this folder's estimator into $SITE (default: .site/ here, leaving your environment as it was) and
# train GRPO with it. Extra arguments are Hydra overrides and win over the settings below.
#   examples/custom_estimator/run.sh          # the quickstart's GRPO run with adv_estimator=median_baseline
#   examples/custom_estimator/run.sh --short  # the tiny random model, 2 steps (CI runs it)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SITE=${SITE:-$HERE/.site}
PYTHON=$(dirname "$(command -v rlloom)")/python
"$PYTHON" -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation --upgrade \
    --target "$SITE" "$HERE"
export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
SETTINGS=(algorithm=grpo algorithm.adv_estimator=median_baseline)
if [[ ${1:-} == --short ]]; then
    shift
    SETTINGS=(preset=tiny "${SETTINGS[@]}" trainer.total_steps=2)
fi
exec rlloom train "${SETTINGS[@]}" "$@"
