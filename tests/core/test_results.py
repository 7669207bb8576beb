"""The result store (spec §7.1.4) as Celery's result backend uses it, on every backend:
get/mget/set/delete, the chord counter that counts each member once, TTLs that hide a
record the moment it expires and a sweep that deletes it, and refusals for bad input."""

from __future__ import annotations

import pytest

from loam_common import results as R
from loam_common.errors import InvalidArgument
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.store import RESERVED_PREFIX

NS = "acme"
SEC = 1_000_000_000


def payload(data: bytes) -> pb.Payload:
    return pb.Payload(data=data, content_type="application/json")


async def stored(store) -> list[bytes]:
    rows = await store.snapshot(lambda tx: tx.scan(b"", b"\xff\xff"))
    registry = (RESERVED_PREFIX, b"n/", b"sys/registry")  # the namespace registry and its version
    return [k for k, _ in rows if not k.startswith(registry)]


async def get(store, key: str) -> bytes | None:
    p = await store.snapshot(R.result_get, NS, key)
    return p.data if p is not None else None


async def test_set_get_mget_delete(store):
    await store.transact(R.result_set, NS, "celery-task-meta-1", payload(b'{"status":"SUCCESS"}'), None)
    await store.transact(R.result_set, NS, "celery-task-meta-2", payload(b"2"), 60 * SEC)
    assert await get(store, "celery-task-meta-1") == b'{"status":"SUCCESS"}'
    got = await store.snapshot(R.result_mget, NS, ["celery-task-meta-2", "missing", "celery-task-meta-1"])
    assert [p.data if p else None for p in got] == [b"2", None, b'{"status":"SUCCESS"}']

    await store.transact(R.result_set, NS, "celery-task-meta-1", payload(b"new"), None)  # overwrite
    assert await get(store, "celery-task-meta-1") == b"new"
    assert await store.transact(R.result_delete, NS, "celery-task-meta-1") is True
    assert await store.transact(R.result_delete, NS, "celery-task-meta-1") is False
    assert await get(store, "celery-task-meta-1") is None


async def test_set_many_writes_in_order_in_one_transaction(store, clock):
    await store.transact(R.result_incr, NS, "counter", "m1", None)
    items = [("a", payload(b"1"), 0), ("b", payload(b"2"), 10 * SEC), ("a", payload(b"3"), 0),
             ("counter", payload(b"x"), 0)]  # fmt: skip
    await store.transact(R.result_set_many, NS, items)
    got = await store.snapshot(R.result_mget, NS, ["a", "b", "counter"])
    assert [p.data for p in got] == [b"3", b"2", b"x"]  # the later item for a key wins
    assert await store.transact(R.result_incr, NS, "counter", "m2", None) == 2  # members survive, as with set
    clock.advance(11 * SEC)
    assert await get(store, "b") is None  # each item's own TTL


async def test_incr_counts_each_member_once(store):
    key = "chord-unlock-g1"
    assert await store.transact(R.result_incr, NS, key, "task-a", None) == 1
    assert await store.transact(R.result_incr, NS, key, "task-a", None) == 1  # redelivered
    assert await store.transact(R.result_incr, NS, key, "task-b", None) == 2
    assert await store.transact(R.result_incr, NS, key, "task-b", None) == 2
    assert await store.transact(R.result_incr, NS, key, "task-c", None) == 3
    assert await get(store, key) == b"3"  # reads back like a Redis counter
    await store.transact(R.result_delete, NS, key)
    assert await stored(store) == []  # the members went with it
    assert await store.transact(R.result_incr, NS, key, "task-a", None) == 1


async def test_ttl_hides_the_record_at_once_and_the_sweep_deletes_it(store, clock):
    await store.transact(R.result_set, NS, "k", payload(b"v"), 10 * SEC)
    await store.transact(R.result_incr, NS, "c", "m1", 10 * SEC)
    clock.advance(9 * SEC)
    assert await get(store, "k") == b"v"
    assert await store.transact(R.sweep_results, NS, 100) == 0
    clock.advance(1 * SEC)
    assert await get(store, "k") is None  # expired, though not swept yet
    assert await store.snapshot(R.result_mget, NS, ["k", "c"]) == [None, None]
    assert await stored(store) != []
    assert await store.transact(R.sweep_results, NS, 100) == 2
    assert await stored(store) == []


async def test_expire_moves_the_expiry(store, clock):
    await store.transact(R.result_set, NS, "k", payload(b"v"), 10 * SEC)
    assert await store.transact(R.result_expire, NS, "k", 100 * SEC) is True
    clock.advance(20 * SEC)
    assert await store.transact(R.sweep_results, NS, 100) == 0  # the old entry moved
    assert await get(store, "k") == b"v"
    clock.advance(80 * SEC)
    assert await get(store, "k") is None
    assert await store.transact(R.sweep_results, NS, 100) == 1
    assert await stored(store) == []
    assert await store.transact(R.result_expire, NS, "k", SEC) is False  # nothing live to expire


async def test_ttl_zero_means_never_and_set_over_an_expired_counter_starts_clean(store, clock):
    await store.transact(R.result_set, NS, "forever", payload(b"v"), 0)
    await store.transact(R.result_incr, NS, "c", "m1", 5 * SEC)
    await store.transact(R.result_incr, NS, "c", "m2", 5 * SEC)
    clock.advance(3650 * 24 * 3600 * SEC)
    assert await get(store, "forever") == b"v"
    # The counter expired: its old members no longer count.
    assert await store.transact(R.result_incr, NS, "c", "m1", None) == 1


async def test_incr_renews_the_ttl_for_a_new_member(store, clock):
    await store.transact(R.result_incr, NS, "c", "m1", 10 * SEC)
    clock.advance(8 * SEC)
    await store.transact(R.result_incr, NS, "c", "m2", 10 * SEC)
    clock.advance(8 * SEC)
    assert await store.transact(R.sweep_results, NS, 100) == 0  # the expiry entry moved too
    assert await get(store, "c") == b"2"
    clock.advance(3 * SEC)
    assert await get(store, "c") is None
    assert await store.transact(R.sweep_results, NS, 100) == 1
    assert await stored(store) == []


async def test_the_sweeper_finds_a_namespace_that_only_has_results(store, clock, sweep):
    await store.transact(R.result_set, NS, "k", payload(b"v"), SEC)
    clock.advance(2 * SEC)
    report = await sweep()
    assert report.results == 1
    assert await stored(store) == []


@pytest.mark.parametrize(
    ("call", "field"),
    [
        ((R.result_set, "x" * 1025, payload(b"v"), None), "key"),
        ((R.result_set, "", payload(b"v"), None), "key"),
        ((R.result_set, "k", payload(b"v"), -1), "ttl_ns"),
        ((R.result_expire, "k", -1), "ttl_ns"),
        ((R.result_incr, "k", "", None), "member"),
        ((R.result_incr, "k", "m", -5), "ttl_ns"),
        ((R.result_get, "y" * 1025), "key"),
        ((R.result_mget, ["ok", ""]), "keys[1]"),
        ((R.result_delete, ""), "key"),
        ((R.result_set_many, [("a", payload(b"1"), 0), ("", payload(b"2"), 0)]), "items[1].key"),
        ((R.result_set_many, [("a", payload(b"1"), 0), ("k", payload(b"2"), -1)]), "items[1].ttl_ns"),
        ((R.result_set_many, [("a", payload(b"1"), 0)] * 1001), "items"),
    ],
)
async def test_bad_input_is_refused_and_changes_nothing(store, call, field):
    await store.transact(R.result_set, NS, "k", payload(b"v"), 10 * SEC)
    before = await stored(store)
    fn, *args = call
    with pytest.raises(InvalidArgument) as e:
        await store.transact(fn, NS, *args)
    assert e.value.field == field
    assert await stored(store) == before
    assert await get(store, "k") == b"v"
