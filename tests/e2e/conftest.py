"""The `dev_server` fixture: `loam dev` as a subprocess (devserver.py), started once per
test module on a free port with a fresh data directory, stopped at the end."""

from __future__ import annotations

import pytest
from devserver import start_dev_server


@pytest.fixture(scope="module")
def dev_server(tmp_path_factory: pytest.TempPathFactory):
    # No Flink: a request the REST fuzzer makes up may be a valid Flink deploy, and these
    # tests have no use for a session cluster's JVMs.
    server = start_dev_server(tmp_path_factory.mktemp("loam-dev"), "--no-flink")
    try:
        yield server
    finally:
        server.stop()
