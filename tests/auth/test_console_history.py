"""The console's REST of issue 22's last items, through the gateway app on a real store:
the redaction hook (every read that shows a payload hides the configured fields, and a
search cannot find a job by a hidden value), the audit log (who did what, when, with
which token and role; per namespace), and the metrics history (points from the store's
totals and the histograms, per queue, per range)."""

from __future__ import annotations

import asyncio
import base64
import json
import math

import httpx
import pytest

from loam_common import auth, keys, metrics
from loam_common.blobs import DirBlobStore
from loam_common.errors import InvalidArgument
from loam_gateway.app import create_app
from loam_gateway.audit_log import AuditLog
from loam_gateway.auth import StoreAuthenticator
from loam_gateway.metrics_history import MetricsHistory, quantile
from loam_gateway.redaction import REDACTED, Redaction
from loam_gateway.routing import Router
from loam_queue_core import QueueCore, histogram_flush
from loam_queue_core.histogram_flush import HistogramFlush
from loam_queue_core.rpc import CoreRpc

RULES = "password,card.number;acme=profile.*.ssn"
SECRET = {"user": "ada", "password": "hunter2", "card": {"number": "4242-4242", "exp": "12/30"},
          "profile": {"home": {"ssn": "078-05-1120", "city": "Paris"}}}  # fmt: skip


@pytest.fixture
async def app_parts(store, tmp_path):
    core = QueueCore(store, DirBlobStore(tmp_path / "blobs"))
    router = Router(local=CoreRpc(core))
    history = MetricsHistory(router.metrics_text, store, interval_s=0.001)  # its loop is not started here
    app = create_app(router, StoreAuthenticator(store), redaction=Redaction.parse(RULES), audit=AuditLog(store),
                     metrics_history=history)  # fmt: skip
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
        yield client, history


@pytest.fixture
def gateway(app_parts):
    return app_parts[0]


@pytest.fixture
def token(store):
    async def _token(ns: str, *actions: str) -> dict[str, str]:
        t, _ = await store.transact(auth.token_create, ns, list(actions), "", None)
        return {"authorization": f"Bearer {t}"}

    return _token


async def enqueue(gw, who, queue: str, data, name: str = "charge") -> str:
    r = await gw.post(f"/v1/queues/{queue}/jobs", json={"name": name, "data": data}, headers=who)
    assert r.status_code == 200, r.text
    return r.json()["job"]


# -- redaction ----------------------------------------------------------------------------
def test_redaction_rules_parse_and_refuse_bad_input():
    r = Redaction.parse(" password , card.number ; team-a = items.*.pin ")
    assert r.fields == {"*": ("password", "card.number"), "team-a": ("items.*.pin",)}
    assert Redaction.parse("").for_namespace("any") is None
    hide = r.for_namespace("team-a")
    assert hide({"items": [{"pin": 1, "n": 2}, {"pin": 3}], "card": {"number": 4, "cvc": 5}, "x": {"password": 6}}) == {
        "items": [{"pin": REDACTED, "n": 2}, {"pin": REDACTED}], "card": {"number": REDACTED, "cvc": 5},
        "x": {"password": REDACTED}}  # fmt: skip
    assert r.for_namespace("team-b")({"items": [{"pin": 1}]}) == {"items": [{"pin": 1}]}
    for bad in ("a..b", "bad ns=field", "team-a=", "x=,"):
        with pytest.raises(InvalidArgument):
            Redaction.parse(bad)


async def test_every_read_of_a_payload_hides_the_configured_fields(gateway, token):
    admin = await token("acme", *sorted(auth.ACTIONS))
    job = await enqueue(gateway, admin, "pay", SECRET)
    expected = {"user": "ada", "password": REDACTED, "card": {"number": REDACTED, "exp": "12/30"},
                "profile": {"home": {"ssn": REDACTED, "city": "Paris"}}}  # fmt: skip
    r = await gateway.get("/v1/queues/pay/jobs?state=waiting", headers=admin)
    assert r.json()["jobs"][0]["payload"]["data"] == expected
    r = await gateway.get(f"/v1/queues/pay/jobs/{job}", headers=admin)
    assert r.json()["job"]["payload"]["data"] == expected
    r = await gateway.get("/v1/queues/pay/dead-letters:preview", headers=admin)
    assert r.json()["sample"][0]["job"]["payload"]["data"] == expected
    r = await gateway.get("/v1/queues/pay/jobs:export?format=ndjson", headers=admin)
    assert json.loads(r.text.splitlines()[0])["payload"]["data"] == expected
    for path in ("/v1/queues/pay/jobs:export?format=csv", "/v1/queues/pay/jobs:export?format=json"):
        assert "hunter2" not in (await gateway.get(path, headers=admin)).text
    # a search finds what is shown, and nothing by a hidden value
    r = await gateway.get("/v1/queues/pay/jobs:search?text=paris&in=payload", headers=admin)
    assert [j["id"] for j in r.json()["jobs"]] == [job]
    r = await gateway.get("/v1/queues/pay/jobs:search?text=hunter2", headers=admin)
    assert r.json()["jobs"] == []
    r = await gateway.get("/v1/queues/pay/jobs:export?text=078-05", headers=admin)
    assert r.text == ""
    # the stored job is unchanged: a retried job runs with its real payload (Connect sees it)
    r = await gateway.post("/loam.jobs.v1.JobsService/JobAdmin", json={"queue": "pay", "job": job, "op": {"get": {}}},
                           headers=admin)  # fmt: skip
    assert r.status_code == 200, r.text
    assert json.loads(base64.b64decode(r.json()["job"]["task"]["payload"]["data"])) == SECRET
    # the namespace rule applies to acme only; the rule for every namespace to all
    other = await token("rival", *sorted(auth.ACTIONS))
    await enqueue(gateway, other, "pay", SECRET)
    r = await gateway.get("/v1/queues/pay/jobs", headers=other)
    shown = r.json()["jobs"][0]["payload"]["data"]
    assert shown["profile"]["home"]["ssn"] == "078-05-1120" and shown["password"] == REDACTED


async def test_a_schedules_payload_is_redacted_too(gateway, token):
    admin = await token("acme", *sorted(auth.ACTIONS))
    r = await gateway.put("/v1/schedules/nightly", json={"queue": "pay", "name": "charge", "data": SECRET,
                                                        "every_ns": 3_600 * 10**9}, headers=admin)  # fmt: skip
    assert r.json()["schedule"]["payload"]["data"]["password"] == REDACTED
    r = await gateway.get("/v1/schedules", headers=admin)
    assert r.json()["schedules"][0]["payload"]["data"]["card"]["number"] == REDACTED


# -- the audit log ------------------------------------------------------------------------
async def test_the_audit_log_records_who_did_what_per_namespace(gateway, token, dump):
    operator = await token("acme", auth.READ, auth.ADMIN, auth.ENQUEUE)
    viewer = await token("acme", auth.READ)
    rival = await token("rival", *sorted(auth.ACTIONS))
    job = await enqueue(gateway, operator, "emails", {"n": 1})
    assert (await gateway.post(f"/v1/queues/emails/jobs/{job}:change-priority", json={"priority": 4},
                               headers=operator)).status_code == 200  # fmt: skip
    assert (await gateway.post("/v1/queues/emails:pause", headers=operator)).status_code == 200
    assert (await gateway.post(f"/v1/queues/emails/jobs/{job}:remove", headers=operator)).status_code == 200
    # refused: no record
    before = await dump()
    assert (await gateway.post("/v1/queues/emails:resume", headers=viewer)).status_code == 403
    assert (await gateway.post("/v1/queues/emails/jobs/nope:retry", headers=operator)).status_code == 404
    assert await dump() == before

    r = await gateway.get("/v1/audit", headers=viewer)
    assert r.status_code == 200, r.text
    page = r.json()
    assert page["enabled"] is True
    got = [(e["action"], e["queue"], e["job"], e["count"], e["role"]) for e in page["entries"]]
    assert got == [("job.remove", "emails", job, 1, "operator"), ("queue.pause", "emails", "", 0, "operator"),
                   ("job.change-priority", "emails", job, 1, "operator"),
                   ("queue.enqueue", "emails", job, 1, "operator")]  # fmt: skip
    who = (await gateway.get("/v1/whoami", headers=operator)).json()["token_id"]
    assert {e["token_id"] for e in page["entries"]} == {who}
    assert page["entries"][0]["at_ns"] >= page["entries"][1]["at_ns"] >= page["entries"][2]["at_ns"] > 0
    assert "priority 4" in page["entries"][2]["detail"]
    # one job's entries; paging by `before`
    r = await gateway.get(f"/v1/audit?queue=emails&job={job}", headers=viewer)
    assert [e["action"] for e in r.json()["entries"]] == [
        "job.remove",
        "job.change-priority",
        "queue.enqueue",
    ]
    r = await gateway.get("/v1/audit?limit=2", headers=viewer)
    assert len(r.json()["entries"]) == 2 and r.json()["next_before"]
    r = await gateway.get(f"/v1/audit?limit=3&before={r.json()['next_before']}", headers=viewer)
    assert [e["action"] for e in r.json()["entries"]] == ["job.change-priority", "queue.enqueue"]
    assert r.json()["next_before"] == ""
    # another namespace sees none of it; bad input is refused
    assert (await gateway.get("/v1/audit", headers=rival)).json()["entries"] == []
    for bad in ("/v1/audit?before=zz", "/v1/audit?job=x", "/v1/audit?limit=0", "/v1/audit?queue=a/b"):
        r = await gateway.get(bad, headers=viewer)
        assert (r.status_code, r.json()["code"]) == (400, "invalid_argument"), (bad, r.text)


async def test_a_batch_is_recorded_with_how_many_jobs(gateway, token):
    admin = await token("acme", *sorted(auth.ACTIONS))
    ids = [await enqueue(gateway, admin, "emails", {"n": i}) for i in range(3)]
    r = await gateway.post("/v1/queues/emails/batches", json={"action": "remove", "ids": [*ids, "missing"]},
                           headers=admin)  # fmt: skip
    batch = r.json()
    while batch["state"] != "done":  # the batch record's long poll: wakes on each change
        batch = (await gateway.get(f"/v1/batches/{batch['id']}?after_version={batch['version']}&wait_ms=10000",
                                   headers=admin)).json()  # fmt: skip
    # the summary, written as the batch started, is up to date once the record says done;
    # newer than it, each job's own record (the core's, as a part of the batch)
    *each, summary = [e for e in (await gateway.get("/v1/audit", headers=admin)).json()["entries"]
                      if e["action"] != "queue.enqueue"]  # fmt: skip
    assert (summary["action"], summary["count"], summary["role"], summary["batch"]) == (
        "batch.remove",
        3,
        "admin",
        batch["id"],
    )
    assert summary["detail"] == f"batch {batch['id']}: 3 succeeded, 1 failed"
    assert sorted((e["action"], e["job"], e["batch"]) for e in each) == sorted(
        [("job.remove", j, batch["id"]) for j in ids]
    )


# -- metrics history ----------------------------------------------------------------------
def _text(enqueued: int, ok: int, fail: int, waiting: int) -> str:
    lab = (("ns", "acme"), ("queue", "emails"))
    samples = [
        metrics.Sample("loam_jobs_enqueued_total", lab, enqueued),
        metrics.Sample("loam_jobs_completed_total", (*lab, ("outcome", "ok")), ok),
        metrics.Sample("loam_jobs_completed_total", (*lab, ("outcome", "fail")), fail),
        metrics.Sample("loam_jobs_completed_total", (*lab, ("outcome", "retry")), 1),
        metrics.Sample("loam_jobs_waiting", (*lab, ("band", "fifo")), waiting),
        metrics.Sample("loam_jobs_waiting", (*lab, ("band", "prioritized")), 1),
        metrics.Sample("loam_jobs_delayed", lab, 2),
        metrics.Sample("loam_jobs_active", lab, 3),
        metrics.Sample("loam_jobs_oldest_waiting_seconds", lab, 7.5),
    ]
    # a histogram in the text is this process's, not the history's: it is left out
    stray = metrics.Histogram("loam_jobs_lease_latency_seconds", metrics.LATENCY_BUCKETS, ("ns", "queue"))
    stray.observe_many([3600.0] * 50, "acme", "emails")
    return metrics.render(samples + stray.samples())


async def observe(store, waits: list[float], runs: list[float]) -> None:
    """What a queue core saw, added to the store's histograms by its flush."""
    seen = metrics.ProcessMetrics()
    seen.observe_lease("acme", "emails", *(int(w * 1e9) for w in waits))
    seen.observe_run("acme", "emails", "a", *(int(r * 1e9) for r in runs[: len(runs) // 2]))  # two tasks:
    seen.observe_run("acme", "emails", "b", *(int(r * 1e9) for r in runs[len(runs) // 2 :]))  # summed
    await HistogramFlush(store, observed=seen).run_once()


async def test_a_point_is_the_step_between_two_samples(store):
    async def never() -> str:
        raise AssertionError

    h = MetricsHistory(never, store, interval_s=10)
    await store.transact(lambda tx: tx.put(keys.namespace_registry("acme"), b""))  # as its first queue does
    s = 10**9
    await observe(store, [0.002] * 10, [0.3] * 4)
    await h.record(_text(10, 2, 1, 5), now_ns=1000 * s)
    assert await h.points("acme", "emails", "1h") == []  # one sample: no step yet
    await observe(store, [0.02] * 90 + [2.0] * 10, [0.7] * 96)
    await h.record(_text(25, 12, 1, 8), now_ns=1010 * s)
    (p,) = await h.points("acme", "emails", "1h")
    assert (p["t_ns"], p["enqueued"], p["completed"], p["failed"]) == (1010 * s, 15, 10, 0)
    assert (p["depth"], p["active"], p["oldest_wait_s"]) == (8 + 1 + 2, 3, 7.5)
    # 100 waits in the step: 90 in (0.01, 0.025], 10 in (1, 2.5]
    assert 0.01 < p["wait_p50_s"] <= 0.025 and 1 < p["wait_p99_s"] <= 2.5
    assert 0.5 < p["run_p50_s"] <= 1 and 0.5 < p["run_p99_s"] <= 1
    assert await h.points("acme", "emails", "24h") == []  # its step is 5 min
    # a step with no lease has no percentiles (null, not 0)
    await h.record(_text(25, 12, 1, 8), now_ns=1020 * s)
    assert (await h.points("acme", "emails", "1h"))[-1]["wait_p50_s"] is None
    # 24h: a point once 5 minutes have passed since its last
    await h.record(_text(30, 12, 1, 8), now_ns=1300 * s)
    (p24,) = await h.points("acme", "emails", "24h")
    assert p24["enqueued"] == 20
    # the 1h ring keeps 360 points; a queue gone from the metrics loses its history
    for i in range(400):
        await h.record(_text(30 + i, 12, 1, 8), now_ns=(1310 + 10 * i) * s)
    assert len(await h.points("acme", "emails", "1h")) == 360
    assert (await h.points("acme", "emails", "1h"))[-1]["t_ns"] == (1310 + 10 * 399) * s
    await h.record("", now_ns=10**13)
    assert await h.points("acme", "emails", "1h") == []
    assert await store.snapshot(lambda tx: tx.get(keys.metrics_histograms("acme", "emails"))) is None
    # a queue that appears after the first sample is new: its first step counts from zero
    await observe(store, [0.002] * 3, [])
    await h.record(_text(6, 4, 0, 2), now_ns=10**13 + 10 * s)
    [p] = await h.points("acme", "emails", "1h")
    assert (p["enqueued"], p["completed"], p["run_p50_s"]) == (6, 4, None)
    assert 0.001 < p["wait_p50_s"] <= 0.005


async def test_the_histograms_of_several_cores_add_up_and_a_failed_flush_loses_nothing(store):
    """Each queue core adds what it saw to the queue's histograms in the store: two cores
    that ran a queue's jobs (before and after its ownership moved) make one histogram; a
    flush whose transaction fails gives its observations back to the next one."""
    a, b = metrics.ProcessMetrics(), metrics.ProcessMetrics()
    a.observe_lease("acme", "emails", *[10**6] * 3)  # 1 ms
    b.observe_lease("acme", "emails", *[2 * 10**9] * 2)  # 2 s
    b.observe_run("acme", "emails", "t", 10**8)
    for seen in (a, b):
        assert await HistogramFlush(store, observed=seen).run_once() == 1
        assert await HistogramFlush(store, observed=seen).run_once() == 0  # nothing new: no write

    def read(tx):
        raw = tx.get(keys.metrics_histograms("acme", "emails"))
        return json.loads(raw)

    stored = await store.snapshot(read)
    assert stored == {"wait": [[0.001, 3], [2.5, 2]], "run": [[0.1, 1]]}

    class Down:
        async def transact(self, fn, *args):
            raise ConnectionError("store unreachable")

    a.observe_lease("acme", "emails", 10**6)
    with pytest.raises(ConnectionError):
        await HistogramFlush(Down(), observed=a).run_once()
    assert await HistogramFlush(store, observed=a).run_once() == 1
    assert (await store.snapshot(read))["wait"] == [[0.001, 4], [2.5, 2]]


async def test_a_flush_that_fails_midway_writes_the_rest_next_time(store, monkeypatch):
    """A flush of many queues is several transactions: one that fails gives its queues'
    observations, and those of the transactions after it, to the next pass; those that
    committed are not written twice."""
    monkeypatch.setattr(histogram_flush, "FLUSH_BATCH", 2)
    seen = metrics.ProcessMetrics()
    for q in range(5):
        seen.observe_lease("acme", f"q{q}", *[10**6] * (q + 1))

    class FailsSecond:
        def __init__(self) -> None:
            self.calls = 0

        async def transact(self, fn, *args):
            self.calls += 1
            if self.calls == 2:
                raise ConnectionError("store unreachable")
            return await store.transact(fn, *args)

    with pytest.raises(ConnectionError):
        await HistogramFlush(FailsSecond(), observed=seen).run_once()
    assert await HistogramFlush(store, observed=seen).run_once() == 3

    def waits(tx):
        return [json.loads(tx.get(keys.metrics_histograms("acme", f"q{q}")) or b'{"wait":[]}')["wait"]
                for q in range(5)]  # fmt: skip

    assert await store.snapshot(waits) == [[[0.001, q + 1]] for q in range(5)]


def test_quantile_interpolates_within_a_bucket():
    assert quantile(0.5, {}, {1.0: 0, 2.0: 10, math.inf: 10}) == pytest.approx(1.5)
    assert quantile(0.99, {1.0: 5, math.inf: 5}, {1.0: 5, math.inf: 9}) == 1.0  # past the last bound
    assert math.isnan(quantile(0.5, {1.0: 3, math.inf: 3}, {1.0: 3, math.inf: 3}))


async def test_the_metrics_route_serves_a_queues_points(app_parts, token):
    gateway, history = app_parts
    admin = await token("acme", *sorted(auth.ACTIONS))
    viewer = await token("acme", auth.READ)
    await enqueue(gateway, admin, "emails", {"n": 0})
    await history.sample_once()
    for i in range(4):
        await enqueue(gateway, admin, "emails", {"n": i})
    await history.sample_once()
    r = await gateway.get("/v1/queues/emails/metrics?range=1h", headers=viewer)
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["enabled"], body["range"]) == (True, "1h")
    (p,) = body["points"]
    assert (p["enqueued"], p["depth"], p["completed"]) == (4, 5, 0)
    r = await gateway.get("/v1/queues/emails/metrics?range=7d", headers=viewer)
    assert (r.json()["points"], r.json()["step_ns"]) == ([], 3600 * 10**9)
    rival = await token("rival", auth.READ)
    assert (await gateway.get("/v1/queues/emails/metrics", headers=rival)).status_code == 404
    r = await gateway.get("/v1/queues/emails/metrics?range=2h", headers=viewer)
    assert (r.status_code, r.json()["code"]) == (400, "invalid_argument")
    assert (await gateway.get("/v1/queues/nope/metrics", headers=viewer)).status_code == 404


# -- the job list's rows ------------------------------------------------------------------
def test_a_list_row_is_the_job_view_and_its_summary_a_valid_one():
    from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
    from loam_common.jobs import states as S
    from loam_gateway.rest import JobView, job_row, job_view

    j = pb.Job(id="01J", queue="q", state=S.FAILED, attempt=2, attempts_max=3, worker="w1", created_ns=5,
               task=pb.TaskSpec(name="charge", payload=pb.Payload(data=json.dumps(SECRET).encode(),
                                                                   content_type="application/json")),
               result=pb.Payload(data=b"\x00\x01", content_type="application/octet-stream"),
               progress=b'{"password": "p", "pct": 50}', flow="f1", children=2, pending_children=1)  # fmt: skip
    j.task.headers["h"] = "v"
    j.errors.add(code="E1", message="first", stacktrace="trace 1", at_ns=6, attempt=1)
    j.errors.add(code="E2", message="second", stacktrace="trace 2", at_ns=7, attempt=2)
    j.parents.add(queue="p", job_id="01P")
    hide = Redaction.parse(RULES).for_namespace("acme")
    for redact in (None, hide):
        assert job_row(j, redact) == job_view(j, redact).model_dump()
    summary = JobView.model_validate(job_row(j, hide, summary=True))
    assert (summary.payload.data, summary.payload.size, summary.result.data_base64) == (
        None,
        len(json.dumps(SECRET)),
        None,
    )
    assert [(e.message, e.stacktrace) for e in summary.errors] == [("second", "")]
    assert (summary.progress, summary.headers, summary.parents[0].job_id) == (None, {}, "01P")


async def test_the_job_list_pages_in_full_or_in_summary(gateway, token):
    admin = await token("acme", *sorted(auth.ACTIONS))
    ids = [await enqueue(gateway, admin, "pay", SECRET) for _ in range(3)]
    r = await gateway.get("/v1/queues/pay/jobs?state=waiting&page_size=2&view=summary", headers=admin)
    assert r.status_code == 200, r.text
    first = r.json()
    assert [j["payload"]["data"] for j in first["jobs"]] == [None, None]
    r = await gateway.get(f"/v1/queues/pay/jobs?state=waiting&page_size=2&page_token={first['next_page_token']}",
                          headers=admin)  # fmt: skip
    assert r.json()["jobs"][0]["payload"]["data"]["password"] == REDACTED
    assert {j["id"] for j in first["jobs"] + r.json()["jobs"]} == set(ids)
    r = await gateway.get("/v1/queues/pay/jobs?view=brief", headers=admin)
    assert (r.status_code, r.json()["code"]) == (400, "invalid_argument")


def test_loam_dev_refuses_a_bad_rule_or_interval(capsys):
    from loam_gateway import dev

    args = dev.parse_args(["--redact", "password;team-a=card.number", "--metrics-interval", "2.5"])
    assert (args.redaction.fields["team-a"], args.metrics_interval) == (("card.number",), 2.5)
    for bad in (["--redact", "a..b"], ["--metrics-interval", "0"], ["--redact", "bad ns=x"]):
        with pytest.raises(SystemExit) as e:
            dev.parse_args(bad)
        assert e.value.code == 2
    assert "--redact" in capsys.readouterr().err


async def test_two_gateways_on_one_store_serve_one_history(store, token):
    """Two gateways sampling the same store (at the same moments and in between): each
    step's point is written once, whoever comes first, and both serve the same points."""
    core = QueueCore(store)
    histories, clients = [], []
    for _ in range(2):
        router = Router(local=CoreRpc(core))
        history = MetricsHistory(router.metrics_text, store, interval_s=10)
        histories.append(history)
        app = create_app(router, StoreAuthenticator(store), metrics_history=history)
        clients.append(httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw"))
    a, b = clients
    try:
        admin = await token("acme", *sorted(auth.ACTIONS))
        s = 10**9
        text = await histories[0].read_text()
        await histories[0].record(text, now_ns=1000 * s)
        for step in range(1, 4):
            await enqueue(a if step % 2 else b, admin, "emails", {"n": step})
            text = await histories[0].read_text()
            # both sample the step's end; then one of them again, between two ends
            await histories[step % 2].record(text, now_ns=(1000 + 10 * step) * s)
            await histories[(step + 1) % 2].record(text, now_ns=(1000 + 10 * step) * s + 1)
            await histories[step % 2].record(text, now_ns=(1005 + 10 * step) * s)
        seen = [
            (await c.get("/v1/queues/emails/metrics?range=1h", headers=admin)).json()["points"]
            for c in clients
        ]
        assert seen[0] == seen[1]
        assert [(p["t_ns"], p["enqueued"], p["depth"]) for p in seen[0]] == [
            ((1000 + 10 * step) * s, 1, step) for step in range(1, 4)
        ]
    finally:
        for c in clients:
            await c.aclose()


async def test_a_core_stopping_in_order_writes_what_it_observed_last(store):
    """The flush runs as a loop of the core's process; its stop writes the observations
    made since its last pass, so a core stopped in order loses none."""
    seen = metrics.ProcessMetrics()
    flush = HistogramFlush(store, interval=3600, observed=seen)  # no pass but the first and the last
    flush.start()
    async with asyncio.timeout(30):
        while flush.passes == 0:  # the first pass, at start, found nothing
            await asyncio.sleep(0.001)
    seen.observe_run("acme", "emails", "t", 3 * 10**9)
    await flush.stop()
    raw = await store.snapshot(lambda tx: tx.get(keys.metrics_histograms("acme", "emails")))
    assert json.loads(raw) == {"wait": [], "run": [[5, 1]]}


def test_a_queue_core_refuses_a_bad_flush_interval(capsys):
    from loam_queue_core import server

    assert server.parse_args(["--store", "memory://", "--histogram-flush", "0.5"]).histogram_flush == 0.5
    for bad in ("0", "-1", "soon"):
        with pytest.raises(SystemExit) as e:
            server.parse_args(["--store", "memory://", "--histogram-flush", bad])
        assert e.value.code == 2
    assert "--histogram-flush" in capsys.readouterr().err
