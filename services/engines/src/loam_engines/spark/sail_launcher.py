"""Sail's Spark Connect server as a child of the engine runner.

Runs with the Python of the Spark environment (.engines/spark), not Loam's: it imports
only pysail. It starts the server on the given address (port 0 = any free one), prints
one JSON line `{"port": N}` on stdout once it listens (the CLI reports the port only in
a log line that RUST_LOG can silence), and turns SIGTERM and SIGINT into a clean stop.

    python sail_launcher.py --ip 127.0.0.1 --port 0
"""

import argparse
import json
import signal
import sys
import threading


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--ip", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    args = p.parse_args()

    from pysail.spark import SparkConnectServer

    server = SparkConnectServer(ip=args.ip, port=args.port)
    server.start(background=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    _host, port = server.listening_address
    sys.stdout.write(json.dumps({"port": port}) + "\n")
    sys.stdout.flush()
    stop.wait()
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
