"""The device settings (``trainer.device`` and an engine's own ``device``): the valid names, their
check, and :func:`resolve_device` where a role runs. Torch is imported by ``resolve_device`` only, so
composing and checking a config (and reporting its error) never waits for torch to load."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

DEVICE_CHOICES = ("auto", "cpu", "cuda")
"""Device settings (``cuda:<N>`` too)."""


class DeviceError(ValueError):
    """A device or dtype setting that cannot be honoured on this machine."""


def check_device_name(key: str, name: str) -> None:
    """Raise :class:`DeviceError` unless ``name`` is ``auto``, ``cpu``, ``cuda`` or ``cuda:<N>``;
    ``key`` is the config key quoted in the message."""
    base, _, index = name.partition(":")
    if base not in DEVICE_CHOICES or (index and (base != "cuda" or not index.isdigit())):
        raise DeviceError(f"{key}={name!r}: choose one of {list(DEVICE_CHOICES)} (or cuda:<index>)")


def resolve_device(name: str, key: str = "trainer.device") -> torch.device:
    """``auto`` → ``cuda`` (no index: the current CUDA device) when CUDA is available, else ``cpu``;
    ``cuda`` on a machine without CUDA raises a :class:`DeviceError` that names ``key`` and the way out.
    Resolved where the role runs, so a Ray worker on a GPU node picks CUDA even when the controller's
    machine has none."""
    import torch

    check_device_name(key, name)
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(
                f"{key}={name}: this machine has no usable CUDA device (torch {torch.__version__}, "
                f"CUDA build: {torch.version.cuda or 'no'}); use {key}=cpu or {key}=auto"
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise DeviceError(f"{key}={name}: only {torch.cuda.device_count()} CUDA device(s) are visible")
    return device
