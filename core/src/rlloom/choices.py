"""The valid values of config keys that the core and plugin config schemas share, and the device
name check; importable without torch, so composing and checking a config (and reporting its error)
never waits for torch to load. The modules that compute with these names (:mod:`rlloom.losses`,
:mod:`rlloom.devices`) import them from here."""

from __future__ import annotations

AGG_MODES: tuple[str, ...] = (
    "token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)
"""The loss aggregation modes understood by :func:`rlloom.losses.aggregate`."""

KL_ESTIMATORS: dict[str, str] = {
    "k1": "k1",
    "kl": "k1",
    "abs": "abs",
    "k2": "k2",
    "mse": "k2",
    "k3": "k3",
    "low_var_kl": "k3",
}
"""Accepted names of :func:`rlloom.losses.kl_estimate` estimators -> the canonical estimator they denote."""

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
