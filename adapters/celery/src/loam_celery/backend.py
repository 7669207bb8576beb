"""The result backend `loam://` (spec §7.1.4): Celery's key-value backend over Loam's
result store (ResultGet/MGet/Set/Delete/Incr/Expire).

- Every value is stored with `result_expires` as its TTL; the server expires keys, so
  beat needs no `celery.backend_cleanup` (`supports_autoexpire`).
- `implements_incr`: chords use the native counter, not the `chord_unlock` polling task.
  The counter is a set of members (`ResultIncr` with `member` = the header task id), so
  a header task that runs twice (redelivered after a lost worker, or a stalled lease)
  counts once. Of the calls that see the count reach the chord size exactly one added
  the last member; a one-time claim (`<chord key>.claim`, member = the task id) and a
  done marker (`<chord key>.done`) make the body fire once, and fire on a re-run of the
  claiming task if it died between claiming and publishing the body.
- `AsyncResult.get` long-polls the task's key (ResultGet with `wait_ns`) instead of
  polling every `interval`; its first look at a result also reads the results of tasks
  published after it from this process, so waiting on many in turn costs one call for
  many (`_ReadAhead`).
- GroupResult save/restore/delete are plain set/get/delete (the base class).
- A failure in a chain is stored for the steps after it (Celery's `_fail_chain`) and,
  here, also for the members of the groups among them, which never run: a caller
  waiting on such a group gets the failure instead of waiting forever (Celery's Redis
  backend waits forever there, celery#6437).

- The SUCCESS of a task acked before it ran is written behind: the pool process goes on
  to its next task while a thread of its own sends the result (write_behind.py).
  `acks_late` tasks, and every task with the option `write_behind` False, store theirs
  before the task reports back.

Options (`result_backend_transport_options`): `token_env` (default LOAM_TOKEN; a URL
with credentials is refused), `write_behind` (default True), `timeout`, `ssl`.
"""

from __future__ import annotations

import collections
import itertools
import threading
import time
from typing import Any

from celery import states
from celery.backends.base import KeyValueStoreBackend
from celery.exceptions import ChordError, TimeoutError
from celery.result import GroupResult, allow_join_result
from celery.utils.log import get_logger
from kombu.utils.encoding import bytes_to_str, ensure_bytes

from loam.errors import Unavailable
from loam_celery.connection import ImproperlyConfigured, Settings, client_for
from loam_celery.write_behind import WriteBehind

logger = get_logger(__name__)

MGET_BATCH = 1000
LONG_POLL_S = 10.0  # one ResultGet wait; the server caps it at 30 s
READ_AHEAD_MIN, READ_AHEAD_MAX = 4, 128  # results read together with an awaited one (_ReadAhead)
PUBLISHED_KEEP = 10_000  # published ids remembered for reading ahead
AHEAD_KEEP = 1_000  # finished results read ahead and kept for their own get


try:
    from celery.backends.base import _create_chord_error_with_cause as _chord_error
except ImportError:  # Celery < 5.7

    def _chord_error(message: str, original_exc: Any = None) -> ChordError:
        err = ChordError(message)
        err.__cause__ = original_exc if isinstance(original_exc, Exception) else None
        return err


_join_deadline = threading.local()  # set while a chord body's join runs in this thread


def _never_run_members(chain: Any) -> list[dict[str, Any]]:
    """The tasks inside the group steps of `chain` (a failed task's remaining steps, as
    dicts), through nested groups and chains, and inside the bodies of chord steps."""
    out: list[dict[str, Any]] = []

    def walk(sig: Any, inside_group: bool) -> None:
        if not isinstance(sig, dict):
            return
        kind = sig.get("subtask_type")
        kwargs = sig.get("kwargs") or {}
        if kind in ("group", "chain"):
            for task in kwargs.get("tasks") or ():
                walk(task, inside_group or kind == "group")
        elif kind == "chord":
            walk(kwargs.get("body"), inside_group)
        elif inside_group:
            out.append(sig)

    try:
        steps = list(chain or ())
    except TypeError:  # a request's chain may be a placeholder
        return out
    for step in steps:
        walk(step, False)
    return out


def _k(key: bytes | str) -> str:
    return bytes_to_str(key)


class _Retrying:
    """The client's calls, each after this process's results written behind (so it comes
    after them) and tried again on Unavailable (twice, with backoff): every result-store
    call is idempotent (sets, reads, deletes, member counts)."""

    def __init__(self, client: Any, behind: WriteBehind, timeout: float) -> None:
        self._client = client
        self._behind = behind
        self._timeout = timeout

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self._client, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self._behind.flush(self._timeout)
            for delay in (0.1, 0.5, None):
                try:
                    return fn(*args, **kwargs)
                except Unavailable:
                    if delay is None:
                        raise
                    time.sleep(delay)
            raise AssertionError("unreachable")

        return call


class _ReadAhead:
    """Reads the results of tasks this process published together with the one a `get`
    waits for, so a process that waits on many results in turn makes one call for many
    (Redis's backend gets the same from subscribing at publish time).

    - Published ids are kept in order (the newest PUBLISHED_KEEP). Waiting on one drops
      it and every id published before it: results are mostly awaited in the order they
      were sent, and an older one awaited later is read on its own, as without this.
    - The first look at a result is one ResultMGet of it and of up to `n` ids published
      after it; finished results among those are kept (the newest AHEAD_KEEP) for their
      own `get`, which then makes no call. `n` doubles while most of them were finished
      and halves otherwise.
    - When the awaited result was not finished at the first look, the caller is ahead of
      the workers: the next gets long-poll at once (1, 2, 4, ... up to 8 of them in a
      row) instead of looking first, so a caller that keeps up makes one call per result.

    Only finished results (SUCCESS, FAILURE, REVOKED) are kept, and only until their `get`
    or `forget`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._published: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._ahead: collections.OrderedDict[str, dict[str, Any]] = collections.OrderedDict()
        self._n = READ_AHEAD_MIN
        self._misses = 0  # first looks in a row that found the awaited result unfinished
        self._skip = 0  # gets left that long-poll without a first look

    def published(self, task_id: str) -> None:
        with self._lock:
            self._published[task_id] = None
            if len(self._published) > PUBLISHED_KEEP:
                self._published.popitem(last=False)

    def drop(self, task_id: str) -> None:
        with self._lock:
            self._ahead.pop(task_id, None)
            self._published.pop(task_id, None)

    def first_look(self, backend: LoamBackend, task_id: str) -> dict[str, Any] | None:
        """The finished result of `task_id` if it was read ahead or is finished now, else
        None (the caller long-polls)."""
        with self._lock:
            meta = self._ahead.pop(task_id, None)
            if meta is not None:
                return meta
            if task_id in self._published:
                while self._published:
                    tid, _ = self._published.popitem(last=False)
                    if tid == task_id:
                        break
            if self._skip > 0:
                self._skip -= 1
                return None
            ahead = list(itertools.islice(self._published, self._n))
        keys = [task_id, *ahead]
        values = backend.mget([backend.get_key_for_task(k) for k in keys])
        metas: dict[str, dict[str, Any]] = {}
        for tid, value in zip(keys, values, strict=True):
            if value is not None:
                meta = backend.decode_result(value)
                if meta["status"] in states.READY_STATES:
                    metas[tid] = meta
        with self._lock:
            for tid in ahead:
                if tid in metas and tid in self._published:
                    del self._published[tid]
                    self._ahead[tid] = metas[tid]
            while len(self._ahead) > AHEAD_KEEP:
                self._ahead.popitem(last=False)
            if ahead:
                done = sum(1 for tid in ahead if tid in metas)
                self._n = (
                    min(self._n * 2, READ_AHEAD_MAX)
                    if 2 * done > len(ahead)
                    else max(self._n // 2, READ_AHEAD_MIN)
                )
            if task_id in metas:
                self._misses = 0
                return metas[task_id]
            self._misses = min(self._misses + 1, 4)
            self._skip = 1 << (self._misses - 1)
        return None


class LoamBackend(KeyValueStoreBackend):
    supports_autoexpire = True
    supports_native_join = True
    implements_incr = True
    persistent = True

    def __init__(self, app: Any = None, url: str | None = None, **kwargs: Any) -> None:
        super().__init__(app=app, url=url, **kwargs)
        options = dict(self.app.conf.get("result_backend_transport_options") or {})
        self.settings = Settings.from_url(url or self.app.conf.result_backend or "loam://", options)
        self._reader = _ReadAhead()
        self._behind = WriteBehind(self._send_behind)
        self._write_behind = options.get("write_behind", True)
        if not isinstance(self._write_behind, bool):
            raise ImproperlyConfigured(f"result_backend_transport_options: write_behind must be True or False, "
                                       f"not {self._write_behind!r}")  # fmt: skip

    @property
    def client(self) -> Any:
        # per process: a forked pool child gets its own
        return _Retrying(client_for(self.settings), self._behind, self.settings.timeout)

    def _send_behind(self, writes: list[tuple[str, bytes, float | None]]) -> None:
        client_for(self.settings).result_set_many(writes)

    def _ttl(self, seconds: Any) -> float | None:
        return float(seconds) if seconds else None

    # -- the six primitives -----------------------------------------------------------------
    def get(self, key: bytes | str) -> bytes | None:
        value = self.client.result_get(_k(key), raw=True)
        return value.data if value is not None else None

    def mget(self, keys: list[bytes | str]) -> list[bytes | None]:
        out: list[bytes | None] = []
        keys = list(keys)
        for i in range(0, len(keys), MGET_BATCH):
            values = self.client.result_mget([_k(k) for k in keys[i : i + MGET_BATCH]], raw=True)
            out.extend(v.data if v is not None else None for v in values)
        return out

    def set(self, key: bytes | str, value: Any) -> None:
        self.client.result_set(_k(key), ensure_bytes(value), ttl=self._ttl(self.expires))

    def delete(self, key: bytes | str) -> None:
        self.client.result_delete(_k(key))

    def incr(self, key: bytes | str) -> int:
        """A plain counter: every call a new member (made once, so a retry counts once)."""
        from loam.client import uuid7

        return int(self.client.result_incr(_k(key), uuid7()))

    def expire(self, key: bytes | str, value: Any) -> None:
        self.client.result_expire(_k(key), float(value or 0))

    def _store_result(self, task_id: str, result: Any, state: str, traceback: Any = None,
                      request: Any = None, **kwargs: Any) -> Any:  # fmt: skip
        """Celery reads the key first so that nothing overwrites a SUCCESS; a SUCCESS
        itself may replace one (a re-run's equally valid result), so it skips that read:
        one call per task instead of two. The SUCCESS of a task acked before it ran is
        written behind (write_behind.py): its pool process does not wait for it."""
        if state != states.SUCCESS:
            return super()._store_result(task_id, result, state, traceback, request, **kwargs)
        meta = self._get_result_meta(result=result, state=state, traceback=traceback, request=request)
        meta["task_id"] = bytes_to_str(task_id)
        key, value = self.get_key_for_task(task_id), self.encode(meta)
        if self._acked_before_run(request):
            self._behind.put(_k(key), ensure_bytes(value), self._ttl(self.expires))
        else:
            self._set_with_state(key, value, state)
        return result

    def _acked_before_run(self, request: Any) -> bool:
        """A worker ran this task under an early ack: a crash while it ran would have lost
        it anyway, so its result may follow the task. Under `acks_late` the result is
        stored before the task reports back, so an acked task always has its result."""
        if (
            not self._write_behind
            or request is None
            or getattr(request, "is_eager", False)
            or not getattr(request, "delivery_info", None)
        ):
            return False
        task = self.app.tasks.get(getattr(request, "task", None) or "")
        return task is not None and not task.acks_late and not task.reject_on_worker_lost

    def _fail_chain(self, chain: Any, exc: Any, traceback: Any = None, store_result: bool = True,
                    state: str = states.FAILURE) -> None:  # fmt: skip
        """Celery (5.7+) stores the failure for every step after the failed one that has a
        task id of its own; a group step has none its callers wait on (a GroupResult waits
        on its members), so the members get it too. Only their results are stored: they
        are no chord's parts, whatever the header around them counts."""
        super()._fail_chain(chain, exc, traceback, store_result=store_result, state=state)
        if not (store_result and state in states.PROPAGATE_STATES):
            return
        from celery.app.task import Context

        for member in _never_run_members(chain):
            ctx = Context(member)
            ctx.update(ctx.options)
            ctx.id = ctx.options.get("task_id")
            ctx.group = ctx.options.get("group_id")
            if ctx.id is not None:
                self.store_result(ctx.id, exc, state, traceback=traceback, request=ctx)

    # -- waiting without polling ------------------------------------------------------------------
    def on_task_call(self, producer: Any, task_id: str) -> dict[str, Any]:
        """A task published from here with its result kept: a later `get` may read its
        result together with the one it waits for (`wait_for`)."""
        self._reader.published(task_id)
        return {}

    def forget(self, task_id: str) -> None:
        self._reader.drop(task_id)
        super().forget(task_id)

    def wait_for(self, task_id: str, timeout: float | None = None, interval: float = 0.5,
                 no_ack: bool = True, on_interval: Any = None) -> dict[str, Any]:  # fmt: skip
        self._ensure_not_eager()
        task_id = bytes_to_str(task_id)
        meta = self._reader.first_look(self, task_id)
        if meta is not None:
            return meta
        if timeout is None and getattr(_join_deadline, "at", None) is not None:
            timeout = max(_join_deadline.at - time.monotonic(), 0.0)
        key = _k(self.get_key_for_task(task_id))
        deadline = None if timeout is None else time.monotonic() + timeout
        version = 0  # absent: the first call waits for the key to be written, else answers at once
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            wait = LONG_POLL_S if left is None else max(min(left, LONG_POLL_S), 0.0)
            value, version = self.client.result_wait(key, version, wait=wait, raw=True)
            if value is not None:
                meta = self.decode_result(value.data)
                if meta["status"] in states.READY_STATES:
                    return meta
            if on_interval:
                on_interval()
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError("The operation timed out.")

    def get_many(
        self,
        task_ids: Any,
        timeout: float | None = None,
        interval: float = 0.5,
        no_ack: bool = True,
        on_message: Any = None,
        on_interval: Any = None,
        max_iterations: int | None = None,
        READY_STATES: frozenset[str] = states.READY_STATES,
    ) -> Any:  # noqa: N803 - Celery's name
        """Celery's `get_many` (GroupResult.get, join_native), waiting on a pending key
        between rounds instead of sleeping `interval`."""
        ids = set(task_ids)
        for task_id in list(ids):
            cached = self._cache.get(task_id)
            if cached is not None and cached["status"] in READY_STATES:
                yield bytes_to_str(task_id), cached
                ids.discard(task_id)
        deadline = None if timeout is None else time.monotonic() + timeout
        versions: dict[str, int] = {}
        iterations = 0
        while ids:
            keys = list(ids)
            r = self._mget_to_results(self.mget([self.get_key_for_task(k) for k in keys]), keys, READY_STATES)
            self._cache.update(r)
            ids.difference_update({bytes_to_str(v) for v in r})
            for key, value in r.items():
                if on_message is not None:
                    on_message(value)
                yield bytes_to_str(key), value
            if not ids:
                break
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"Operation timed out ({timeout})")
            if on_interval:
                on_interval()
            pending = min(ids)
            key = _k(self.get_key_for_task(pending))
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            wait = LONG_POLL_S if left is None else min(left, LONG_POLL_S)
            # Unknown version: 0 (absent) answers at once if the key exists, and the next
            # round waits on the version seen.
            _value, versions[pending] = self.client.result_wait(
                key, versions.get(pending, 0), wait=wait, raw=True
            )
            iterations += 1
            if max_iterations and iterations >= max_iterations:
                break

    # -- chords ---------------------------------------------------------------------------------
    def add_to_chord(self, group_id: str, result: Any) -> None:
        """`Task.add_to_chord`: one more header result to wait for."""
        self.client.result_incr(_k(self.get_key_for_chord(group_id)) + ".extra", result.id,
                                ttl=self._ttl(self.chord_expires))  # fmt: skip

    def set_chord_size(self, group_id: str, chord_size: int) -> None:
        """Celery's canvas tells the size before it sends the last header task."""
        key = _k(self.get_key_for_chord(group_id)) + ".s"
        self.client.result_set(key, str(int(chord_size)).encode(), ttl=self._ttl(self.chord_expires))

    def _apply_chord_incr(self, header_result_args: Any, body: Any, **kwargs: Any) -> None:
        """As Redis does: save the header's GroupResult only when a header result is a
        group itself (its structure must reach the body); simple headers' results are
        read from what each part stashed (`on_chord_part_return`), never joined."""
        self.ensure_chords_allowed()
        header_result = self.app.GroupResult(*header_result_args)
        if any(isinstance(r, GroupResult) for r in header_result.results):
            header_result.save(backend=self)
            self.expire(self.get_key_for_group(header_result.id), self._chord_result_expires)

    def on_chord_part_return(self, request: Any, state: str, result: Any, **kwargs: Any) -> None:
        gid = request.group
        if not gid:
            return
        key = _k(self.get_key_for_chord(gid))
        ttl = self._ttl(self.chord_expires)
        index = getattr(request, "group_index", None)
        if index is not None:  # this part's result, for the body (read in order, no join)
            part = self.encode([1, request.id, state, self.encode_result(result, state)])
            self.client.result_set(f"{key}.j.{index}", ensure_bytes(part), ttl=ttl)
        count, _added = self.client.result_add(key, str(request.id), ttl=ttl)
        size = (request.chord or {}).get("chord_size")
        if size is None:
            stored = self.client.result_get(key + ".s", raw=True)
            size = int(stored.data) if stored is not None else None
        deps = None
        if size is None:  # set_chord_size comes before the last part is sent: that one sees it
            return
        if count < size:
            return
        extra = self.client.result_get(key + ".extra", raw=True)
        size += int(extra.data or 0) if extra is not None else 0
        if count < size:
            return
        if count > size:  # pragma: no cover - more distinct members than the chord has
            logger.warning("Chord counter for %r counted %d parts of %d", gid, count, size)
            return
        # One-time claim: the first claimer fires; a re-run of the claimer (it died before
        # publishing) fires only if the body was not sent.
        claims, claimed = self.client.result_add(key + ".claim", str(request.id), ttl=ttl)
        if claimed and claims > 1:
            return
        if not claimed and self.get(key + ".done") is not None:
            return
        self._fire_chord_body(request, gid, deps, key, ttl, size)

    def _k_group(self, gid: str) -> str:
        return _k(self.get_key_for_group(gid))

    def _restore_deps(self, request: Any, gid: str) -> GroupResult | None:
        from celery.canvas import maybe_signature

        try:
            deps = GroupResult.restore(gid, backend=self)
        except Exception as exc:  # noqa: BLE001 - as Celery's own backends report it
            logger.exception("Chord %r raised: %r", gid, exc)
            self.chord_error_from_stack(maybe_signature(request.chord, app=self.app),
                                        ChordError(f"Cannot restore group: {exc!r}"))  # fmt: skip
            return None
        if deps is None:
            self.chord_error_from_stack(maybe_signature(request.chord, app=self.app),
                                        ChordError(f"GroupResult {gid} no longer exists"))  # fmt: skip
        return deps

    def _header_results(self, gid: str, key: str, size: int, deps: GroupResult | None) -> list[Any]:
        """The header's results in order: joined when the header is complex (its
        GroupResult was saved), else read from the parts' stash."""
        if deps is None:
            deps = GroupResult.restore(gid, backend=self)
        if deps is not None:
            deps.on_ready()  # every part reported: mark it ready, so the join does not wait
            join = deps.join_native if deps.supports_native_join else deps.join
            timeout = self.app.conf.result_chord_join_timeout
            # Celery's join waits on nested results without a timeout: bound those too, so a
            # pool process never waits forever on a result queued behind itself.
            _join_deadline.at = None if timeout is None else time.monotonic() + timeout
            try:
                with allow_join_result():
                    return join(timeout=timeout, propagate=True)
            finally:
                _join_deadline.at = None
        parts = self.mget([f"{key}.j.{i}" for i in range(size)])
        if any(p is None for p in parts):
            raise ChordError(f"chord {gid}: {parts.count(None)} of {size} header results are missing")
        out = []
        for raw in parts:
            _, tid, state, value = self.decode(raw)
            if state in states.EXCEPTION_STATES:
                value = self.exception_to_python(value)
            if state in states.PROPAGATE_STATES:
                raise _chord_error(f"Dependency {tid} raised {value!r}", value)
            out.append(value)
        return out

    def _fire_chord_body(self, request: Any, gid: str, deps: GroupResult | None, key: str, ttl: float | None,
                         size: int) -> None:  # fmt: skip
        from celery.canvas import maybe_signature

        app = self.app
        callback = maybe_signature(request.chord, app=app)
        try:
            ret = self._header_results(gid, key, size, deps)
        except Exception as exc:  # noqa: BLE001
            reason = str(exc) if isinstance(exc, ChordError) else repr(exc)
            logger.exception("Chord %r raised: %r", gid, reason)
            # The body fails with the header's own exception (what a caller of the chord
            # sees on Celery's Redis backend), the ChordError naming the culprit as its cause.
            cause = (
                exc.__cause__
                if isinstance(exc, ChordError) and isinstance(exc.__cause__, Exception)
                else None
            )
            self.chord_error_from_stack(
                callback, cause or (exc if isinstance(exc, ChordError) else ChordError(reason))
            )
        else:
            try:
                app.amqp._retry_publish(callback.delay, ret)  # noqa: SLF001 - as the base class does
            except Exception as exc:  # noqa: BLE001
                logger.exception("Chord %r raised: %r", gid, exc)
                self.chord_error_from_stack(callback, ChordError(f"Callback error: {exc!r}"))
        finally:
            self.client.result_set(key + ".done", b"1", ttl=ttl)
            self.client.result_delete(self._k_group(gid))
