#!/usr/bin/env bash
# Rewrite .ci/constraints.txt, the lock of the CPU stack that scripts/bootstrap.sh (and so .ci/run and
# scripts/train.sh) installs from, as the exact versions installed in .venv/ now. Run it after changing a
# dependency in any pyproject.toml and running scripts/bootstrap.sh; commit the result.
set -euo pipefail
cd "$(dirname "$0")/.."
LOCK=.ci/constraints.txt
{
    echo "# The CPU stack, locked: every third-party distribution scripts/bootstrap.sh installs, at the version"
    echo "# it installed when scripts/lock.sh last ran (torch as the CPU build's version: an unpinned torch pulls"
    echo "# a multi-GB CUDA build on these machines). Regenerate with scripts/lock.sh; do not edit by hand."
    .venv/bin/python -m pip freeze --exclude-editable --disable-pip-version-check \
        | grep -v -i -E '^(rlloom|pip==|-e |#)' | grep -v ' @ ' \
        | sed -E 's/^torch==([0-9.]+)\+cpu$/torch==\1/' | LC_ALL=C sort -f
} > "$LOCK.new"
mv "$LOCK.new" "$LOCK"
echo "scripts/lock.sh: $(grep -c '==' "$LOCK") pins in $LOCK"
