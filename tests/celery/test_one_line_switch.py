"""The hidden-change count for Celery is zero: unmodified Celery apps (tests/fixtures/:
a plain app with a producer script and beat, the Django integration, the Flask
integration) are copied byte for byte, only their broker and result-backend URL lines
are changed to `loam://…`, and they run as real processes (`python send.py`, `celery
worker` with its forked pool, `celery beat`, `celery call`/`result`/`inspect`,
`manage.py`) against one real `loam dev` for this module.

No app imports loam_celery: the `loam` transport alias comes from the start-up hook the
package installs (loam_celery.pth, decision 0029).
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import signal
import site
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from devserver import start_dev_server  # noqa: E402

FIXTURES = Path(__file__).parents[1] / "fixtures"
BIN = Path(sys.executable).parent
CELERY = str(BIN / "celery")
TIMEOUT_S = 60
REDIS_URL = re.compile(r"redis://[^\"']*")


@pytest.fixture(scope="module")
def loam(tmp_path_factory):
    server = start_dev_server(tmp_path_factory.mktemp("loam-dev"))
    yield server
    server.stop()


@pytest.fixture
def env() -> dict[str, str]:
    """This environment without anything that could hand an app Loam settings or code."""
    drop = ("LOAM_", "PYTHONPATH", "CELERY_", "DJANGO_SETTINGS_MODULE")
    return {**{k: v for k, v in os.environ.items() if not k.startswith(drop)}, "PYTHONUNBUFFERED": "1"}


def copy_switched(app: str, dest: Path, url_lines: dict[str, tuple[str, ...]], loam_url: str) -> Path:
    """Copy fixture `app` to `dest` byte for byte, then, in each file of `url_lines`,
    replace the Redis URL on each line that starts with one of the given prefixes."""
    dest = dest / app
    shutil.copytree(FIXTURES / app, dest, ignore=shutil.ignore_patterns("__pycache__"))
    for rel, prefixes in url_lines.items():
        path = dest / rel
        lines = path.read_text().splitlines(keepends=True)
        for i, line in enumerate(lines):
            if line.lstrip().startswith(prefixes):
                lines[i] = REDIS_URL.sub(loam_url, line)
        path.write_text("".join(lines))
    return dest


def hidden_changes(app: str, copy: Path) -> list[tuple[str, str, str]]:
    """Every line in which the copy differs from the fixture: (file, original, copy)."""
    changes: list[tuple[str, str, str]] = []
    original = FIXTURES / app
    names = {
        p.relative_to(original) for p in original.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    }
    copied = {p.relative_to(copy) for p in copy.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    for rel in sorted(names | copied):
        a = (original / rel).read_bytes().decode().splitlines() if rel in names else []
        b = (copy / rel).read_bytes().decode().splitlines() if rel in copied else []
        removed: list[str] = []
        added: list[str] = []
        for line in difflib.ndiff(a, b):
            if line.startswith("- "):
                removed.append(line[2:])
            elif line.startswith("+ "):
                added.append(line[2:])
        changes += [(str(rel), r, a_) for r, a_ in zip(removed, added, strict=False)]
        if len(removed) != len(added):
            changes.append((str(rel), f"{len(removed)} lines removed", f"{len(added)} lines added"))
    return changes


def assert_only_urls_changed(app: str, copy: Path, expected: list[tuple[str, str]], loam_url: str) -> None:
    """The copy differs from the fixture in exactly the `expected` lines (file, the line's
    start), in that order, and each of them only by its URL."""
    changes = hidden_changes(app, copy)
    assert len(changes) == len(expected), changes
    for (file, old, new), (want_file, start) in zip(changes, expected, strict=True):
        assert file == want_file and old.lstrip().startswith(start), changes
        assert REDIS_URL.search(old) and REDIS_URL.sub(loam_url, old) == new, (old, new)


class Proc:
    """A long-running process (worker, beat) in its own process group, logging to a file."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str], log: Path) -> None:
        self.log = log
        self.name = ""
        self._out = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=self._out, stderr=subprocess.STDOUT,
                                     start_new_session=True)  # fmt: skip

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, pattern: str, timeout: float = TIMEOUT_S) -> str:
        """Wait until the log matches `pattern` (a regex); returns the match."""
        deadline = time.monotonic() + timeout
        while not (m := re.search(pattern, self.text())):
            if self.proc.poll() is not None:
                raise AssertionError(f"exited with {self.proc.returncode}:\n{self.text()[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {pattern!r} in {timeout}s:\n{self.text()[-3000:]}")
            time.sleep(0.1)  # the log is a file: nothing to wait on but its growth
        return m.group(0)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                pass
        try:  # the pool children too
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self._out.close()


@pytest.fixture
def procs():
    started: list[Proc] = []
    yield started
    for p in started:
        p.stop()


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> str:
    """A short-lived process (producer, `celery call`); its output, or a failure with it."""
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S + 30)
    assert done.returncode == 0, f"{argv} exited with {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def start_worker(procs: list[Proc], app: str, cwd: Path, env: dict[str, str]) -> Proc:
    """`celery -A app worker` with its default prefork pool (forked children run the
    tasks), two processes."""
    name = f"w-{uuid.uuid4().hex[:6]}@{socket.gethostname()}"
    argv = [CELERY, "-A", app, "worker", "--loglevel=INFO", "--concurrency=2", "--without-mingle",
            "--without-gossip", "-n", name]  # fmt: skip
    worker = Proc(argv, cwd, env, cwd / "worker.log")
    worker.name = name
    procs.append(worker)
    worker.wait_for(r" ready\.")
    return worker


def loam_url(loam, app: str) -> str:
    return f"loam://127.0.0.1:{loam.port}/{app.replace('_', '-')}-{uuid.uuid4().hex[:6]}"


def test_the_start_up_hook_is_installed_and_imports_nothing(env):
    """loam_celery.pth sits in site-packages as the package ships it and registers the
    alias lazily: a bare interpreter has imported neither loam_celery nor kombu, and
    kombu.transport knows `loam` once something imports it."""
    from loam_celery.startup import PTH_LINE

    shipped = (Path(__file__).parents[2] / "adapters" / "celery" / "loam_celery.pth").read_text()
    assert [line for line in shipped.splitlines(keepends=True) if not line.startswith("#")] == [PTH_LINE]
    installed = [Path(d) / "loam_celery.pth" for d in site.getsitepackages()]
    installed = [p for p in installed if p.exists()]
    assert installed, "loam_celery.pth is not installed (make venv)"
    assert installed[0].read_text() == shipped
    probe = "import sys; print(sorted(m for m in sys.modules if m.startswith(('kombu', 'celery', 'loam'))))"
    assert run([sys.executable, "-c", probe], Path.cwd(), env).strip() == "[]"
    resolve = "from kombu.transport import resolve_transport; print(resolve_transport('loam').__module__)"
    assert run([sys.executable, "-c", resolve], Path.cwd(), env).strip() == "loam_celery.transport"


def test_plain_app_producer_worker_beat_and_cli_with_only_the_urls_changed(loam, env, procs, tmp_path):
    url = loam_url(loam, "plain")
    app = copy_switched("celery_plain", tmp_path, {"tasks.py": ("BROKER_URL", "RESULT_BACKEND")}, url)
    assert_only_urls_changed(
        "celery_plain", app, [("tasks.py", "BROKER_URL"), ("tasks.py", "RESULT_BACKEND")], url
    )

    worker = start_worker(procs, "tasks", app, env)
    # A producer that is a plain script: nothing but the app module is imported.
    assert run([sys.executable, "send.py", "2", "3"], app, env).strip() == "result: 5"
    # The celery subcommands, each its own process.
    task_id = run([CELERY, "-A", "tasks", "call", "tasks.add", "--args=[20, 22]"], app, env).strip()
    # Run by a forked pool process, which got the alias from its parent.
    worker.wait_for(rf"/ForkPoolWorker-\d+\] Task tasks\.add\[{task_id}\] succeeded")
    assert run([CELERY, "-A", "tasks", "result", task_id], app, env).strip() == "42"
    # Addressed to the worker, so it answers as soon as the worker replies.
    ping = [CELERY, "-A", "tasks", "inspect", "ping", f"--destination={worker.name}", "--timeout=30"]
    answer = run(ping, app, env)
    assert f"{worker.name}: OK" in answer and "pong" in answer, answer
    # beat with its default scheduler: its ticks reach the worker through loam://.
    procs.append(Proc([CELERY, "-A", "tasks", "beat", "--loglevel=INFO", "-s", str(tmp_path / "beat-schedule")],
                      app, env, app / "beat.log"))  # fmt: skip
    worker.wait_for(
        r"/ForkPoolWorker-\d+\] Task tasks\.heartbeat\[[0-9a-f-]+\] succeeded in [0-9.e-]+s: 'beat'"
    )


def test_django_integration_with_only_the_settings_urls_changed(loam, env, procs, tmp_path):
    url = loam_url(loam, "django")
    lines = ("CELERY_BROKER_URL", "CELERY_RESULT_BACKEND")
    app = copy_switched("celery_django", tmp_path, {"proj/settings.py": lines}, url)
    assert_only_urls_changed("celery_django", app, [("proj/settings.py", n) for n in lines], url)

    start_worker(procs, "proj", app, env)
    assert run([sys.executable, "manage.py", "add", "4", "5"], app, env).strip() == "result: 9"


def test_flask_integration_with_only_the_config_urls_changed(loam, env, procs, tmp_path):
    url = loam_url(loam, "flask")
    app = copy_switched("celery_flask", tmp_path, {"app.py": ("broker_url", "result_backend")}, url)
    assert_only_urls_changed(
        "celery_flask", app, [("app.py", "broker_url"), ("app.py", "result_backend")], url
    )

    start_worker(procs, "make_celery", app, env)
    assert run([sys.executable, "send.py", "6", "7"], app, env).strip() == "result: 13"
