"""The Spark endpoint's costs, next to the issue's targets (spec §9; issue 20):

| figure | target |
|---|---|
| added latency of the proxy per Spark Connect call, p50 (proxy - direct) | <= 1 ms |
| cold start of a namespace's Sail through the proxy, to the first answer | <= 150 ms |
| a SparkBatch run from submit to the script's first line | <= 1 s |

1. A Sail server and the proxy run in this process (SailPool +
   SparkConnectProxy, with the gateway's token check: `StoreAuthenticator` over a real
   LMDB store holding the bench's token, so the figure includes it); a PySpark 4.2 client
   in a subprocess times `spark.range(10).count()` (one ExecutePlan plus its
   ReleaseExecutes) and `spark.conf.get(...)` (one Config call) directly against Sail and
   through the proxy, in alternating rounds (direct, proxy, direct, ...) so a change in the
   machine's load falls on both; the figure is the median of the rounds' differences. Then
   raw loops from a gRPC client of one call each, a unary `Config` and a server-streaming
   `ExecutePlan` of `range(10)`, again in alternating rounds: Sail directly, through the
   proxy (an HTTP/2 frame relay, decision 0044), and through a bare grpc.aio relay (no
   token check, no routing, no pool: the floor of a relay in Python's gRPC, which the
   proxy was until 0044), with this process's CPU time per relayed call, which the load
   moves far less than latency.
2. Cold start: the namespace's server stopped, a raw gRPC `Config` call through the proxy
   (no client start-up in the figure), timed to its answer; then the same call warm. Twice:
   with no spare (every start imports pysail and pays Sail's first-request set-up), and
   from the warm spare the runner keeps (`SailSettings.spares`, given time to get ready,
   as it has between a namespace's idle stop and its next connection). And where a cold
   start's time goes, phase by phase, without the proxy: spawning the launcher, its
   python importing pysail and the server listening, the channel connecting, the first
   request.
3. `loam dev` as a subprocess (no auth); the SDK submits `print('first')` as a SparkBatch
   run and follows its log; the figure is the line's time (the runner's clock) minus the
   submit's start.

Needs `make engines-spark`. Prints a table and writes JSON (`--out`, default
bench/results/spark_bench.json).

    .venv/bin/python bench/spark_bench.py [--calls 300] [--rounds 3] [--cold 5] [--batches 5] [--uvloop]

`--uvloop` runs this process (the proxy's) on uvloop, as `loam dev` does; the default is
asyncio's own loop, as `loam engines` runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

# Before gRPC is imported, as loam_engines does for the runner: gRPC's fork handlers would
# run in the Sail children this process starts (under --uvloop they abort them).
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import grpc  # noqa: E402

from loam_common.auth import ACTIONS, ENGINE, Principal, token_create
from loam_common.errors import Unauthenticated
from loam_common.store import LmdbBackend, Store
from loam_engines.spark.proxy import SparkConnectProxy
from loam_engines.spark.sail import SailPool, SailSettings, find_spark_python
from loam_gateway.auth import StoreAuthenticator

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "bench-token"
CONFIG = "/spark.connect.SparkConnectService/Config"
EXECUTE_PLAN = "/spark.connect.SparkConnectService/ExecutePlan"

CLIENT = r"""
import json, sys, time
from pyspark.sql.connect.session import SparkSession
url, calls = sys.argv[1], int(sys.argv[2])
spark = SparkSession.builder.remote(url).getOrCreate()
spark.range(10).count()
out = {}
for name, op in (("range_count", lambda: spark.range(10).count()),
                 ("conf_get", lambda: spark.conf.get("spark.sql.session.timeZone"))):
    for _ in range(20):
        op()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        op()
        times.append((time.perf_counter() - t0) * 1000)
    out[name] = times
spark.stop()
print(json.dumps(out))
"""


class OneToken:
    """The cold-start figures' token check (their subject is Sail's start, not auth)."""

    async def authenticate(self, headers):  # noqa: ANN001, ANN201
        if headers.get("authorization") != f"Bearer {TOKEN}":
            raise Unauthenticated("bad token")
        return Principal(namespace="bench", actions=ACTIONS, token_id="bench")


async def store_token(work: Path) -> tuple[Store, str]:
    """A real store with one engine token in it, as `loam dev --auth` keeps them."""
    store = Store(LmdbBackend(work / "auth.lmdb"))
    token, _ = await store.transact(token_create, "bench", [ENGINE], "spark bench")
    return store, token


RAW_CLIENT = r"""
import sys, time, grpc
port, n, method, stream, request, token = (int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4] == "stream",
                                           bytes.fromhex(sys.argv[5]), sys.argv[6])
channel = grpc.insecure_channel(f"127.0.0.1:{port}")
metadata = [("authorization", f"Bearer {token}")] if token != "-" else None
if stream:
    multi = channel.unary_stream(method)
    call = lambda: [*multi(request, metadata=metadata)]
else:
    multi = channel.unary_unary(method)
    call = lambda: multi(request, metadata=metadata)
for _ in range(100):
    call()
print("ready", flush=True)
sys.stdin.readline()
times = []
for _ in range(n):
    t0 = time.perf_counter()
    call()
    times.append(time.perf_counter() - t0)
times.sort()
print(times[len(times) // 2] * 1000, flush=True)
"""


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def raw_loop(port: int, token: str, calls: int, method: str = CONFIG) -> tuple[float, float]:
    """`calls` raw calls of `method` (Config, or the server stream ExecutePlan) from a gRPC
    client in a subprocess (warmed up first): their p50 in ms, and this process's CPU time
    per call in µs (the proxy's or the bare relay's: nothing else runs here meanwhile).
    `token` "-": no authorization sent."""
    session = str(uuid.uuid4())
    request = execute_plan_request(session) if method == EXECUTE_PLAN else config_request(session)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", RAW_CLIENT, str(port), str(calls), method,
        "stream" if method == EXECUTE_PLAN else "unary", request.hex(), token,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)  # fmt: skip
    assert (await proc.stdout.readline()).strip() == b"ready"
    before = cpu_s()
    proc.stdin.write(b"go\n")
    await proc.stdin.drain()
    p50 = float((await proc.stdout.readline()).strip())
    used = cpu_s() - before
    await proc.wait()
    return round(p50, 3), round(used / calls * 1e6, 1)


async def bare_relay(upstream_port: int) -> tuple[grpc.aio.Server, int]:
    """The floor under a relay in Python's gRPC (the proxy until decision 0044): a
    grpc.aio server that relays Config (unary) and ExecutePlan (server stream) to Sail as
    raw bytes with nothing else (no token check, no routing, no pool)."""
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{upstream_port}")
    config = channel.unary_unary(CONFIG)
    execute = channel.unary_stream(EXECUTE_PLAN)

    async def relay(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return await config(request)

    async def relay_stream(request: bytes, context: grpc.aio.ServicerContext):  # noqa: ANN202
        async for item in execute(request):
            yield item

    class Handler(grpc.GenericRpcHandler):
        def service(self, details):  # noqa: ANN001, ANN201
            if details.method == EXECUTE_PLAN:
                return grpc.unary_stream_rpc_method_handler(relay_stream)
            return grpc.unary_unary_rpc_method_handler(relay)

    server = grpc.aio.server()
    server.add_generic_rpc_handlers((Handler(),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return round(s[min(len(s) - 1, int(p * len(s)))], 3)


def config_request(session: str) -> bytes:
    """A serialised ConfigRequest{session_id, user_context{user_id}, operation{get{keys}}},
    by hand: field 1 session id, 2 user context, 3 operation (Get = field 2 of it)."""

    def ld(field: int, payload: bytes) -> bytes:
        n, out = len(payload), b""
        while True:
            byte = n & 0x7F
            n >>= 7
            out += bytes([byte | (0x80 if n else 0)])
            if not n:
                break
        return bytes([(field << 3) | 2]) + out + payload

    get = ld(1, b"spark.sql.session.timeZone")
    return ld(1, session.encode()) + ld(2, ld(1, b"bench")) + ld(3, ld(2, get))


def _ld(field: int, payload: bytes) -> bytes:
    assert len(payload) < 128
    return bytes([(field << 3) | 2, len(payload)]) + payload


def execute_plan_request(session: str) -> bytes:
    """A serialised ExecutePlanRequest{session_id, user_context{user_id}, plan{root{range{end:
    10, step: 1}}}}: Plan.root is field 1, Relation.range field 15, Range.end 2, step 3."""
    rng = b"\x10\x0a\x18\x01"
    return _ld(1, session.encode()) + _ld(2, _ld(1, b"bench")) + _ld(3, _ld(1, _ld(15, rng)))


async def raw_config(port: int, session: str) -> float:
    """One Config call through the proxy on a fresh channel, in ms to its answer."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        await ch.channel_ready()
        call = ch.unary_unary(CONFIG)
        t0 = time.perf_counter()
        await call(config_request(session), metadata=[("authorization", f"Bearer {TOKEN}")])
        return (time.perf_counter() - t0) * 1000


def run_client(python: Path, url: str, calls: int) -> dict[str, list[float]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:  # PySpark needs a file, not -c
        f.write(CLIENT)
    try:
        out = subprocess.run([str(python), f.name, url, str(calls)], capture_output=True, text=True, env=env,
                             check=True, timeout=600)  # fmt: skip
    finally:
        os.unlink(f.name)
    return json.loads(out.stdout.strip().splitlines()[-1])


async def cold_phases(python: Path, runs: int, work: Path) -> dict:
    """Where a cold start's time goes, without the proxy (the launcher as the pool runs it)."""
    from loam_engines import processes
    from loam_engines.spark.sail import LAUNCHER

    names = ("spawn", "python_import_pysail_listen", "channel_ready", "first_request", "total")
    rows = []
    for i in range(runs):
        t0 = time.perf_counter()
        child = await processes.spawn(f"phase-{i}", [str(python), str(LAUNCHER), "--ip", "127.0.0.1", "--port", "0"],
                                      pid_dir=work / "pids")  # fmt: skip
        t1 = time.perf_counter()
        port = json.loads(await child.proc.stdout.readline())["port"]
        t2 = time.perf_counter()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            await ch.channel_ready()
            t3 = time.perf_counter()
            await ch.unary_unary(CONFIG)(config_request(f"00000000-0000-4000-9000-{i:012d}"))
            t4 = time.perf_counter()
        await child.stop(3.0)
        rows.append(
            [(t1 - t0) * 1000, (t2 - t1) * 1000, (t3 - t2) * 1000, (t4 - t3) * 1000, (t4 - t0) * 1000]
        )
    return {
        name: round(statistics.median(col), 1)
        for name, col in zip(names, zip(*rows, strict=True), strict=True)
    }


async def cold_through_proxy(python: Path, runs: int, work: Path, spares: int) -> dict:
    pool = SailPool(SailSettings(python=python, work_dir=work / f"sail-{spares}", pid_dir=work / "pids",
                                 idle_s=3600, spares=spares))  # fmt: skip
    proxy = SparkConnectProxy(OneToken(), {"sail": pool}, port=0)
    port = await proxy.start()
    cold, warm = [], []
    try:
        pool.prewarm()
        for i in range(runs):
            b = pool.backend("bench")
            if b is not None:
                await pool._stop(b)  # noqa: SLF001 - the bench stops it the way the idle timer does
            if pool._spare is not None:  # noqa: SLF001 - ready, as between an idle stop and a reconnect
                await pool._spare  # noqa: SLF001
            cold.append(await raw_config(port, f"00000000-0000-4000-8{spares:03d}-{i:012d}"))
            warm.append(await raw_config(port, f"00000000-0000-4000-8{spares:03d}-{i:012d}"))
        claims = pool.spare_claims
    finally:
        await proxy.stop()
        await pool.close()
    return {"first_answer_ms": [round(x, 1) for x in cold], "median_ms": round(statistics.median(cold), 1),
            "warm_median_ms": round(statistics.median(warm), 2), "from_spare": claims}  # fmt: skip


async def proxy_figures(python: Path, calls: int, rounds: int, cold_runs: int, work: Path) -> dict:
    pool = SailPool(SailSettings(python=python, work_dir=work / "sail", pid_dir=work / "pids", idle_s=3600))
    store, token = await store_token(work)
    proxy = SparkConnectProxy(StoreAuthenticator(store), {"sail": pool}, port=0)
    port = await proxy.start()
    direct: dict[str, list[dict]] = {}
    proxied: dict[str, list[dict]] = {}
    try:
        backend = await pool.acquire("bench", None)
        pool.release(backend, None)
        for _ in range(rounds):  # paired: direct then proxy, again and again
            d = await asyncio.to_thread(run_client, python, f"sc://127.0.0.1:{backend.port}", calls)
            p = await asyncio.to_thread(run_client, python, f"sc://127.0.0.1:{port}/;authorization=Bearer {token}",
                                        calls)  # fmt: skip
            for op in d:
                direct.setdefault(op, []).append(d[op])
                proxied.setdefault(op, []).append(p[op])
        bare, bare_port = await bare_relay(backend.port)
        raw: dict[str, dict[str, list[tuple[float, float]]]] = {}
        for method in (CONFIG, EXECUTE_PLAN):
            rows = raw[method.rsplit("/", 1)[1]] = {"direct": [], "proxy": [], "bare_relay": []}
            for _ in range(rounds):  # paired again: Sail directly, the proxy, the bare relay
                rows["direct"].append(await raw_loop(backend.port, "-", 10 * calls, method))
                rows["proxy"].append(await raw_loop(port, token, 10 * calls, method))
                rows["bare_relay"].append(await raw_loop(bare_port, "-", 10 * calls, method))
        await bare.stop(0)
    finally:
        await proxy.stop()
        await pool.close()
        await store.close()
    out: dict = {"rounds": rounds}
    for name, rows in raw.items():
        med = {
            k: (statistics.median(p for p, _ in v), statistics.median(c for _, c in v))
            for k, v in rows.items()
        }
        added = {k: round(statistics.median(x[0] - d[0] for d, x in zip(rows["direct"], rows[k], strict=True)), 3)
                 for k in ("proxy", "bare_relay")}  # fmt: skip
        out[f"raw_{name}"] = {
            "direct_p50_ms": round(med["direct"][0], 3), "proxy_p50_ms": round(med["proxy"][0], 3),
            "bare_relay_p50_ms": round(med["bare_relay"][0], 3), "proxy_added_p50_ms": added["proxy"],
            "bare_relay_added_p50_ms": added["bare_relay"], "proxy_cpu_us_per_call": med["proxy"][1],
            "bare_relay_cpu_us_per_call": med["bare_relay"][1], "per_round": rows}  # fmt: skip
    out["proxy_cpu_us_per_config_call"] = out["raw_Config"]["proxy_cpu_us_per_call"]
    for op in ("range_count", "conf_get"):
        ds, ps = direct[op], proxied[op]
        added = [pct(p, 0.5) - pct(d, 0.5) for d, p in zip(ds, ps, strict=True)]
        out[op] = {"direct_p50_ms": round(statistics.median(pct(d, 0.5) for d in ds), 3),
                   "direct_p95_ms": round(statistics.median(pct(d, 0.95) for d in ds), 3),
                   "proxy_p50_ms": round(statistics.median(pct(p, 0.5) for p in ps), 3),
                   "proxy_p95_ms": round(statistics.median(pct(p, 0.95) for p in ps), 3),
                   "added_p50_ms": round(statistics.median(added), 3),
                   "added_p50_ms_per_round": [round(a, 3) for a in added]}  # fmt: skip
    out["cold_start"] = await cold_through_proxy(python, cold_runs, work, spares=0)
    out["cold_start_from_spare"] = await cold_through_proxy(python, cold_runs, work, spares=1)
    out["cold_start_phases"] = await cold_phases(python, cold_runs, work)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def batch_figures(runs: int, work: Path) -> dict:
    import loam

    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOAM_", "SPARK_"))}
    proc = subprocess.Popen([sys.executable, "-m", "loam_gateway.dev", "--port", str(port), "--data", str(work / "dev"),
                             "--spark-port", "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=env)  # fmt: skip
    try:
        for line in proc.stdout:
            if "ready on" in line:
                break
        figures = []
        async with loam.Client(f"http://127.0.0.1:{port}") as c:
            for _ in range(runs):
                t0 = time.time_ns()
                run = await c.submit_spark(b"print('first')", entrypoint="first.py")
                async for line in c.follow_engine_run(run.id):
                    if line.stream == "stdout":
                        figures.append((line.at_ns - t0) / 1e6)
                        break
                await c.wait_engine_run(run.id)
        return {"submit_to_first_line_ms": [round(x, 1) for x in figures],
                "median_ms": round(statistics.median(figures), 1)}  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(20)


async def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=300)
    p.add_argument("--rounds", type=int, default=3, help="direct/proxy pairs of client runs")
    p.add_argument("--cold", type=int, default=5)
    p.add_argument("--batches", type=int, default=5)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "spark_bench.json")
    p.add_argument("--uvloop", action="store_true", help="run the proxy on uvloop, as `loam dev` does")
    args = p.parse_args()
    python = find_spark_python()
    if python is None:
        print("no Spark environment: run `make engines-spark`", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        report = {
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "loop": type(asyncio.get_running_loop()).__module__.split(".")[0],
            "commit": _commit(),
            "machine": {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "load_avg": os.getloadavg(),
            },
            "proxy": await proxy_figures(python, args.calls, args.rounds, args.cold, work),
            "batch": await batch_figures(args.batches, work),
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    px, b = report["proxy"], report["batch"]
    print(f"{'figure':58} {'value':>10} {'target':>8}")
    for op in ("conf_get", "range_count"):
        f = px[op]
        print(f"{'proxy added p50, ' + op + ' (' + str(f['direct_p50_ms']) + ' -> ' + str(f['proxy_p50_ms']) + ' ms)':58} "
              f"{f['added_p50_ms']:>8} ms {'<= 1 ms':>8}")  # fmt: skip
    for name in ("Config", "ExecutePlan"):
        raw = px[f"raw_{name}"]
        print(f"{'raw ' + name + ' added p50: the proxy / a bare grpc.aio relay':58} {raw['proxy_added_p50_ms']:>5} / "
              f"{raw['bare_relay_added_p50_ms']} ms {'<= 1 ms':>8}")  # fmt: skip
        print(f"{'CPU per relayed ' + name + ': the proxy / a bare grpc.aio relay':58} "
              f"{raw['proxy_cpu_us_per_call']:>5} / {raw['bare_relay_cpu_us_per_call']} us")  # fmt: skip
    print(f"{'cold start through the proxy to the first answer, no spare':58} {px['cold_start']['median_ms']:>8} ms "
          f"{'<= 150':>8}")  # fmt: skip
    print(f"{'cold start through the proxy, from the warm spare':58} {px['cold_start_from_spare']['median_ms']:>8} ms "
          f"{'<= 150':>8}")  # fmt: skip
    print("cold start phases without the proxy (median ms): "
          + ", ".join(f"{k} {v}" for k, v in px["cold_start_phases"].items()))  # fmt: skip
    print(f"{'SparkBatch submit to first line (median)':58} {b['median_ms']:>8} ms {'<= 1000':>8}")
    print(
        f"load average {report['machine']['load_avg']} at the start, {os.getloadavg()} at the end; "
        f"JSON in {args.out}"
    )
    return 0


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        )
        return out.stdout.strip()
    except OSError:
        return ""


if __name__ == "__main__":
    if "--uvloop" in sys.argv:
        import uvloop

        sys.exit(asyncio.run(main(), loop_factory=uvloop.new_event_loop))
    sys.exit(asyncio.run(main()))
