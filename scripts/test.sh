#!/usr/bin/env bash
# Run the whole test suite (slow end-to-end tests included) and print its 30 slowest tests; extra arguments
# go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
exec .venv/bin/python -m pytest --durations=30 "$@"
