"""The key layout: the only module that builds store keys.

Tenant scope first; numbers big-endian so byte order is time / priority order.
`Q` below is `t/<ns>/q/<queue>/`. Names never contain `/` (validate.py), so a name
ends at the next `/`; free-form strings in the middle of a key (subjects, result
keys) are length-prefixed; free-form strings at the end need no prefix.

| key                                         | value                | notes                          |
|---------------------------------------------|----------------------|--------------------------------|
| `n/<ns>`                                    | empty                | the namespace registry         |
| `t/<ns>/qs/<queue>`                         | empty                | the namespace's queue registry |
| `Q cfg`                                     | QueueConfig          | created on first use           |
| `Q ctr`                                     | u64                  | job-key counter (BullMQ ids)   |
| `Q rt`, `Q rt/<shard u8>`                   | QueueRuntime         | rate bucket (sharded or not)   |
| `Q m/<shard u8>`                            | ShardMeta            | seqs, counts per state, payload bytes |
| `Q j/<job id>`                              | Job                  | ULID: byte order = age         |
| `Q log/<job id>/<n u32>`                    | LogLine              | capped per job                 |
| `Q r/<shard><band u8><prio u32><seq u64>`   | job id               | ready index (waiting, prio.)   |
| `Q d/<shard><due_ns u64><job id>`           | empty                | delayed index                  |
| `Q a/<shard><deadline_ns u64><job id>`      | empty                | active index, by lease deadline|
| `Q s/<state u8><shard><state_ns u64><id>`   | empty                | finished & waiting-children    |
| `Q o/<shard><seq u64>`                      | JobEvent             | outbox an earlier server left  |
| `Q ev/<shard u8><seq u64>`                  | JobEvent             | event log (= the outbox, 0020) |
| `Q k/<job key>`                             | job id               | job_key uniqueness             |
| `Q ik/<idempotency key>`                    | IdempotencyRecord    | by the key: a producer's UUIDv7 keys side by side |
| `Q ike/<expires_ns u64><idempotency key>`   | empty                | idempotency expiry index       |
| `Q i/<sha256(idempotency key)>`, `Q ie/...` | (as above)           | format 2's, read until they expire |
| `Q u/<dedup id>`                            | DedupRecord          |                                |
| `Q sq/<len u16><subject>`                   | job id               | the subject's in-flight job    |
| `Q sq/<len u16><subject><seq u64>`          | job id               | the subject's backlog, FIFO    |
| `Q sd/<len u16><subject><len u16><task><id>`| empty                | the subject's delayed jobs     |
| `Q w/<worker id>`                           | Worker               | last seen, for Workers         |
| `Q dep/<parent id>/<child queue>/<child id>`| Dependency           | children (dependencies.py)     |
| `Q met/<kind>`                              | MetricsRecord        | per-minute completed / failed  |
| `Q nd/<shard u8>`                           | u64                  | the shard's time in `sys/due/` |
| `t/<ns>/gc/<blob ref>`                      | empty                | blobs to delete (sweeper)      |
| `t/<ns>/res/<key>`                          | ResultRecord         | result store                   |
| `t/<ns>/resm/<len u16><key><member>`        | empty                | incr-with-member members       |
| `t/<ns>/rexp/<expires_ns u64><key>`         | empty                | result expiry index            |
| `t/<ns>/sched/<schedule id>`                | ScheduleRecord       | schedules.py                   |
| `t/<ns>/sdue/<next_ns u64><schedule id>`    | empty                | schedules by next tick (sweep) |
| `t/<ns>/flow/<flow id>`                     | FlowRecord           | flow ids: submit once          |
| `t/<ns>/quota/rate`                         | u64 start s, u64 n   | enqueue_rate window (quotas.py)|
| `t/<ns>/quota/set`                          | NamespaceQuotas      | the namespace's own quotas (SetQuotas) |
| `t/<ns>/xb/<len u16><exchange><queue>/<rk>` | ExchangeBinding      | exchanges.py (kombu bindings)  |
| `dn/<ns>`                                   | empty                | namespaces with durable state  |
| `t/<ns>/dur/p/<promise id>`                 | durable promise JSON | loam_durable (Resonate)        |
| `t/<ns>/dur/t/<task id>`                    | durable task JSON    | task id = its promise id       |
| `t/<ns>/dur/s/<schedule id>`                | durable schedule JSON| Resonate schedules             |
| `t/<ns>/dur/tm/<due_ms u64><kind u8><id>`   | empty                | durable timers (timeout, lease,|
|                                             |                      | retry, schedule), by due time  |
| `t/<ns>/dur/ret/<settled_ms u64><root id>`  | empty                | settled roots, for retention   |
| `t/<ns>/dur/ob/<ns u64><8 random bytes>`    | outbound message JSON| pushes a timer process left    |
| `t/<ns>/dur/cfg`                            | durable config JSON  | retention TTL per namespace    |
| `t/<ns>/dur/ps/<state group>\0<promise id>` | empty                | promises by state (pending,    |
|                                             |                      | resolved, rejected*): search   |
| `t/<ns>/dur/pg/<len u32><tag><len u32><value><promise id>` | empty | promises by tag: search   |
| `t/<ns>/dur/st/<start_ms u64><promise id>`  | start request JSON   | a root a Loam schedule's tick  |
|                                             |                      | asks the durable timers to run |
| `t/<ns>/flink/d/<deployment>`               | Deployment (JSON)    | loam_engines.flink: a Flink deployment, its versions and savepoints |
| `t/<ns>/flink/log/<deployment>/<seq u64>`   | LogLine (JSON)       | the deployment's lifecycle log, capped |
| `sys/flink/busy/<ns>/<deployment>`          | empty                | a Flink action in flight: what a restarted runner resumes |
| `sys/flink/periodic/<ns>/<deployment>`      | empty                | a RUNNING Flink deployment with a savepoint policy |
| `t/<ns>/eng/run/<run id>`                   | EngineRun            | engine runs (loam_engines)     |
| `t/<ns>/eng/log/<run id>/<n u32>`           | EngineLogLine        | a run's output, n from 1       |
| `t/<ns>/audit/<at_ns u64><8 random bytes>`  | AuditEntry (JSON)    | operator actions, REST and Connect (audit.py) |
| `t/<ns>/mhl/<queue>/<tier u8>`              | Totals (JSON)        | metrics history: a tier's last step end (metrics_history.py) |
| `t/<ns>/mhp/<queue>/<tier u8><t_ns u64>`    | 13 f64 (LE)          | metrics history: one point per step, trimmed by age |
| `t/<ns>/mhh/<queue>`                        | histograms (JSON)    | metrics history: the wait and run times every queue core observed, per bucket, since the queue's first job |
| `sys/tokens/<token id>`                     | TokenRecord          | API tokens (auth.py), hashed   |
| `sys/engines/ns/<ns>`                       | empty                | namespaces with engine jobs    |
| `sys/own/<kind>/<ns>/<queue>/<shard u8>`    | OwnershipLease       | fenced shard ownership         |
| `sys/members/<kind>/<id>`                   | ServiceMember        | live sweepers / relays; kind   |
|                                             |                      | durable-push: id = a push URL  |
| `sys/registry`                              | u64                  | registry version (registry.py) |
| `sys/mhist/sampled`                         | u64                  | metrics history: the last sample's time, where a new queue's first step starts |
| `sys/due/<due_ns u64><len u16><ns><len u16><queue><shard u8>` | empty | the due index (decision 0032) |
| `sys/format`                                | u64                  | the store's format version (store_format.py) |

Durable records (`dur/`) are JSON, not protobuf: they are the Resonate protocol's own
records, stored as they travel, so the server never transcodes them (decision 0025).
Promise ids are free-form and end their keys.

System keys (`sys/…`) sit outside every tenant prefix: they belong to the deployment,
not a tenant (a token record is what tells us the tenant, so it cannot live inside one).

The store's format version is in `sys/format` (store_format.py, which moves an older
store's keys when it is opened). Band 0 is the FIFO band (served first), band 1 the prioritized.
In the FIFO band the u32 slot is a lane instead of a priority: lane 0 holds LIFO jobs
under `2^64 - 1 - seq` (newest first), lane 1 plain FIFO jobs under `seq`, so a LIFO
job is served before every FIFO job, as BullMQ serves it next. In the prioritized band a
LIFO job (BullMQ's changePriority with lifo) sits under `<prio><0 u64><2^64 - 1 - seq>`:
sequences start at 1, so it comes before every other job of its priority, newest first.
"""

from __future__ import annotations

import functools
import hashlib
import struct

U64 = struct.Struct(">Q")
U32 = struct.Struct(">I")
U16 = struct.Struct(">H")
MAX_U64 = 2**64 - 1
FIFO_BAND = 0
PRIORITY_BAND = 1
LIFO_LANE = 0
FIFO_LANE = 1
ULID_LEN = 26


def prefix_end(prefix: bytes) -> bytes:
    """The smallest key greater than every key starting with `prefix`."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return b"\xff" * (len(prefix) + 1)
    return stripped[:-1] + bytes((stripped[-1] + 1,))


_BACKLOG_END = b"\xff" * 9


def _lp(s: str) -> bytes:
    b = s.encode()
    return U16.pack(len(b)) + b


@functools.lru_cache(maxsize=4096)  # every key of a call starts so: built once per namespace
def ns_prefix(ns: str) -> bytes:
    return b"t/" + ns.encode() + b"/"


def namespace_registry(ns: str = "") -> bytes:
    """`n/<ns>`: every namespace that has a queue, so sweeps can find them."""
    return b"n/" + ns.encode()


def queue_registry(ns: str, queue: str = "") -> bytes:
    return ns_prefix(ns) + b"qs/" + queue.encode()


def queue_from_registry_key(ns: str, key: bytes) -> str:
    return key[len(queue_registry(ns)) :].decode()


class QueueKeys:
    """Keys of one queue. Built once per transition and reused."""

    __slots__ = ("q", "ns", "queue")

    def __init__(self, ns: str, queue: str) -> None:
        self.ns = ns
        self.queue = queue
        self.q = ns_prefix(ns) + b"q/" + queue.encode() + b"/"

    def all(self) -> bytes:
        return self.q

    def config(self) -> bytes:
        return self.q + b"cfg"

    def key_counter(self) -> bytes:
        """The last job key handed out by `job_key_from_counter` (BullMQ's auto ids)."""
        return self.q + b"ctr"

    def runtime(self, shard: int | None = None) -> bytes:
        """The rate bucket: one per queue, or one per shard when the limit is sharded."""
        return self.q + b"rt" if shard is None else self.q + b"rt/" + bytes((shard,))

    def shard_meta(self, shard: int) -> bytes:
        return self.q + b"m/" + bytes((shard,))

    def shard_metas(self) -> bytes:
        return self.q + b"m/"

    def next_due(self, shard: int) -> bytes:
        """The time under which the shard sits in the due index (`due_entry`)."""
        return self.q + b"nd/" + bytes((shard,))

    def next_dues(self) -> bytes:
        return self.q + b"nd/"

    def job(self, job_id: str) -> bytes:
        return self.q + b"j/" + job_id.encode()

    def jobs(self) -> bytes:
        return self.q + b"j/"

    def job_id_from_job_key(self, key: bytes) -> str:
        return key[len(self.q) + 2 :].decode()

    def log(self, job_id: str, n: int) -> bytes:
        return self.q + b"log/" + job_id.encode() + b"/" + U32.pack(n)

    def logs(self, job_id: str) -> bytes:
        return self.q + b"log/" + job_id.encode() + b"/"

    # ready index -----------------------------------------------------------------
    def ready_shard(self, shard: int) -> bytes:
        return self.q + b"r/" + bytes((shard,))

    def ready_band(self, shard: int, band: int) -> bytes:
        """One band of a shard's ready index: FIFO_BAND (waiting) or PRIORITY_BAND."""
        return self.q + b"r/" + bytes((shard, band))

    def ready(self, shard: int, priority: int, seq: int, lifo: bool) -> bytes:
        if priority:
            base = self.q + b"r/" + bytes((shard, PRIORITY_BAND)) + U32.pack(priority)
            return base + (U64.pack(0) + U64.pack(MAX_U64 - seq) if lifo else U64.pack(seq))
        lane, order = (LIFO_LANE, MAX_U64 - seq) if lifo else (FIFO_LANE, seq)
        return self.q + b"r/" + bytes((shard, FIFO_BAND)) + U32.pack(lane) + U64.pack(order)

    # delayed index ---------------------------------------------------------------
    def delayed_shard(self, shard: int) -> bytes:
        return self.q + b"d/" + bytes((shard,))

    def delayed(self, shard: int, due_ns: int, job_id: str) -> bytes:
        return self.delayed_shard(shard) + U64.pack(max(due_ns, 0)) + job_id.encode()

    # active index ----------------------------------------------------------------
    def active_shard(self, shard: int) -> bytes:
        return self.q + b"a/" + bytes((shard,))

    def active(self, shard: int, deadline_ns: int, job_id: str) -> bytes:
        return self.active_shard(shard) + U64.pack(max(deadline_ns, 0)) + job_id.encode()

    # state index (completed, failed, dead-lettered, canceled, waiting-children) ------
    def state_shard(self, state: int, shard: int) -> bytes:
        return self.q + b"s/" + bytes((state, shard))

    def state_entry(self, state: int, shard: int, state_ns: int, job_id: str) -> bytes:
        return self.state_shard(state, shard) + U64.pack(max(state_ns, 0)) + job_id.encode()

    # outbox (rows an earlier server left, which the relay moves into the log) ------
    def outbox_shard(self, shard: int) -> bytes:
        return self.q + b"o/" + bytes((shard,))

    def outboxes(self) -> bytes:
        return self.q + b"o/"

    def outbox(self, shard: int, seq: int) -> bytes:
        return self.outbox_shard(shard) + U64.pack(seq)

    # event log (each change writes its event here; the sequence is ShardMeta.outbox_seq) --
    def event_logs(self) -> bytes:
        return self.q + b"ev/"

    def event_log_shard(self, shard: int) -> bytes:
        return self.q + b"ev/" + bytes((shard,))

    def event_log(self, shard: int, seq: int) -> bytes:
        return self.event_log_shard(shard) + U64.pack(seq)

    # uniqueness ------------------------------------------------------------------
    def job_key(self, job_key: str) -> bytes:
        return self.q + b"k/" + job_key.encode()

    def idempotency(self, key: str) -> bytes:
        """An idempotency key's record, under the key itself (format 3): the keys a
        producer makes in a row (the SDK's are UUIDv7, in time order) land side by side
        in the index instead of on a page picked at random each."""
        return self.q + b"ik/" + key.encode()

    def idempotency_expiry_all(self) -> bytes:
        return self.q + b"ike/"

    def idempotency_expiry(self, expires_ns: int, key: str) -> bytes:
        return self.q + b"ike/" + U64.pack(expires_ns) + key.encode()

    def idempotency_from_expiry(self, expiry_key: bytes) -> bytes:
        return self.q + b"ik/" + expiry_key[len(self.q) + 4 + 8 :]

    # Format 2 kept an idempotency record under the SHA-256 of its key. Those records
    # are read, and swept, where they are until they have expired (store_format.py).
    def idempotency_format_2(self, key: str) -> bytes:
        return self.q + b"i/" + hashlib.sha256(key.encode()).digest()

    def idempotency_expiry_all_format_2(self) -> bytes:
        return self.q + b"ie/"

    def idempotency_from_expiry_format_2(self, expiry_key: bytes) -> bytes:
        return self.q + b"i/" + expiry_key[len(self.q) + 3 + 8 :]

    def dedup(self, dedup_id: str) -> bytes:
        return self.q + b"u/" + dedup_id.encode()

    def dedups(self) -> bytes:
        return self.q + b"u/"

    # subjects --------------------------------------------------------------------
    def subject_current(self, subject: str) -> bytes:
        """The subject's holder: the key its backlog's entries extend, so the holder and
        the backlog's head share a B-tree page (format 2, decision 0046)."""
        return self.q + b"sq/" + _lp(subject)

    def subject_backlog(self, subject: str) -> tuple[bytes, bytes]:
        """The range of the subject's backlog entries (`subject_current_and_backlog`)."""
        return self.subject_current_and_backlog(subject)[1:]

    def subject_current_and_backlog(self, subject: str) -> tuple[bytes, bytes, bytes]:
        """`subject_current`, and the range of the subject's backlog entries, at once
        (the subject encoded once): a job giving up its subject writes the one and
        takes the other's head. The range runs from after the holder's key to the
        prefix and nine 0xff bytes: above every entry (the prefix and an 8-byte seq),
        and no other subject's key starts with the prefix (it ends with the subject's
        length-prefixed name)."""
        prefix = self.q + b"sq/" + _lp(subject)
        return prefix, prefix + b"\x00", prefix + _BACKLOG_END

    def subject_backlog_entry(self, subject: str, seq: int) -> bytes:
        return self.subject_current(subject) + U64.pack(seq)

    def subject_backlogs(self) -> bytes:
        """Every subject's holder and backlog; `is_subject_holder` tells the two apart."""
        return self.q + b"sq/"

    def is_subject_holder(self, key: bytes) -> bool:
        """A key under `subject_backlogs` that names a subject's holder (it ends with
        the subject's name), not a backlog entry (which has a seq after it)."""
        at = len(self.q) + 3
        return len(key) == at + 2 + U16.unpack_from(key, at)[0]

    def subject_holders_format_1(self) -> bytes:
        """Where format 1 kept every subject's holder (`Q sj/<len u16><subject>`): what
        store_format.py moves."""
        return self.q + b"sj/"

    def subject_current_from_format_1(self, key: bytes) -> bytes:
        """`subject_current` of a format-1 holder key (the subject's part unchanged)."""
        return self.q + b"sq/" + key[len(self.q) + 3 :]

    def subject_delayed(self, subject: str, task: str) -> bytes:
        """The subject's delayed jobs of one task name, for a replacement to find
        (insert.py); kept with the delayed index (queue.py `_index_add`)."""
        return self.q + b"sd/" + _lp(subject) + _lp(task)

    def subject_delayed_entry(self, subject: str, task: str, job_id: str) -> bytes:
        return self.subject_delayed(subject, task) + job_id.encode()

    # flow dependencies (dependencies.py) -------------------------------------------------
    def dependencies(self, parent_id: str) -> bytes:
        return self.q + b"dep/" + parent_id.encode() + b"/"

    def dependency(self, parent_id: str, child_queue: str, child_id: str) -> bytes:
        """One child of a parent job in this queue; the child may live in another queue."""
        return self.dependencies(parent_id) + child_queue.encode() + b"/" + child_id.encode()

    def worker(self, worker_id: str) -> bytes:
        return self.q + b"w/" + worker_id.encode()

    def metrics(self, kind: str) -> bytes:
        """`kind`: "completed" or "failed" (BullMQ's metrics)."""
        return self.q + b"met/" + kind.encode()

    def workers(self) -> bytes:
        return self.q + b"w/"


DUE_INDEX = b"sys/due/"


def store_format() -> bytes:
    """The store's format version (store_format.py)."""
    return b"sys/format"


def registry_version() -> bytes:
    """Moves whenever a namespace or a queue shard appears or goes (registry.py)."""
    return b"sys/registry"


def due_entry(due_ns: int, ns: str, queue: str, shard: int) -> bytes:
    """The due index: a queue shard that may have sweep work (a lease past its deadline,
    a delayed job due, a retention age or idempotency record passing) from `due_ns` on.
    Store-wide, so a sweeper pass reads what is due instead of every queue."""
    return DUE_INDEX + U64.pack(max(due_ns, 0)) + _lp(ns) + _lp(queue) + bytes((shard,))


def due_entry_parts(key: bytes) -> tuple[int, str, str, int]:
    """(due_ns, ns, queue, shard) of a `due_entry` key."""
    p = len(DUE_INDEX)
    due_ns = U64.unpack_from(key, p)[0]
    p += 8
    n = U16.unpack_from(key, p)[0]
    ns = key[p + 2 : p + 2 + n].decode()
    p += 2 + n
    n = U16.unpack_from(key, p)[0]
    queue = key[p + 2 : p + 2 + n].decode()
    return due_ns, ns, queue, key[p + 2 + n]


def index_job_id(index_key: bytes, prefix_len: int) -> str:
    """The job id at the end of a delayed/active/state index key: after a u64."""
    return index_key[prefix_len + 8 :].decode()


def index_time(index_key: bytes, prefix_len: int) -> int:
    return U64.unpack_from(index_key, prefix_len)[0]


def blob_gc_all(ns: str) -> bytes:
    return ns_prefix(ns) + b"gc/"


def blob_gc(ns: str, ref: str) -> bytes:
    """A blob whose last reference was dropped; the sweeper deletes it, then this key."""
    return blob_gc_all(ns) + ref.encode()


# audit log (audit.py) ------------------------------------------------------------------
def audit_all(ns: str) -> bytes:
    return ns_prefix(ns) + b"audit/"


def audit_entry(ns: str, at_ns: int, nonce: bytes) -> bytes:
    return audit_all(ns) + U64.pack(at_ns) + nonce


# metrics history (metrics_history.py) ----------------------------------------------------
def metrics_last_all(ns: str) -> bytes:
    return ns_prefix(ns) + b"mhl/"


def metrics_last(ns: str, queue: str, tier: int) -> bytes:
    """A queue's totals at the end of the last step of `tier`: where its next point starts."""
    return metrics_last_all(ns) + queue.encode() + b"/" + bytes((tier,))


def metrics_points(ns: str, queue: str, tier: int | None = None) -> bytes:
    """The prefix of a queue's points (of one tier, or of all)."""
    p = ns_prefix(ns) + b"mhp/" + queue.encode() + b"/"
    return p if tier is None else p + bytes((tier,))


def metrics_point(ns: str, queue: str, tier: int, t_ns: int) -> bytes:
    return metrics_points(ns, queue, tier) + U64.pack(t_ns)


def metrics_histograms_all(ns: str) -> bytes:
    return ns_prefix(ns) + b"mhh/"


def metrics_histograms(ns: str, queue: str) -> bytes:
    """A queue's wait and run time histograms, summed over the queue cores that saw its jobs."""
    return metrics_histograms_all(ns) + queue.encode()


def metrics_sampled() -> bytes:
    """When the store's metrics were last sampled, by any gateway."""
    return b"sys/mhist/sampled"


# result store -----------------------------------------------------------------------
def result(ns: str, key: str) -> bytes:
    return ns_prefix(ns) + b"res/" + key.encode()


def result_member(ns: str, key: str, member: str) -> bytes:
    return ns_prefix(ns) + b"resm/" + _lp(key) + member.encode()


def result_members(ns: str, key: str) -> bytes:
    return ns_prefix(ns) + b"resm/" + _lp(key)


def result_expiry_all(ns: str) -> bytes:
    return ns_prefix(ns) + b"rexp/"


def result_expiry(ns: str, expires_ns: int, key: str) -> bytes:
    return result_expiry_all(ns) + U64.pack(expires_ns) + key.encode()


def result_key_from_expiry(ns: str, expiry_key: bytes) -> tuple[int, str]:
    p = len(result_expiry_all(ns))
    return U64.unpack_from(expiry_key, p)[0], expiry_key[p + 8 :].decode()


def namespaces_prefix() -> bytes:
    return b"t/"


# quotas (jobs/quotas.py) ---------------------------------------------------------------
def quota_rate_window(ns: str) -> bytes:
    return ns_prefix(ns) + b"quota/rate"


def namespace_quotas(ns: str) -> bytes:
    """The namespace's own quotas, set by the admin API; absent: the deployment's."""
    return ns_prefix(ns) + b"quota/set"


# schedules and flows (schedules.py, flows.py) ---------------------------------------
def schedules_all(ns: str) -> bytes:
    return ns_prefix(ns) + b"sched/"


def schedule(ns: str, schedule_id: str) -> bytes:
    return schedules_all(ns) + schedule_id.encode()


def schedule_id_from_key(ns: str, key: bytes) -> str:
    return key[len(schedules_all(ns)) :].decode()


def schedule_due_all(ns: str) -> bytes:
    return ns_prefix(ns) + b"sdue/"


def schedule_due(ns: str, next_ns: int, schedule_id: str) -> bytes:
    """The due index: a sweep scans it up to now to find the schedules to fire."""
    return schedule_due_all(ns) + U64.pack(max(next_ns, 0)) + schedule_id.encode()


def schedule_id_from_due(ns: str, key: bytes) -> str:
    return key[len(schedule_due_all(ns)) + 8 :].decode()


def flow(ns: str, flow_id: str) -> bytes:
    return ns_prefix(ns) + b"flow/" + flow_id.encode()


# exchanges (exchanges.py) ---------------------------------------------------------------
def exchange_bindings(ns: str, exchange: str) -> bytes:
    """Every binding of one exchange (queue names end at `/`; the routing key, free-form,
    ends the key)."""
    return ns_prefix(ns) + b"xb/" + _lp(exchange)


def exchange_binding(ns: str, exchange: str, queue: str, routing_key: str) -> bytes:
    return exchange_bindings(ns, exchange) + queue.encode() + b"/" + routing_key.encode()


# durable mode (loam_durable: the Resonate protocol) ---------------------------------------
DURABLE_TIMER_PROMISE = b"p"  # a promise's timeout
DURABLE_TIMER_TASK = b"t"  # a task's lease expiry or retry (one at a time per task)
DURABLE_TIMER_SCHEDULE = b"s"  # a schedule's next fire


def durable_namespaces(ns: str = "") -> bytes:
    """`dn/<ns>`: every namespace holding durable state, so the timer loop finds them."""
    return b"dn/" + ns.encode()


@functools.lru_cache(maxsize=4096)
def durable_all(ns: str) -> bytes:
    return ns_prefix(ns) + b"dur/"


@functools.lru_cache(maxsize=4096)
def durable_promises(ns: str) -> bytes:
    return durable_all(ns) + b"p/"


def durable_promise(ns: str, promise_id: str) -> bytes:
    return durable_promises(ns) + promise_id.encode()


@functools.lru_cache(maxsize=4096)
def durable_tasks(ns: str) -> bytes:
    return durable_all(ns) + b"t/"


def durable_task(ns: str, task_id: str) -> bytes:
    return durable_tasks(ns) + task_id.encode()


def durable_schedules(ns: str) -> bytes:
    return durable_all(ns) + b"s/"


def durable_schedule(ns: str, schedule_id: str) -> bytes:
    return durable_schedules(ns) + schedule_id.encode()


def durable_timers(ns: str) -> bytes:
    return durable_all(ns) + b"tm/"


def durable_timer(ns: str, due_ms: int, kind: bytes, object_id: str) -> bytes:
    return durable_timers(ns) + U64.pack(max(due_ms, 0)) + kind + object_id.encode()


def durable_timer_parts(ns: str, key: bytes) -> tuple[int, bytes, str]:
    """(due ms, kind, object id) of a timer key."""
    p = len(durable_timers(ns))
    return U64.unpack_from(key, p)[0], key[p + 8 : p + 9], key[p + 9 :].decode()


def durable_retention_all(ns: str) -> bytes:
    return durable_all(ns) + b"ret/"


def durable_retention(ns: str, settled_ms: int, root_id: str) -> bytes:
    return durable_retention_all(ns) + U64.pack(max(settled_ms, 0)) + root_id.encode()


def durable_retention_parts(ns: str, key: bytes) -> tuple[int, str]:
    p = len(durable_retention_all(ns))
    return U64.unpack_from(key, p)[0], key[p + 8 :].decode()


def durable_outbox_all(ns: str) -> bytes:
    return durable_all(ns) + b"ob/"


def durable_outbox(ns: str, at_ns: int, nonce: bytes) -> bytes:
    return durable_outbox_all(ns) + U64.pack(max(at_ns, 0)) + nonce


def durable_config(ns: str) -> bytes:
    return durable_all(ns) + b"cfg"


def durable_promise_states(ns: str, state_group: str = "") -> bytes:
    """`dur/ps/<group>\\0`: the state index (search); with no group, all of it."""
    base = durable_all(ns) + b"ps/"
    return base + state_group.encode() + b"\x00" if state_group else base


def durable_promise_state(ns: str, state_group: str, promise_id: str) -> bytes:
    return durable_promise_states(ns, state_group) + promise_id.encode()


def durable_promise_tags(ns: str, tag: str | None = None, value: str | None = None) -> bytes:
    """`dur/pg/...`: the tag index (search); `tag` and `value` narrow the prefix."""
    base = durable_all(ns) + b"pg/"
    if tag is None:
        return base
    t = tag.encode()
    base += U32.pack(len(t)) + t
    if value is None:
        return base
    v = value.encode()
    return base + U32.pack(len(v)) + v


def durable_promise_tag(ns: str, tag: str, value: str, promise_id: str) -> bytes:
    return durable_promise_tags(ns, tag, value) + promise_id.encode()


def durable_starts(ns: str) -> bytes:
    return durable_all(ns) + b"st/"


def durable_start(ns: str, start_ms: int, promise_id: str) -> bytes:
    """A root promise a Loam schedule's tick asks the durable timers to create and run."""
    return durable_starts(ns) + U64.pack(max(start_ms, 0)) + promise_id.encode()


def durable_start_parts(ns: str, key: bytes) -> tuple[int, str]:
    p = len(durable_starts(ns))
    return U64.unpack_from(key, p)[0], key[p + 8 :].decode()


# engine runs (loam_engines.runs) -----------------------------------------------------------
def engine_runs_all(ns: str) -> bytes:
    return ns_prefix(ns) + b"eng/run/"


def engine_run(ns: str, run_id: str) -> bytes:
    """`t/<ns>/eng/run/<run id>`: one engine run (EngineRun); the id is its job's ULID,
    so byte order is age."""
    return engine_runs_all(ns) + run_id.encode()


def engine_run_id_from_key(ns: str, key: bytes) -> str:
    return key[len(engine_runs_all(ns)) :].decode()


def engine_logs(ns: str, run_id: str) -> bytes:
    return ns_prefix(ns) + b"eng/log/" + run_id.encode() + b"/"


def engine_log(ns: str, run_id: str, n: int) -> bytes:
    """`t/<ns>/eng/log/<run id>/<n u32>`: one line of a run's output (EngineLogLine)."""
    return engine_logs(ns, run_id) + U32.pack(n)


def engine_namespaces_all() -> bytes:
    return b"sys/engines/ns/"


def engine_namespace(ns: str) -> bytes:
    """`sys/engines/ns/<ns>`: a namespace that has submitted or scheduled engine jobs,
    so a runner knows whose engine queues to lease from."""
    return engine_namespaces_all() + ns.encode()


def engine_namespace_from_key(key: bytes) -> str:
    return key[len(engine_namespaces_all()) :].decode()


# system keys (outside every tenant prefix) -----------------------------------------------
def tokens_all() -> bytes:
    return b"sys/tokens/"


def token(token_id: str) -> bytes:
    """`sys/tokens/<id>`: one API token's TokenRecord (its secret only as a hash)."""
    return tokens_all() + token_id.encode()


# shard ownership and service membership (ownership.py) ----------------------------------
def ownership_all(kind: str) -> bytes:
    return b"sys/own/" + kind.encode() + b"/"


def ownership(kind: str, ns: str, queue: str, shard: int) -> bytes:
    """`sys/own/<kind>/<ns>/<queue>/<shard u8>`: who owns a queue shard for `kind`.
    `queue` may be empty: the namespace-wide sweeps (results, blobs) are owned as
    `(ns, "", 0)`."""
    return ownership_all(kind) + ns.encode() + b"/" + queue.encode() + b"/" + bytes((shard,))


def members_all(kind: str) -> bytes:
    return b"sys/members/" + kind.encode() + b"/"


def member(kind: str, member_id: str) -> bytes:
    """`sys/members/<kind>/<id>`: one live process of a kind, renewed by its heartbeat."""
    return members_all(kind) + member_id.encode()


def seq_from_key(key: bytes, prefix_len: int) -> int:
    """The u64 sequence right after a shard prefix (outbox and event log keys)."""
    return U64.unpack_from(key, prefix_len)[0]


def flink_deployments(ns: str) -> bytes:
    return ns_prefix(ns) + b"flink/d/"


def flink_deployment(ns: str, name: str) -> bytes:
    """`t/<ns>/flink/d/<deployment>`: one Flink deployment (loam_engines.flink.model)."""
    return flink_deployments(ns) + name.encode()


def flink_logs(ns: str, name: str) -> bytes:
    return ns_prefix(ns) + b"flink/log/" + name.encode() + b"/"


def flink_log(ns: str, name: str, seq: int) -> bytes:
    return flink_logs(ns, name) + U64.pack(seq)


def flink_busy_all() -> bytes:
    return b"sys/flink/busy/"


def flink_busy(ns: str, name: str) -> bytes:
    """`sys/flink/busy/<ns>/<deployment>`: an action in flight, across every namespace."""
    return flink_busy_all() + ns.encode() + b"/" + name.encode()


def flink_busy_from_key(key: bytes) -> tuple[str, str]:
    ns, _, name = key[len(flink_busy_all()) :].decode().partition("/")
    return ns, name


def flink_periodic_all() -> bytes:
    return b"sys/flink/periodic/"


def flink_periodic(ns: str, name: str) -> bytes:
    """`sys/flink/periodic/<ns>/<deployment>`: RUNNING with a periodic savepoint policy."""
    return flink_periodic_all() + ns.encode() + b"/" + name.encode()


def flink_periodic_from_key(key: bytes) -> tuple[str, str]:
    ns, _, name = key[len(flink_periodic_all()) :].decode().partition("/")
    return ns, name
