"""The launcher=ray config schema: pools, mapping and their errors (no Ray needed)."""

from __future__ import annotations

import pytest
from rlloom.config import ConfigError, compose_config

from rlloom_ray.config import RayLauncherConfig


def test_unmapped_roles_go_to_the_global_pool_of_one():
    cfg = RayLauncherConfig(resource_pools={"gen": 1}, mapping={"rollout": "gen"})
    assert cfg.pools() == {"global": 1, "gen": 1}
    assert [cfg.pool_of(role) for role in ("actor", "ref", "rollout")] == ["global", "global", "gen"]
    assert RayLauncherConfig(resource_pools={"global": 2}).pools() == {"global": 2}


@pytest.mark.parametrize("kwargs, message", [
    ({"resource_pools": {"gen": 0}}, "launcher.resource_pools.gen=0: a pool needs at least 1 process"),
    ({"mapping": {"rollout": "gen"}}, "launcher.mapping.rollout=gen: no such pool; pools are global"),
    ({"mapping": {"critc": "global"}}, "launcher.mapping.critc: unknown role"),
    ({"cpus_per_worker": 0.0}, "launcher.cpus_per_worker=0.0: must be > 0"),
    ({"threads_per_worker": -1}, "launcher.threads_per_worker=-1: must be >= 0"),
    ({"gpus_per_worker": -1.0}, "launcher.gpus_per_worker=-1.0: must be >= 0"),
    ({"call_timeout_s": 0.0}, "launcher.call_timeout_s=0.0: must be > 0"),
    ({"connect_timeout_s": 0.0}, "launcher.connect_timeout_s=0.0: must be > 0"),
])
def test_bad_values_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message.replace(".", r"\.").replace("(", r"\(")):
        RayLauncherConfig(**kwargs)


def test_cpu_workers_use_gloo_and_gpu_workers_reserve_a_gpu_and_use_nccl():
    # The NCCL path itself cannot run here (no GPU): these are the reservations and backend it gets.
    assert RayLauncherConfig(cpus_per_worker=2.0).bundle() == {"CPU": 2.0}
    assert RayLauncherConfig().process_group_backend() == "gloo"
    gpu = RayLauncherConfig(gpus_per_worker=1.0)
    assert gpu.bundle() == {"CPU": 1.0, "GPU": 1.0}
    assert gpu.process_group_backend() == "cpu:gloo,cuda:nccl"


def test_pools_and_mapping_come_from_the_command_line():
    resolved = compose_config(["launcher=ray", "+launcher.resource_pools.gen=1", "+launcher.mapping.rollout=gen",
                               "launcher.call_timeout_s=30"])
    cfg = resolved.sections["launcher"]
    assert isinstance(cfg, RayLauncherConfig)
    assert (cfg.resource_pools, cfg.mapping, cfg.call_timeout_s) == ({"gen": 1}, {"rollout": "gen"}, 30.0)


def test_a_mapping_to_a_missing_pool_is_a_config_error():
    with pytest.raises((ConfigError, ValueError), match="no such pool"):
        compose_config(["launcher=ray", "+launcher.mapping.rollout=gen"])


def test_an_unreachable_address_fails_fast_naming_it(tmp_path, capsys):
    """A refused address stops the run in seconds (Ray alone would retry for a minute), exit 2."""
    import socket

    from rlloom.cli import main

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    status = main(["train", "preset=tiny", "launcher=ray", f"launcher.address=127.0.0.1:{port}",
                   f"trainer.run_dir={tmp_path}"])
    err = capsys.readouterr().err
    assert status == 2 and f"launcher.address=127.0.0.1:{port}" in err and "Traceback" not in err, err
