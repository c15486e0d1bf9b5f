"""The embedded default launcher: every role lives in this process."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import torch

T = TypeVar("T")


@dataclass
class LocalLauncherConfig:
    """``num_threads``: torch intra-op threads for this process (0: leave torch's default, one per core)."""

    num_threads: int = 0


class LocalLauncher:
    """Builds each role in-process; a role handle is the engine object itself.

    Contract shared by every launcher: ``start_role(role, build)`` returns a handle whose methods
    are the engine's methods (same arguments, same results); ``shutdown()`` releases everything.
    """

    def __init__(self, cfg: LocalLauncherConfig) -> None:
        if cfg.num_threads < 0:
            raise ValueError(f"launcher.num_threads must be >= 0, got {cfg.num_threads}")
        if cfg.num_threads:
            torch.set_num_threads(cfg.num_threads)
        self._closables: list[object] = []

    def start_role(self, role: str, build: Callable[[], T]) -> T:
        handle = build()
        self._closables.append(handle)
        return handle

    def shutdown(self) -> None:
        for handle in reversed(self._closables):
            close = getattr(handle, "close", None)
            if close is not None:
                close()
        self._closables.clear()
