"""Loam Jobs next to the systems it replaces, in one run on one machine.

    make bench-anchors                                  # = .venv/bin/python bench/harness.py
    .venv/bin/python bench/harness.py [--jobs 20000] [--runs 3] [--no-million]
    .venv/bin/python bench/harness.py --smoke           # Loam only, a few hundred jobs, < 30 s

Installs what is missing (apt: redis-server, rabbitmq-server, postgresql, nodejs; pip:
bench/requirements.txt into this interpreter; npm: bench/node, i.e. bullmq 6.7 with ioredis
and pg), starts every system on free ports in throwaway directories, runs the workloads
through one driver process per system and round (bench/drivers/), stops everything, and
writes bench/results/latest.{json,md,png}.

Systems (name: client and worker → store):
  loam                  Python SDK, loam.Worker (async, concurrency 50) → `loam dev`
  loam-celery           Celery, broker loam:// (loam-celery), no result backend
  loam-celery-results   the same with the loam:// result backend
  loam-bullmq           BullMQ 6.7 through @loam/bullmq (concurrency 50)
  celery-redis          Celery on redis-server, no result backend
  celery-redis-results  the same with the Redis result backend
  celery-rabbitmq       Celery on rabbitmq-server (pyamqp), no result backend
  bullmq-redis          BullMQ 6.7 on redis-server (concurrency 50)
  bullmq-postgres       BullMQ 6.7 on its built-in Postgres backend (concurrency 50)
  bullmq-redis-aof      BullMQ 6.7 on Redis as BullMQ's production guide sets it: appendonly yes,
                        appendfsync everysec, maxmemory-policy noeviction
  celery-redis-results-aof  Celery + Redis results on that Redis
  loam-durable          Python SDK → `loam dev --durable` (an fsync before each acknowledgement)
  bullmq-redis-always   BullMQ 6.7 on Redis with appendfsync always (an fsync per write), the
                        anchor for loam-durable

Rounds are interleaved (round 1 of every system, then round 2, ...), so the machine's
load drifts over all systems alike; every figure is the median of the rounds, with min
and max. The adapters (loam-celery, loam-bullmq) are probed first with a tiny round; a
probe that fails marks the row pending with the reason, and the rest runs on.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import glob
import importlib.metadata as md
import json
import os
import platform
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
DRIVERS = BENCH / "drivers"
NODE_DIR = BENCH / "node"
ADAPTER_BULLMQ = ROOT / "adapters" / "bullmq"
PY = sys.executable
sys.path.insert(0, str(DRIVERS))
import procstat  # noqa: E402  (bench/drivers/procstat.py, found through the path above)

FIGURES = ["enqueue_per_s", "bulk_enqueue_per_s", "drain_per_s", "latency_p50_ms", "latency_p99_ms"]
RATES = {"enqueue_per_s", "bulk_enqueue_per_s", "drain_per_s"}
LABELS = {
    "enqueue_per_s": "enqueue 1-by-1 (jobs/s)",
    "bulk_enqueue_per_s": "bulk enqueue (jobs/s)",
    "drain_per_s": "drain (jobs/s)",
    "latency_p50_ms": "enqueue→start p50 (ms)",
    "latency_p99_ms": "p99 (ms)",
}
EXIT_NO_LOAM = 3  # `loam dev` did not start (the smoke test skips on it)


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def out_of(cmd: list[str], **kw: Any) -> str:
    try:
        return subprocess.run(
            cmd, capture_output=True, text=True, timeout=60, **kw, check=False
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# -- installing -----------------------------------------------------------------------------------
def pg_bin() -> Path | None:
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name))
    return Path(dirs[-1]) if dirs and Path(dirs[-1], "initdb").exists() else None


RABBIT_BIN = Path("/usr/lib/rabbitmq/bin")

APT = {  # package → is it there
    "redis-server": lambda: shutil.which("redis-server") is not None,
    "rabbitmq-server": lambda: (RABBIT_BIN / "rabbitmq-server").exists(),
    "postgresql": lambda: pg_bin() is not None,
    "nodejs": lambda: shutil.which("node") is not None,
    "npm": lambda: shutil.which("npm") is not None,
}


def run_logged(cmd: list[str], what: str, cwd: Path | None = None, env: dict[str, str] | None = None,
               timeout: float = 1800) -> bool:  # fmt: skip
    log(f"{what}: {shlex.join(cmd)}")
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    if p.returncode != 0:
        log(f"{what} failed ({p.returncode}): {(p.stdout + p.stderr)[-1500:]}")
    return p.returncode == 0


def install(need: set[str], notes: dict[str, str]) -> None:
    missing = [pkg for pkg, there in APT.items() if pkg in need and not there()]
    if missing:
        if os.geteuid() != 0 or not shutil.which("apt-get"):
            notes["apt"] = f"not root or no apt-get: {', '.join(missing)} not installed"
            log(notes["apt"])
        else:
            env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
            run_logged(["apt-get", "update", "-qq"], "apt-get update", env=env)
            run_logged(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
                       "apt-get install", env=env)  # fmt: skip
    # pip: Celery with its Redis client (py-amqp comes with kombu), matplotlib for the chart
    probe = "import celery, kombu, redis, amqp, matplotlib"
    if subprocess.run([PY, "-c", probe], capture_output=True, check=False).returncode != 0:
        run_logged([PY, "-m", "pip", "install", "-q", "-r", str(BENCH / "requirements.txt")], "pip install")
    # npm: BullMQ 6.7 and its Redis and Postgres clients, in bench/node
    if shutil.which("npm") and not (NODE_DIR / "node_modules" / "bullmq").exists():
        lock = (NODE_DIR / "package-lock.json").exists()
        run_logged(
            ["npm", "ci" if lock else "install", "--no-audit", "--no-fund"], "npm (bench/node)", cwd=NODE_DIR
        )
    # @loam/bullmq's own dependencies (what `make test-bullmq` installs)
    if ("loam-bullmq" in need and shutil.which("npm") and (ADAPTER_BULLMQ / "package-lock.json").exists()
            and not (ADAPTER_BULLMQ / "node_modules" / ".bin" / "tsx").exists()):  # fmt: skip
        run_logged(["npm", "ci", "--no-audit", "--no-fund"], "npm ci (adapters/bullmq)", cwd=ADAPTER_BULLMQ)


# -- services -------------------------------------------------------------------------------------
@dataclass
class Service:
    name: str
    url: str
    command: str
    version: str = ""
    stop: Callable[[], None] = lambda: None
    pids: list[int] = field(default_factory=list)  # process trees that do its work (for settle)
    extra: dict[str, Any] = field(default_factory=dict)


def _pump(proc: subprocess.Popen, path: Path, lines: list[str]) -> None:
    with open(path, "a", errors="replace") as f:
        for line in proc.stdout:  # type: ignore[union-attr]
            lines.append(line)
            f.write(line)
            f.flush()


def _stop_proc(proc: subprocess.Popen, timeout: float = 20) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def start_loam(work: Path, label: str = "loam", durable: bool = False) -> Service:
    port = free_port()
    data = work / f"{label}-data"
    exe = Path(PY).with_name("loam")
    cmd = [str(exe), "dev"] if exe.exists() else [PY, "-m", "loam_gateway.dev"]
    cmd += ["--port", str(port), "--data", str(data)] + (["--durable"] if durable else [])
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOAM_")}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)  # fmt: skip
    lines: list[str] = []
    threading.Thread(target=_pump, args=(proc, work / f"{label}.log", lines), daemon=True).start()
    deadline = time.monotonic() + 60
    while not any("ready" in line for line in lines):
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop_proc(proc)
            raise RuntimeError(f"loam dev did not get ready: {''.join(lines)[-1500:]}")
        time.sleep(0.05)
    return Service(label, f"http://127.0.0.1:{port}", shlex.join(cmd), stop=lambda: _stop_proc(proc),
                   pids=[proc.pid], extra={"port": port, "data": data})  # fmt: skip


#: Redis as BullMQ's production guide configures it (and `appendfsync always` for the
#: anchor of `loam dev --durable`, which fsyncs before every acknowledgement)
REDIS_PERSISTENCE = {
    "redis": ["--appendonly", "no"],
    "redis-aof": ["--appendonly", "yes", "--appendfsync", "everysec", "--maxmemory-policy", "noeviction"],
    "redis-always": ["--appendonly", "yes", "--appendfsync", "always", "--maxmemory-policy", "noeviction"],
}


def start_redis(work: Path, label: str = "redis") -> Service:
    port = free_port()
    d = work / label
    d.mkdir(exist_ok=True)
    cmd = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", *REDIS_PERSISTENCE[label],
           "--dir", str(d), "--daemonize", "no"]  # fmt: skip
    with open(work / f"{label}.log", "wb") as logf:
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 20
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop_proc(proc)
            raise RuntimeError(f"redis-server did not start: {(work / f'{label}.log').read_text()[-800:]}")
        time.sleep(0.05)
    version = out_of(["redis-server", "--version"]).split(" v=")[-1].split(" ")[0]
    return Service(label, f"redis://127.0.0.1:{port}", shlex.join(cmd), version, lambda: _stop_proc(proc),
                   [proc.pid])  # fmt: skip


def start_rabbitmq(work: Path) -> Service:
    """A throwaway node: its own name, ports, epmd port, mnesia and log dirs and cookie."""
    d = work / "rabbitmq"
    d.mkdir()
    port, dist, epmd = free_port(), free_port(), free_port()
    node = f"loambench{os.getpid()}@localhost"
    (d / "enabled_plugins").write_text("[].\n")
    (d / "rabbitmq.conf").write_text("loopback_users = none\n")
    env = dict(os.environ, HOME=str(d), RABBITMQ_NODENAME=node, RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
               RABBITMQ_NODE_PORT=str(port), RABBITMQ_DIST_PORT=str(dist), ERL_EPMD_PORT=str(epmd),
               RABBITMQ_MNESIA_BASE=str(d / "mnesia"), RABBITMQ_LOG_BASE=str(d / "log"),
               RABBITMQ_ENABLED_PLUGINS_FILE=str(d / "enabled_plugins"), RABBITMQ_CONFIG_FILE=str(d / "rabbitmq"),
               RABBITMQ_PID_FILE=str(d / "pid"))  # fmt: skip
    cmd = [str(RABBIT_BIN / "rabbitmq-server")]
    proc = subprocess.Popen(cmd, cwd=d, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # fmt: skip
    lines: list[str] = []
    threading.Thread(target=_pump, args=(proc, work / "rabbitmq.log", lines), daemon=True).start()

    def stop() -> None:
        subprocess.run([str(RABBIT_BIN / "rabbitmqctl"), "-q", "-n", node, "stop"], env=env, capture_output=True,
                       timeout=60, check=False)  # fmt: skip
        _stop_proc(proc, 30)
        epmd_bin = shutil.which("epmd") or "epmd"
        subprocess.run(
            [epmd_bin, "-port", str(epmd), "-kill"], env=env, capture_output=True, timeout=20, check=False
        )

    deadline = time.monotonic() + 90
    while not any("completed with" in line for line in lines):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop()
            raise RuntimeError(f"rabbitmq-server did not start in 90 s: {''.join(lines)[-1500:]}")
        time.sleep(0.1)
    version = next((ln.split("RabbitMQ", 1)[1].split()[0] for ln in lines if "RabbitMQ " in ln
                    and any(c.isdigit() for c in ln.split("RabbitMQ", 1)[1][:8])), "")  # fmt: skip
    version = version or out_of(["dpkg-query", "-W", "-f", "${Version}", "rabbitmq-server"])
    erlang = out_of(["dpkg-query", "-W", "-f", "${Version}", "erlang-base"])
    return Service("rabbitmq", f"pyamqp://guest:guest@127.0.0.1:{port}//",
                   f"RABBITMQ_NODENAME={node} RABBITMQ_NODE_PORT={port} ERL_EPMD_PORT={epmd} "
                   f"RABBITMQ_MNESIA_BASE=... {cmd[0]}", f"{version} (Erlang {erlang})", stop, [proc.pid])  # fmt: skip


def start_postgres() -> Service:
    """initdb + pg_ctl on a free port, as the postgres user when we are root."""
    bindir = pg_bin()
    if bindir is None:
        raise RuntimeError("no PostgreSQL server binaries (apt-get install postgresql)")
    d = Path(tempfile.mkdtemp(prefix="loam-bench-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(d, "postgres", "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    port = free_port()
    data = d / "data"
    opts = (f"-p {port} -k {d} -c listen_addresses=127.0.0.1 -c max_connections=200 "
            f"-c synchronous_commit=off")  # fmt: skip
    subprocess.run([*as_user, str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E",
                    "UTF8"], check=True, capture_output=True, timeout=120)  # fmt: skip
    start = [*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(d / "server.log"), "-w",
             "start"]  # fmt: skip
    p = subprocess.run(start, capture_output=True, text=True, timeout=120, check=False)
    if p.returncode != 0:
        raise RuntimeError(
            f"pg_ctl start failed: {p.stdout}{p.stderr}{(d / 'server.log').read_text()[-800:]}"
        )

    def stop() -> None:
        subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"],
                       capture_output=True, timeout=120, check=False)  # fmt: skip
        shutil.rmtree(d, ignore_errors=True)

    psql = [str(bindir / "psql"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-qAt"]
    subprocess.run([*psql, "-c", "create database bench"], check=True, capture_output=True, timeout=60)
    version = out_of([*psql, "-c", "show server_version"]).split()[0]
    postmaster = int((data / "postmaster.pid").read_text().split()[0])
    return Service("postgres", f"postgres://postgres@127.0.0.1:{port}/bench", shlex.join(start), version, stop,
                   [postmaster])  # fmt: skip


# -- systems --------------------------------------------------------------------------------------
@dataclass
class System:
    name: str
    family: str  # loam | celery | bullmq
    needs: tuple[str, ...]  # services
    client: str  # what drives it, for the table
    adapter: bool = False  # probed first; pending if the probe fails
    growth: bool = False


SYSTEMS = [
    System("loam", "loam", ("loam",), "Python SDK · loam.Worker, async, concurrency 50", growth=True),
    System("loam-celery", "celery", ("loam",), "Celery · loam:// broker · prefork", adapter=True),
    System(
        "loam-celery-results", "celery", ("loam",), "Celery · loam:// broker + loam:// results", adapter=True
    ),
    System("loam-bullmq", "bullmq", ("loam",), "BullMQ 6.7 · @loam/bullmq · concurrency 50", adapter=True),
    System("celery-redis", "celery", ("redis",), "Celery · Redis broker · prefork"),
    System("celery-redis-results", "celery", ("redis",), "Celery · Redis broker + Redis results"),
    System("celery-rabbitmq", "celery", ("rabbitmq",), "Celery · RabbitMQ (pyamqp) · prefork"),
    System("bullmq-redis", "bullmq", ("redis",), "BullMQ 6.7 · Redis · concurrency 50", growth=True),
    System(
        "bullmq-postgres",
        "bullmq",
        ("postgres",),
        "BullMQ 6.7 · Postgres backend · concurrency 50",
        growth=True,
    ),
    System("bullmq-redis-aof", "bullmq", ("redis-aof",), "BullMQ 6.7 · Redis AOF everysec · concurrency 50"),
    System(
        "celery-redis-results-aof", "celery", ("redis-aof",), "Celery · Redis AOF everysec broker + results"
    ),
    System("loam-durable", "loam", ("loam-durable",), "Python SDK · loam.Worker → loam dev --durable"),
    System(
        "bullmq-redis-always", "bullmq", ("redis-always",), "BullMQ 6.7 · Redis AOF always · concurrency 50"
    ),
]
BY_NAME = {s.name: s for s in SYSTEMS}
# Within a round, each Loam side runs next to its anchors, so they share the same minutes of load
RUN_ORDER = ["loam", "bullmq-redis", "bullmq-redis-aof", "bullmq-postgres", "loam-bullmq", "loam-celery",
             "celery-redis", "celery-rabbitmq", "loam-celery-results", "celery-redis-results",
             "celery-redis-results-aof", "loam-durable", "bullmq-redis-always"]  # fmt: skip
# (Loam side, anchor) pairs for the ratio table: like for like first, then the native SDK
PAIRS = [
    ("loam-celery", "celery-redis"),
    ("loam-celery", "celery-rabbitmq"),
    ("loam-celery-results", "celery-redis-results"),
    ("loam-celery-results", "celery-redis-results-aof"),
    ("loam-bullmq", "bullmq-redis"),
    ("loam-bullmq", "bullmq-redis-aof"),
    ("loam-bullmq", "bullmq-postgres"),
    ("loam", "bullmq-redis"),
    ("loam", "bullmq-redis-aof"),
    ("loam-durable", "bullmq-redis-always"),
    ("loam-durable", "bullmq-redis-aof"),
    ("loam", "bullmq-postgres"),
    ("loam", "celery-redis"),
    ("loam", "celery-rabbitmq"),
]


def driver_cmd(system: System, svc: dict[str, Service], args: argparse.Namespace, mode: str = "run",
               jobs: int | None = None, lat_jobs: int | None = None) -> tuple[list[str], dict[str, str]]:  # fmt: skip
    jobs = args.jobs if jobs is None else jobs
    lat_jobs = args.latency_jobs if lat_jobs is None else lat_jobs
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOAM_")}
    common = ["--timeout", str(args.timeout)]
    run_args = [
        "--jobs",
        str(jobs),
        "--latency-jobs",
        str(lat_jobs),
        "--latency-rate",
        str(args.latency_rate),
    ]
    growth_args = ["--samples", str(args.growth_samples), "--repeats", str(args.runs)]
    if system.family == "loam":
        loam_svc = svc[system.needs[0]]
        cmd = [PY, str(DRIVERS / "loam_driver.py"), "--url", loam_svc.url, *common, mode]
        if mode == "run":
            return cmd + run_args, env
        pids = ",".join(map(str, loam_svc.pids))
        return cmd + ["--levels", args.growth_levels, *growth_args, "--settle-pids", pids], env
    if system.family == "celery":
        backend = ""
        if system.name.startswith("loam-celery"):
            broker = svc["loam"].url.replace("http://", "loam://") + "/bench"
            backend = broker if system.name.endswith("results") else ""
        elif system.name.startswith("celery-redis"):
            redis = svc[system.needs[0]]
            broker = redis.url + "/0"
            backend = redis.url + "/1" if "results" in system.name else ""
        else:
            broker = svc["rabbitmq"].url
        env.update(BENCH_BROKER=broker, BENCH_BACKEND=backend)
        return [PY, str(DRIVERS / "celery_driver.py"), *common, *run_args], env
    # bullmq
    script = str(DRIVERS / "bullmq_driver.mjs")
    if system.name == "loam-bullmq":
        cmd = [str(ADAPTER_BULLMQ / "node_modules" / ".bin" / "tsx"), script, mode, "--backend", "loam",
               "--lib", str(ADAPTER_BULLMQ / "package.json"), "--adapter", str(ADAPTER_BULLMQ / "src" / "index.ts"),
               "--loam-url", svc["loam"].url]  # fmt: skip
    elif system.name.startswith("bullmq-redis"):
        cmd = ["node", script, mode, "--backend", "redis", "--lib", str(NODE_DIR / "package.json"),
               "--redis-url", svc[system.needs[0]].url]  # fmt: skip
    else:
        cmd = ["node", script, mode, "--backend", "postgres", "--lib", str(NODE_DIR / "package.json"),
               "--pg-url", svc["postgres"].url]  # fmt: skip
    cmd += common
    if mode == "run":
        return cmd + run_args, env
    store = svc[system.needs[0]]
    pids = ",".join(map(str, store.pids))
    return cmd + ["--levels", args.anchor_growth_levels, *growth_args, "--settle-pids", pids], env


class DriverError(RuntimeError):
    pass


def run_driver(cmd: list[str], env: dict[str, str], timeout: float, live: bool = False) -> dict[str, Any]:
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True,
                                stderr=None if live else err, start_new_session=True)  # fmt: skip
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)  # the Celery driver stops its worker on SIGTERM
            try:
                proc.communicate(timeout=40)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
            raise DriverError(f"timed out after {timeout:.0f} s") from None
        err.seek(0)
        errors = err.read()
    lines = [ln for ln in out.splitlines() if ln.strip()]
    if proc.returncode != 0 or not lines:
        tail = (errors.strip() or out.strip())[-1200:]
        raise DriverError(f"exit {proc.returncode}: {tail}")
    return json.loads(lines[-1])


# -- aggregation and reports ----------------------------------------------------------------------
def stats(values: list[float]) -> dict[str, Any]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


def fmt(v: float | None, rate: bool) -> str:
    if v is None:
        return "–"
    if rate:
        return f"{v:,.0f}"
    return f"{v:.2f}" if v < 10 else f"{v:.1f}" if v < 100 else f"{v:.0f}"


def cell(st: dict[str, Any] | None, rate: bool) -> str:
    if not st:
        return "–"
    return f"**{fmt(st['median'], rate)}** ({fmt(st['min'], rate)}–{fmt(st['max'], rate)})"


def ratio_rows(systems: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for side, anchor in PAIRS:
        a, b = systems.get(side, {}), systems.get(anchor, {})
        if a.get("status") != "ok" or b.get("status") != "ok":
            continue
        row: dict[str, Any] = {"loam": side, "anchor": anchor}
        for f in FIGURES:
            x, y = a.get(f), b.get(f)
            row[f] = round(x / y, 3) if x is not None and y else None
        rows.append(row)
    return rows


def memory_cell(memory: dict[str, Any] | None) -> str:
    """The store's processes' resident memory at a growth level: PSS (shared pages split
    among the processes sharing them) and, in brackets, the RSS sum."""
    if not memory:
        return "–"
    return f"{memory['pss_mb']:,.0f} ({memory['rss_mb']:,.0f})"


def markdown(report: dict[str, Any]) -> str:
    m, s = report["machine"], report["settings"]
    out = [f"# Loam Jobs next to Celery and BullMQ ({report['date'][:16].replace('T', ' ')} UTC)", ""]
    out.append(f"{m['cpus']} vCPUs ({m['cpu']}), {m['memory_gb']} GB, Linux {m['kernel']}, Python "
               f"{m['python']}. The machine is shared: load average {m['load_avg_start'][0]} at the start, "
               f"{', '.join(str(x[0]) for x in m['load_avg_rounds'])} at the start of each round, "
               f"{m['load_avg_end'][0]} at the end; absolute rates drift with it, the ratios of one run "
               f"hold better.")  # fmt: skip
    out += ["", (f"{s['jobs']:,} no-op jobs per workload; latency over {s['latency_jobs']} jobs sent one at a "
                 f"time at {s['latency_rate']:g}/s into an idle worker; {s['runs']} interleaved rounds: "
                 "**median** (min–max). Before each driver run the harness waits until every service's "
                 "processes are idle (under 5 % of a core for a second), so no system pays for another's "
                 "leftover background work."), ""]  # fmt: skip
    waits = report.get("idle_waits") or []
    if waits:
        longest = max(waits, key=lambda w: w["waited_s"])
        busy = ", ".join(f"{n} {c:.1f} s" for n, c in longest["cpu_s"].items() if c >= 0.1) or "none"
        out += [(f"Idle waits before the driver runs: median {statistics.median(w['waited_s'] for w in waits):.0f} s, "
                 f"longest {longest['waited_s']:.0f} s (before {longest['before']}, round {longest['round']}; "
                 f"CPU used meanwhile: {busy})."), ""]  # fmt: skip
    out.append("| system | client · worker | " + " | ".join(LABELS[f] for f in FIGURES) + " |")
    out.append("|---|---|" + "---:|" * len(FIGURES))
    for name, row in report["systems"].items():
        if row.get("status") != "ok":
            out.append(f"| {name} | {BY_NAME[name].client} | {row.get('status')}: {row.get('reason', '')} "
                       + "| " * (len(FIGURES) - 1) + "|")  # fmt: skip
            continue
        cells = [cell(row["stats"].get(f), f in RATES) for f in FIGURES]
        if row.get("bulk_note"):
            cells[1] = row["bulk_note"]
        out.append(f"| {name} | {BY_NAME[name].client} | " + " | ".join(cells) + " |")
    out += ["", "## Loam / anchor, same run", "",
            ("Ratios of the medians. Rates: above 1 means Loam is faster. Latencies: below 1 means Loam "
             "is faster."), ""]  # fmt: skip
    out.append("| Loam side | anchor | " + " | ".join(LABELS[f].split(" (")[0] for f in FIGURES) + " |")
    out.append("|---|---|" + "---:|" * len(FIGURES))
    for r in report["ratios"]:
        out.append(f"| {r['loam']} | {r['anchor']} | "
                   + " | ".join("–" if r[f] is None else f"{r[f]:.2f}×" for f in FIGURES) + " |")  # fmt: skip
    if report.get("growth"):
        out += ["", "## Growth: per-call latency by backlog", "",
                ("One queue grown to each level (bulk), then left until the store's processes are idle "
                 "(\"idle after fill\": how long the background work the fill left behind took; the memory is "
                 "the store's process tree's, read from /proc after the level's calls); then, per round: "
                 f"{s['growth_samples']} single enqueues, then {s['growth_samples']} lease(1) + complete, "
                 "each call timed alone (p50 per round; median (min–max) of the rounds). BullMQ's lease is "
                 "`worker.getNextJob` (manual processing) and its complete `job.moveToCompleted`."), ""]  # fmt: skip
        out.append("| system | waiting | enqueue p50 (ms) | enqueue p99 (ms) | lease p50 (ms) | lease p99 (ms) "
                   "| complete p50 (ms) | fill (jobs/s) | idle after fill (s) | server memory, PSS (RSS) MB |")  # fmt: skip
        out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name, g in report["growth"].items():
            if "error" in g:
                out.append(f"| {name} | {g['error']} | | | | | | | | |")
                continue
            for level, lv in g["levels"].items():
                c = [
                    cell(lv[k], False)
                    for k in (
                        "enqueue_p50_ms",
                        "enqueue_p99_ms",
                        "lease_p50_ms",
                        "lease_p99_ms",
                        "complete_p50_ms",
                    )
                ]
                out.append(
                    f"| {name} | {int(level):,} | "
                    + " | ".join(c)
                    + f" | {lv['fill_per_s']:,.0f} | {lv.get('settle_s') or 0:.0f} | {memory_cell(lv.get('memory'))} |"
                )
        flat = [f"{n}: enqueue ×{g['flatness']['enqueue_p50']:.2f}, lease ×{g['flatness']['lease_p50']:.2f}"
                for n, g in report["growth"].items() if g.get("flatness")]  # fmt: skip
        if flat:
            out += ["", "Top level / 1,000 level (p50): " + "; ".join(flat) + "."]
    out += ["", "## Versions", ""]
    out += [f"- {k}: {v}" for k, v in report["versions"].items()]
    out += ["", "## Commands", "", "```sh", report["commands"]["harness"]]
    out += [f"# {k}: {v}" for k, v in report["commands"]["services"].items()]
    out += [f"# {k}: {v}" for k, v in report["commands"]["systems"].items()]
    out += ["```", ""]
    if report.get("notes"):
        out += ["## Notes", ""] + [f"- {k}: {v}" for k, v in report["notes"].items()] + [""]
    return "\n".join(out)


COLORS = {
    "loam": "#1b7a55", "loam-celery": "#3fa37a", "loam-celery-results": "#7cc6a2", "loam-bullmq": "#0f4d35",
    "celery-redis": "#d4652a", "celery-redis-results": "#f0a070", "celery-rabbitmq": "#a33b1c",
    "bullmq-redis": "#3b5ba5", "bullmq-postgres": "#8a5cc2", "bullmq-redis-aof": "#6f8cd0",
    "celery-redis-results-aof": "#f5c09a", "loam-durable": "#5fb38c", "bullmq-redis-always": "#9db1e3",
}  # fmt: skip


def chart(report: dict[str, Any], path: Path) -> bool:
    """2×2: rates, latencies, Loam/anchor ratios, per-call latency by backlog."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = {n: r for n, r in report["systems"].items() if r.get("status") == "ok"}
    names = list(rows)
    fig, axes = plt.subplots(2, 2, figsize=(15, 10.5))

    def bars(ax: Any, figs: list[str], title: str) -> None:
        width = 0.8 / len(figs)
        for j, f in enumerate(figs):
            xs, ys, lo, hi, cs = [], [], [], [], []
            for i, n in enumerate(names):
                st = rows[n]["stats"].get(f)
                if not st:
                    continue
                xs.append(i + (j - (len(figs) - 1) / 2) * width)
                ys.append(st["median"])
                lo.append(st["median"] - st["min"])
                hi.append(st["max"] - st["median"])
                cs.append(COLORS.get(n, "grey"))
            ax.bar(xs, ys, width, yerr=[lo, hi], color=cs, hatch=["", "//", ".."][j], edgecolor="white",
                   capsize=2, label=LABELS[f].split(" (")[0])  # fmt: skip
        ax.set_xticks(range(len(names)), names, rotation=35, ha="right", fontsize=8)
        ax.set_yscale("log")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7)
        ax.grid(axis="y", which="both", alpha=0.3)

    bars(
        axes[0][0],
        ["enqueue_per_s", "bulk_enqueue_per_s", "drain_per_s"],
        "rates, jobs/s (log): higher is better",
    )
    bars(axes[0][1], ["latency_p50_ms", "latency_p99_ms"], "enqueue→start, ms (log): lower is better")

    ax = axes[1][0]
    ratios = report["ratios"]
    shown = ["enqueue_per_s", "bulk_enqueue_per_s", "drain_per_s", "latency_p50_ms"]
    height = 0.8 / len(shown)
    for j, f in enumerate(shown):
        ys, vs = [], []
        for i, r in enumerate(ratios):
            if r.get(f):
                ys.append(i + (j - (len(shown) - 1) / 2) * height)
                # latency inverted, so that right of 1 always means Loam ahead
                vs.append(1 / r[f] if f not in RATES else r[f])
        ax.barh(ys, vs, height, label=LABELS[f].split(" (")[0] + (" (inverted)" if f not in RATES else ""),
                color=["#1b7a55", "#7cc6a2", "#3b5ba5", "#d4652a"][j])  # fmt: skip
    ax.axvline(1, color="black", lw=1)
    ax.set_xscale("log")
    ax.set_yticks(range(len(ratios)), [f"{r['loam']} / {r['anchor']}" for r in ratios], fontsize=8)
    ax.invert_yaxis()
    ax.set_title("Loam / anchor, same run (log): right of 1 = Loam ahead", fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(axis="x", which="both", alpha=0.3)

    ax = axes[1][1]
    growth = report.get("growth") or {}
    for n, g in growth.items():
        if "levels" not in g:
            continue
        lv = sorted(g["levels"], key=int)
        for key, style in (("enqueue_p50_ms", "-o"), ("lease_p50_ms", "--s")):
            ax.plot([int(x) for x in lv], [g["levels"][x][key]["median"] for x in lv], style,
                    color=COLORS.get(n, "grey"), label=f"{n} {key.split('_')[0]}", markersize=4)  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("jobs waiting")
    ax.set_title("per-call p50 by backlog, ms (log): flat is the point", fontsize=10)
    if growth:
        ax.legend(fontsize=7)
    ax.grid(which="both", alpha=0.3)

    m, st = report["machine"], report["settings"]
    fig.suptitle(f"Loam Jobs and the anchors: {st['jobs']:,} jobs, median of {st['runs']} interleaved rounds "
                 f"(error bars: min–max); {m['cpus']} vCPUs, load average {m['load_avg_start'][0]} → "
                 f"{m['load_avg_end'][0]}; {report['date'][:10]}", fontsize=11)  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


# -- versions and machine -------------------------------------------------------------------------
def pkg_version(name: str) -> str:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return "not installed"


def node_pkg(dirpath: Path, name: str) -> str:
    try:
        return json.loads((dirpath / "node_modules" / name / "package.json").read_text())["version"]
    except (OSError, ValueError, KeyError):
        return "not installed"


def git_state() -> str:
    commit = out_of(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"])
    dirty = out_of(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"])
    return f"{commit}{' + uncommitted changes' if dirty else ''}"


def versions(services: dict[str, Service], git_start: str) -> dict[str, str]:
    git_end = git_state()
    moved = "" if git_end == git_start else f"; {git_end} by the end of the run"
    v = {
        "loam": f"{pkg_version('loam')} (git {git_start} at the start{moved})",
        "python": procstat.python_build(),
        "celery": pkg_version("celery"),
        "kombu": pkg_version("kombu"),
        "redis-py": pkg_version("redis"),
        "py-amqp": pkg_version("amqp"),
        "loam-celery": pkg_version("loam-celery"),
        "node": out_of(["node", "--version"]) or "not installed",
        "bullmq": node_pkg(NODE_DIR, "bullmq"),
        "ioredis": node_pkg(NODE_DIR, "ioredis"),
        "pg (node)": node_pkg(NODE_DIR, "pg"),
    }
    with contextlib.suppress(OSError, ValueError):
        v["@loam/bullmq"] = json.loads((ADAPTER_BULLMQ / "package.json").read_text())["version"]
        v["bullmq (under @loam/bullmq)"] = node_pkg(ADAPTER_BULLMQ, "bullmq")
    for name in ("redis", "redis-aof", "redis-always", "rabbitmq", "postgres"):
        if name in services:
            v[f"{name} server"] = services[name].version
    return v


def machine() -> dict[str, Any]:
    cpu = ""
    with contextlib.suppress(OSError):
        cpu = next(
            (
                ln.split(":", 1)[1].strip()
                for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")
            ),
            "",
        )
    mem = 0.0
    with contextlib.suppress(OSError, ValueError):
        mem = (
            int(
                next(
                    ln.split()[1]
                    for ln in Path("/proc/meminfo").read_text().splitlines()
                    if ln.startswith("MemTotal")
                )
            )
            / 2**20
        )
    return {"cpus": os.cpu_count(), "cpu": cpu, "memory_gb": round(mem, 1), "kernel": platform.release(),
            "python": procstat.python_build()}  # fmt: skip


# -- main -----------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=20000, help="jobs per enqueue/bulk/drain workload (20000)")
    p.add_argument("--runs", type=int, default=3, help="interleaved rounds; figures are medians (3)")
    p.add_argument("--latency-jobs", type=int, default=500, help="jobs in the latency workload (500)")
    p.add_argument("--latency-rate", type=float, default=50.0, help="their rate, jobs/s (50)")
    p.add_argument("--systems", default=",".join(s.name for s in SYSTEMS), help="comma-separated subset")
    p.add_argument("--growth-levels", default="1000,100000,1000000", help="backlog levels for Loam")
    p.add_argument(
        "--anchor-growth-levels", help="backlog levels for the BullMQ anchors (as --growth-levels)"
    )
    p.add_argument("--growth-samples", type=int, default=200, help="timed calls per level and round (200)")
    p.add_argument("--no-million", action="store_true", help="drop the 1,000,000 level")
    p.add_argument("--no-growth", action="store_true", help="skip the growth workload")
    p.add_argument("--no-install", action="store_true", help="install nothing; skip what is missing")
    p.add_argument("--smoke", action="store_true",
                   help="CI: Loam only, 300 jobs, 1 round, growth at 1,000 only, no installs")  # fmt: skip
    p.add_argument("--out", type=Path, default=BENCH / "results", help="results directory (bench/results)")
    p.add_argument("--timeout", type=float, default=900, help="seconds per driver run (900)")
    p.add_argument("--keep", action="store_true", help="keep the work directory (logs, data)")
    args = p.parse_args(argv)
    if args.smoke:
        args.systems, args.jobs, args.runs, args.no_install = "loam", 300, 1, True
        args.latency_jobs, args.latency_rate, args.growth_samples = 30, 100.0, 20
        args.growth_levels, args.timeout = "1000", 60
    if args.anchor_growth_levels is None:
        args.anchor_growth_levels = args.growth_levels
    if args.no_million:
        args.growth_levels = ",".join(x for x in args.growth_levels.split(",") if int(x) < 1_000_000)
        args.anchor_growth_levels = ",".join(
            x for x in args.anchor_growth_levels.split(",") if int(x) < 1_000_000
        )
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    wanted = [BY_NAME[n.strip()] for n in args.systems.split(",") if n.strip()]
    started = dt.datetime.now(dt.UTC)
    load_start = loadavg()
    git_start = git_state()  # the server and the drivers run the working tree as it is now
    notes: dict[str, str] = {}
    needs = {svc for s in wanted for svc in s.needs}
    if not args.no_install:
        apt = {"redis": "redis-server", "redis-aof": "redis-server", "redis-always": "redis-server",
               "rabbitmq": "rabbitmq-server", "postgres": "postgresql"}  # fmt: skip
        need = {apt[s] for s in needs if s in apt} | {s.name for s in wanted}
        if any(s.family == "bullmq" for s in wanted):
            need |= {"nodejs", "npm"}
        install(need, notes)

    work = Path(tempfile.mkdtemp(prefix="loam-bench-"))
    services: dict[str, Service] = {}
    systems: dict[str, dict[str, Any]] = {}
    down: dict[str, str] = {}

    def stop_all(*_: Any) -> None:
        for name, svc in list(services.items())[::-1]:
            log(f"stopping {name}")
            with contextlib.suppress(Exception):
                svc.stop()
            services.pop(name, None)

    def on_signal(signum: int, _frame: Any) -> None:
        stop_all()
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    starters: dict[str, Callable[[], Service]] = {
        "loam": lambda: start_loam(work),
        "loam-durable": lambda: start_loam(work, "loam-durable", durable=True),
        "redis": lambda: start_redis(work),
        "redis-aof": lambda: start_redis(work, "redis-aof"),
        "redis-always": lambda: start_redis(work, "redis-always"),
        "rabbitmq": lambda: start_rabbitmq(work),
        "postgres": start_postgres,
    }
    commands: dict[str, Any] = {"harness": shlex.join(["python", "bench/harness.py", *(argv or sys.argv[1:])]),
                                "services": {}, "systems": {}}  # fmt: skip
    try:
        for name in ["loam", "loam-durable", "redis", "redis-aof", "redis-always", "rabbitmq", "postgres"]:
            if name not in needs:
                continue
            t0 = time.monotonic()
            try:
                services[name] = starters[name]()
                commands["services"][name] = services[name].command.replace(str(ROOT) + "/", "")
                log(f"{name} up in {time.monotonic() - t0:.1f} s: {services[name].url}")
            except Exception as e:  # noqa: BLE001 - recorded, the others run on
                down[name] = f"{type(e).__name__}: {e}"[:600]
                log(f"{name} did not start: {down[name]}")
        if "loam" in down:
            return EXIT_NO_LOAM
        for s in wanted:
            missing = [n for n in s.needs if n in down]
            if missing:
                systems[s.name] = {
                    "status": "skipped",
                    "reason": f"{missing[0]} did not start: {down[missing[0]]}",
                }
            elif s.family == "bullmq" and not shutil.which("node"):
                systems[s.name] = {"status": "skipped", "reason": "no node"}
            elif s.name == "loam-bullmq" and not (ADAPTER_BULLMQ / "node_modules" / ".bin" / "tsx").exists():
                systems[s.name] = {
                    "status": "pending",
                    "reason": "adapters/bullmq has no node_modules (npm ci)",
                }
            elif (
                s.family == "bullmq"
                and s.name != "loam-bullmq"
                and not (NODE_DIR / "node_modules" / "bullmq").exists()
            ):
                systems[s.name] = {
                    "status": "skipped",
                    "reason": "bench/node has no bullmq (npm ci in bench/node)",
                }
            elif (
                s.family == "celery"
                and subprocess.run([PY, "-c", "import celery"], capture_output=True, check=False).returncode
            ):
                systems[s.name] = {"status": "skipped", "reason": "celery not installed"}
        # adapters still being built: a tiny round first
        for s in wanted:
            if s.adapter and s.name not in systems:
                cmd, env = driver_cmd(s, services, args, jobs=200, lat_jobs=20)
                log(f"probing {s.name}")
                try:
                    run_driver(cmd, env, min(args.timeout, 300))
                except DriverError as e:
                    systems[s.name] = {"status": "pending", "reason": f"probe failed: {e}"[:600]}
                    log(f"{s.name} pending: {e}")
        active = sorted((s for s in wanted if s.name not in systems), key=lambda s: RUN_ORDER.index(s.name))
        raw: dict[str, list[dict[str, Any]]] = {s.name: [] for s in active}
        errors: dict[str, list[str]] = {s.name: [] for s in active}
        load_rounds = []
        settle_waits: list[dict[str, Any]] = []
        for r in range(args.runs):
            load_rounds.append(loadavg())
            log(f"round {r + 1}/{args.runs}, load average {load_rounds[-1]}")
            for s in active:
                cmd, env = driver_cmd(s, services, args)
                if r == 0:
                    extra = {k: env[k] for k in ("BENCH_BROKER", "BENCH_BACKEND") if k in env}
                    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in extra.items())
                    commands["systems"][s.name] = (prefix + " " if prefix else "") + shlex.join(
                        [c.replace(str(ROOT) + "/", "") for c in cmd]
                    )
                # what the previous system left running (a server catching up) must not weigh on this one
                waited, used = procstat.settle_named(
                    {n: svc.pids for n, svc in services.items()}, max_wait=120
                )
                settle_waits.append(
                    {"before": s.name, "round": r + 1, "waited_s": round(waited, 1), "cpu_s": used}
                )
                if waited > 3:
                    busy = ", ".join(f"{n} {c:.1f} s" for n, c in used.items() if c >= 0.1) or "none"
                    log(f"  waited {waited:.0f} s for the services to go idle (CPU used meanwhile: {busy})")
                t0 = time.monotonic()
                try:
                    res = run_driver(cmd, env, args.timeout)
                    raw[s.name].append(res)
                    shown = ", ".join(f"{k} {fmt(res.get(k), k in RATES)}" for k in FIGURES if k in res)
                    log(f"  {s.name} ({time.monotonic() - t0:.0f} s): {shown}")
                except DriverError as e:
                    errors[s.name].append(str(e)[:600])
                    log(f"  {s.name} failed: {e}")
        for s in active:
            runs = raw[s.name]
            row: dict[str, Any] = {"status": "ok" if runs else "failed", "client": s.client, "family": s.family,
                                   "runs_ok": len(runs), "stats": {}}  # fmt: skip
            for f in FIGURES:
                vals = [x[f] for x in runs if x.get(f) is not None]
                row[f] = statistics.median(vals) if vals else None
                if vals:
                    row["stats"][f] = stats(vals)
            if s.family == "celery":
                row["bulk_note"] = "n/a (no bulk publish)"
                hand = [x["enqueue_handoff_per_s"] for x in runs if "enqueue_handoff_per_s" in x]
                if hand:
                    row["stats"]["enqueue_handoff_per_s"] = stats(hand)
                if runs and "worker_command" in runs[0]:
                    row["worker_command"] = runs[0]["worker_command"]
            if errors[s.name]:
                row["errors"] = errors[s.name]
                if not runs:
                    row["reason"] = errors[s.name][0]
            systems[s.name] = row
        systems = {s.name: systems[s.name] for s in wanted}

        growth: dict[str, Any] = {}
        if not args.no_growth:
            for s in wanted:
                if not s.growth or systems[s.name].get("status") != "ok":
                    continue
                gsvc = dict(services)
                if s.name == "loam":  # a fresh server, so the million does not weigh on anything else
                    services["loam-growth"] = start_loam(work, "loam-growth")
                    gsvc["loam"] = services["loam-growth"]
                cmd, env = driver_cmd(s, gsvc, args, mode="growth")
                log(
                    f"growth: {s.name} ({args.growth_levels if s.name == 'loam' else args.anchor_growth_levels})"
                )
                commands["systems"][f"{s.name} growth"] = shlex.join(
                    [c.replace(str(ROOT) + "/", "") for c in cmd]
                )
                try:
                    res = run_driver(cmd, env, args.timeout * 4, live=True)
                    g: dict[str, Any] = {"levels": {}}
                    for level, lv in res["levels"].items():
                        keys = lv["runs"][0].keys()
                        g["levels"][level] = {k: stats([x[k] for x in lv["runs"]]) for k in keys}
                        g["levels"][level]["fill_per_s"] = lv["fill_per_s"]
                        g["levels"][level]["settle_s"] = lv.get("settle_s")
                        g["levels"][level]["waiting"] = lv.get("waiting")
                        g["levels"][level]["memory"] = lv.get("memory")
                    lv_sorted = sorted(g["levels"], key=int)
                    if len(lv_sorted) > 1:
                        lo, hi = g["levels"][lv_sorted[0]], g["levels"][lv_sorted[-1]]
                        g["flatness"] = {k: hi[f"{k}_ms"]["median"] / lo[f"{k}_ms"]["median"]
                                         for k in ("enqueue_p50", "lease_p50")}  # fmt: skip
                    growth[s.name] = g
                except DriverError as e:
                    growth[s.name] = {"error": str(e)[:600]}
                    log(f"growth {s.name} failed: {e}")
                if s.name == "loam":
                    services.pop("loam-growth").stop()
        load_end = loadavg()
        report = {
            "date": started.isoformat(timespec="seconds"),
            "duration_s": round((dt.datetime.now(dt.UTC) - started).total_seconds()),
            "machine": {
                **machine(),
                "load_avg_start": load_start,
                "load_avg_rounds": load_rounds,
                "load_avg_end": load_end,
            },
            "versions": versions(services, git_start),
            "settings": {
                "jobs": args.jobs,
                "runs": args.runs,
                "latency_jobs": args.latency_jobs,
                "latency_rate": args.latency_rate,
                "growth_levels": args.growth_levels,
                "anchor_growth_levels": args.anchor_growth_levels,
                "growth_samples": args.growth_samples,
                "smoke": args.smoke,
            },
            "commands": commands,
            "idle_waits": settle_waits,
            "systems": systems,
            "ratios": ratio_rows(systems),
            "growth": growth,
            "notes": notes,
        }
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "latest.json").write_text(json.dumps(report, indent=2) + "\n")
        (args.out / "latest.md").write_text(markdown(report))
        drew = chart(report, args.out / "latest.png")
        log(
            f"wrote {args.out / 'latest.json'}, latest.md{', latest.png' if drew else ' (no matplotlib: no chart)'}"
        )
        print(markdown(report))
        return 0
    finally:
        stop_all()
        if args.keep:
            log(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
