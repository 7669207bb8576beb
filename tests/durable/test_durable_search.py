"""`promise.search` on the SQLite store, in process with a ManualClock: answered from the
id order, the tag index or the state index, paged with a cursor, effective (timed-out)
states, and never a read of the whole namespace: a counting store shows how many
records one page touched."""

from __future__ import annotations

import pytest
from loam_durable import transitions as tr
from loam_durable.facade import DurableCore
from loam_durable.hub import Hub
from loam_durable.records import DurableError, dumps
from loam_durable.timers import DurableTimers

from loam_common import keys
from loam_common.store import ManualClock, SqliteBackend, Store

NS = "s1"
SEC = 1_000_000_000
TARGET = {"resonate:target": "poll://any@workers"}


@pytest.fixture
async def env(tmp_path):
    clock = ManualClock()
    store = Store(SqliteBackend(tmp_path / "store.db", clock=clock))
    core = DurableCore(store, Hub(), retry_ms=30_000)
    yield core, clock
    await store.close()


def now_ms(clock: ManualClock) -> int:
    return clock.now_ns() // 1_000_000


async def create(core: DurableCore, promise_id: str, timeout_at: int, **tags: str) -> None:
    await core.request(
        NS, "promise.create", {"id": promise_id, "timeoutAt": timeout_at, "param": {}, "tags": tags}
    )


async def search(core: DurableCore, **data) -> dict:
    status, out = await core.request(NS, "promise.search", data)
    assert status == 200
    return out


def ids(page: dict) -> list[str]:
    return [p["id"] for p in page["promises"]]


async def fill(core: DurableCore, clock: ManualClock) -> None:
    far = now_ms(clock) + 3600_000
    for i in range(30):  # a workflow's many steps: resolved, no tags of their own
        await create(core, f"wf-big:{i:02d}", far, **{"resonate:origin": "wf-big", "resonate:scope": "local"})
        await core.request(NS, "promise.settle", {"id": f"wf-big:{i:02d}", "state": "resolved"})
    await create(core, "order-1", far, team="blue", **TARGET)
    await create(core, "order-2", far, team="red", **TARGET)
    await create(core, "order-3", far, team="blue")
    await create(core, "other-1", far, team="blue")
    await core.request(NS, "promise.settle", {"id": "order-3", "state": "rejected_canceled"})


class CountingReads:
    """Counts the promise records a search reads (rows of `dur/p/`), by wrapping the
    transaction's scan and batch_get for one call."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, ns: str) -> None:
        self.prefix = keys.durable_promises(ns)
        self.records = 0
        real = tr.promise_search
        counter = self

        def counted(tx, fx, q):
            scan, batch_get = tx.scan, tx.batch_get

            def counting_scan(start, end, *a, **kw):
                rows = scan(start, end, *a, **kw)
                counter.records += sum(1 for k, _ in rows if k.startswith(counter.prefix))
                return rows

            def counting_batch_get(ks):
                found = batch_get(ks)
                counter.records += len(found)
                return found

            tx.scan, tx.batch_get = counting_scan, counting_batch_get
            try:
                return real(tx, fx, q)
            finally:
                tx.scan, tx.batch_get = scan, batch_get

        monkeypatch.setattr(tr, "promise_search", counted)


async def test_search_by_tag_reads_only_the_tagged_promises(env, monkeypatch):
    core, clock = env
    await fill(core, clock)
    reads = CountingReads(monkeypatch, NS)
    page = await search(core, tags={"team": "blue"}, limit=100)
    assert ids(page) == ["order-1", "order-3", "other-1"]
    assert reads.records == 3  # the 30 steps and order-2 were never read
    assert "cursor" not in page


async def test_search_by_state_uses_the_state_index(env, monkeypatch):
    core, clock = env
    await fill(core, clock)
    reads = CountingReads(monkeypatch, NS)
    assert ids(await search(core, state="pending", limit=100)) == ["order-1", "order-2", "other-1"]
    assert reads.records == 3
    assert ids(await search(core, state="rejected", limit=100)) == ["order-3"]
    assert ids(await search(core, state="rejected_canceled", tags={"team": "blue"}, limit=100)) == ["order-3"]
    assert ids(await search(core, state="resolved", limit=100)) == [f"wf-big:{i:02d}" for i in range(30)]


async def test_search_by_id_pattern_scans_its_prefix_only(env, monkeypatch):
    core, clock = env
    await fill(core, clock)
    reads = CountingReads(monkeypatch, NS)
    assert ids(await search(core, id="order-*", limit=100)) == ["order-1", "order-2", "order-3"]
    assert reads.records == 3
    assert ids(await search(core, id="order-*2", limit=100)) == ["order-2"]
    assert ids(await search(core, id="*-1", limit=100)) == ["order-1", "other-1"]
    # resonate:origin is the id a workflow's promises extend: found by that prefix too
    page = await search(core, tags={"resonate:origin": "wf-big"}, state="resolved", limit=100)
    assert len(page["promises"]) == 30


async def test_search_pages_with_a_cursor_without_repeats_or_gaps(env):
    core, clock = env
    await fill(core, clock)
    seen: list[str] = []
    page = await search(core, state="resolved", limit=7)
    while True:
        seen += ids(page)
        if "cursor" not in page:
            break
        assert len(page["promises"]) == 7
        page = await search(core, state="resolved", limit=7, cursor=page["cursor"])
    assert seen == [f"wf-big:{i:02d}" for i in range(30)]
    # the same over the tag index and the id order
    first = await search(core, tags={"team": "blue"}, limit=2)
    rest = await search(core, tags={"team": "blue"}, limit=2, cursor=first["cursor"])
    assert ids(first) + ids(rest) == ["order-1", "order-3", "other-1"]
    first = await search(core, id="order-*", limit=1)
    rest = await search(core, id="order-*", limit=5, cursor=first["cursor"])
    assert ids(first) + ids(rest) == ["order-1", "order-2", "order-3"]


async def test_search_reports_effective_states_and_moves_the_index(env):
    core, clock = env
    soon = now_ms(clock) + 1000
    await create(core, "late-targeted", soon, **TARGET)  # a timer settles it
    await create(core, "late-plain", soon)  # no timer: settled when read
    clock.advance(2 * SEC)
    assert ids(await search(core, state="pending", limit=10)) == []
    timed_out = await search(core, state="rejected_timedout", limit=10)
    assert ids(timed_out) == ["late-plain", "late-targeted"]
    assert all(p["state"] == "rejected_timedout" for p in timed_out["promises"])


async def test_retention_removes_the_index_rows(env):
    core, clock = env
    await create(core, "gone", now_ms(clock) + 3600_000, team="x", **TARGET)
    assert ids(await search(core, tags={"team": "x"})) == ["gone"]
    await core.request(NS, "promise.settle", {"id": "gone", "state": "resolved"})
    await core.set_retention(NS, 1)
    clock.advance(2 * SEC)
    assert await core.transact(NS, tr.retention_sweep) == 1

    def index_left(tx):
        return [
            key
            for prefix in (keys.durable_promise_states(NS), keys.durable_promise_tags(NS))
            for key, _ in tx.scan(prefix, keys.prefix_end(prefix))
        ]

    assert await core.store.snapshot(index_left) == []
    assert ids(await search(core, tags={"team": "x"})) == []


async def test_promises_from_before_the_index_are_indexed_by_the_timers(env):
    core, clock = env
    await create(core, "new-one", now_ms(clock) + 3600_000, team="old")

    def store_without_index(tx, n):  # as a store written before the search index existed
        for i in range(n):
            p = {"id": f"old-{i:04d}", "state": "pending", "param": {}, "value": {}, "tags": {"team": "old"},
                 "timeoutAt": now_ms(clock) + 3600_000, "createdAt": now_ms(clock)}  # fmt: skip
            tx.put(keys.durable_promise(NS, p["id"]), dumps(p))
        tx.put(keys.durable_namespaces(NS), b"")

    await core.store.transact(store_without_index, 1200)
    assert ids(await search(core, tags={"team": "old"}, limit=1000)) == ["new-one"]
    timers = DurableTimers(core, "sweeper-1")
    for _ in range(3):  # 500 a pass
        await timers.run_once()
    page = await search(core, tags={"team": "old"}, limit=1000)
    rest = await search(core, tags={"team": "old"}, limit=1000, cursor=page["cursor"])
    assert ids(page) + ids(rest) == ["new-one"] + [f"old-{i:04d}" for i in range(1200)]
    assert len(ids(await search(core, state="pending", limit=1000))) == 1000


async def test_bad_search_is_refused(env):
    core, _ = env
    for data in (
        {"state": "done"},
        {"limit": 0},
        {"limit": 1001},
        {"cursor": 5},
        {"id": ""},
        {"tags": {"a": 1}},
    ):
        with pytest.raises(DurableError) as e:
            await core.request(NS, "promise.search", data)
        assert e.value.status == 400
