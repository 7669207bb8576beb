"""Sail's Spark Connect server as a child of the engine runner.

Runs with the Python of the Spark environment (.engines/spark), not Loam's: it imports
only pysail (and grpc, which the environment has, for the warm-up). It starts the server
on the given address (port 0 = any free one), prints one JSON line `{"port": N}` on
stdout once it listens (the CLI reports the port only in a log line that RUST_LOG can
silence), and turns SIGTERM and SIGINT into a clean stop.

    python sail_launcher.py --ip 127.0.0.1 --port 0
    python sail_launcher.py --ip 127.0.0.1 --port 0 --spare

`--spare`: a server made ready before any namespace asks for one. Most of a cold start is
not the server's start (~50 ms) but importing pysail (its 159 MB native module) and the
first request a Sail process ever answers, which initialises process-wide state (several
hundred ms; a second server in the same process answers its first request in a few ms).
A spare does both ahead of time — it imports pysail, runs a throwaway server and asks it
one Config — prints `{"spare": "ready"}`, then waits for one JSON line on stdin with the
namespace's settings (`cwd`, `env`: the `SAIL_*` settings, read when the server starts;
`sys_path`: the namespace's packages, for UDFs that run in this process), and only then
starts the namespace's server. stdin closed instead: it exits.
"""

import argparse
import json
import os
import signal
import sys
import threading

CONFIG = "/spark.connect.SparkConnectService/Config"


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (no generated code in this environment's path)."""
    n, size = len(payload), b""
    while True:
        byte, n = n & 0x7F, n >> 7
        size += bytes([byte | (0x80 if n else 0)])
        if not n:
            return bytes([(number << 3) | 2]) + size + payload


def _warm_up(server_class) -> None:
    """One request to a throwaway server: what a Sail process does once, done now."""
    import grpc

    server = server_class(ip="127.0.0.1", port=0)
    server.start(background=True)
    try:
        _host, port = server.listening_address
        session = b"00000000-0000-4000-8000-00000000a11e"  # Config get spark.sql.session.timeZone
        request = (
            _field(1, session)
            + _field(2, _field(1, b"loam"))
            + _field(3, _field(2, _field(1, b"spark.sql.session.timeZone")))
        )
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            channel.unary_unary(CONFIG)(request, timeout=60)
    finally:
        server.stop()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--ip", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--spare", action="store_true", help="warm up, then wait on stdin for the namespace")
    args = p.parse_args()

    from pysail.spark import SparkConnectServer

    if args.spare:  # until claimed, SIGTERM ends it the default way (no server to stop)
        _warm_up(SparkConnectServer)
        sys.stdout.write(json.dumps({"spare": "ready"}) + "\n")
        sys.stdout.flush()
        line = sys.stdin.readline()
        if not line:
            return 0
        claim = json.loads(line)
        os.chdir(claim["cwd"])
        os.environ.update(claim.get("env", {}))
        sys.path[:0] = claim.get("sys_path", [])

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server = SparkConnectServer(ip=args.ip, port=args.port)
    server.start(background=True)
    _host, port = server.listening_address
    sys.stdout.write(json.dumps({"port": port}) + "\n")
    sys.stdout.flush()
    stop.wait()
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
