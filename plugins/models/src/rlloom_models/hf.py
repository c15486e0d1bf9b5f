"""``model=hf``: any Hugging Face model, by hub id or local folder.

An existing local folder must hold ``config.json``; it is returned as an absolute path (``~``
expanded) so that workers started elsewhere find it. Anything else must look like a hub id
(``name`` or ``org/name``) and is returned unchanged: transformers downloads it (a hub needs to be
reachable then) or finds it in its own cache.
"""

from __future__ import annotations

import re
from pathlib import Path

from omegaconf import MISSING

from rlloom_models.errors import ModelSourceError

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")


def hf_model_path(path: str) -> str:
    """The folder or hub id ``path`` names, validated as described in the module docstring."""
    if not path or path == MISSING:
        raise ModelSourceError("model.path is required: a Hugging Face id (org/name) or a local model folder")
    local = Path(path).expanduser()
    if local.exists():
        if not local.is_dir():
            raise ModelSourceError(f"model.path={path!r} is a file; expected a Hugging Face model folder")
        if not (local / "config.json").is_file():
            raise ModelSourceError(f"model.path={path!r} has no config.json: not a Hugging Face model folder")
        return str(local.absolute())
    if path.startswith(("/", ".", "~")) or not HUB_ID.match(path):
        raise ModelSourceError(f"model.path={path!r}: no such folder, and not a Hugging Face id (org/name)")
    return path
