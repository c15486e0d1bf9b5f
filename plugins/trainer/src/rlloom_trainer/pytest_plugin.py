"""What rlloom-trainer gives every pytest suite where it is installed (entry point ``pytest11``): the ``cuda``
and ``slow`` markers, and the fixtures ``rlloom_tiny_model_cache`` / ``rlloom_tiny_model`` the contract tests
(:mod:`rlloom_trainer.contracts`) build their engines and runs on.

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
    config.addinivalue_line("markers", "slow: takes more than ~20 s (an end-to-end run); deselect with -m 'not slow'")


@pytest.fixture(scope="session")
def rlloom_tiny_model_cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A model cache folder (``model.cache_dir``) for the session, shared by the runs and engines of the tests."""
    return str(tmp_path_factory.mktemp("rlloom-model-cache"))


@pytest.fixture(scope="session")
def rlloom_tiny_model(rlloom_tiny_model_cache: str) -> str:
    """The folder of the tiny random model ``preset=tiny`` trains (``model=tiny model.num_heads=2``), built once
    in :func:`rlloom_tiny_model_cache`."""
    from rlloom.plugins.registry import get_registry

    source = get_registry().get("model", "tiny")
    return source.factory(source.config(num_heads=2, cache_dir=rlloom_tiny_model_cache))


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
