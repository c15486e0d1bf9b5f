"""The ``cuda`` test marker, loaded by pytest in every suite where rlloom-trainer is installed
(entry point ``pytest11``).

``@pytest.mark.cuda("what it checks")`` marks a test that runs on a CUDA GPU. Without a usable GPU
the test is skipped with the reason ``needs a CUDA GPU: <what it checks>``; ``gpus=N`` asks for N
GPUs (skipped below that, e.g. NCCL refuses two ranks on one GPU). ``scripts/gpu_check.sh`` runs
every test so marked (``pytest -m cuda``) on the lent GPU machine.
"""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "cuda(what, gpus=1): runs on CUDA GPUs; skipped with `what` as the "
                                       "reason where fewer are visible (scripts/gpu_check.sh runs them all)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    marked = [(item, item.get_closest_marker("cuda")) for item in items]
    marked = [(item, mark) for item, mark in marked if mark is not None]
    if not marked:
        return
    import torch

    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    for item, mark in marked:
        gpus = mark.kwargs.get("gpus", 1)
        what = mark.args[0] if mark.args else item.name
        if visible < gpus:
            need = "a CUDA GPU" if gpus == 1 else f"{gpus} CUDA GPUs ({visible} visible)"
            item.add_marker(pytest.mark.skip(reason=f"needs {need}: {what}"))
