#!/usr/bin/env bash
# Run the whole test suite (slow end-to-end tests included) on two pytest-xdist workers, each taking whole test
# files (a file's module fixtures are built once), and print its 30 slowest tests; extra arguments go to pytest
# (`-n 0`: one process, in file order).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
exec .venv/bin/python -m pytest -n 2 --dist loadfile --durations=30 "$@"
