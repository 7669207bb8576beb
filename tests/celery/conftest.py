"""Celery on Loam, end to end: real Celery workers and beat processes (subprocesses of
`celery -A proj ...`, proj.py beside this file) against the session's `loam dev`
(`loam_server`, the SDK's test kit). The session gets a namespace of its own; each
test picks its own queue names, so tests do not see each other's messages.

- `celery_ns` / `celery_url`: the session's namespace and its `loam://` URL, set on
  proj's app (and in the environment the subprocesses get) before the app is used;
- `start_worker(*args, vt=3)`: a worker subprocess, ready when it prints "ready";
  stopped (SIGTERM, then SIGKILL of its process group) at the end of the test;
- `marks`: what tasks recorded (proj.marks) in this session's marks directory.
"""

from __future__ import annotations

import os
import sys
import uuid

import pytest
from celery_kit import HERE, Proc


@pytest.fixture(scope="session")
def celery_ns() -> str:
    return f"celery-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def celery_env(loam_server, celery_ns, tmp_path_factory) -> dict[str, str]:
    url = f"loam://127.0.0.1:{loam_server.port}/{celery_ns}"
    marks = tmp_path_factory.mktemp("celery-marks")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOAM_")}
    env.update(LOAM_CELERY_URL=url, LOAM_CELERY_MARKS=str(marks), PYTHONPATH=str(HERE), PYTHONUNBUFFERED="1")
    os.environ.update(LOAM_CELERY_URL=url, LOAM_CELERY_MARKS=str(marks))
    sys.path.insert(0, str(HERE))
    import proj

    proj.URL, proj.MARKS = url, marks
    proj.app.conf.update(broker_url=url, result_backend=url)
    return env


@pytest.fixture(scope="session")
def app(celery_env):
    import proj

    return proj.app


@pytest.fixture
def marks(celery_env):
    import proj

    return proj.marks


@pytest.fixture
def start_worker(celery_env, tmp_path):
    procs: list[Proc] = []

    def start(
        *args: str, vt: float = 3, concurrency: int = 2, queues: str = "celery", ready: bool = True
    ) -> Proc:
        env = dict(celery_env, LOAM_CELERY_VT=str(vt))
        name = f"w{len(procs)}-{uuid.uuid4().hex[:6]}@%h"
        p = Proc(env, tmp_path / f"worker{len(procs)}.log", "worker", "-l", "INFO", "-n", name, "-c",
                 str(concurrency), "-Q", queues, "--without-mingle", "--without-gossip", *args)  # fmt: skip
        procs.append(p)
        if ready:
            p.wait_for(" ready.")
        return p

    yield start
    for p in procs:
        p.stop()


@pytest.fixture
def start_beat(celery_env, tmp_path):
    procs: list[Proc] = []

    def start(*args: str) -> Proc:
        p = Proc(celery_env, tmp_path / f"beat{len(procs)}.log", "beat", "-l", "INFO", "-S", "loam",
                 "--max-interval", "1", *args)  # fmt: skip
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.stop()
