"""The model cache: folders built once, published atomically, shared by concurrent callers.

Layout: ``<cache root>/models/<name>/`` where the cache root is, in order of precedence, the
``cache_dir`` argument, the ``RLLOOM_CACHE`` environment variable, or ``~/.cache/rlloom``.

A folder is built in a temporary sibling (``.<name>.<random>``) and renamed into place only once
``build`` has returned, so ``<name>/`` either does not exist or is complete: its existence is the
completion mark. Builders of the same name are serialised by a file lock (``<name>.lock``), so
concurrent callers (other processes, other ranks) build once and all get the same folder.

A builder whose output changes (a fix) gives a new ``version``: it is recorded inside the folder
(:data:`VERSION_FILE`), and a folder recorded with another version, or with none, is removed and
built again, so a cache written by older code is never used.
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
VERSION_FILE = ".rlloom-cache-version"


def cache_root(cache_dir: str | None = None) -> Path:
    """The cache root: ``cache_dir``, else ``$RLLOOM_CACHE``, else ``~/.cache/rlloom`` (``~`` expanded)."""
    root = cache_dir or os.environ.get(CACHE_ENV) or DEFAULT_CACHE
    return Path(root).expanduser().absolute()


def cached_folder(
    name: str,
    build: Callable[[Path], None],
    cache_dir: str | None = None,
    version: int | None = None,
) -> str:
    """Path of the cached folder ``name``, calling ``build(tmp_dir)`` to fill it if it is absent.

    ``build`` writes the folder's files into the empty directory it is given. If it raises, nothing
    is published and the error propagates; the next call builds again. Temporary folders left by a
    builder that died are removed by the next builder of the same name.

    ``version``: the version of what ``build`` writes, recorded in the folder's :data:`VERSION_FILE`;
    an existing folder with another version or none (written by an older builder) is removed and
    built again. ``None``: any existing folder is used and none is stamped (for names that already
    identify their content, such as ``tiny-<hash>``).
    """
    if not name or name.startswith(".") or os.sep in name:
        raise ValueError(f"cache folder name must be a plain, non-hidden name, got {name!r}")
    models = cache_root(cache_dir) / "models"
    final = models / name
    if _usable(final, version):
        return str(final)
    models.mkdir(parents=True, exist_ok=True)
    with FileLock(str(models / f"{name}.lock")):
        if _usable(final, version):  # another caller built it while we waited for the lock
            return str(final)
        for leftover in models.glob(f".{name}.*"):
            shutil.rmtree(leftover, ignore_errors=True)
        shutil.rmtree(final, ignore_errors=True)  # a folder of another version
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=models))
        try:
            build(tmp)
            if version is not None:
                (tmp / VERSION_FILE).write_text(str(version), encoding="utf-8")
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return str(final)


def _usable(folder: Path, version: int | None) -> bool:
    """Whether ``folder`` exists and, when ``version`` is set, records exactly that version."""
    if not folder.is_dir():
        return False
    if version is None:
        return True
    try:
        return (folder / VERSION_FILE).read_text(encoding="utf-8").strip() == str(version)
    except OSError:  # no stamp: written before versions were recorded
        return False
