"""Keeps bench/floor_bench.py a floor of the real thing: its rows sit under the keys
`keys.QueueKeys` makes, hold messages the real store's readers parse, and end where a
queue core's lease and complete leave them (every job completed, nothing ready or
active, four events a job in order). The timings are not checked."""

from __future__ import annotations

import sys
from pathlib import Path

import lmdb

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import floor_bench  # noqa: E402  (bench/floor_bench.py, found through the path above)

from loam_common.gen.loam.jobs.v1 import events_pb2  # noqa: E402
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb  # noqa: E402
from loam_common.jobs import states as S  # noqa: E402


def _rows(env: lmdb.Environment, prefix: bytes) -> list[tuple[bytes, bytes]]:
    with env.begin(db=env.open_db(b"kv")) as txn:
        return [(k, v) for k, v in txn.cursor() if k.startswith(prefix)]


def test_the_floor_writes_the_rows_of_the_key_layout(tmp_path: Path) -> None:
    env = floor_bench.open_env(str(tmp_path))
    jobs = 70  # three lease transactions, the last one short
    floor_bench.enqueue_floor(env, jobs)
    k = floor_bench.K

    ready = _rows(env, k.ready_shard(0))
    assert [key for key, _ in ready] == [k.ready(0, 0, seq, False) for seq in range(1, jobs + 1)]
    first = pb.Job.FromString(dict(_rows(env, k.jobs()))[k.job(ready[0][1].decode())])
    assert (first.state, first.seq, first.task.name) == (S.WAITING, 1, "noop")

    floor_bench.lease_complete_floor(env, jobs)
    assert _rows(env, k.ready_shard(0)) == [] and _rows(env, k.active_shard(0)) == []
    records = [pb.Job.FromString(v) for _, v in _rows(env, k.jobs())]
    assert len(records) == jobs and {(j.state, j.epoch, j.worker) for j in records} == {(S.COMPLETED, 1, "")}
    done = _rows(env, k.state_shard(S.COMPLETED, 0))
    assert sorted(key for key, _ in done) == sorted(
        k.state_entry(S.COMPLETED, 0, j.state_ns, j.id) for j in records
    )
    events = [events_pb2.JobEvent.FromString(v) for _, v in _rows(env, k.event_log_shard(0))]
    assert [e.seq for e in events] == list(range(1, 4 * jobs + 1))
    per_job: dict[str, list[str]] = {}
    for e in events:
        per_job.setdefault(e.job_id, []).append(e.event)
    assert len(per_job) == jobs
    assert {tuple(v) for v in per_job.values()} == {("added", "waiting", "active", "completed")}
    env.close()
