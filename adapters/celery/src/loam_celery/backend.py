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
  polling every `interval`.
- GroupResult save/restore/delete are plain set/get/delete (the base class).

The token comes from `result_backend_transport_options["token_env"]` (default
LOAM_TOKEN); a URL with credentials is refused.
"""

from __future__ import annotations

import time
from typing import Any

from celery import states
from celery.backends.base import KeyValueStoreBackend
from celery.exceptions import ChordError, TimeoutError
from celery.result import GroupResult, allow_join_result
from celery.utils.log import get_logger
from kombu.utils.encoding import bytes_to_str, ensure_bytes

from loam_celery.connection import Settings, client_for

logger = get_logger(__name__)

MGET_BATCH = 1000
LONG_POLL_S = 10.0  # one ResultGet wait; the server caps it at 30 s


def _k(key: bytes | str) -> str:
    return bytes_to_str(key)


class LoamBackend(KeyValueStoreBackend):
    supports_autoexpire = True
    supports_native_join = True
    implements_incr = True
    persistent = True

    def __init__(self, app: Any = None, url: str | None = None, **kwargs: Any) -> None:
        super().__init__(app=app, url=url, **kwargs)
        options = dict(self.app.conf.get("result_backend_transport_options") or {})
        self.settings = Settings.from_url(url or self.app.conf.result_backend or "loam://", options)

    @property
    def client(self) -> Any:
        return client_for(self.settings)  # per process: a forked pool child gets its own

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
        """A plain counter: every call a new member."""
        from loam.client import uuid7

        return int(self.client.result_incr(_k(key), uuid7()))

    def expire(self, key: bytes | str, value: Any) -> None:
        self.client.result_expire(_k(key), float(value or 0))

    def _store_result(self, task_id: str, result: Any, state: str, traceback: Any = None,
                      request: Any = None, **kwargs: Any) -> Any:  # fmt: skip
        """Celery reads the key first so that nothing overwrites a SUCCESS; a SUCCESS
        itself may replace one (a re-run's equally valid result), so it skips that read:
        one call per task instead of two."""
        if state != states.SUCCESS:
            return super()._store_result(task_id, result, state, traceback, request, **kwargs)
        meta = self._get_result_meta(result=result, state=state, traceback=traceback, request=request)
        meta["task_id"] = bytes_to_str(task_id)
        self._set_with_state(self.get_key_for_task(task_id), self.encode(meta), state)
        return result

    # -- waiting without polling ------------------------------------------------------------------
    def wait_for(self, task_id: str, timeout: float | None = None, interval: float = 0.5,
                 no_ack: bool = True, on_interval: Any = None) -> dict[str, Any]:  # fmt: skip
        self._ensure_not_eager()
        key = _k(self.get_key_for_task(task_id))
        deadline = None if timeout is None else time.monotonic() + timeout
        version = -1  # first call: answer at once
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            wait = 0.0 if version < 0 else LONG_POLL_S if left is None else max(min(left, LONG_POLL_S), 0.0)
            value, version = self.client.result_wait(key, max(version, 0), wait=wait, raw=True)
            if value is not None:
                meta = self.decode_result(value.data)
                if meta["status"] in states.READY_STATES:
                    return meta
            if on_interval:
                on_interval()
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError("The operation timed out.")

    def get_many(self, task_ids: Any, timeout: float | None = None, interval: float = 0.5, no_ack: bool = True,
                 on_message: Any = None, on_interval: Any = None, max_iterations: int | None = None,
                 READY_STATES: frozenset[str] = states.READY_STATES) -> Any:  # noqa: N803 - Celery's name
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
            _value, versions[pending] = self.client.result_wait(key, versions.get(pending, 0), wait=wait, raw=True)
            iterations += 1
            if max_iterations and iterations >= max_iterations:
                break

    # -- chords ---------------------------------------------------------------------------------
    def add_to_chord(self, group_id: str, result: Any) -> None:
        """`Task.add_to_chord`: one more header result to wait for."""
        self.client.result_incr(_k(self.get_key_for_chord(group_id)) + ".extra", result.id,
                                ttl=self._ttl(self.chord_expires))  # fmt: skip

    def set_chord_size(self, group_id: str, chord_size: int) -> None:
        pass  # the size travels in each header task's request

    def on_chord_part_return(self, request: Any, state: str, result: Any, **kwargs: Any) -> None:
        gid = request.group
        if not gid:
            return
        app = self.app
        key = _k(self.get_key_for_chord(gid))
        ttl = self._ttl(self.chord_expires)
        count, _added = self.client.result_add(key, str(request.id), ttl=ttl)
        size = (request.chord or {}).get("chord_size")
        deps = None
        if size is None:
            deps = self._restore_deps(request, gid)
            if deps is None:
                return
            size = len(deps)
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
        if deps is None:
            deps = self._restore_deps(request, gid)
            if deps is None:
                return
        self._fire_chord_body(request, gid, deps, key, ttl)

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

    def _fire_chord_body(self, request: Any, gid: str, deps: GroupResult, key: str, ttl: float | None) -> None:
        from celery.canvas import maybe_signature

        app = self.app
        callback = maybe_signature(request.chord, app=app)
        join = deps.join_native if deps.supports_native_join else deps.join
        try:
            with allow_join_result():
                ret = join(timeout=app.conf.result_chord_join_timeout, propagate=True)
        except Exception as exc:  # noqa: BLE001
            try:
                culprit = next(deps._failed_join_report())  # noqa: SLF001 - Celery's helper
                reason = f"Dependency {culprit.id} raised {exc!r}"
            except StopIteration:
                reason = repr(exc)
            logger.exception("Chord %r raised: %r", gid, reason)
            self.chord_error_from_stack(callback, ChordError(reason))
        else:
            try:
                app.amqp._retry_publish(callback.delay, ret)  # noqa: SLF001 - as the base class does
            except Exception as exc:  # noqa: BLE001
                logger.exception("Chord %r raised: %r", gid, exc)
                self.chord_error_from_stack(callback, ChordError(f"Callback error: {exc!r}"))
        finally:
            self.client.result_set(key + ".done", b"1", ttl=ttl)
            deps.delete()
            for dep in deps.results:
                self.expire(self.get_key_for_task(dep.id), self.expires)
