"""Where the running code came from (``rlloom --version``; a run's record: :mod:`rlloom_trainer.provenance`):
the rlloom version, the git commit of rlloom's source when it is a git checkout, the installed plugin
distributions. Nothing here raises: what cannot be found is ``None`` (the commit) or ``"?"`` (a version)."""

from __future__ import annotations

import functools
import importlib.metadata
import os
import subprocess
from typing import Any

import rlloom

CORE = "rlloom"
UNKNOWN = "?"


def version_of(distribution: str) -> str:
    """The installed version of ``distribution``, or ``"?"``."""
    try:
        return importlib.metadata.version(distribution)
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return UNKNOWN


def _git(folder: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", folder, *args], capture_output=True, text=True, timeout=10, check=False)


@functools.cache
def git_state() -> dict[str, Any]:
    """``{"git_commit": <HEAD>, "git_dirty": <tracked files changed>}`` when rlloom's own source files are
    tracked by a git checkout (an editable install), else ``{"git_commit": None}``."""
    folder = os.path.dirname(os.path.abspath(rlloom.__file__))
    try:
        if _git(folder, "ls-files", "--error-unmatch", "__init__.py").returncode != 0:
            return {"git_commit": None}  # not tracked: a wheel, even one unpacked inside some git checkout
        head = _git(folder, "rev-parse", "HEAD")
        if head.returncode != 0:
            return {"git_commit": None}
        status = _git(folder, "status", "--porcelain", "--untracked-files=no")
        return {"git_commit": head.stdout.strip(), "git_dirty": bool(status.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"git_commit": None}


def plugin_distributions() -> list[tuple[str, str]]:
    """(distribution, version) of every installed distribution with an ``rlloom`` entry point but the core,
    sorted by name (from package metadata: no plugin is imported)."""
    found = {(ep.dist.name, ep.dist.version) for ep in importlib.metadata.entry_points(group="rlloom") if ep.dist}
    return sorted(item for item in found if item[0] != CORE)


def version_text() -> str:
    """What ``rlloom --version`` prints: ``rlloom <version>`` (with the git commit of a checkout), then one
    ``<distribution> <version>`` line per installed plugin distribution."""
    git = git_state()
    commit = f" (git {git['git_commit'][:12]}{', modified' if git['git_dirty'] else ''})" if git["git_commit"] else ""
    return "\n".join([f"rlloom {rlloom.__version__}{commit}", *(f"{name} {version}" for name, version in
                                                                 plugin_distributions())])
