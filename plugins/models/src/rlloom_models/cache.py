"""The model cache: folders built once, published atomically, shared by concurrent callers.

Layout: ``<cache root>/models/<name>/`` where the cache root is, in order of precedence, the
``cache_dir`` argument, the ``RLLOOM_CACHE`` environment variable, or ``~/.cache/rlloom``.

A folder is built in a temporary sibling (``.<name>.<random>``) and renamed into place only once
``build`` has returned, so ``<name>/`` either does not exist or is complete: its existence is the
completion mark. Builders of the same name are serialised by a file lock (``<name>.lock``), so
concurrent callers (other processes, other ranks) build once and all get the same folder.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock

CACHE_ENV = "RLLOOM_CACHE"
DEFAULT_CACHE = "~/.cache/rlloom"


def cache_root(cache_dir: str | None = None) -> Path:
    """The cache root: ``cache_dir``, else ``$RLLOOM_CACHE``, else ``~/.cache/rlloom`` (``~`` expanded)."""
    root = cache_dir or os.environ.get(CACHE_ENV) or DEFAULT_CACHE
    return Path(root).expanduser().absolute()


def cached_folder(
    name: str,
    build: Callable[[Path], None],
    cache_dir: str | None = None,
    valid: Callable[[Path], bool] | None = None,
) -> str:
    """Path of the cached folder ``name``, calling ``build(tmp_dir)`` to fill it if it is absent.

    ``build`` writes the folder's files into the empty directory it is given. If it raises, nothing
    is published and the error propagates; the next call builds again. Temporary folders left by a
    builder that died are removed by the next builder of the same name. ``valid(folder)``: whether
    an existing folder is still good (e.g. one an older version of ``build`` wrote lacks something);
    one that is not is removed and built again.
    """
    if not name or name.startswith(".") or os.sep in name:
        raise ValueError(f"cache folder name must be a plain, non-hidden name, got {name!r}")
    models = cache_root(cache_dir) / "models"
    final = models / name

    def usable() -> bool:
        return final.is_dir() and (valid is None or valid(final))

    if usable():
        return str(final)
    models.mkdir(parents=True, exist_ok=True)
    with FileLock(str(models / f"{name}.lock")):
        if usable():  # another caller built it while we waited for the lock
            return str(final)
        for leftover in models.glob(f".{name}.*"):
            shutil.rmtree(leftover, ignore_errors=True)
        shutil.rmtree(final, ignore_errors=True)  # an invalid folder
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=models))
        try:
            build(tmp)
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return str(final)
