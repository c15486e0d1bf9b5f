#!/usr/bin/env bash
# Build the docs site from docs/ (the README is its home page) into site/, or into the folder given, with
# every warning an error: a broken link or anchor, a page missing from mkdocs.yml's nav, a link to a file
# outside the repository. Preview while editing: .venv/bin/mkdocs serve
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
NO_MKDOCS_2_WARNING=1 exec .venv/bin/mkdocs build --strict --site-dir "${1:-site}"
