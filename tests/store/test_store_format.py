"""The store's format version: `open_store` brings a store written in format 1 (a
subject's holder under `sj/`) to format 2 (under `sq/`, beside its backlog) before
anything reads it, and refuses a store of a newer format."""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from loam_common import keys, store_format
from loam_common.errors import IdempotencyConflict
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import sweeps
from loam_common.jobs.complete import Ok
from loam_common.store import Fault, FaultPlan, LmdbBackend, MemoryBackend, SqliteBackend, Store, open_store
from loam_queue_core import QueueCore

NS = "acme"
EMBEDDED = {"lmdb": (LmdbBackend, "store.lmdb"), "sqlite": (SqliteBackend, "store.db")}


@pytest.fixture(params=sorted(EMBEDDED))
def embedded(request, tmp_path):
    """(url, backend of a fresh store at that url) for each embedded store."""
    cls, name = EMBEDDED[request.param]
    path = str(tmp_path / name)
    return f"{request.param}:///{path}", lambda: cls(path)


async def enqueue(core: QueueCore, queue: str, subject: str) -> str:
    spec = pb.TaskSpec(name="t", payload=pb.Payload(data=b"x"))
    return (await core.jobs.enqueue(NS, queue, spec, pb.EnqueueOpts(subject=subject))).job_id


def as_format_1(tx) -> None:  # noqa: ANN001
    """Put every subject's holder key where format 1 kept it, and drop the version."""
    registry = keys.queue_registry(NS)
    for queue_key, _ in tx.scan(registry, keys.prefix_end(registry)):
        k = keys.QueueKeys(NS, keys.queue_from_registry_key(NS, queue_key))
        for key, holder in tx.scan(k.subject_backlogs(), keys.prefix_end(k.subject_backlogs())):
            if k.is_subject_holder(key):
                tx.put(k.subject_holders_format_1() + key[len(k.subject_backlogs()) :], holder)
                tx.delete(key)
    tx.delete(keys.store_format())


def subject_keys(tx, queue: str) -> list[bytes]:  # noqa: ANN001
    k = keys.QueueKeys(NS, queue)
    return [key for key, _ in tx.scan(k.q + b"s", k.q + b"t")]


async def test_a_format_1_store_has_its_subject_holders_moved_when_opened(embedded):
    url, backend = embedded
    store = Store(backend())
    core = QueueCore(store)
    first = [await enqueue(core, "q", "s1") for _ in range(3)]
    other = [await enqueue(core, "q2", "user/7") for _ in range(2)]
    running = (await core.jobs.lease(NS, ["q"], "w1", 10))[0]
    await store.transact(as_format_1)
    assert any(b"/sj/" in key for key in await store.snapshot(subject_keys, "q"))
    await store.close()

    store = open_store(url)
    try:
        assert store_format.stored_format(store.backend) == store_format.FORMAT
        for queue in ("q", "q2"):
            assert not any(b"/sj/" in key for key in await store.snapshot(subject_keys, queue))
        core = QueueCore(store)
        # The subjects are still held: nothing more of s1 while its first job runs, and
        # finishing it hands the subject on, in order.
        assert running.id == first[0]
        assert [j.id for j in await core.jobs.lease(NS, ["q"], "w1", 10)] == []
        await core.jobs.complete(NS, "q", running.id, running.epoch, Ok())
        order = []
        for queue in ("q", "q", "q2", "q2"):
            (job,) = await core.jobs.lease(NS, [queue], "w1", 10)
            order.append(job.id)
            await core.jobs.complete(NS, queue, job.id, job.epoch, Ok())
        assert order == first[1:] + other
    finally:
        await store.close()


async def test_opening_a_current_store_changes_nothing(embedded):
    url, _ = embedded
    async with open_store(url) as store:
        assert store_format.ensure_current(store.backend) == store_format.FORMAT
        assert store_format.stored_format(store.backend) == store_format.FORMAT


async def test_a_store_of_a_newer_format_is_refused_and_left_as_it_is(embedded):
    url, backend = embedded
    store = Store(backend())
    await store.transact(lambda tx: tx.put(keys.store_format(), keys.U64.pack(store_format.FORMAT + 1)))
    await store.close()
    with pytest.raises(store_format.NewerStoreFormat) as info:
        open_store(url)
    assert f"format {store_format.FORMAT + 1}" in str(info.value)
    raw = backend()
    try:
        assert store_format.stored_format(raw) == store_format.FORMAT + 1
    finally:
        raw.close()


async def test_the_move_is_tried_again_through_a_conflict_and_a_lost_acknowledgement():
    plan = FaultPlan()
    backend = MemoryBackend(faults=plan)
    store = Store(backend)
    try:
        core = QueueCore(store)
        ids = [await enqueue(core, "q", "s1") for _ in range(2)]
        await store.transact(as_format_1)
        plan.schedule_commits(Fault.CONFLICT, Fault.UNKNOWN_COMMITTED)
        assert store_format.ensure_current(backend) == 1
        assert plan.injected[Fault.CONFLICT] == 1 and plan.injected[Fault.UNKNOWN_COMMITTED] == 1
        assert store_format.stored_format(backend) == store_format.FORMAT
        assert not any(b"/sj/" in key for key in await store.snapshot(subject_keys, "q"))
        (job,) = await core.jobs.lease(NS, ["q"], "w1", 10)
        await core.jobs.complete(NS, "q", job.id, job.epoch, Ok())
        assert [j.id for j in await core.jobs.lease(NS, ["q"], "w1", 10)] == ids[1:]
    finally:
        await store.close()


def as_format_2_idempotency(tx, queue: str) -> int:  # noqa: ANN001
    """Put the queue's idempotency records where format 2 kept them (under the SHA-256
    of their key), and set the version to 2; the number of records moved."""
    k = keys.QueueKeys(NS, queue)
    moved = 0
    for key, _ in tx.scan(k.idempotency_expiry_all(), keys.prefix_end(k.idempotency_expiry_all())):
        idem_key = key[len(k.idempotency_expiry_all()) + 8 :].decode()
        record = k.idempotency(idem_key)
        tx.put(k.idempotency_format_2(idem_key), tx.get(record))
        tx.put(k.idempotency_expiry_all_format_2() + key[len(k.idempotency_expiry_all()) :][:8]
               + hashlib.sha256(idem_key.encode()).digest(), b"")  # fmt: skip
        tx.delete(record)
        tx.delete(key)
        moved += 1
    tx.put(keys.store_format(), keys.U64.pack(2))
    return moved


def idempotency_rows(tx, queue: str) -> list[bytes]:  # noqa: ANN001
    k = keys.QueueKeys(NS, queue)
    return [key for key, _ in tx.scan(k.q + b"i", k.q + b"j")]


async def test_format_2_idempotency_records_are_honoured_until_they_expire(embedded):
    """Format 3 keeps an idempotency record under its key; a store of format 2 keeps its
    records under the key's hash, which cannot be moved: they are read where they are, a
    retry of their request still gets its first answer, and they are swept once expired."""
    url, backend = embedded
    store = Store(backend())
    core = QueueCore(store)
    ttl = 1_000_000_000

    async def enqueue_keyed(key: str, data: bytes = b"1"):
        task = pb.TaskSpec(name="t", payload=pb.Payload(data=data))
        return await core.jobs.enqueue(
            NS, "q", task, pb.EnqueueOpts(idempotency=pb.Idempotency(key=key, ttl_ns=ttl))
        )

    first = await enqueue_keyed("req-1")
    assert (await enqueue_keyed("req-2")).created
    assert await store.transact(as_format_2_idempotency, "q") == 2
    await store.close()

    store = open_store(url)
    try:
        assert store_format.stored_format(store.backend) == store_format.FORMAT
        core = QueueCore(store)
        assert (await enqueue_keyed("req-1")) == first  # the first answer again
        with pytest.raises(IdempotencyConflict):
            await enqueue_keyed("req-1", b"2")
        new = await enqueue_keyed("req-3")  # a new key: format 3's place
        assert new.created and (await enqueue_keyed("req-3")).job_id == new.job_id
        k = keys.QueueKeys(NS, "q")
        assert (
            len([r for r in await store.snapshot(idempotency_rows, "q") if r.startswith(k.q + b"ik/")]) == 1
        )
        await asyncio.sleep(ttl / 1e9 + 0.1)
        assert await store.transact(sweeps.sweep_idempotency, NS, "q") == 3
        assert await store.snapshot(idempotency_rows, "q") == []
        assert (await enqueue_keyed("req-1", b"2")).created  # expired: the key is free again
    finally:
        await store.close()
