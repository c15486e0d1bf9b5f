"""The cluster a plan is made for: ``8xH100`` (one node of 8), ``2x8xH100`` (2 nodes of 8) or a YAML
file, described by each device's dense bf16 peak, memory, memory bandwidth and link bandwidth to the
other devices of its node, and the network bandwidth between nodes per device.

The known devices' figures are NVIDIA's data-sheet numbers for the SXM parts (bf16 peaks:
:data:`rlloom_enginekit.devices.PEAK_BF16_FLOPS`, which MFU uses too); bandwidths are one direction.
A YAML file names every field of :class:`Cluster` (a ``device`` by known name or by all the fields of
:class:`DeviceSpec`); a missing or unknown field is a ValueError naming it and the file.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

import yaml

GB = 1e9


@dataclass(frozen=True)
class DeviceSpec:
    """One accelerator: ``bf16_flops`` (dense peak, FLOP/s), ``memory_bytes``, ``memory_bandwidth``
    and ``link_bandwidth`` (to another device of its node, one direction), both in bytes/s."""

    name: str
    bf16_flops: float
    memory_bytes: float
    memory_bandwidth: float
    link_bandwidth: float


@dataclass(frozen=True)
class Cluster:
    """``nodes`` × ``devices_per_node`` devices of one kind; ``network_bandwidth``: bytes/s between
    nodes per device, one direction."""

    nodes: int
    devices_per_node: int
    device: DeviceSpec
    network_bandwidth: float

    @property
    def devices(self) -> int:
        return self.nodes * self.devices_per_node


def known_devices() -> dict[str, DeviceSpec]:
    """The devices a cluster may name: H100 (80 GB HBM3, 3.35 TB/s, NVLink 4: 450 GB/s each way),
    H200 (141 GB HBM3e, 4.8 TB/s, NVLink 4), A100 (80 GB HBM2e, 2.04 TB/s, NVLink 3: 300 GB/s)."""
    from rlloom_enginekit.devices import PEAK_BF16_FLOPS

    peaks = dict(PEAK_BF16_FLOPS)
    return {
        "H100": DeviceSpec("H100", peaks["H100"], 80 * GB, 3.35e12, 450 * GB),
        "H200": DeviceSpec("H200", peaks["H200"], 141 * GB, 4.8e12, 450 * GB),
        "A100": DeviceSpec("A100", peaks["A100"], 80 * GB, 2.04e12, 300 * GB),
    }


NETWORK_BANDWIDTH = 50 * GB
"""Between nodes, per device, when the cluster is given by name: one 400 Gb/s InfiniBand NIC per GPU."""

_SHORTHAND = re.compile(r"^(?:(\d+)x)?(\d+)x([A-Za-z0-9]+)$")


def parse_cluster(text: str) -> Cluster:
    """``[N x] M x DEVICE`` (``8xH100``, ``2x8xH100``) or the path of a YAML file (``.yaml``/``.yml``)."""
    if text.endswith((".yaml", ".yml")):
        return cluster_from_file(text)
    match = _SHORTHAND.match(text)
    if match is None:
        raise ValueError(f"cluster={text}: expected NODESxDEVICESxNAME (2x8xH100), DEVICESxNAME (8xH100) or a "
                         "YAML file")
    nodes, per_node, name = int(match.group(1) or 1), int(match.group(2)), match.group(3)
    if nodes < 1 or per_node < 1:
        raise ValueError(f"cluster={text}: needs at least one node of at least one device")
    return Cluster(nodes, per_node, device_named(name, f"cluster={text}"), NETWORK_BANDWIDTH)


def device_named(name: str, where: str) -> DeviceSpec:
    devices = known_devices()
    if name not in devices:
        raise ValueError(f"{where}: unknown device {name!r}; known: {', '.join(devices)} (or describe it in a "
                         "YAML file: name, bf16_flops, memory_bytes, memory_bandwidth, link_bandwidth)")
    return devices[name]


def cluster_from_file(path: str) -> Cluster:
    """A :class:`Cluster` from a YAML mapping of its fields (module docstring)."""
    with open(path, encoding="utf-8") as handle:
        fields = yaml.safe_load(handle)
    where = f"cluster file {path}"
    device = _require(fields, Cluster, where)["device"]
    if isinstance(device, str):
        spec = device_named(device, where)
    else:
        spec = DeviceSpec(**_require(device, DeviceSpec, f"{where}, device"))
    return Cluster(int(fields["nodes"]), int(fields["devices_per_node"]), spec, float(fields["network_bandwidth"]))


def _require(fields, cls: type, where: str) -> dict:
    """``fields`` (a mapping) when it holds exactly the fields of the dataclass ``cls``, else a ValueError."""
    names = [field.name for field in dataclasses.fields(cls)]
    if not isinstance(fields, dict):
        raise ValueError(f"{where}: expected a mapping of {', '.join(names)}")
    missing = [name for name in names if name not in fields]
    unknown = [name for name in fields if name not in names]
    if missing or unknown:
        problems = [f"missing field {name!r}" for name in missing] + [f"unknown field {name!r}" for name in unknown]
        raise ValueError(f"{where}: {'; '.join(problems)} (fields: {', '.join(names)})")
    return fields
