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
    ({"cpus_per_worker": 0.0}, "launcher.cpus_per_worker=0.0: must be > 0"),
    ({"threads_per_worker": -1}, "launcher.threads_per_worker=-1: must be >= 0"),
    ({"gpus_per_worker": -1.0}, "launcher.gpus_per_worker=-1.0: must be >= 0"),
    ({"call_timeout_s": 0.0}, "launcher.call_timeout_s=0.0: must be > 0"),
    ({"connect_timeout_s": 0.0}, "launcher.connect_timeout_s=0.0: must be > 0"),
])
def test_bad_values_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message.replace(".", r"\.").replace("(", r"\(")):
        RayLauncherConfig(**kwargs)


def test_the_mapping_names_roles_of_the_run_declared_ones_included():
    # checked when composed, against the chosen algorithm's roles: Safe-RLHF declares cost_critic, GRPO does not
    with pytest.raises(ConfigError, match=r"launcher\.mapping\.critc: unknown role; roles are actor, ref, critic, "
                                          r"rollout, reward$"):
        compose_config(["launcher=ray", "+launcher.mapping.critc=global"])
    with pytest.raises(ConfigError, match=r"launcher\.mapping\.cost_critic: unknown role"):
        compose_config(["launcher=ray", "+launcher.mapping.cost_critic=global"])
    safe = compose_config(["launcher=ray", "algorithm=safe_rlhf", "cost=format", "+launcher.mapping.cost_critic=global"])
    assert safe.sections["launcher"].pool_of("cost_critic") == "global"


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


def test_an_address_that_accepts_but_never_answers_fails_at_the_connect_timeout(tmp_path, capsys):
    """A firewall or proxy that accepts TCP but is no Ray cluster: named after launcher.connect_timeout_s."""
    import socket

    from rlloom.cli import main

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        status = main(["train", "preset=tiny", "launcher=ray", f"launcher.address={address}",
                       "launcher.connect_timeout_s=1", f"trainer.run_dir={tmp_path}"])
    err = capsys.readouterr().err
    assert status == 2 and f"launcher.address={address}" in err and "sends nothing back" in err, err
    assert "Traceback" not in err


def test_a_grpc_server_passes_the_reachability_check_and_http_does_not():
    """The check speaks HTTP/2 as Ray's GCS and client server do (a real gRPC server answers it)."""
    import socket
    import threading
    from concurrent import futures

    import grpc
    from rlloom_ray.config import check_reachable

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        check_reachable(f"127.0.0.1:{port}", 5.0)
        check_reachable(f"ray://127.0.0.1:{port}", 5.0)
    finally:
        server.stop(None)
    with socket.socket() as web:
        web.bind(("127.0.0.1", 0))
        web.listen()

        def answer_http() -> None:
            connection, _ = web.accept()
            with connection:
                connection.recv(64)
                connection.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

        threading.Thread(target=answer_http, daemon=True).start()
        with pytest.raises(ConnectionError, match="does not speak gRPC"):
            check_reachable(f"127.0.0.1:{web.getsockname()[1]}", 5.0)
