"""Helpers for the Celery tests (imported by name: `conftest` is ambiguous across test
directories): the app directory, a `celery` subprocess, and `eventually`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
CELERY = str(Path(sys.executable).with_name("celery"))
READY_TIMEOUT_S = 30


class Proc:
    """A `celery -A proj ...` subprocess in its own process group, logging to a file."""

    def __init__(self, env: dict[str, str], log: Path, *args: str) -> None:
        self.log = log
        self._out = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([CELERY, "-A", "proj", *args], cwd=HERE, env=env, stdout=self._out,
                                     stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, needle: str, timeout: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.text():
            if self.proc.poll() is not None:
                raise RuntimeError(f"celery exited with {self.proc.returncode}:\n{self.text()[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"no {needle!r} from celery in {timeout}s:\n{self.text()[-3000:]}")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL the whole process group: the main process and its pool children."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self, timeout: float = 15) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        if self.proc.poll() is None:
            self.kill()
        else:  # pool children left behind by a main process that died
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._out.close()


def eventually(check, timeout: float = 20, interval: float = 0.05):
    """Call `check` until it returns a true value (returned) or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)
