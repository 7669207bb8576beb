"""The clients of a chaos run, each recording into the History: producers (some jobs
with a subject), workers, a worker that stalls past its lease (a GC pause), a producer
of runs of jobs on a few subjects of their own with workers that lease them as subject
batches (`subject_batch`) and complete each batch in one call, one of which stalls past
its lease halfway through a batch (a dead worker's run), a Watch
that reconnects from its cursor every few seconds, a vandal sending malformed and
hostile requests (none may get a 500), on the FIFO queue one producer and one
worker (lease order must be enqueue order there), and a starter of durable workflows
(run by the Resonate SDK worker of durable_steps_worker.py)."""

from __future__ import annotations

import asyncio
import base64
import json
import random
import time
from dataclasses import dataclass, field

import httpx
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from history import History

from loam_common.connect_client import jobs_client
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as J
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb

SEC = 1_000_000_000
#: outcomes a client cannot know: the call may or may not have happened
UNKNOWN = {Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED, Code.UNKNOWN, Code.INTERNAL, Code.CANCELED, Code.ABORTED}
SUBJECTS = [f"customer-{i}" for i in range(4)]
#: subjects only the run producer enqueues to, one job at a time: their acknowledged
#: order is their FIFO order, which the checker holds subject batches to
RUN_SUBJECTS = [f"run-{i}" for i in range(3)]
RUN_PRODUCER = "run-producer"
SUBJECT_BATCH = 4
RESONATE_VERSION = "2026-04-01"


@dataclass
class Workload:
    url: str
    ns: str
    queue: str
    history: History
    seed: int = 0
    fifo_queue: str = ""
    stop_producing: asyncio.Event = field(default_factory=asyncio.Event)
    stop_working: asyncio.Event = field(default_factory=asyncio.Event)
    stop_watching: asyncio.Event = field(default_factory=asyncio.Event)
    clients: list = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.headers = {"x-loam-namespace": self.ns}

    def client(self):
        c = jobs_client(self.url, timeout_ms=10_000)
        self.clients.append(c)
        return c

    async def close(self) -> None:
        for c in self.clients:
            try:
                await c.close()
            except Exception:  # noqa: BLE001 - closing after a kill may fail; nothing to keep
                pass

    # -- producers -------------------------------------------------------------------------
    async def producer(self, i: int) -> None:
        c, n = self.client(), 0
        while not self.stop_producing.is_set():
            n += 1
            subject = self.rng.choice(SUBJECTS) if n % 3 == 0 else ""
            req = J.EnqueueRequest(queue=self.queue, task=pb.TaskSpec(name="noop", payload=pb.Payload(data=b"%d-%d" % (i, n))),
                                   opts=pb.EnqueueOpts(subject=subject))  # fmt: skip
            op = self.history.invoke("enqueue", f"producer-{i}", queue=self.queue, subject=subject)
            await self.recorded_enqueue(c, op, req)
            await asyncio.sleep(0.01)

    async def run_producer(self) -> None:
        """Runs of 2-6 jobs for one of RUN_SUBJECTS, each enqueue answered before the
        next is sent, so a subject's acknowledged jobs are in its order."""
        c, n = self.client(), 0
        while not self.stop_producing.is_set():
            subject = self.rng.choice(RUN_SUBJECTS)
            for _ in range(self.rng.randint(2, 6)):
                n += 1
                req = J.EnqueueRequest(queue=self.queue, task=pb.TaskSpec(name="noop", payload=pb.Payload(data=b"run-%d" % n)),
                                       opts=pb.EnqueueOpts(subject=subject))  # fmt: skip
                op = self.history.invoke("enqueue", RUN_PRODUCER, queue=self.queue, subject=subject)
                await self.recorded_enqueue(c, op, req)
            await asyncio.sleep(0.03)

    async def recorded_enqueue(self, c, op, req: J.EnqueueRequest) -> None:
        """Enqueue and record the outcome: the job, a refusal, or (a lost answer) unknown."""
        try:
            resp = await c.enqueue(req, headers=self.headers)
            self.history.ok(op, resp.enqueued.job)
        except ConnectError as e:
            (self.history.info if e.code in UNKNOWN else self.history.fail)(op, f"{e.code.name}: {e.message}")
            await asyncio.sleep(0.05)

    # -- workers ---------------------------------------------------------------------------
    async def complete(self, c, process: str, lease: J.Lease, retry_s: float = 20.0) -> None:
        job, epoch = lease.token.job, lease.token.epoch
        deadline = time.monotonic() + retry_s
        while True:
            op = self.history.invoke("complete", process, job=job, epoch=epoch)
            try:
                await c.complete(J.CompleteRequest(token=lease.token, outcome=J.Outcome(ok=J.Outcome.Ok())),
                                 headers=self.headers)  # fmt: skip
                self.history.ok(op)
                return
            except ConnectError as e:
                if e.code in UNKNOWN:
                    self.history.info(op, f"{e.code.name}: {e.message}")
                    if time.monotonic() < deadline:
                        await asyncio.sleep(0.1)
                        continue
                    return
                self.history.fail(op, f"{e.code.name}: {e.message}")
                return

    async def complete_batch(self, c, process: str, leases: list[J.Lease], retry_s: float = 20.0) -> None:
        """Complete `leases` in one CompleteBatch call (one `complete` op per job, all
        invoked together); a lost answer sends the same batch again."""
        deadline = time.monotonic() + retry_s
        while leases:
            ops = [
                self.history.invoke("complete", process, job=x.token.job, epoch=x.token.epoch) for x in leases
            ]
            items = [J.CompleteRequest(token=x.token, outcome=J.Outcome(ok=J.Outcome.Ok())) for x in leases]
            try:
                resp = await c.complete_batch(J.CompleteBatchRequest(items=items), headers=self.headers)
            except ConnectError as e:
                for op in ops:
                    (self.history.info if e.code in UNKNOWN else self.history.fail)(
                        op, f"{e.code.name}: {e.message}"
                    )
                if e.code in UNKNOWN and time.monotonic() < deadline:
                    await asyncio.sleep(0.1)
                    continue
                return
            for op, res in zip(ops, resp.results, strict=True):
                if res.HasField("error"):
                    self.history.fail(op, f"{res.error.code}: {res.error.message}")
                else:
                    self.history.ok(op)
            return

    async def lease(
        self, c, process: str, max_jobs: int, queue: str = "", subject_batch: int = 0
    ) -> list[J.Lease]:
        queue = queue or self.queue
        op = self.history.invoke("lease", process, queue=queue, max=max_jobs, subject_batch=subject_batch)
        try:
            resp = await c.lease(J.LeaseRequest(queues=[queue], worker=process, max=max_jobs, wait_ns=SEC // 2,
                                                subject_batch=subject_batch), headers=self.headers)  # fmt: skip
        except ConnectError as e:
            (self.history.info if e.code in UNKNOWN else self.history.fail)(op, f"{e.code.name}: {e.message}")
            await asyncio.sleep(0.05)
            return []
        self.history.ok(op, [(x.token.job, x.token.epoch, x.opts.subject) for x in resp.leases])
        return list(resp.leases)

    async def worker(self, i: int) -> None:
        c, name = self.client(), f"worker-{i}"
        while not self.stop_working.is_set():
            for lease in await self.lease(c, name, 4):
                await asyncio.sleep(self.rng.random() * 0.003)  # the "work"
                await self.complete(c, name, lease)

    async def batch_worker(self, i: int) -> None:
        """Leases subject batches (a run of one subject's jobs with its first) and
        completes what it got in one call."""
        c, name = self.client(), f"batch-worker-{i}"
        while not self.stop_working.is_set():
            leases = await self.lease(c, name, SUBJECT_BATCH, subject_batch=SUBJECT_BATCH)
            if leases:
                await asyncio.sleep(self.rng.random() * 0.003)
                await self.complete_batch(c, name, leases)

    async def batch_stalling_worker(self, pause_s: float) -> None:
        """Leases a subject batch, completes its first job, then stalls past the lease
        (a worker dying mid-run): the rest of the run comes back and runs again in
        order; its late completion of them is fenced or, if nobody took them meanwhile,
        accepted."""
        c = self.client()
        while not self.stop_producing.is_set():
            leases = await self.lease(c, "batch-stalling", SUBJECT_BATCH, subject_batch=SUBJECT_BATCH)
            if len(leases) > 1:
                await self.complete_batch(c, "batch-stalling", leases[:1], retry_s=5)
                await asyncio.sleep(pause_s)
                await self.complete_batch(c, "batch-stalling", leases[1:], retry_s=5)
            elif leases:
                await self.complete_batch(c, "batch-stalling", leases, retry_s=5)
            await asyncio.sleep(1)

    async def stalling_worker(self, pause_s: float) -> None:
        """Leases a few jobs, stalls longer than their lease (a GC or network pause), then
        completes them: each completion is either fenced or, if nobody reclaimed the job
        meanwhile, accepted; never both for one job."""
        c = self.client()
        while not self.stop_producing.is_set():
            leases = await self.lease(c, "stalling", 2)
            if leases:
                await asyncio.sleep(pause_s)
                for lease in leases:
                    await self.complete(c, "stalling", lease, retry_s=5)
            await asyncio.sleep(1)

    # -- the FIFO queue: one producer, one worker, one priority, no retries or delays --
    async def fifo_producer(self) -> None:
        """Enqueues one job at a time (each answered before the next is sent), so the
        acknowledged enqueues are in the queue's order."""
        c, n = self.client(), 0
        while not self.stop_producing.is_set():
            n += 1
            req = J.EnqueueRequest(queue=self.fifo_queue, task=pb.TaskSpec(name="ordered", payload=pb.Payload(data=b"%d" % n)))  # fmt: skip
            op = self.history.invoke("enqueue", "fifo-producer", queue=self.fifo_queue, subject="")
            await self.recorded_enqueue(c, op, req)
            await asyncio.sleep(0.02)

    async def fifo_worker(self) -> None:
        c = self.client()
        while not self.stop_working.is_set():
            for lease in await self.lease(c, "fifo-worker", 1, self.fifo_queue):
                await self.complete(c, "fifo-worker", lease)

    # -- durable workflows ------------------------------------------------------------------
    async def durable_starter(self, url: str, group: str, steps: int, every_s: float) -> None:
        """Starts `chain(start, steps)` workflows on the worker group, one every `every_s`,
        with a raw `promise.create` (as any Resonate client does); a create whose answer
        was lost is sent again with the same id (creates are idempotent by id)."""
        async with httpx.AsyncClient(timeout=10) as http:
            i = 0
            while not self.stop_producing.is_set():
                i += 1
                root = f"chaos-{self.seed}-{i}"
                data = json.dumps({"func": "chain", "args": [f"w{i}", steps], "kwargs": {}, "version": 1})
                body = json.dumps({"kind": "promise.create", "head": {"corrId": root, "version": RESONATE_VERSION},
                                   "data": {"id": root, "timeoutAt": 2**53, "tags": {"resonate:target": f"poll://any@{group}"},
                                            "param": {"data": base64.b64encode(data.encode()).decode()}}})  # fmt: skip
                while not self.stop_producing.is_set():
                    op = self.history.invoke("durable-start", "durable-starter", id=root)
                    try:
                        r = await http.post(
                            url.rstrip("/") + "/", content=body, headers={"content-type": "application/json"}
                        )
                    except httpx.HTTPError as e:
                        self.history.info(op, f"{type(e).__name__}")
                        await asyncio.sleep(0.2)
                        continue
                    if r.status_code == 200:
                        self.history.ok(op, root)
                        break
                    (self.history.info if r.status_code >= 500 else self.history.fail)(
                        op, f"{r.status_code} {r.text[:200]}"
                    )
                    if r.status_code < 500:
                        break
                    await asyncio.sleep(0.2)
                await asyncio.sleep(every_s)

    # -- the Watch -------------------------------------------------------------------------
    async def watcher(self, ready: asyncio.Event, heads) -> None:
        """Watches the queue, dropping the stream every 1-3 s and resuming from its cursor;
        ends once it has seen each shard's head (`await heads()`) after stop_watching."""
        c, cursor = self.client(), b""
        last: dict[int, int] = {}
        while True:
            if self.stop_watching.is_set():
                want = await heads()
                if all(last.get(s, 0) >= h for s, h in want.items()):
                    return
            op = self.history.invoke("watch", "watcher", cursor=cursor.hex())
            got: list[tuple[int, int]] = []
            op.value = got
            loop = asyncio.get_running_loop()
            drop_at = loop.time() + self.rng.uniform(1.0, 3.0)
            try:
                async with asyncio.timeout_at(drop_at):
                    req = J.WatchRequest(selector=J.Selector(queue=self.queue), cursor=cursor)
                    async for msg in c.watch(req, headers=self.headers):
                        if msg.HasField("event"):
                            got.append((msg.event.shard, msg.event.seq))
                            last[msg.event.shard] = msg.event.seq
                        if msg.cursor:
                            cursor = msg.cursor
                        if msg.ready:
                            ready.set()
                self.history.ok(op, got)
            except (TimeoutError, ConnectError) as e:
                if loop.time() >= drop_at:  # the planned reconnect (the client reports it as cancelled)
                    self.history.ok(op, got)
                    continue
                self.history.info(
                    op, f"{e.code.name}: {e.message}" if isinstance(e, ConnectError) else "timeout"
                )
                op.value = got
                await asyncio.sleep(0.2)

    # -- the vandal ------------------------------------------------------------------------
    def bad_requests(self) -> list[tuple[str, str, bytes, dict]]:
        svc = "/loam.jobs.v1.JobsService/"
        deep = json.dumps({"name": "t", "data": json.loads("[" * 300 + "]" * 300)})
        junk = bytes(self.rng.randrange(256) for _ in range(self.rng.randrange(1, 200)))
        proto = {"content-type": "application/proto"}
        res = "/resonate/"

        def envelope(kind: str, data) -> bytes:
            return json.dumps(
                {"kind": kind, "head": {"corrId": "v", "version": RESONATE_VERSION}, "data": data}
            ).encode()

        js = {"content-type": "application/json"}
        return [
            ("POST", svc + "Enqueue", junk, proto),
            ("POST", svc + "Enqueue", junk, js),
            ("POST", svc + "Enqueue", b"null", js),
            ("POST", svc + "Enqueue", json.dumps({"queue": self.queue, "task": {"name": "t"}, "opt": {}}).encode(), js),
            ("POST", svc + "Enqueue", json.dumps({"queue": self.queue, "task": {"name": "t", "payload": {"data": "!!!"}}}).encode(), js),
            ("POST", svc + "Lease", json.dumps({"queues": [".."], "worker": "v"}).encode(), js),
            ("POST", svc + "Complete", json.dumps({"token": {"queue": self.queue, "job": "x" * 5000, "epoch": "1"}}).encode(), js),
            ("POST", f"/v1/queues/{self.queue}/jobs", deep.encode(), js),
            ("POST", f"/v1/queues/{self.queue}/jobs", json.dumps({"name": "t", "priority": "3"}).encode(), js),
            ("POST", f"/v1/queues/{self.queue}/jobs", base64.b64encode(junk), js),
            ("POST", f"/v1/queues/{self.queue}:pause", b"", {"content-type": "text/plain", "origin": "http://evil.example"}),
            ("GET", f"/v1/queues/{self.queue}/jobs?page_size=-1", b"", {}),
            ("GET", "/v1/queues", b"", {"host": "attacker.example"}),
            ("PUT", "/v1/quotas", json.dumps({"stored_jobs": -1}).encode(), js),
            ("PUT", "/v1/quotas", json.dumps({"stored_jobs": "3"}).encode(), js),
            # malformed Resonate envelopes: unknown kind, wrong version, data not an object, deep JSON, junk
            ("POST", res, envelope("promise.nope", {}), js),
            ("POST", res, json.dumps({"kind": "promise.get", "head": {"corrId": "v", "version": "1999-01-01"}, "data": {"id": "x"}}).encode(), js),
            ("POST", res, envelope("promise.create", []), js),
            ("POST", res, envelope("task.acquire", {"id": "nope", "version": 7, "pid": "v", "ttl": 1}), js),
            ("POST", res, ("[" * 50_000 + "]" * 50_000).encode(), js),
            ("POST", res, junk, js),
        ]  # fmt: skip

    async def vandal(self) -> None:
        async with httpx.AsyncClient(base_url=self.url, timeout=10) as http:
            while not self.stop_producing.is_set():
                method, path, body, headers = self.rng.choice(self.bad_requests())
                self.history.bad_inputs += 1
                try:
                    r = await http.request(
                        method, path, content=body or None, headers={**self.headers, **headers}
                    )
                except httpx.HTTPError:
                    continue  # the gateway is down (a fault): nothing answered
                if r.status_code == 500 or r.status_code < 400:
                    self.history.bad_input_failures.append(f"{method} {path}: {r.status_code} {r.text[:200]}")
                await asyncio.sleep(0.02)
