"""`loam dev`: every service in one process on the embedded store.

The data directory (default `./.loam`) holds the store (`loam.lmdb/`, an LMDB
environment; a directory made before LMDB was the default keeps its SQLite `loam.db`,
and `--store sqlite:///...` picks any store) and the blobs (`blobs/`). `--durable`
(`LOAM_DURABLE=on`) fsyncs every commit before it is acknowledged (power-loss safe); by
default a commit survives a crash of the process, and the store flushes within ~0.25 s. The gateway calls a local CoreRpc (no network hop); the sweeper (every
200 ms) and the relay (every 100 ms) run as in-process loops under the owner id
`loam-dev`; they share the core's store, so the core's effect sink wakes the parked
leases of the queues where a sweep reclaimed or promoted jobs. Durable mode
(loam_durable, the Resonate protocol) is mounted at `<url>/resonate`; its timers run as
an in-process loop and its pushes go straight to this process's SSE connections.
Prints the URLs, then exactly one line with "ready" once the server accepts connections. Ctrl-C or SIGTERM stops it: in-flight calls get up to
3 s, then the loops stop (releasing their shard leases) and the store is closed.

Without auth (`LOAM_AUTH` unset) it binds loopback only; `--auth` (or `LOAM_AUTH=on`)
checks bearer tokens against the store (create them with `loam tokens create`).

The engine runner (loam_engines) runs in the same process: the Spark Connect endpoint
(`--spark-port`, default 15002, or any free port when 15002 is taken and no port was
asked for; 0 = any free port) is printed as an `sc://localhost:PORT` URL, and the
engine RPCs and SparkBatch runs are served.

    python -m loam_gateway.dev --host 127.0.0.1 --port 7720 --data ./.loam
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from loam_durable.facade import DurableCore
from loam_durable.hub import Hub
from loam_durable.timers import DurableTimers

from loam_common import tracing
from loam_common.blobs import DirBlobStore
from loam_common.errors import InvalidArgument
from loam_common.jobs import quotas
from loam_common.loop import configure_logging
from loam_common.serving import ServeError, run_server_main, serve
from loam_common.store.runner import open_store, store_url_of
from loam_engines.credentials import NoCredentials, StoreCredentials
from loam_engines.engines import Engines, EngineSettings
from loam_gateway.app import DEFAULT_PORT, create_app
from loam_gateway.audit_log import AuditLog
from loam_gateway.auth import DevAuthenticator, StoreAuthenticator, auth_on, check_bind
from loam_gateway.durable_mount import DurableMount
from loam_gateway.guard import guard_flags, guard_policy
from loam_gateway.metrics_history import MetricsHistory
from loam_gateway.redaction import REDACT_ENV, Redaction
from loam_gateway.routing import Router
from loam_queue_core.core import QueueCore
from loam_queue_core.rpc import CoreRpc
from loam_relay.service import RelayService
from loam_sweeper.service import SweeperService

log = logging.getLogger("loam.dev")

SWEEP_INTERVAL_S = 0.2
OWNER_ID = "loam-dev"  # the same after a restart, so its shard leases come straight back


def _durable_retry_ms() -> int:
    """How long a pending durable task waits before its `execute` is sent again
    (LOAM_DURABLE_RETRY_MS; Resonate's own default is 30 s)."""
    return int(os.environ.get("LOAM_DURABLE_RETRY_MS", "30000"))


def _redaction(p: argparse.ArgumentParser, spec: str) -> Redaction:
    try:
        return Redaction.parse(spec)
    except InvalidArgument as e:
        p.error(f"--redact: {e}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    env = os.environ
    p = argparse.ArgumentParser(prog="loam dev", description="Run every Loam service in one process.")
    p.add_argument("--host", default=env.get("LOAM_HOST", "127.0.0.1"))
    p.add_argument("--port", type=int, default=int(env.get("LOAM_PORT", DEFAULT_PORT)),
                   help=f"the HTTP port ($LOAM_PORT; default {DEFAULT_PORT}, 0 = any free port, printed when ready)")  # fmt: skip
    p.add_argument("--data", default=env.get("LOAM_DATA", "./.loam"), help="data directory (default ./.loam)")
    p.add_argument("--auth", action="store_true", default=auth_on(env.get("LOAM_AUTH")),
                   help="require bearer tokens (LOAM_AUTH=on); needed to bind a non-loopback host")  # fmt: skip
    p.add_argument("--durable-retry-ms", type=int, default=int(env.get("LOAM_DURABLE_RETRY_MS", "30000")),
                   help="ms a pending durable task waits before its execute is sent again (LOAM_DURABLE_RETRY_MS)")  # fmt: skip
    p.add_argument("--store", default=None,
                   help="store URL (lmdb:///dir, sqlite:///file.db); default the data directory's store")  # fmt: skip
    p.add_argument("--durable", action="store_true", default=auth_on(env.get("LOAM_DURABLE")),
                   help="fsync each commit before acknowledging it: survives power loss (LOAM_DURABLE=on)")  # fmt: skip
    p.add_argument("--log-level", default=env.get("LOAM_LOG_LEVEL", "warning"))
    p.add_argument("--quotas", default=env.get("LOAM_QUOTAS"),
                   help="per-namespace quotas, e.g. '*:stored_jobs=100000;alpha:enqueue_rate=50' "
                        "(enqueue_rate, stored_jobs, payload_bytes, active_leases, schedules; 0 = none)")  # fmt: skip
    guard_flags(p, env)
    p.add_argument("--metrics-interval", type=float, default=float(env.get("LOAM_METRICS_INTERVAL_S", 10)),
                   help="seconds between two samples of the metrics history ($LOAM_METRICS_INTERVAL_S)")  # fmt: skip
    p.add_argument("--redact", default=env.get(REDACT_ENV, ""),
                   help="payload fields REST hides: '[namespace=]field,a.b;...' ($LOAM_REDACT)")  # fmt: skip
    spark_port = env.get("LOAM_SPARK_PORT")
    p.add_argument("--spark-port", type=int, default=int(spark_port) if spark_port else None,
                   help="the Spark Connect endpoint's port ($LOAM_SPARK_PORT; default 15002, 0 = any free port)")  # fmt: skip
    p.add_argument("--sail-idle", type=float, default=float(env.get("LOAM_SAIL_IDLE_S", 300)),
                   help="seconds a namespace's Sail server stays up with no open session ($LOAM_SAIL_IDLE_S)")  # fmt: skip
    p.add_argument("--sail-memory-mb", type=int, default=int(env.get("LOAM_SAIL_MEMORY_MB", 0)),
                   help="memory cap of each namespace's Sail server, MiB; it spills past it ($LOAM_SAIL_MEMORY_MB, 0 = none)")  # fmt: skip
    p.add_argument(
        "--sail-spares",
        type=int,
        choices=(0, 1),
        default=int(env.get("LOAM_SAIL_SPARES", 1)),
        help="keep a warm Sail launcher for the next namespace's start, made on first use ($LOAM_SAIL_SPARES, default 1)",
    )
    p.add_argument("--sail-prewarm", action="store_true", default=env.get("LOAM_SAIL_PREWARM", "") in ("1", "on", "true"),
                   help="make the warm Sail spare at start, so the first namespace starts warm too ($LOAM_SAIL_PREWARM)")  # fmt: skip
    p.add_argument("--no-flink", action="store_true", default=env.get("LOAM_FLINK", "").lower() in ("0", "off", "false"),
                   help="run no Flink engine: Flink deploys are refused ($LOAM_FLINK=off)")  # fmt: skip
    args = p.parse_args(argv)
    args.redaction = _redaction(p, args.redact)
    if not args.metrics_interval > 0:
        p.error("--metrics-interval must be a positive number of seconds")
    return args


async def run(args: argparse.Namespace) -> None:
    data = Path(args.data).resolve()
    data.mkdir(parents=True, exist_ok=True)
    store = open_store(store_url_of(args.store or data), durable_power_loss=args.durable)
    blobs = DirBlobStore(data / "blobs")
    quota_table = quotas.parse(args.quotas)
    core = QueueCore(store, blobs, quotas=quota_table)
    # the history's wait and run times reach the store at least as often as it is sampled
    core.histogram_flush.interval = min(core.histogram_flush.interval, args.metrics_interval)
    tracing.configure_from_env("loam-dev")  # OTEL_TRACES_EXPORTER=console|otlp|...; off when unset
    hub = Hub()
    durable = DurableCore(store, hub, retry_ms=args.durable_retry_ms)
    rpc = CoreRpc(core)
    authenticator = StoreAuthenticator(store) if args.auth else None
    engines = Engines(
        store,
        blobs,
        rpc,
        authenticator or DevAuthenticator(),
        StoreCredentials(store) if args.auth else NoCredentials(),
        EngineSettings(
            data_dir=data / "engines",
            runner_id=OWNER_ID,
            spark_port=args.spark_port,
            sail_idle_s=args.sail_idle,
            sail_memory_limit_bytes=args.sail_memory_mb << 20,
            sail_spares=args.sail_spares,
            flink=not args.no_flink,
            sail_prewarm=args.sail_prewarm,
        ),  # fmt: skip
    )
    rpc.engines = engines.rpc
    router = Router(local=rpc)
    loops = [
        # Same store as the core: the core's effect sink wakes what the sweeps make ready.
        SweeperService(store, blobs, OWNER_ID, None, SWEEP_INTERVAL_S, quotas=quota_table),
        RelayService(store, OWNER_ID),
        DurableTimers(durable, OWNER_ID, SWEEP_INTERVAL_S),
        core.histogram_flush,
    ]

    async def start() -> None:
        for loop in loops:
            loop.start()

    async def stop() -> None:
        try:
            await engines.stop()
        except Exception:  # noqa: BLE001 - the loops and the store still have to stop
            log.exception("stopping the engine runner failed")
        for loop in loops:
            try:
                await loop.stop()
            except Exception:  # noqa: BLE001 - stopping the others and closing the store matter more
                log.exception("stopping %s failed", loop.name)

    app = create_app(
        router,
        authenticator,
        on_startup=start,
        on_shutdown=stop,
        durable=DurableMount(durable, hub),
        guard=guard_policy(args),
        redaction=args.redaction,
        audit=AuditLog(store),
        metrics_history=MetricsHistory(router.metrics_text, store, args.metrics_interval),
    )

    def ready(server) -> None:
        # With --port 0 the OS picked the port: say which, so a script can read it here.
        port = args.port or server.servers[0].sockets[0].getsockname()[1]
        url = f"http://{args.host}:{port}"
        print(f"loam dev: serving {url} (data in {data}, auth {'on' if args.auth else 'off'})", flush=True)
        print(f"loam dev: durable (Resonate) at {url}/resonate", flush=True)
        print(f"loam dev: the console is at {url}/console/", flush=True)
        print(f"loam dev: spark connect on {engines.spark_url}", flush=True)
        print(f"loam dev: ready on {url}", flush=True)

    try:
        # Before the HTTP server: a Spark port that is taken stops `loam dev` with one line.
        try:
            await engines.start()
        except OSError as e:
            raise ServeError(str(e)) from None
        await serve(app, args.host, args.port, on_ready=ready, log_level=args.log_level)
    finally:
        await stop()
        await store.close()
        print("loam dev: stopped", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging(args.log_level)
    try:
        check_bind(args.host, args.auth)
    except ValueError as e:
        print(f"loam dev: {e}", file=sys.stderr)
        return 2
    return run_server_main("loam dev", run(args))


if __name__ == "__main__":
    sys.exit(main())
