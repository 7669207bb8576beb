"""SyncClient's unary calls run in the caller's thread (loam.blocking): typed errors,
many threads at once, a forked child using the client its parent used, and no
background loop unless something needs it."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from loam import SyncClient, errors


def _loop_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "loam-sync-client"]


def test_unary_calls_need_no_background_loop_and_errors_are_typed(url: str, ns: str) -> None:
    before = len(_loop_threads())
    with SyncClient(url, namespace=ns) as c:
        job = c.enqueue("q", "t", {"n": 1})
        (leased,) = c.lease("q", max=1)
        assert leased.id == job.id and leased.payload == {"n": 1}
        c.complete(leased)
        with pytest.raises(errors.InvalidState):
            c.complete(leased)  # completed already
        with pytest.raises(errors.InvalidArgument) as bad:
            c.enqueue("not a queue name!", "t")
        assert bad.value.field == "queue"
        assert len(_loop_threads()) == before  # nothing needed the async client
        assert [s.id for s in c.iter_schedules()] == []  # a stream: that starts it
        assert len(_loop_threads()) == before + 1
    assert len(_loop_threads()) == before


def test_threads_share_one_sync_client(url: str, ns: str) -> None:
    with SyncClient(url, namespace=ns) as c:
        failures: list[BaseException] = []

        def work(t: int) -> None:
            try:
                for i in range(20):
                    c.result_set(f"k{t}-{i}", {"t": t, "i": i})
                    assert c.result_get(f"k{t}-{i}") == {"t": t, "i": i}
            except BaseException as e:  # noqa: BLE001 - reported below
                failures.append(e)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(30)
        assert not failures
        assert c.result_mget([f"k{t}-19" for t in range(8)]) == [{"t": t, "i": 19} for t in range(8)]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")
def test_a_forked_child_uses_the_parents_client(url: str, ns: str) -> None:
    with SyncClient(url, namespace=ns) as c:
        c.result_set("parent", 1)  # the parent's connection is open now
        pid = os.fork()
        if pid == 0:  # the child: its own connection, never the parent's socket
            code = 1
            try:
                c.result_set("child", 2)
                code = 0 if c.result_get("child") == 2 and c.result_get("parent") == 1 else 3
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert c.result_get("child") == 2  # and the parent's connection still works


class _Interrupted(Exception):
    pass


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs setitimer")
def test_a_call_interrupted_midway_leaves_the_thread_a_working_connection(url: str, ns: str) -> None:
    def interrupt(signum: int, frame: object) -> None:
        raise _Interrupted

    with SyncClient(url, namespace=ns) as c:
        c.result_set("before", 1)
        previous = signal.signal(signal.SIGALRM, interrupt)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.3)
            with pytest.raises(_Interrupted):
                c.result_wait("absent", wait=5)  # a long-poll, cut short while it waits
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        assert c.result_get("before") == 1


def test_an_answer_that_is_not_http_is_unavailable_and_the_next_call_dials_again() -> None:
    """Another server on the port (here one that answers garbage once, then HTTP): a
    typed Unavailable, not the HTTP library's own exception, and the client works on."""
    import socket

    from loam_common.gen.loam.jobs.v1 import jobs_pb2 as jpb

    answer = jpb.ResultIncrResponse(size=5, added=True).SerializeToString()
    listener = socket.create_server(("127.0.0.1", 0))
    calls = 0

    def serve() -> None:
        nonlocal calls
        while calls < 2:
            conn, _ = listener.accept()
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                length = next(int(v) for k, _, v in (ln.partition(b":") for ln in head.split(b"\r\n"))
                              if k.strip().lower() == b"content-length")  # fmt: skip
                while len(body) < length:
                    body += conn.recv(65536)
                calls += 1
                if calls == 1:
                    conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
                else:
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: %d\r\n\r\n" % len(answer)
                        + answer
                    )

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    with SyncClient(f"http://127.0.0.1:{listener.getsockname()[1]}", namespace="default") as c:
        with pytest.raises(errors.Unavailable):
            c.result_incr("k", "m")
        assert c.result_incr("k", "m") == 5
    thread.join(5)
    listener.close()
    assert calls == 2
