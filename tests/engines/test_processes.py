"""Engine child processes: a child dies with its runner, and a pid file left by a runner
that died lets the next one end what is still running, but never a process that merely
reuses the pid."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

from loam_engines import processes


def _wait_gone(pid: int, limit: float = 5.0) -> bool:
    deadline = time.monotonic() + limit
    while processes.alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


async def test_stop_ends_the_whole_process_group(tmp_path):
    # A shell that starts a grandchild and ignores SIGTERM: stop() still ends both.
    child = await processes.spawn(
        "group", ["sh", "-c", "trap '' TERM; sleep 60 & echo $!; wait"], pid_dir=tmp_path
    )
    grandchild = int((await child.proc.stdout.readline()).decode())
    assert (tmp_path / "group.pid").exists()
    await child.stop(grace_s=0.3)
    assert _wait_gone(grandchild)
    assert not (tmp_path / "group.pid").exists()


def test_a_child_dies_with_its_runner_and_a_restart_reaps_what_escaped(tmp_path):
    # A runner process starts a child, then is killed with SIGKILL.
    runner = textwrap.dedent(f"""
        import asyncio, sys
        from loam_engines import processes
        async def main():
            child = await processes.spawn("kid", ["sleep", "60"], pid_dir=__import__("pathlib").Path({str(tmp_path)!r}))
            print(child.pid, flush=True)
            await asyncio.sleep(60)
        asyncio.run(main())
    """)
    proc = subprocess.Popen([sys.executable, "-c", runner], stdout=subprocess.PIPE, text=True)
    kid = int(proc.stdout.readline())
    assert processes.alive(kid)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert _wait_gone(kid), "the child outlived its runner"
    # What the death signal cannot reach (a process that escaped its parent) is reaped
    # from its pid file; a pid file naming a reused pid kills nothing.
    escaped = subprocess.Popen(["sleep", "60"], start_new_session=True)
    (tmp_path / "escaped.pid").write_text(
        json.dumps({"pid": escaped.pid, "start": processes.start_time(escaped.pid)})
    )
    (tmp_path / "reused.pid").write_text(json.dumps({"pid": os.getpid(), "start": 1}))
    killed = processes.reap_orphans(tmp_path)
    assert killed == [escaped.pid]
    escaped.wait(5)
    assert list(tmp_path.glob("*.pid")) == []
    assert processes.alive(os.getpid())


async def test_a_child_that_exits_leaves_no_pid_file(tmp_path):
    child = await processes.spawn("quick", ["true"], pid_dir=tmp_path)
    assert await asyncio.wait_for(child.wait(), 5) == 0
    assert not (tmp_path / "quick.pid").exists()
