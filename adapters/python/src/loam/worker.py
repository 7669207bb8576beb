"""The native worker: leases jobs in batches, runs their handlers, keeps their leases
alive, and records their outcomes in batches.

    lease (long-poll, max = free slots + prefetch)  →  buffer  →  up to `concurrency`
    handlers at once  →  outcome  →  completions made within `batch_delay` go out as
    one CompleteBatch call

Nothing on the hot path costs a round trip per job: a lease brings many jobs, and the
completions of many jobs share one call. Each job held (buffered or running) has its
lease extended at a third of its length, so a handler may run longer than the lease.
A handler's exception retries the job (spending an attempt, with the job's backoff);
`UnrecoverableError` fails it at once; `Retry(after=...)` retries after a set time; a
returned `Outcome` is used as it is.

`stop()` is graceful: no more leases, the jobs not started go back at once
(Outcome.Release, no attempt spent), the running ones finish and their outcomes are
sent before `run()` returns."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import logging
import signal
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from loam.client import Client, worker_id
from loam.errors import (
    DeadlineExceeded,
    Fenced,
    InvalidState,
    JobsError,
    NotFound,
    PermanentError,
    Retry,
    Unavailable,
    UnrecoverableError,
)
from loam.options import Outcome
from loam.views import LeasedJob
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as jpb

log = logging.getLogger("loam.worker")

Handler = Callable[[LeasedJob], Any]
MAX_LEASE = 1000  # the server's cap on one lease call


@dataclass(slots=True)
class _Held:
    job: LeasedJob
    length: float  # lease length, seconds
    next_extend: float  # loop time
    extending: bool = False
    lost: bool = False  # the lease was taken back (fenced, removed, past its timeout)


class Worker:
    """Runs `handler(job)` for jobs of `queues`.

    `handler` is one callable for every task name, or a mapping name → callable (then
    only those names are leased; a "*" entry takes the rest). Handlers may be async
    functions (run on the loop) or plain functions (run in a thread pool of
    `concurrency` threads). What a handler returns is the job's result.

    `prefetch`: jobs leased ahead of free slots (default `concurrency`), so a slot never
    waits on a round trip. `wait`: the long-poll of one lease call, seconds.
    `batch_delay`: how long a completion waits for others to share its call."""

    def __init__(
        self,
        client: Client,
        queues: str | Iterable[str],
        handler: Handler | Mapping[str, Handler],
        *,
        concurrency: int = 10,
        prefetch: int | None = None,
        wait: float = 5.0,
        names: Iterable[str] | None = None,
        worker: str | None = None,
        batch_delay: float = 0.002,
        max_batch: int = 500,
        executor: ThreadPoolExecutor | None = None,
        subject_batch: int = 0,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.client = client
        self.queues = [queues] if isinstance(queues, str) else list(queues)
        if isinstance(handler, Mapping):
            self._handlers: dict[str, Handler] = dict(handler)
            self._default = self._handlers.pop("*", None)
            if names is None and self._default is None:
                names = list(self._handlers)
        else:
            self._handlers, self._default = {}, handler
        self.names = list(names) if names else None
        self.concurrency = concurrency
        self.prefetch = concurrency if prefetch is None else max(prefetch, 0)
        self.wait = wait
        self.id = worker or worker_id()
        self.batch_delay = batch_delay
        self.max_batch = max_batch
        # Lease a subject's consecutive jobs together; they run one after another, in order.
        self.subject_batch = subject_batch
        self._busy_subjects: set[str] = set()
        # A subject batch's jobs waiting for the job of their subject running here, in
        # order, and the subjects whose running job finished with jobs behind it.
        self._behind: dict[str, deque[LeasedJob]] = {}
        self._behind_count = 0
        self._subjects_freed: deque[str] = deque()
        self._executor = executor
        self._own_executor = executor is None

        # what this worker holds
        self._buffer: deque[LeasedJob] = deque()  # leased, not started
        self._running: dict[asyncio.Task[None], LeasedJob] = {}
        self._held: dict[str, _Held] = {}  # every job whose lease we keep alive
        self._reports: dict[str, asyncio.Task[None]] = {}
        # completions waiting to share a call, and the calls in flight
        self._pending: list[tuple[jpb.CompleteRequest, LeasedJob]] = []
        self._flush_timer: asyncio.TimerHandle | None = None
        self._flushing: set[asyncio.Task[None]] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._task: asyncio.Task[None] | None = None
        self._async_handlers: dict[Any, bool] = {}

        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._room = asyncio.Event()  # a slot or buffer space freed
        self._beat = asyncio.Event()  # a job to keep alive arrived
        self._stop = asyncio.Event()
        self._stopping = False
        self._poll_cap: float | None = None
        self._last_activity = 0.0

        self.processed = 0  # completed Ok
        self.retried = 0
        self.failed = 0
        self.released = 0

    # -- lifecycle -------------------------------------------------------------------
    async def run(self, *, handle_signals: bool = False) -> None:
        """Work until `stop()` (or SIGINT/SIGTERM with `handle_signals`), then shut down
        gracefully and return."""
        loop = self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._last_activity = loop.time()
        if self._own_executor:
            self._executor = ThreadPoolExecutor(self.concurrency, thread_name_prefix="loam-worker")
        if handle_signals:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, self.stop)
        leaser = asyncio.create_task(self._lease_loop(), name="loam-lease")
        beater = asyncio.create_task(self._heartbeat_loop(), name="loam-heartbeat")
        try:
            await self._stop.wait()
            await self._shutdown(leaser)
        finally:
            beater.cancel()
            leaser.cancel()
            for t in [*self._running, *self._tasks]:
                t.cancel()
            await asyncio.gather(beater, leaser, *self._running, *self._tasks, return_exceptions=True)
            if self._buffer or self._behind_count or self._pending or self._flushing:  # torn down: hand back
                self._release_unstarted()
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await asyncio.wait_for(self._flush_all(), 5)
            self._stopping = False  # so the worker can run again
            self._stop.clear()
            if handle_signals:
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.remove_signal_handler(sig)
            if self._own_executor and self._executor is not None:
                self._executor.shutdown(wait=False, cancel_futures=True)

    async def run_until_idle(self, idle: float = 0.5) -> None:
        """Work until no job has been in hand for `idle` seconds, then stop: for
        scripts and tests that drain what is there."""
        self._poll_cap = idle
        task = asyncio.create_task(self.run())
        try:
            while not task.done():
                await asyncio.sleep(min(idle / 4, 0.05))
                loop = asyncio.get_running_loop()
                if self._in_hand() == 0 and not self._held and loop.time() - self._last_activity >= idle:
                    self.stop()
                    break
            await task
        finally:
            if not task.done():
                task.cancel()

    def start(self) -> asyncio.Task[None]:
        """Run in the background on the current loop; `await worker.shutdown()` later."""
        self._task = asyncio.create_task(self.run(), name=f"loam-worker {self.id}")
        return self._task

    def stop(self) -> None:
        """Ask for a graceful shutdown; callable from any thread or a signal handler."""
        loop = self._loop
        if loop is not None and threading.get_ident() != self._loop_thread:
            loop.call_soon_threadsafe(self.stop)
            return
        self._stopping = True
        self._stop.set()
        self._room.set()

    async def shutdown(self) -> None:
        """`stop()`, and wait for the background run that `start()` began to finish."""
        self.stop()
        if self._task is not None:
            await self._task

    async def _shutdown(self, leaser: asyncio.Task[None]) -> None:
        self._release_unstarted()
        if not leaser.done():
            # Its long poll is answered now, with any job leased for it meanwhile
            # (released below), instead of running out its wait.
            with contextlib.suppress(Exception):
                await self.client.end_lease_wait(self.queues, worker=self.id)
        await asyncio.gather(leaser, return_exceptions=True)
        self._release_unstarted()
        while self._running:
            await asyncio.gather(*self._running, return_exceptions=True)
        await self._flush_all()

    # -- leasing ---------------------------------------------------------------------
    def _in_hand(self) -> int:
        return len(self._running) + len(self._buffer) + self._behind_count

    async def _lease_loop(self) -> None:
        capacity = self.concurrency + self.prefetch
        low_water = max(1, capacity // 2)
        backoff = 0.1
        assert self._loop is not None
        while not self._stopping:
            room = capacity - self._in_hand()
            # With jobs still buffered, wait for room for a real batch, not one job.
            if room <= 0 or (self._buffer and room < low_water):
                self._room.clear()
                await self._room.wait()
                continue
            wait = self.wait if self._poll_cap is None else min(self.wait, self._poll_cap)
            if self._buffer:
                wait = 0  # there is work in hand: top up, do not park
            try:
                jobs = await self.client.lease(self.queues, max=min(room, MAX_LEASE), wait=wait, worker=self.id,
                                               names=self.names, subject_batch=self.subject_batch)  # fmt: skip
                backoff = 0.1
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the server is down or refused: say so, back off, go on
                log.warning("lease from %s failed: %s", ",".join(self.queues), e)
                try:
                    await asyncio.wait_for(self._stop.wait(), backoff)
                except TimeoutError:
                    pass
                backoff = min(backoff * 2, 5.0)
                continue
            if jobs:
                idle = not self._running
                self._received(jobs)
                if idle:  # their handlers start before the next poll is sent, not after
                    await asyncio.sleep(0)
            elif self._buffer:  # nothing more to be had now: let the buffer drain first
                self._room.clear()
                await self._room.wait()

    def _received(self, jobs: list[LeasedJob]) -> None:
        loop = self._loop
        assert loop is not None
        now = loop.time()
        self._last_activity = now
        for job in jobs:
            job._reporter = self._report
            length = job.lease_ns / 1e9
            self._held[job.id] = _Held(job, length, now + length / 3)
            self._buffer.append(job)
        if self._stopping:
            self._release_unstarted()
        else:
            self._fill()
        self._beat.set()  # after the handlers are started: they run first

    def _fill(self) -> None:
        if self.subject_batch > 1:
            return self._fill_subjects_in_order()
        while self._buffer and len(self._running) < self.concurrency and not self._stopping:
            self._start(self._buffer.popleft())

    def _start(self, job: LeasedJob) -> None:
        task = asyncio.create_task(self._run_job(job), name=f"loam-job {job.id}")
        self._running[task] = job

    def _fill_subjects_in_order(self) -> None:
        """`_fill` for a worker leasing subject batches: a subject's jobs arrive together
        and must run one at a time, in order, so a job whose subject is running here
        waits behind it (`_behind`, a queue per subject: a finished job hands its subject
        to the next one there) while other jobs start."""
        freed, behind_of = self._subjects_freed, self._behind
        while freed and len(self._running) < self.concurrency and not self._stopping:
            subject = freed.popleft()
            behind = behind_of[subject]
            job = behind.popleft()
            self._behind_count -= 1
            if not behind:
                del behind_of[subject]
            self._start(job)  # its subject stays busy
        while self._buffer and len(self._running) < self.concurrency and not self._stopping:
            job = self._buffer.popleft()
            subject = job.raw.opts.subject
            if subject:
                if subject in self._busy_subjects:
                    behind = behind_of.get(subject)
                    if behind is None:
                        behind = behind_of[subject] = deque()
                    behind.append(job)
                    self._behind_count += 1
                    continue
                self._busy_subjects.add(subject)
            self._start(job)

    def _subject_done(self, job: LeasedJob) -> None:
        """`job`'s handler is over: its subject goes to the next job behind it here, or is free."""
        subject = job.raw.opts.subject
        if subject in self._behind:
            self._subjects_freed.append(subject)
        else:
            self._busy_subjects.discard(subject)

    def _release_unstarted(self) -> None:
        """Hand back every job leased here and not started: the buffer's, and those
        behind their subject's running job."""
        jobs = [job for behind in self._behind.values() for job in behind]  # ahead of the buffer's
        jobs.extend(self._buffer)
        self._buffer.clear()
        self._behind.clear()
        self._behind_count = 0
        while self._subjects_freed:  # no job of theirs runs here any more
            self._busy_subjects.discard(self._subjects_freed.popleft())
        self._release(jobs)

    def _release(self, jobs: list[LeasedJob]) -> None:
        for job in jobs:
            self.released += 1
            self._complete(job, Outcome.release())

    # -- running ---------------------------------------------------------------------
    def _handler_for(self, job: LeasedJob) -> Handler | None:
        return self._handlers.get(job.name, self._default)

    async def _run_job(self, job: LeasedJob) -> None:
        try:
            outcome = await outcome_of(
                self._handler_for(job), job, executor=self._executor, cache=self._async_handlers
            )
        except asyncio.CancelledError:
            # Torn down mid-run: give the job back without spending an attempt.
            self._complete(job, Outcome.release())
            raise
        finally:
            self._running.pop(asyncio.current_task(), None)  # type: ignore[arg-type]
            self._subject_done(job)
            assert self._loop is not None
            self._last_activity = self._loop.time()
        kind = outcome.WhichOneof("kind")
        if kind == "ok":
            self.processed += 1
        elif kind == "retry":
            self.retried += 1
        elif kind == "fail":
            self.failed += 1
        pending = self._reports.pop(job.id, None)
        if pending is not None:  # its progress and logs land before its outcome
            await asyncio.gather(pending, return_exceptions=True)
        self._complete(job, outcome)
        self._fill()
        self._room.set()

    # -- reports (progress, logs), in order per job ------------------------------------
    def _report(self, job: LeasedJob, **kw: Any) -> None:
        loop = self._loop
        if loop is None:
            raise RuntimeError("the worker is not running")
        if threading.get_ident() != self._loop_thread:
            loop.call_soon_threadsafe(self._report_on_loop, job, kw)
        else:
            self._report_on_loop(job, kw)

    def _report_on_loop(self, job: LeasedJob, kw: dict[str, Any]) -> None:
        prev = self._reports.get(job.id)
        self._reports[job.id] = asyncio.create_task(self._send_report(prev, job, kw))

    async def _send_report(self, prev: asyncio.Task[None] | None, job: LeasedJob, kw: dict[str, Any]) -> None:
        if prev is not None:
            await asyncio.gather(prev, return_exceptions=True)
        progress = kw.pop("progress", None)
        try:
            await self.client.report(
                job.token, progress_json=progress, log=kw.get("log_line"), data=kw.get("data")
            )
        except JobsError as e:
            log.warning("report for job %s failed: %s", job.id, e)

    # -- completions, coalesced --------------------------------------------------------
    def _complete(self, job: LeasedJob, outcome: jpb.Outcome) -> None:
        self._pending.append((jpb.CompleteRequest(token=job.token, outcome=outcome), job))
        if len(self._pending) >= self.max_batch:
            self._flush()
        elif self._flush_timer is None and len(self._flushing) < 2:
            assert self._loop is not None
            self._flush_timer = self._loop.call_later(self.batch_delay, self._flush)

    def _flush(self) -> None:
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        while self._pending:
            batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch :]
            task = asyncio.create_task(self._send_batch(batch))
            self._flushing.add(task)
            task.add_done_callback(self._flushed)

    def _flushed(self, task: asyncio.Task[None]) -> None:
        self._flushing.discard(task)
        if self._pending and self._flush_timer is None:
            self._flush()  # what piled up while the call was out goes at once

    async def _flush_all(self) -> None:
        while self._pending or self._flushing:
            self._flush()
            if self._flushing:
                await asyncio.gather(*self._flushing, return_exceptions=True)

    async def _send_batch(self, batch: list[tuple[jpb.CompleteRequest, LeasedJob]]) -> None:
        try:
            results = await self._complete_with_retry([req for req, _ in batch])
        except Exception as e:
            # The leases run out and the server's stalled sweep gives the jobs back.
            log.error("could not record %d outcome(s): %s", len(batch), e)
            results = [e] * len(batch)
        for (req, job), res in zip(batch, results, strict=True):
            self._held.pop(job.id, None)
            if isinstance(res, Fenced):
                log.warning("job %s: %s", job.id, res)
            elif isinstance(res, BaseException) and not isinstance(res, InvalidState):
                log.warning(
                    "job %s: outcome %s not recorded: %s", job.id, req.outcome.WhichOneof("kind"), res
                )

    async def _complete_with_retry(self, reqs: list[jpb.CompleteRequest]) -> list[Any]:
        delay = 0.1
        for attempt in range(6):
            try:
                return await self.client.complete_batch(reqs)
            except (Unavailable, DeadlineExceeded):
                # Fenced by the epoch, so sending again cannot record an outcome twice.
                if attempt == 5:
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
        raise AssertionError("unreachable")

    # -- heartbeat ---------------------------------------------------------------------
    async def _heartbeat_loop(self) -> None:
        loop = self._loop
        assert loop is not None
        while True:
            now = loop.time()
            soonest = now + 1.0
            for held in list(self._held.values()):
                if held.extending or held.lost:
                    continue
                if held.next_extend <= now:
                    held.extending = True
                    t = asyncio.create_task(self._extend(held))
                    self._tasks.add(t)
                    t.add_done_callback(self._tasks.discard)
                else:
                    soonest = min(soonest, held.next_extend)
            self._beat.clear()
            try:
                await asyncio.wait_for(self._beat.wait(), max(soonest - loop.time(), 0.005))
            except TimeoutError:
                pass

    async def _extend(self, held: _Held) -> None:
        assert self._loop is not None
        try:
            await self.client.extend(held.job.token, held.length)
            held.next_extend = self._loop.time() + held.length / 3
        except (Fenced, NotFound, InvalidState) as e:
            held.lost = True  # reclaimed, removed or past its timeout: the outcome will be refused
            log.warning("job %s: lease lost: %s", held.job.id, e)
        except Exception as e:
            held.next_extend = self._loop.time() + min(held.length / 10, 1.0)
            log.warning("job %s: extend failed, will try again: %s", held.job.id, e)
        finally:
            held.extending = False
            self._beat.set()


# -- one job's handler → its outcome (the Worker and loam.testing.drain share it) --------
def _is_async(handler: Handler, cache: dict[Any, bool] | None) -> bool:
    known = cache.get(handler) if cache is not None else None
    if known is None:
        known = inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
            type(handler).__call__ if callable(handler) else None
        )
        if cache is not None:
            cache[handler] = known
    return known


async def outcome_of(
    handler: Handler | None,
    job: LeasedJob,
    *,
    executor: ThreadPoolExecutor | None = None,
    cache: dict[Any, bool] | None = None,
) -> jpb.Outcome:
    """Run `handler(job)` (async on the loop, sync in `executor`) and map what happened
    to an Outcome: a return value is Ok (a returned Outcome is used as is),
    UnrecoverableError is Fail, Retry is Retry after its delay, a timeout (the job's
    `timeout`, async handlers) or any other exception is Retry with the job's backoff."""
    if handler is None:
        return Outcome.fail(f"no handler for task {job.name!r} on this worker")
    try:
        if _is_async(handler, cache):
            if not job.opts.timeout_ns:
                result = await handler(job)
            else:
                async with asyncio.timeout(job.opts.timeout_ns / 1e9):
                    result = await handler(job)
        else:
            ctx = contextvars.copy_context()
            result = await asyncio.get_running_loop().run_in_executor(executor, ctx.run, handler, job)
            if inspect.isawaitable(result):
                result = await result
    except PermanentError as e:
        out = Outcome.retry(e)
        out.retry.error.permanent = True  # the server fails it: no retry
        return out
    except UnrecoverableError as e:
        return Outcome.fail(e, dead_letter=e.dead_letter)
    except Retry as e:
        return Outcome.retry(e, after=e.after)
    except TimeoutError as e:
        out = Outcome.retry(e)
        out.retry.error.code = "timeout"
        return out
    except Exception as e:
        return Outcome.retry(e)
    return result if isinstance(result, jpb.Outcome) else Outcome.ok(result)
