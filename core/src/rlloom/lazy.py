"""Names a package exports but imports when first used, so that importing the package (as the registry
does every plugin's entry module) does not import torch and friends."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, sources: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` (PEP 562) for ``package``: ``sources`` maps each exported name to the module
    defining it (``".algorithm"``: relative to ``package``), imported when the name is first read and the
    value cached in the package; other names raise ``AttributeError``."""

    def __getattr__(name: str) -> Any:
        if name not in sources:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(sources[name], package), name)
        setattr(importlib.import_module(package), name, value)
        return value

    return __getattr__
