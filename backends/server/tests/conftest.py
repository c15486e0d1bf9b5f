"""Real ``rlloom serve`` processes for the tests (the hf engine on the tiny preset's model)."""

from __future__ import annotations

import pytest

from rlloom_server.testing import ServerProcess


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("server_models"))


@pytest.fixture
def start_server(model_cache):
    """``start_server(*overrides_or_flags) -> ServerProcess`` on the tiny preset; all stopped after the test."""
    servers = []

    def start(*args: str) -> ServerProcess:
        server = ServerProcess("preset=tiny", f"model.cache_dir={model_cache}", *args)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
