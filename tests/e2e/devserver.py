"""`loam dev` as a subprocess on a free port with a fresh data directory, ready when
it prints its "ready" line; `stop()` sends SIGTERM (and kills it if it does not stop)."""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

READY_TIMEOUT_S = 30


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class DevServer:
    url: str
    port: int
    data: Path
    proc: subprocess.Popen
    lines: list[str] = field(default_factory=list)

    def stop(self, timeout: float = 15) -> int:
        """SIGTERM, then wait; kill if it does not stop in time. Returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def start_dev_server(
    data: Path,
    *extra: str,
    port: int | None = None,
    env: dict | None = None,
    drop_env: tuple[str, ...] = ("LOAM_",),
    timeout_s: float = READY_TIMEOUT_S,
    server_class: type[DevServer] = DevServer,
) -> DevServer:
    """`loam dev` with `extra` flags; `env` is added to this process's environment less the
    variables starting with `drop_env`. Returns once it prints "ready" (a `server_class`)."""
    # Without a port, `loam dev` binds any free one and names it in its ready line: a port
    # picked here and bound there later could be taken by another process meanwhile.
    cmd = [sys.executable, "-m", "loam_gateway.dev", "--host", "127.0.0.1", "--port", str(port or 0),
           "--data", str(data), *extra]  # fmt: skip
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(drop_env)}, **(env or {})}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    server = server_class(f"http://127.0.0.1:{port}", port or 0, data, proc)  # the port: from its ready line
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:  # keep reading so the pipe never fills
        for line in proc.stdout:
            server.lines.append(line)
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            line = lines.get(timeout=max(deadline - time.monotonic(), 0.01))
        except queue.Empty:
            server.stop()
            raise RuntimeError(
                f"loam dev did not get ready in {timeout_s}s:\n{''.join(server.lines)}"
            ) from None
        if line is None:
            raise RuntimeError(f"loam dev exited with {proc.wait()}:\n{''.join(server.lines)}")
        if "ready on " in line:  # `loam dev: ready on <url>`, its last start-up line
            server.url = line.split("ready on ", 1)[1].strip()
            server.port = int(server.url.rsplit(":", 1)[1])
            return server
