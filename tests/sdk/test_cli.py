"""The `loam` command as a user runs it: `.venv/bin/loam ... --json` in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loam import Client, errors
from loam.testing import LoamServer

LOAM = str(Path(sys.executable).with_name("loam"))


def run(
    *args: str, ok: bool = True, stdin: str | None = None, env: dict | None = None
) -> subprocess.CompletedProcess:
    p = subprocess.run([LOAM, *args], capture_output=True, text=True, timeout=60, input=stdin, env=env)
    if ok:
        assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    return p


@pytest.fixture
def cli(url: str, ns: str):
    def call(*args: str, ok: bool = True, **kw) -> object:
        p = run(*args, "--json", "--url", url, "--namespace", ns, ok=ok, **kw)
        return json.loads(p.stdout) if p.returncode == 0 else p

    return call


def test_jobs_add_get_ls_retry_rm(cli) -> None:
    added = cli(
        "jobs", "add", "mail", "send", '{"to": "a@example.com"}', "--priority", "3", "--attempts", "2"
    )
    assert added["created"] and added["state"] == "prioritized"
    job = cli("jobs", "get", "mail", added["id"])
    assert (
        job["payload"] == {"to": "a@example.com"} and job["name"] == "send" and job["state"] == "prioritized"
    )
    cli("jobs", "add", "mail", "note", "plain words", "--delay", "60")
    listed = cli("jobs", "ls", "mail")
    assert [j["name"] for j in listed] == ["note", "send"]
    assert [j["name"] for j in cli("jobs", "ls", "mail", "--state", "delayed")] == ["note"]
    assert cli("jobs", "ls", "mail", "--state", "delayed,prioritized", "--limit", "1").__len__() == 1
    assert cli("jobs", "rm", "mail", added["id"]) == {"id": added["id"], "removed": True}
    assert [j["name"] for j in cli("jobs", "ls", "mail")] == ["note"]


def test_jobs_retry(cli, url: str, ns: str) -> None:
    added = cli("jobs", "add", "r", "t", "1")
    from loam import Outcome, SyncClient

    with SyncClient(url, namespace=ns) as c:
        (job,) = c.lease("r")
        c.complete(job, Outcome.fail("broken"))
    assert cli("jobs", "get", "r", added["id"])["state"] == "failed"
    assert cli("jobs", "retry", "r", added["id"])["state"] == "waiting"


def test_bulk_add_by_count_and_file(cli, tmp_path: Path) -> None:
    res = cli("jobs", "add", "bulk", "t", "--count", "2500", '{"x": 1}')
    assert res["count"] == res["created"] == 2500 and res["errors"] == 0
    lines = tmp_path / "jobs.jsonl"
    lines.write_text('{"name": "a", "payload": 1, "priority": 2}\n{"x": 2}\n\n"text"\n')
    res = cli("jobs", "add", "bulk", "fromfile", "--file", str(lines))
    assert res["count"] == 3 and [j["state"] for j in res["jobs"]] == ["prioritized", "waiting", "waiting"]
    res = cli("jobs", "add", "bulk", "stdin", "--file", "-", stdin='{"k": 1}\n{"k": 2}\n')
    assert res["created"] == 2
    counts = cli("queues", "counts", "bulk")
    assert counts["waiting"] == 2504 and counts["prioritized"] == 1


def test_queues_counts_pause_resume_drain_ls(cli) -> None:
    cli("jobs", "add", "qa", "t", "--count", "3")
    cli("jobs", "add", "qb", "t")
    assert cli("queues", "pause", "qa") == {"queue": "qa", "paused": True}
    assert cli("queues", "counts", "qa")["paused"] is True
    assert cli("queues", "resume", "qa") == {"queue": "qa", "paused": False}
    assert cli("queues", "counts", "qa") == {
        "waiting": 3, "prioritized": 0, "delayed": 0, "active": 0, "waiting_children": 0,
        "completed": 0, "failed": 0, "dead_lettered": 0, "canceled": 0, "paused": False,
    }  # fmt: skip
    listed = {q["name"]: q["counts"]["waiting"] for q in cli("queues", "ls")}
    assert listed == {"qa": 3, "qb": 1}
    assert cli("queues", "drain", "qa") == {"queue": "qa", "removed": 3}


def test_human_output(url: str, ns: str) -> None:
    common = ["--url", url, "--namespace", ns]
    run("jobs", "add", "h", "greet", '{"who": "you"}', *common)
    out = run("jobs", "ls", "h", *common).stdout
    assert "greet" in out and "waiting" in out and "you" in out
    assert "waiting" in run("queues", "counts", "h", *common).stdout


def test_errors_are_one_line_with_exit_codes(cli, url: str, ns: str) -> None:
    p = cli("jobs", "get", "mail", "01ARZ3NDEKTSV4RRFFQ69G5FAV", ok=False)
    assert p.returncode == 1 and p.stderr.startswith("loam: not_found:") and p.stderr.count("\n") == 1
    p = run("queues", "counts", "q", "--url", "http://127.0.0.1:1", ok=False)
    assert p.returncode == 3 and p.stderr.startswith("loam: unavailable:")
    p = run("jobs", "ls", "q", "--state", "bogus", "--url", url, ok=False)
    assert p.returncode == 2 and "unknown job state" in p.stderr
    p = run("jobs", "frobnicate", ok=False)
    assert p.returncode == 2


def test_env_selects_server_and_namespace(url: str, ns: str) -> None:
    import os

    env = {**os.environ, "LOAM_URL": url, "LOAM_NAMESPACE": ns}
    run("jobs", "add", "envq", "t", env=env)
    assert json.loads(run("queues", "counts", "envq", "--json", env=env).stdout)["waiting"] == 1


def test_tokens_create_ls_revoke(tmp_path: Path) -> None:
    store = str(tmp_path / "tokens.db")
    made = json.loads(run("tokens", "create", "--namespace", "team-a", "--actions", "jobs:enqueue,jobs:admin",
                          "--name", "ci", "--store", store, "--json").stdout)  # fmt: skip
    assert made["token"].startswith("loam_") and made["actions"] == ["jobs:admin", "jobs:enqueue"]
    listed = json.loads(run("tokens", "ls", "--store", store, "--json").stdout)
    assert [(t["id"], t["namespace"], t["name"], t["revoked"]) for t in listed] == [
        (made["id"], "team-a", "ci", False)
    ]
    assert "token" not in listed[0]
    assert (
        json.loads(run("tokens", "revoke", made["id"], "--store", store, "--json").stdout)["revoked"] is True
    )
    p = run(
        "tokens", "create", "--namespace", "x", "--actions", "jobs:everything", "--store", store, ok=False
    )
    assert p.returncode == 1 and "unknown action" in p.stderr
    p = run("tokens", "revoke", "0123456789abcdef", "--store", store, ok=False)
    assert p.returncode == 1 and "not_found" in p.stderr


async def test_token_from_the_cli_works_on_an_auth_server(tmp_path: Path) -> None:
    with LoamServer(tmp_path / "data", auth=True) as server:
        store = str(tmp_path / "data")  # the dev data dir: the CLI opens its store
        made = json.loads(run("tokens", "create", "--namespace", "team-b", "--actions", "jobs:enqueue,jobs:admin",
                              "--store", store, "--json").stdout)  # fmt: skip
        async with Client(server.url, token=made["token"]) as c:
            await c.enqueue("authq", "t", 1)
            assert (await c.queue_counts("authq"))["waiting"] == 1
            with pytest.raises(errors.PermissionDenied):
                await c.lease("authq")  # no jobs:consume
        async with Client(server.url, token="loam_0000000000000000_" + "0" * 64) as c:
            with pytest.raises(errors.Unauthenticated):
                await c.enqueue("authq", "t", 1)
        p = run("queues", "counts", "authq", "--url", server.url, "--token", made["token"], "--json")
        assert json.loads(p.stdout)["waiting"] == 1
        run("tokens", "revoke", made["id"], "--store", store)


def test_loam_dev_serves_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    import signal
    import time

    from loam import SyncClient
    from loam.testing import free_port

    port = free_port()
    proc = subprocess.Popen(
        [LOAM, "dev", "--port", str(port), "--data", str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        for line in proc.stdout:  # type: ignore[union-attr]
            if "ready" in line or time.monotonic() > deadline:
                break
        with SyncClient(f"http://127.0.0.1:{port}") as c:
            assert c.enqueue("devq", "t").created
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (tmp_path / "loam.lmdb" / "data.mdb").exists()
    for service in ("gateway", "queue-core", "sweeper", "relay"):
        assert run(service, "--help").stdout.startswith(f"usage: loam {service}")


def test_schedules_add_ls_get_rm(cli) -> None:
    made = cli("schedules", "add", "nightly", "reports", "build", '{"kind": "full"}', "--cron", "0 3 * * *",
               "--tz", "Europe/Paris", "--priority", "2", "--header", "team=data")  # fmt: skip
    assert made["changed"] is True and made["cron"] == "0 3 * * *" and made["tz"] == "Europe/Paris"
    assert made["payload"] == {"kind": "full"} and made["headers"] == {"team": "data"} and made["next_ns"] > 0
    assert made["opts"]["priority"] == 2
    same = cli("schedules", "add", "nightly", "reports", "build", '{"kind": "full"}', "--cron", "0 3 * * *",
               "--tz", "Europe/Paris", "--priority", "2", "--header", "team=data")  # fmt: skip
    assert same == {**made, "changed": False}
    # flags before the payload work too, as in `jobs add`
    beat = cli("schedules", "add", "beat", "ticks", "tick", "--every", "1m30s", "--limit", "5", "--immediately",
               "--misfire", "skip", "7")  # fmt: skip
    assert beat["every_ns"] == 90 * 10**9 and beat["limit"] == 5 and beat["misfire"] == "skip"
    assert beat["payload"] == 7 and beat["count"] == 1 and beat["last_job_id"]
    assert [s["id"] for s in cli("schedules", "ls")] == ["beat", "nightly"]
    got = cli("schedules", "get", "beat")
    assert got["count"] == 1 and "changed" not in got
    assert cli("queues", "counts", "ticks")["waiting"] == 1  # the immediate tick
    assert cli("schedules", "rm", "beat") == {"id": "beat", "removed": True}
    assert cli("schedules", "rm", "beat") == {"id": "beat", "removed": False}
    p = cli("schedules", "get", "beat", ok=False)
    assert p.returncode == 1 and p.stderr.startswith("loam: not_found:")


def test_schedules_errors(cli) -> None:
    for args, code, text in [
        ((), 2, "--cron EXPR or --every"),
        (("--cron", "@daily", "--every", "5s"), 2, "not both"),
        (("--every", "soon"), 2, "use a duration"),
        (("--every", "5s", "--start", "tomorrow"), 2, "ISO 8601"),
        (("--cron", "61 * * * *"), 1, "invalid_argument: spec.cron"),
        (("--cron", "@daily", "--tz", "Mars/Olympus"), 1, "invalid_argument: spec.tz"),
    ]:
        p = cli("schedules", "add", "x", "q", "t", *args, ok=False)
        assert p.returncode == code and text in p.stderr and p.stderr.count("\n") == 1, (args, p.stderr)
    assert cli("schedules", "ls") == []


def test_schedules_human_output(url: str, ns: str) -> None:
    common = ["--url", url, "--namespace", ns]
    out = run(
        "schedules", "add", "paris", "q", "report", "--cron", "*/5 * * * *", "--tz", "Europe/Paris", *common
    ).stdout
    assert out.startswith("paris  created  cron '*/5 * * * *' in Europe/Paris; next ")
    out = run(
        "schedules", "add", "paris", "q", "report", "--cron", "*/5 * * * *", "--tz", "Europe/Paris", *common
    ).stdout
    assert "unchanged" in out
    assert "replaced" in run("schedules", "add", "paris", "q", "report", "--every", "10m", *common).stdout
    out = run("schedules", "ls", *common).stdout
    assert "paris" in out and "every 10m" in out and "1 schedule(s)" in out
    out = run("schedules", "get", "paris", *common).stdout
    assert "every 10m" in out and "fire-latest" in out
    assert run("schedules", "rm", "paris", *common).stdout.strip() == "paris  removed"


def test_flows_add_and_get(cli, tmp_path: Path) -> None:
    graph = {"id": "etl-1", "queue": "etl", "nodes": [
        {"id": "extract", "name": "extract", "payload": {"src": "s3://x"}},
        {"id": "transform", "name": "transform", "depends_on": ["extract"], "attempts": 3},
        {"id": "load", "queue": "load", "name": "load", "depends_on": ["transform"], "on_failure": "ignore_dependency"},
    ]}  # fmt: skip
    path = tmp_path / "flow.json"
    path.write_text(json.dumps(graph))
    made = cli("flows", "add", str(path))
    assert made["id"] == "etl-1" and made["created"] is True
    assert [(j["node"], j["queue"]) for j in made["jobs"]] == [
        ("extract", "etl"),
        ("transform", "etl"),
        ("load", "load"),
    ]
    again = cli("flows", "add", "-", stdin=json.dumps(graph))
    assert again == {**made, "created": False}
    got = cli("flows", "get", "etl-1")
    assert [(j["node"], j["job_id"], j["state"]) for j in got["jobs"]] == [
        ("extract", made["jobs"][0]["job_id"], "waiting"),
        ("transform", made["jobs"][1]["job_id"], "waiting-children"),
        ("load", made["jobs"][2]["job_id"], "waiting-children"),
    ]
    job = cli("jobs", "get", "etl", made["jobs"][1]["job_id"])
    assert job["attempts_max"] == 3 and job["flow"] == "etl-1" and job["flow_node"] == "transform"
    # a bare list of nodes, with --id
    bare = cli("flows", "add", "-", "--id", "solo", stdin='[{"id": "a", "queue": "q", "name": "a"}]')
    assert bare["id"] == "solo" and bare["created"] is True


def test_flows_errors_and_human_output(cli, url: str, ns: str) -> None:
    for text, code, message in [
        ("not json", 2, "not JSON"),
        ("[]", 2, "at least one node"),
        ('[{"id": "a", "name": "a"}]', 2, "node 0 has no queue"),
        ('[{"id": "a", "queue": "q", "name": "a", "colour": "red"}]', 2, "unknown enqueue option(s): colour"),
        ('[{"id": "a", "queue": "q", "name": "a", "depends_on": ["a"]}]', 1, "invalid_argument: graph.nodes[0].depends_on[0]"),
    ]:  # fmt: skip
        p = cli("flows", "add", "-", ok=False, stdin=text)
        assert p.returncode == code and message in p.stderr and p.stderr.count("\n") == 1, (text, p.stderr)
    p = cli("flows", "add", "/no/such/file.json", ok=False)
    assert p.returncode == 1 and "/no/such/file.json" in p.stderr
    p = cli("flows", "get", "nope", ok=False)
    assert p.returncode == 1 and p.stderr.startswith("loam: not_found:")
    common = ["--url", url, "--namespace", ns]
    graph = '{"id": "h", "nodes": [{"id": "a", "queue": "hq", "name": "a"}, {"id": "b", "queue": "hq", "name": "b", "depends_on": ["a"]}]}'
    out = run("flows", "add", "-", *common, stdin=graph).stdout
    assert out.startswith("flow h  created: 2 job(s)")
    out = run("flows", "get", "h", *common).stdout
    assert "waiting-children" in out and "hq" in out


def test_quotas_get_set_reset(cli, url: str, ns: str) -> None:
    got = cli("quotas", "get")
    assert got["source"] == "deployment" and got["quotas"]["stored_jobs"] == 0
    assert got["usage"]["stored_jobs"] == 0
    cli("jobs", "add", "q", "t", '"0123456789"')
    got = cli("quotas", "set", "stored_jobs=2", "payload_bytes=1000")
    assert got["source"] == "namespace" and got["quotas"]["stored_jobs"] == 2
    assert got["usage"]["stored_jobs"] == 1 and got["usage"]["payload_bytes"] == 10  # the string's bytes
    cli("jobs", "add", "q", "t")
    refused = cli("jobs", "add", "q", "t", ok=False)
    assert (
        refused.returncode == 1 and "resource_exhausted" in refused.stderr and "stored_jobs" in refused.stderr
    )
    # a set changes only the limits it names
    got = cli("quotas", "set", "stored_jobs=0")
    assert got["quotas"]["stored_jobs"] == 0 and got["quotas"]["payload_bytes"] == 1000
    cli("jobs", "add", "q", "t")
    for bad in (["bogus=1"], ["stored_jobs=-1"], ["stored_jobs=x"], [], ["stored_jobs=1", "--reset"]):
        p = cli("quotas", "set", *bad, ok=False)
        assert p.returncode == 2 and p.stderr.startswith("loam: "), (bad, p.stderr)
    assert cli("quotas", "get")["quotas"]["payload_bytes"] == 1000  # the refusals changed nothing
    assert cli("quotas", "set", "--reset")["source"] == "deployment"
    human = run("quotas", "get", "--url", url, "--namespace", ns).stdout
    assert "payload_bytes" in human and "no limit" in human and "deployment" in human


def test_queues_ls_exits_cleanly_every_time(cli) -> None:
    """`loam queues ls` (the SDK's one REST read) ended in SIGABRT about one run in four
    on a loaded machine once its answer was printed: an HTTP runtime's threads aborted the
    interpreter at exit. It now reads over the client's own connections."""
    cli("jobs", "add", "lsq", "t")
    for _ in range(20):
        assert [q["name"] for q in cli("queues", "ls")] == ["lsq"]
