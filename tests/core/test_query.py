"""JobQuery as a console or BullMQ's getJobs uses it, on every backend: newest first,
page after page with nothing missed or repeated, by state (across shards), by name and
time range, and refusals for bad input."""

from __future__ import annotations

import pytest

from loam_common import ids
from loam_common.errors import InvalidArgument, NotFound
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import states as S
from loam_common.jobs.complete import Ok
from loam_common.jobs.enqueue import job_enqueue
from loam_common.jobs.new_job import NewJob
from loam_common.jobs.query import MAX_PAGE, job_query

NS = "acme"
SEC = 1_000_000_000


_made = 0


async def enqueue_at(store, clock, queue: str = "q", name: str = "t") -> str:
    """Enqueue with an id whose ULID time is the store clock's, as the server's ids
    are (ids.new_ulid itself is monotonic per process, so it cannot go back in time)."""
    global _made
    _made += 1
    job_id = ids.ulid_floor(clock.now_ns())[:-6] + f"{_made:06d}"
    job = NewJob(job_id, pb.TaskSpec(name=name), pb.EnqueueOpts())
    (res,) = await store.transact(job_enqueue, NS, queue, [job])
    return res.job_id


async def all_pages(store, page_size: int, **q) -> tuple[list[str], int]:
    """Every page of a query: the ids in order, and how many pages it took."""
    out, token, pages = [], "", 0
    while True:
        jobs, token = await store.snapshot(
            job_query,
            NS,
            "q",
            q.get("states"),
            q.get("name"),
            q.get("since_ns", 0),
            q.get("until_ns", 0),
            page_size,
            token,
        )
        pages += 1
        assert len(jobs) <= page_size
        out.extend(j.id for j in jobs)
        if not token:
            return out, pages


async def test_all_jobs_newest_first_across_pages_without_duplicates_or_gaps(store, clock):
    made = []
    for _ in range(25):
        made.append(await enqueue_at(store, clock))
        clock.advance(1_000_000)
    got, pages = await all_pages(store, 7)
    assert got == made[::-1]
    assert pages == 4  # 7 + 7 + 7 + 4: the last full page knows whether more follow


async def test_finished_jobs_by_finish_time_merged_across_shards(store, core, clock, configure):
    await configure("q", shards=4)
    finished = []
    for _ in range(20):
        await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="t"))
        (job,) = await core.jobs.lease(NS, ["q"], "w", 1)
        clock.advance(SEC)
        await core.jobs.complete(NS, "q", job.id, job.epoch, Ok())
        finished.append(job.id)
    got, _ = await all_pages(store, 3, states=[S.COMPLETED])
    assert got == finished[::-1]
    jobs, _ = await store.snapshot(job_query, NS, "q", [S.COMPLETED], None, 0, 0, 100, "")
    assert len({j.shard for j in jobs}) > 1  # the merge really crossed shards
    since = clock.now_ns() - 5 * SEC + 1  # the last 5 finished: the index bounds the scan
    got, _ = await all_pages(store, 2, states=[S.COMPLETED], since_ns=since)
    assert got == finished[:-6:-1]


async def test_states_are_listed_one_after_another_in_the_order_asked(store, core, clock):
    done = []
    for _ in range(3):
        await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="t"))
        (job,) = await core.jobs.lease(NS, ["q"], "w", 1)
        await core.jobs.complete(NS, "q", job.id, job.epoch, Ok())
        done.append(job.id)
    waiting = [(await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="t"))).job_id for _ in range(3)]
    prio = (await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="t"), pb.EnqueueOpts(priority=4))).job_id
    later = pb.EnqueueOpts(not_before=pb.Delay(delay_ns=SEC))
    delayed = (await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="t"), later)).job_id
    (active,) = await core.jobs.lease(NS, ["q"], "w", 1)  # the oldest waiting job

    got, _ = await all_pages(store, 2, states=[S.WAITING, S.COMPLETED, S.PRIORITIZED])
    assert got == waiting[:0:-1] + done[::-1] + [prio]
    assert (await all_pages(store, 10, states=[S.ACTIVE]))[0] == [active.id]
    assert (await all_pages(store, 10, states=[S.DELAYED, S.DELAYED]))[0] == [delayed]


async def test_subject_backlogs_are_listed_with_their_state(store, core):
    first = (await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="t"), pb.EnqueueOpts(subject="s"))).job_id
    second = (await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="t"), pb.EnqueueOpts(subject="s"))).job_id
    got, _ = await all_pages(store, 10, states=[S.WAITING])
    assert sorted(got) == sorted([first, second])


async def test_name_filter_and_time_range(store, core, clock):
    made = {}
    for i in range(6):
        name = "a" if i % 2 else "b"
        job_id = await enqueue_at(store, clock, name=name)
        made[job_id] = (name, clock.now_ns())
        clock.advance(SEC)
    t0 = min(t for _, t in made.values())
    got, _ = await all_pages(store, 2, name="a")
    assert got == [j for j in list(made)[::-1] if made[j][0] == "a"]
    got, _ = await all_pages(store, 2, since_ns=t0 + 2 * SEC, until_ns=t0 + 4 * SEC)
    assert got == list(made)[3:1:-1]

    # With a state, the range applies to the time the job entered it.
    jobs, _ = await store.snapshot(job_query, NS, "q", [S.WAITING], "b", 0, t0 + SEC, 10, "")
    assert [j.id for j in jobs] == [list(made)[0]]


async def test_bad_input_is_refused(store, clock):
    await enqueue_at(store, clock)
    await enqueue_at(store, clock)
    page, token = await store.snapshot(job_query, NS, "q", None, None, 0, 0, 1, "")
    assert token
    with pytest.raises(InvalidArgument) as e:
        await store.snapshot(job_query, NS, "q", None, None, 0, 0, 1, "garbage!")
    assert e.value.field == "page_token"
    with pytest.raises(InvalidArgument) as e:  # a token from another query
        await store.snapshot(job_query, NS, "q", [S.WAITING], None, 0, 0, 1, token)
    assert e.value.field == "page_token"
    with pytest.raises(InvalidArgument) as e:
        await store.snapshot(job_query, NS, "q", [99], None, 0, 0, 1, "")
    assert e.value.field == "states"
    with pytest.raises(InvalidArgument) as e:
        await store.snapshot(job_query, NS, "q", None, None, 0, 0, -1, "")
    assert e.value.field == "page_size"
    with pytest.raises(InvalidArgument) as e:
        await store.snapshot(job_query, NS, "q", None, None, 5, 5, 1, "")
    assert e.value.field == "until_ns"
    with pytest.raises(InvalidArgument) as e:
        await store.snapshot(job_query, NS, "bad/name", None, None, 0, 0, 1, "")
    assert e.value.field == "queue"
    with pytest.raises(NotFound):
        await store.snapshot(job_query, NS, "nope", None, None, 0, 0, 1, "")
    page, _ = await store.snapshot(job_query, NS, "q", None, None, 0, 0, 10 * MAX_PAGE, "")
    assert len(page) == 2  # a large page size is capped, not refused


async def test_waiting_jobs_across_shards_page_by_page(store, core, configure):
    # Each shard numbers its ready entries on its own, so equal positions in several
    # shards are common: a page boundary between them must neither skip nor repeat.
    await configure("q", shards=4)
    made = {(await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="t"))).job_id for _ in range(30)}
    for size in (1, 3, 7):
        got, _ = await all_pages(store, size, states=[S.WAITING])
        assert len(got) == len(set(got)) == 30 and set(got) == made


async def test_a_sparse_filter_returns_short_pages_but_misses_nothing(store, clock, monkeypatch):
    from loam_common.jobs import query

    monkeypatch.setattr(query, "MAX_EXAMINED", 4)  # look at 4 entries per call at most
    wanted = []
    for i in range(20):
        job_id = await enqueue_at(store, clock, name="rare" if i % 6 == 0 else "common")
        if i % 6 == 0:
            wanted.append(job_id)
    got, pages = await all_pages(store, 2, name="rare")
    assert got == wanted[::-1]
    assert pages >= 5  # 20 entries, 4 per call
