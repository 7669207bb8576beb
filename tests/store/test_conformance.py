"""The store conformance suite: every test runs against every backend (see conftest).

Keys live under a per-test prefix so the suite can share one TiKV cluster.
"""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

from loam_common.effects import Ready
from loam_common.store import (
    COMMIT_TOKEN_PREFIX,
    Fault,
    RegionError,
    Store,
    StoreUnavailable,
    WriteConflict,
    open_store,
)

HOUR_NS = 3_600_000_000_000


@pytest.fixture
def ns() -> bytes:
    return b"test/" + os.urandom(6).hex().encode() + b"/"


def end_of(prefix: bytes) -> bytes:
    return prefix[:-1] + bytes([prefix[-1] + 1])


def faults_of(store: Store):
    return getattr(store.backend, "faults", None)


def u64(n: int) -> bytes:
    return n.to_bytes(8, "big")


# -- transitions used below -------------------------------------------------------------


def put(tx, key, value):
    tx.put(key, value)


def put_many(tx, items):
    for key, value in items:
        tx.put(key, value)


def get(tx, key):
    return tx.get(key)


def scan(tx, start, end, limit=None, reverse=False):
    return tx.scan(start, end, limit=limit, reverse=reverse)


def incr(tx, key):
    value = tx.get(key)
    n = (int.from_bytes(value, "big") if value else 0) + 1
    tx.put(key, u64(n))
    return n


class Boom(Exception):
    pass


# -- basic operations -------------------------------------------------------------------


async def test_get_put_delete(store, ns):
    a, b = ns + b"a", ns + b"b"
    await store.transact(put_many, [(a, b"1"), (b, b"2")])
    assert await store.snapshot(get, a) == b"1"
    assert await store.transact(get, b) == b"2"
    await store.transact(lambda tx: tx.delete(a))
    assert await store.snapshot(get, a) is None
    assert await store.snapshot(get, b) == b"2"
    await store.transact(put, b, b"")  # empty values are values, not deletions
    assert await store.snapshot(get, b) == b""
    await store.transact(lambda tx: tx.delete(ns + b"never-existed"))


async def test_batch_get(store, ns):
    keys = [ns + bytes([i]) for i in range(5)]
    await store.transact(put_many, [(k, b"v%d" % i) for i, k in enumerate(keys[:3])])

    def read(tx):
        return tx.batch_get([keys[0], keys[4], keys[2], keys[0], keys[3]])

    assert await store.snapshot(read) == {keys[0]: b"v0", keys[2]: b"v2"}

    def write_then_read(tx):
        tx.put(keys[4], b"new")
        tx.delete(keys[0])
        return tx.batch_get(keys)

    assert await store.transact(write_then_read) == {
        keys[1]: b"v1",
        keys[2]: b"v2",
        keys[4]: b"new",
    }


BINARY_SUFFIXES = [
    b"\x00",
    b"\x00\x00",
    b"\x00\x01",
    b"\x01",
    b"a",
    b"a\x00",
    b"b",
    b"\x7f",
    b"\x80",
    b"\xfe\xff",
    b"\xff",
    b"\xff\x00",
    b"\xff\xff",
]


async def test_scan_ranges_limits_reverse_binary_keys(store, ns):
    keys = [ns + s for s in BINARY_SUFFIXES]
    await store.transact(put_many, [(k, k[len(ns) :]) for k in reversed(keys)])
    end = end_of(ns)
    expected = [(k, k[len(ns) :]) for k in sorted(keys)]
    assert expected == [(k, k[len(ns) :]) for k in keys]  # the list above is in byte order

    assert await store.snapshot(scan, ns, end) == expected
    assert await store.snapshot(scan, ns, end, 4) == expected[:4]
    assert await store.snapshot(scan, ns, end, None, True) == expected[::-1]
    assert await store.snapshot(scan, ns, end, 3, True) == expected[::-1][:3]
    # [start, end): start included, end excluded
    sub = await store.snapshot(scan, ns + b"\x00\x01", ns + b"\xff")
    assert [k for k, _ in sub] == [ns + s for s in BINARY_SUFFIXES[2:10]]
    sub_rev = await store.snapshot(scan, ns + b"\x00\x01", ns + b"\xff", 2, True)
    assert [k for k, _ in sub_rev] == [ns + b"\xfe\xff", ns + b"\x80"]
    assert await store.snapshot(scan, ns + b"\xff\xff", end) == [(ns + b"\xff\xff", b"\xff\xff")]
    # empty ranges and zero limits
    assert await store.snapshot(scan, ns + b"b", ns + b"b") == []
    assert await store.snapshot(scan, ns + b"c", ns + b"b") == []
    assert await store.snapshot(scan, ns, end, 0) == []
    assert await store.snapshot(scan, ns + b"c", ns + b"d") == []
    # the same answers inside a write transaction
    assert await store.transact(scan, ns, end, 5, True) == expected[::-1][:5]


async def test_keys_of_any_length_sort_in_byte_order(store, ns):
    # LMDB holds at most 511 bytes of key itself; dedup ids and result keys can be 1 KiB.
    long_a = ns + b"a" * 600
    keys_ = sorted([ns + b"a", ns + b"a" * 511, long_a, long_a + b"\x00", long_a + b"b", ns + b"b" * 1500])
    await store.transact(put_many, [(k, b"%d" % len(k)) for k in keys_])
    end = end_of(ns)
    rows = [(k, b"%d" % len(k)) for k in keys_]
    assert await store.snapshot(scan, ns, end) == rows
    assert await store.snapshot(scan, ns, end, 3, True) == rows[::-1][:3]
    assert await store.snapshot(scan, long_a, ns + b"b") == rows[2:5]
    assert await store.snapshot(scan, ns + b"a\x00", long_a + b"a", 2) == rows[1:3]
    assert await store.snapshot(get, long_a + b"b") == b"%d" % len(long_a + b"b")
    assert await store.snapshot(get, long_a + b"c") is None

    def remove(tx):
        tx.delete(long_a)
        tx.delete(long_a + b"c")  # absent: nothing happens

    await store.transact(remove)
    assert [k for k, _ in await store.snapshot(scan, ns, end)] == [k for k in keys_ if k != long_a]


async def test_nested_savepoints_roll_back_to_each_level(store, ns):
    a, b, long_key = ns + b"a", ns + b"b", ns + b"L" * 700
    await store.transact(put_many, [(a, b"0"), (long_key, b"0")])

    def nested(tx):  # inside the savepoint the runner itself takes
        outer = tx.savepoint()
        tx.put(a, b"1")
        inner = tx.savepoint()
        tx.put(a, b"2")
        tx.put(b, b"2")
        tx.delete(long_key)
        tx.rollback_to(inner)
        seen = [(tx.get(a), tx.get(b), tx.get(long_key))]
        tx.put(b, b"3")
        tx.release(inner)
        seen.append(tx.get(b))
        tx.rollback_to(outer)
        seen.append((tx.get(a), tx.get(b)))
        tx.release(outer)
        tx.put(b, b"4")
        return seen

    assert await store.transact(nested) == [(b"1", None, b"0"), b"3", (b"0", None)]
    assert await store.snapshot(lambda tx: tx.batch_get([a, b, long_key])) == {
        a: b"0",
        b: b"4",
        long_key: b"0",
    }


async def test_a_savepoint_released_or_of_another_transaction_is_refused(store, ns):
    """The embedded backends' savepoints are objects checked before a rollback or a
    release; the memory model's are plain tuples, checked only for a rollback."""
    if type(store.backend).__name__.startswith("Memory"):
        pytest.skip("the memory model does not track released savepoints")
    a = ns + b"a"
    other: list[object] = []

    def first(tx):
        other.append(tx.savepoint())

    await store.transact(first)

    def misuse(tx):
        outer = tx.savepoint()
        inner = tx.savepoint()
        tx.put(a, b"1")
        errors = []
        for sp, act in ((other[0], tx.rollback_to), (object(), tx.release)):
            with pytest.raises(ValueError, match="not a savepoint of this transaction"):
                act(sp)
        tx.rollback_to(outer)  # rolls past inner
        for act in (tx.rollback_to, tx.release):
            with pytest.raises(ValueError, match="already released or rolled past") as info:
                act(inner)
            errors.append(str(info.value))
        tx.put(a, b"2")
        tx.release(outer)
        with pytest.raises(ValueError, match="already released"):
            tx.release(outer)
        return len(errors)

    assert await store.transact(misuse) == 2
    assert await store.snapshot(get, a) == b"2"  # the refusals changed nothing


async def test_read_your_writes(store, ns):
    end = end_of(ns)
    await store.transact(put_many, [(ns + b"a", b"1"), (ns + b"c", b"3"), (ns + b"e", b"5")])

    def fn(tx):
        seen = {}
        tx.put(ns + b"b", b"2")  # lands between committed keys
        tx.put(ns + b"c", b"33")  # overwrites a committed key
        tx.delete(ns + b"e")  # hides a committed key
        tx.put(ns + b"f", b"6")
        tx.delete(ns + b"f")  # put then delete in one txn
        tx.put(ns + b"g", b"7")
        seen["get"] = [tx.get(ns + k) for k in (b"a", b"b", b"c", b"e", b"f", b"g")]
        seen["scan"] = tx.scan(ns, end)
        seen["rev"] = tx.scan(ns, end, limit=2, reverse=True)
        seen["batch"] = tx.batch_get([ns + b"b", ns + b"e"])
        return seen

    seen = await store.transact(fn)
    assert seen["get"] == [b"1", b"2", b"33", None, None, b"7"]
    expected = [(ns + b"a", b"1"), (ns + b"b", b"2"), (ns + b"c", b"33"), (ns + b"g", b"7")]
    assert seen["scan"] == expected
    assert seen["rev"] == expected[::-1][:2]
    assert seen["batch"] == {ns + b"b": b"2"}
    assert await store.snapshot(scan, ns, end) == expected


# -- savepoints, atomicity, group commit ----------------------------------------------------


async def test_one_failing_transition_rolls_back_alone(store, ns):
    txn_of: dict[int, object] = {}

    def fn(tx, i):
        tx.put(ns + b"k/%03d" % i, b"x")
        txn_of[i] = tx
        if i % 3 == 0:
            tx.put(ns + b"poison", b"%d" % i)
            raise Boom(i)
        return i

    calls = (store.transact(fn, i) for i in range(50))
    results = await asyncio.gather(*calls, return_exceptions=True)
    for i, result in enumerate(results):
        if i % 3 == 0:
            assert isinstance(result, Boom) and result.args == (i,)
        else:
            assert result == i
    rows = await store.snapshot(scan, ns, end_of(ns))
    assert [k for k, _ in rows] == [ns + b"k/%03d" % i for i in range(50) if i % 3]
    if store.capabilities.group_commit:
        # Concurrent calls really did share transactions (objects kept alive: ids are unique).
        assert len({id(tx) for tx in txn_of.values()}) < 50


async def test_exception_leaves_nothing(store, ns):
    await store.transact(put_many, [(ns + b"keep", b"old"), (ns + b"gone", b"old")])

    def fn(tx):
        tx.put(ns + b"keep", b"new")
        tx.delete(ns + b"gone")
        for i in range(3):
            tx.put(ns + b"n%d" % i, b"x")
        tx.declare(Ready("ns", "failed"))
        raise Boom()

    sink = RecordingSink()
    store.add_sink(sink)
    try:
        with pytest.raises(Boom):
            await store.transact(fn)
    finally:
        store.remove_sink(sink)
    assert sink.ran == []  # a failed transition's effects never run
    rows = await store.snapshot(scan, ns, end_of(ns))
    assert rows == [(ns + b"gone", b"old"), (ns + b"keep", b"old")]


async def test_effects_run_on_caller_loop_before_result(store, ns):
    loop_thread = threading.get_ident()
    sink = RecordingSink()
    store.add_sink(sink)

    def fn(tx, name):
        tx.put(ns + name.encode(), b"1")
        tx.declare(Ready("ns", name))
        return name

    try:
        for name in ("a", "b"):
            assert await store.transact(fn, name) == name
            # ran before the await returned, on this loop
            assert sink.ran[-1] == ([Ready("ns", name)], loop_thread)

        if store.capabilities.group_commit:
            # An effect declared inside a savepoint that is rolled back is dropped.
            def nested(tx):
                tx.declare(Ready("ns", "outer"))
                sp = tx.savepoint()
                tx.put(ns + b"inner", b"1")
                tx.declare(Ready("ns", "inner"))
                tx.rollback_to(sp)
                tx.release(sp)
                return tx.get(ns + b"inner")

            assert await store.transact(nested) is None
            assert [e.queue for effects, _ in sink.ran for e in effects] == ["a", "b", "outer"]
            assert await store.snapshot(get, ns + b"inner") is None
    finally:
        store.remove_sink(sink)


@pytest.mark.parametrize("seed", range(40))
async def test_savepoints_agree_with_a_model(store, ns, seed):
    """Random puts, deletes, reads, scans and nested savepoints (rolled back to, released)
    in one transaction; every read and the committed result must match a plain model.
    SQLite keeps a savepoint's writes in its buffer until a scan needs them in SQLite, so
    this mixes both paths."""
    if not store.capabilities.group_commit:
        pytest.skip("savepoints are used by group commit only")
    import random

    keys = [ns + b"k%d" % i for i in range(6)]

    def fn(tx):
        rnd = random.Random(seed)  # the same operations on every attempt of a retry
        model: dict[bytes, bytes] = {k: v for k, v in zip(keys, (b"seed",) * 3, strict=False)}
        for k, v in model.items():
            tx.put(k, v)
        open_: list[tuple[object, dict]] = []  # (savepoint, the model when it was taken)
        for step in range(60):
            op = rnd.choice("ppddgsSSrR")
            k = rnd.choice(keys)
            if op == "p":
                v = b"v%d" % step
                tx.put(k, v)
                model[k] = v
            elif op == "d":
                tx.delete(k)
                model.pop(k, None)
            elif op == "g":
                assert tx.get(k) == model.get(k), (step, k)
            elif op == "s":
                lo, hi = sorted(rnd.sample(keys, 2))
                want = [(kk, model[kk]) for kk in sorted(model) if lo <= kk < hi]
                assert tx.scan(lo, hi) == want, step
            elif op == "S":
                open_.append((tx.savepoint(), dict(model)))
            elif op == "r" and open_:
                i = rnd.randrange(len(open_))
                sp, snapshot = open_[i]
                tx.rollback_to(sp)
                del open_[i + 1 :]
                model = dict(snapshot)
            elif op == "R" and open_:
                i = rnd.randrange(len(open_))
                tx.release(open_[i][0])
                del open_[i:]
        assert tx.batch_get(keys) == {k: model[k] for k in keys if k in model}
        return model

    model = await store.transact(fn)
    assert dict(await store.snapshot(scan, ns, end_of(ns))) == model


class RecordingSink:
    def __init__(self) -> None:
        self.ran: list[tuple[list, int]] = []

    def run(self, effects: list) -> None:
        self.ran.append((list(effects), threading.get_ident()))


async def test_batches_larger_than_max_batch(store, ns):
    small = Store(store.backend, max_batch=7, close_backend=False)
    try:
        await asyncio.gather(*(small.transact(put, ns + b"%03d" % i, b"") for i in range(100)))
    finally:
        await small.close()
    assert len(await store.snapshot(scan, ns, end_of(ns))) == 100


# -- isolation and concurrency ----------------------------------------------------------


async def off_loop(fn, *args):
    """Call the backend directly, as the runner would: on a worker thread (the TiKV client
    cannot run on the event loop's thread), retrying injected region errors."""

    def retrying():
        for _ in range(100):
            try:
                return fn(*args)
            except RegionError:
                continue
        raise AssertionError("region errors did not stop")

    return await asyncio.to_thread(retrying)


async def test_read_only_transaction_is_a_snapshot(store, ns):
    end = end_of(ns)
    await store.transact(put_many, [(ns + b"a", b"1"), (ns + b"b", b"2")])
    tx = await off_loop(lambda: store.backend.begin(read_only=True))
    try:
        assert await off_loop(tx.get, ns + b"a") == b"1"

        def change(tx2):
            tx2.put(ns + b"a", b"changed")
            tx2.delete(ns + b"b")
            tx2.put(ns + b"c", b"inserted")

        await store.transact(change)
        assert await off_loop(tx.get, ns + b"a") == b"1"
        assert await off_loop(tx.get, ns + b"c") is None
        assert await off_loop(tx.scan, ns, end) == [(ns + b"a", b"1"), (ns + b"b", b"2")]
        assert await off_loop(tx.batch_get, [ns + b"b", ns + b"c"]) == {ns + b"b": b"2"}
    finally:
        await asyncio.to_thread(tx.rollback)
    after = [(ns + b"a", b"changed"), (ns + b"c", b"inserted")]
    assert await store.snapshot(scan, ns, end) == after


async def test_snapshot_rejects_writes(store, ns):
    with pytest.raises(RuntimeError):
        await store.snapshot(put, ns + b"a", b"1")
    assert await store.snapshot(get, ns + b"a") is None


async def test_concurrent_increments_lose_nothing(store, ns):
    key = ns + b"counter"
    results = await asyncio.gather(*(store.transact(incr, key) for _ in range(200)))
    assert sorted(results) == list(range(1, 201))
    assert await store.snapshot(get, key) == u64(200)


async def test_two_runners_on_one_backend_lose_nothing(store, ns):
    key = ns + b"counter"
    other = Store(store.backend, close_backend=False)
    try:
        calls = [s.transact(incr, key) for s in (store, other) for _ in range(100)]
        await asyncio.gather(*calls)
    finally:
        await other.close()
    assert await store.snapshot(get, key) == u64(200)


async def test_pessimistic_transactions_with_locks(store, ns):
    key = ns + b"locked"

    def fn(tx):
        tx.lock_for_update([key])
        return incr(tx, key)

    await asyncio.gather(*(store.transact(fn, pessimistic=True) for _ in range(50)))
    assert await store.snapshot(get, key) == u64(50)


# -- retries and unknown commit outcomes -----------------------------------------------------


async def test_retryable_errors_from_the_function_are_retried(store, ns):
    failures = {"conflict": 2, "region": 2}

    def flaky(tx):
        tx.put(ns + b"attempt", b"x")
        for kind, error in (("conflict", WriteConflict), ("region", RegionError)):
            if failures[kind]:
                failures[kind] -= 1
                raise error(kind)
        return incr(tx, ns + b"n")

    assert await store.transact(flaky) == 1
    assert failures == {"conflict": 0, "region": 0}
    assert await store.snapshot(get, ns + b"n") == u64(1)


async def test_retries_run_out_as_store_unavailable(store, ns):
    impatient = Store(store.backend, max_retries=3, close_backend=False)
    attempts = 0

    def always_conflicts(tx):
        nonlocal attempts
        attempts += 1
        tx.put(ns + b"never", b"x")
        raise WriteConflict("always")

    try:
        with pytest.raises(StoreUnavailable):
            await impatient.transact(always_conflicts)
        assert attempts == 4
        assert await impatient.transact(incr, ns + b"ok") == 1  # the store still works
    finally:
        await impatient.close()
    assert await store.snapshot(get, ns + b"never") is None


async def test_every_logical_transaction_applies_exactly_once(store, ns):
    """Each call appends its id at the next sequence number: a transaction applied twice
    would show its id twice, one lost would leave a gap."""
    faults = faults_of(store)
    if faults is not None:
        # Make sure every fault kind happens at least once, whatever the random draws do.
        faults.schedule_commits(
            Fault.UNKNOWN_COMMITTED,
            Fault.UNKNOWN_NOT_COMMITTED,
            None,
            Fault.CONFLICT,
            Fault.UNKNOWN_COMMITTED,
            Fault.REGION,
            Fault.UNKNOWN_NOT_COMMITTED,
        )
        faults.schedule_reads(None, Fault.REGION, None, Fault.REGION)

    def append(tx, ident):
        n = incr(tx, ns + b"seq")
        tx.put(ns + b"log/" + u64(n), ident)
        return n

    async def worker(w):
        return [await store.transact(append, b"w%d-%d" % (w, i)) for i in range(25)]

    seqs = sum(await asyncio.gather(*(worker(w) for w in range(8))), [])
    assert sorted(seqs) == list(range(1, 201))
    rows = await store.snapshot(scan, ns + b"log/", end_of(ns + b"log/"))
    assert [k for k, _ in rows] == [ns + b"log/" + u64(n) for n in range(1, 201)]
    idents = [b"w%d-%d" % (w, i) for w in range(8) for i in range(25)]
    assert sorted(v for _, v in rows) == sorted(idents)
    if faults is not None:
        for kind in Fault:
            assert faults.injected[kind] >= 1, kind


async def test_commit_unknown_is_resolved_by_the_commit_token(store, ns):
    faults = faults_of(store)
    if faults is None:
        pytest.skip("needs a backend with an injectable fault plan")
    key = ns + b"n"
    runs = 0

    def counted_incr(tx):
        nonlocal runs
        runs += 1
        return incr(tx, key)

    # Pin the faults: the scheduled one, then none (random draws would add retries).
    faults.schedule_reads(*[None] * 10)
    faults.schedule_commits(Fault.UNKNOWN_COMMITTED)
    assert await store.transact(counted_incr) == 1
    assert runs == 1  # the token was found: committed, not run again
    assert faults.injected[Fault.UNKNOWN_COMMITTED] == 1
    assert await store.snapshot(get, key) == u64(1)

    faults.schedule_reads(*[None] * 10)
    faults.schedule_commits(Fault.UNKNOWN_NOT_COMMITTED, None)
    assert await store.transact(counted_incr) == 2
    assert runs == 3  # no token: run again, exactly once
    assert faults.injected[Fault.UNKNOWN_NOT_COMMITTED] == 1
    assert await store.snapshot(get, key) == u64(2)


async def test_a_transaction_that_wrote_nothing_writes_no_commit_token(store, ns):
    await store.transact(put, ns + b"k", b"v")
    before = await store.snapshot(_tokens)
    assert await store.transact(get, ns + b"k") == b"v"  # e.g. a lease that found no job
    assert await store.snapshot(_tokens) == before  # so an idle poller writes nothing


# -- clock and commit tokens ------------------------------------------------------------


async def test_transactions_use_the_store_clock(store):
    clock = store.clock
    assert clock is store.backend.clock
    t0 = clock.now_ns()
    assert await store.transact(lambda tx: tx.now_ns()) == t0
    clock.advance(5_000)
    assert await store.snapshot(lambda tx: tx.now_ns()) == t0 + 5_000


def _tokens(tx):
    return tx.scan(COMMIT_TOKEN_PREFIX, COMMIT_TOKEN_PREFIX[:-1] + b"0")


async def test_commit_tokens_are_written_and_swept(store, ns):
    for i in range(5):
        await store.transact(put, ns + b"%d" % i, b"")
    if not store.capabilities.unknown_commit_outcomes:
        assert await store.snapshot(_tokens) == []
        assert await store.sweep_commit_tokens() == 0
        return
    old = await store.snapshot(_tokens)
    assert len(old) >= 5
    assert all(len(k) == len(COMMIT_TOKEN_PREFIX) + 16 and len(v) == 8 for k, v in old)

    store.clock.advance(2 * HOUR_NS)
    for i in range(3):
        await store.transact(put, ns + b"new%d" % i, b"")
    cutoff = store.clock.now_ns() - HOUR_NS
    assert await store.sweep_commit_tokens(HOUR_NS) >= len(old)
    left = await store.snapshot(_tokens)
    assert len(left) >= 3
    assert all(int.from_bytes(v, "big") >= cutoff for _, v in left)
    assert not {k for k, _ in old} & {k for k, _ in left}


# -- lifecycle ----------------------------------------------------------------------------


async def test_closed_store_refuses_calls(store, ns):
    async with Store(store.backend, close_backend=False) as other:
        assert await other.transact(incr, ns + b"n") == 1
    with pytest.raises(StoreUnavailable):
        await other.transact(incr, ns + b"n")
    assert await store.snapshot(get, ns + b"n") == u64(1)


async def test_stop_iteration_reaches_the_caller_as_runtime_error(store, ns):
    def fn(tx):
        tx.put(ns + b"a", b"1")
        return next(iter(()))

    with pytest.raises(RuntimeError, match="StopIteration"):
        await store.transact(fn)
    assert await store.snapshot(get, ns + b"a") is None


# -- open_store (no backend parameter: runs once) -------------------------------------------


async def test_open_store_urls(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    urls = (f"lmdb:///{tmp_path}/abs.lmdb", "lmdb:rel.lmdb", f"sqlite:///{tmp_path}/abs.db", "sqlite:rel.db")
    for url in (*urls, "memory://"):
        async with open_store(url) as s:
            await s.transact(put, b"k", b"v")
            assert await s.snapshot(get, b"k") == b"v"
    assert (tmp_path / "abs.db").exists() and (tmp_path / "rel.db").exists()
    assert (tmp_path / "abs.lmdb" / "data.mdb").exists() and (tmp_path / "rel.lmdb" / "data.mdb").exists()
    bad_urls = ("sqlite:", "sqlite://host/x.db", "lmdb:", "lmdb://host/x", "lmdb:///")
    for bad in (*bad_urls, "postgres://x", "memory", "tikv://", "tikv://a,"):
        with pytest.raises(ValueError) as info:
            open_store(bad)
        assert repr(bad) in str(info.value) and "memory://" in str(info.value)
