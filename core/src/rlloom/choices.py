"""The valid device settings and their check, shared by the core and plugin config schemas;
importable without torch, so composing and checking a config (and reporting its error) never waits
for torch to load. :mod:`rlloom.devices` resolves them."""

from __future__ import annotations

DEVICE_CHOICES = ("auto", "cpu", "cuda")
"""Device settings (``cuda:<N>`` too); resolved where a role runs (:func:`rlloom.devices.resolve_device`)."""


class DeviceError(ValueError):
    """A device or dtype setting that cannot be honoured on this machine."""


def check_device_name(key: str, name: str) -> None:
    """Raise :class:`DeviceError` unless ``name`` is ``auto``, ``cpu``, ``cuda`` or ``cuda:<N>``;
    ``key`` is the config key quoted in the message."""
    base, _, index = name.partition(":")
    if base not in DEVICE_CHOICES or (index and (base != "cuda" or not index.isdigit())):
        raise DeviceError(f"{key}={name!r}: choose one of {list(DEVICE_CHOICES)} (or cuda:<index>)")
