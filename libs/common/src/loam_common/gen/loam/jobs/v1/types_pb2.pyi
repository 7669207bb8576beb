from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATE_UNSPECIFIED: _ClassVar[JobState]
    JOB_STATE_WAITING: _ClassVar[JobState]
    JOB_STATE_PRIORITIZED: _ClassVar[JobState]
    JOB_STATE_DELAYED: _ClassVar[JobState]
    JOB_STATE_ACTIVE: _ClassVar[JobState]
    JOB_STATE_WAITING_CHILDREN: _ClassVar[JobState]
    JOB_STATE_COMPLETED: _ClassVar[JobState]
    JOB_STATE_FAILED: _ClassVar[JobState]
    JOB_STATE_DEAD_LETTERED: _ClassVar[JobState]
    JOB_STATE_CANCELED: _ClassVar[JobState]

class DedupMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DEDUP_MODE_UNSPECIFIED: _ClassVar[DedupMode]
    DEDUP_MODE_SIMPLE: _ClassVar[DedupMode]
    DEDUP_MODE_THROTTLE: _ClassVar[DedupMode]
    DEDUP_MODE_DEBOUNCE: _ClassVar[DedupMode]

class BackoffKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BACKOFF_KIND_UNSPECIFIED: _ClassVar[BackoffKind]
    BACKOFF_KIND_FIXED: _ClassVar[BackoffKind]
    BACKOFF_KIND_EXPONENTIAL: _ClassVar[BackoffKind]
    BACKOFF_KIND_CUSTOM: _ClassVar[BackoffKind]

class SubjectReplace(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SUBJECT_REPLACE_UNSPECIFIED: _ClassVar[SubjectReplace]
    SUBJECT_REPLACE_KEEP_LATER: _ClassVar[SubjectReplace]

class Mode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODE_UNSPECIFIED: _ClassVar[Mode]
    MODE_QUEUE: _ClassVar[Mode]
    MODE_DURABLE: _ClassVar[Mode]

class MisfirePolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MISFIRE_POLICY_UNSPECIFIED: _ClassVar[MisfirePolicy]
    MISFIRE_POLICY_FIRE_LATEST: _ClassVar[MisfirePolicy]
    MISFIRE_POLICY_SKIP: _ClassVar[MisfirePolicy]
    MISFIRE_POLICY_FIRE_ALL: _ClassVar[MisfirePolicy]

class ScheduleDriver(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SCHEDULE_DRIVER_UNSPECIFIED: _ClassVar[ScheduleDriver]
    SCHEDULE_DRIVER_SERVER: _ClassVar[ScheduleDriver]
    SCHEDULE_DRIVER_ITERATIONS: _ClassVar[ScheduleDriver]

class FailurePolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FAILURE_POLICY_UNSPECIFIED: _ClassVar[FailurePolicy]
    FAILURE_POLICY_FAIL_PARENT: _ClassVar[FailurePolicy]
    FAILURE_POLICY_CONTINUE_PARENT: _ClassVar[FailurePolicy]
    FAILURE_POLICY_IGNORE_DEPENDENCY: _ClassVar[FailurePolicy]
    FAILURE_POLICY_REMOVE_DEPENDENCY: _ClassVar[FailurePolicy]
    FAILURE_POLICY_KEEP_WAITING: _ClassVar[FailurePolicy]

class DependencyState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DEPENDENCY_STATE_UNSPECIFIED: _ClassVar[DependencyState]
    DEPENDENCY_STATE_PENDING: _ClassVar[DependencyState]
    DEPENDENCY_STATE_PROCESSED: _ClassVar[DependencyState]
    DEPENDENCY_STATE_FAILED: _ClassVar[DependencyState]
    DEPENDENCY_STATE_IGNORED: _ClassVar[DependencyState]

class ExchangeType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXCHANGE_TYPE_UNSPECIFIED: _ClassVar[ExchangeType]
    EXCHANGE_TYPE_DIRECT: _ClassVar[ExchangeType]
    EXCHANGE_TYPE_TOPIC: _ClassVar[ExchangeType]
    EXCHANGE_TYPE_FANOUT: _ClassVar[ExchangeType]
JOB_STATE_UNSPECIFIED: JobState
JOB_STATE_WAITING: JobState
JOB_STATE_PRIORITIZED: JobState
JOB_STATE_DELAYED: JobState
JOB_STATE_ACTIVE: JobState
JOB_STATE_WAITING_CHILDREN: JobState
JOB_STATE_COMPLETED: JobState
JOB_STATE_FAILED: JobState
JOB_STATE_DEAD_LETTERED: JobState
JOB_STATE_CANCELED: JobState
DEDUP_MODE_UNSPECIFIED: DedupMode
DEDUP_MODE_SIMPLE: DedupMode
DEDUP_MODE_THROTTLE: DedupMode
DEDUP_MODE_DEBOUNCE: DedupMode
BACKOFF_KIND_UNSPECIFIED: BackoffKind
BACKOFF_KIND_FIXED: BackoffKind
BACKOFF_KIND_EXPONENTIAL: BackoffKind
BACKOFF_KIND_CUSTOM: BackoffKind
SUBJECT_REPLACE_UNSPECIFIED: SubjectReplace
SUBJECT_REPLACE_KEEP_LATER: SubjectReplace
MODE_UNSPECIFIED: Mode
MODE_QUEUE: Mode
MODE_DURABLE: Mode
MISFIRE_POLICY_UNSPECIFIED: MisfirePolicy
MISFIRE_POLICY_FIRE_LATEST: MisfirePolicy
MISFIRE_POLICY_SKIP: MisfirePolicy
MISFIRE_POLICY_FIRE_ALL: MisfirePolicy
SCHEDULE_DRIVER_UNSPECIFIED: ScheduleDriver
SCHEDULE_DRIVER_SERVER: ScheduleDriver
SCHEDULE_DRIVER_ITERATIONS: ScheduleDriver
FAILURE_POLICY_UNSPECIFIED: FailurePolicy
FAILURE_POLICY_FAIL_PARENT: FailurePolicy
FAILURE_POLICY_CONTINUE_PARENT: FailurePolicy
FAILURE_POLICY_IGNORE_DEPENDENCY: FailurePolicy
FAILURE_POLICY_REMOVE_DEPENDENCY: FailurePolicy
FAILURE_POLICY_KEEP_WAITING: FailurePolicy
DEPENDENCY_STATE_UNSPECIFIED: DependencyState
DEPENDENCY_STATE_PENDING: DependencyState
DEPENDENCY_STATE_PROCESSED: DependencyState
DEPENDENCY_STATE_FAILED: DependencyState
DEPENDENCY_STATE_IGNORED: DependencyState
EXCHANGE_TYPE_UNSPECIFIED: ExchangeType
EXCHANGE_TYPE_DIRECT: ExchangeType
EXCHANGE_TYPE_TOPIC: ExchangeType
EXCHANGE_TYPE_FANOUT: ExchangeType

class Payload(_message.Message):
    __slots__ = ("data", "content_type", "blob_ref", "size")
    DATA_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    BLOB_REF_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    content_type: str
    blob_ref: str
    size: int
    def __init__(self, data: _Optional[bytes] = ..., content_type: _Optional[str] = ..., blob_ref: _Optional[str] = ..., size: _Optional[int] = ...) -> None: ...

class TaskSpec(_message.Message):
    __slots__ = ("name", "payload", "headers")
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    name: str
    payload: Payload
    headers: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., payload: _Optional[_Union[Payload, _Mapping]] = ..., headers: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Idempotency(_message.Message):
    __slots__ = ("key", "ttl_ns")
    KEY_FIELD_NUMBER: _ClassVar[int]
    TTL_NS_FIELD_NUMBER: _ClassVar[int]
    key: str
    ttl_ns: int
    def __init__(self, key: _Optional[str] = ..., ttl_ns: _Optional[int] = ...) -> None: ...

class Dedup(_message.Message):
    __slots__ = ("id", "mode", "ttl_ns", "replace", "extend", "keep_last_if_active", "replace_job")
    ID_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    TTL_NS_FIELD_NUMBER: _ClassVar[int]
    REPLACE_FIELD_NUMBER: _ClassVar[int]
    EXTEND_FIELD_NUMBER: _ClassVar[int]
    KEEP_LAST_IF_ACTIVE_FIELD_NUMBER: _ClassVar[int]
    REPLACE_JOB_FIELD_NUMBER: _ClassVar[int]
    id: str
    mode: DedupMode
    ttl_ns: int
    replace: bool
    extend: bool
    keep_last_if_active: bool
    replace_job: bool
    def __init__(self, id: _Optional[str] = ..., mode: _Optional[_Union[DedupMode, str]] = ..., ttl_ns: _Optional[int] = ..., replace: _Optional[bool] = ..., extend: _Optional[bool] = ..., keep_last_if_active: _Optional[bool] = ..., replace_job: _Optional[bool] = ...) -> None: ...

class Delay(_message.Message):
    __slots__ = ("delay_ns", "at_ns")
    DELAY_NS_FIELD_NUMBER: _ClassVar[int]
    AT_NS_FIELD_NUMBER: _ClassVar[int]
    delay_ns: int
    at_ns: int
    def __init__(self, delay_ns: _Optional[int] = ..., at_ns: _Optional[int] = ...) -> None: ...

class Backoff(_message.Message):
    __slots__ = ("kind", "base_ns", "max_ns", "jitter", "custom", "hold_subject")
    KIND_FIELD_NUMBER: _ClassVar[int]
    BASE_NS_FIELD_NUMBER: _ClassVar[int]
    MAX_NS_FIELD_NUMBER: _ClassVar[int]
    JITTER_FIELD_NUMBER: _ClassVar[int]
    CUSTOM_FIELD_NUMBER: _ClassVar[int]
    HOLD_SUBJECT_FIELD_NUMBER: _ClassVar[int]
    kind: BackoffKind
    base_ns: int
    max_ns: int
    jitter: float
    custom: str
    hold_subject: bool
    def __init__(self, kind: _Optional[_Union[BackoffKind, str]] = ..., base_ns: _Optional[int] = ..., max_ns: _Optional[int] = ..., jitter: _Optional[float] = ..., custom: _Optional[str] = ..., hold_subject: _Optional[bool] = ...) -> None: ...

class Retention(_message.Message):
    __slots__ = ("completed_count", "completed_age_ns", "failed_count", "failed_age_ns", "result_ttl_ns")
    COMPLETED_COUNT_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_AGE_NS_FIELD_NUMBER: _ClassVar[int]
    FAILED_COUNT_FIELD_NUMBER: _ClassVar[int]
    FAILED_AGE_NS_FIELD_NUMBER: _ClassVar[int]
    RESULT_TTL_NS_FIELD_NUMBER: _ClassVar[int]
    completed_count: int
    completed_age_ns: int
    failed_count: int
    failed_age_ns: int
    result_ttl_ns: int
    def __init__(self, completed_count: _Optional[int] = ..., completed_age_ns: _Optional[int] = ..., failed_count: _Optional[int] = ..., failed_age_ns: _Optional[int] = ..., result_ttl_ns: _Optional[int] = ...) -> None: ...

class ParentRef(_message.Message):
    __slots__ = ("queue", "job_id", "fail_parent_on_failure", "continue_parent_on_failure", "ignore_dependency_on_failure", "remove_dependency_on_failure", "keep_waiting_on_failure")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    FAIL_PARENT_ON_FAILURE_FIELD_NUMBER: _ClassVar[int]
    CONTINUE_PARENT_ON_FAILURE_FIELD_NUMBER: _ClassVar[int]
    IGNORE_DEPENDENCY_ON_FAILURE_FIELD_NUMBER: _ClassVar[int]
    REMOVE_DEPENDENCY_ON_FAILURE_FIELD_NUMBER: _ClassVar[int]
    KEEP_WAITING_ON_FAILURE_FIELD_NUMBER: _ClassVar[int]
    queue: str
    job_id: str
    fail_parent_on_failure: bool
    continue_parent_on_failure: bool
    ignore_dependency_on_failure: bool
    remove_dependency_on_failure: bool
    keep_waiting_on_failure: bool
    def __init__(self, queue: _Optional[str] = ..., job_id: _Optional[str] = ..., fail_parent_on_failure: _Optional[bool] = ..., continue_parent_on_failure: _Optional[bool] = ..., ignore_dependency_on_failure: _Optional[bool] = ..., remove_dependency_on_failure: _Optional[bool] = ..., keep_waiting_on_failure: _Optional[bool] = ...) -> None: ...

class EnqueueOpts(_message.Message):
    __slots__ = ("job_key", "idempotency", "dedup", "not_before", "priority", "lifo", "attempts", "backoff", "visibility_ns", "timeout_ns", "expires_ns", "parent", "retention", "mode", "durable_function", "subject", "job_key_from_counter", "job_key_keeps_first", "replace", "placement")
    JOB_KEY_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_FIELD_NUMBER: _ClassVar[int]
    DEDUP_FIELD_NUMBER: _ClassVar[int]
    NOT_BEFORE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    LIFO_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_FIELD_NUMBER: _ClassVar[int]
    VISIBILITY_NS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_NS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_NS_FIELD_NUMBER: _ClassVar[int]
    PARENT_FIELD_NUMBER: _ClassVar[int]
    RETENTION_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    DURABLE_FUNCTION_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    JOB_KEY_FROM_COUNTER_FIELD_NUMBER: _ClassVar[int]
    JOB_KEY_KEEPS_FIRST_FIELD_NUMBER: _ClassVar[int]
    REPLACE_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    job_key: str
    idempotency: Idempotency
    dedup: Dedup
    not_before: Delay
    priority: int
    lifo: bool
    attempts: int
    backoff: Backoff
    visibility_ns: int
    timeout_ns: int
    expires_ns: int
    parent: ParentRef
    retention: Retention
    mode: Mode
    durable_function: str
    subject: str
    job_key_from_counter: bool
    job_key_keeps_first: bool
    replace: SubjectReplace
    placement: str
    def __init__(self, job_key: _Optional[str] = ..., idempotency: _Optional[_Union[Idempotency, _Mapping]] = ..., dedup: _Optional[_Union[Dedup, _Mapping]] = ..., not_before: _Optional[_Union[Delay, _Mapping]] = ..., priority: _Optional[int] = ..., lifo: _Optional[bool] = ..., attempts: _Optional[int] = ..., backoff: _Optional[_Union[Backoff, _Mapping]] = ..., visibility_ns: _Optional[int] = ..., timeout_ns: _Optional[int] = ..., expires_ns: _Optional[int] = ..., parent: _Optional[_Union[ParentRef, _Mapping]] = ..., retention: _Optional[_Union[Retention, _Mapping]] = ..., mode: _Optional[_Union[Mode, str]] = ..., durable_function: _Optional[str] = ..., subject: _Optional[str] = ..., job_key_from_counter: _Optional[bool] = ..., job_key_keeps_first: _Optional[bool] = ..., replace: _Optional[_Union[SubjectReplace, str]] = ..., placement: _Optional[str] = ...) -> None: ...

class JobError(_message.Message):
    __slots__ = ("code", "message", "stacktrace", "at_ns", "attempt", "permanent")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STACKTRACE_FIELD_NUMBER: _ClassVar[int]
    AT_NS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    PERMANENT_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    stacktrace: str
    at_ns: int
    attempt: int
    permanent: bool
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ..., stacktrace: _Optional[str] = ..., at_ns: _Optional[int] = ..., attempt: _Optional[int] = ..., permanent: _Optional[bool] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("id", "queue", "task", "opts", "state", "shard", "seq", "epoch", "worker", "deadline_ns", "attempt", "stalled", "created_ns", "processed_ns", "finished_ns", "due_ns", "result", "errors", "progress", "log_count", "subject_blocked", "lease_started_ns", "attempts_max", "origin_queue", "state_ns", "pending_children", "keep_last_pending", "request_hash", "parents", "children", "children_completed", "children_failed", "flow", "flow_node", "failed_child", "deferred_failure", "retry_epoch", "subject_run", "holds_subject")
    ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    OPTS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_NS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    STALLED_FIELD_NUMBER: _ClassVar[int]
    CREATED_NS_FIELD_NUMBER: _ClassVar[int]
    PROCESSED_NS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_NS_FIELD_NUMBER: _ClassVar[int]
    DUE_NS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    LOG_COUNT_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_BLOCKED_FIELD_NUMBER: _ClassVar[int]
    LEASE_STARTED_NS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_MAX_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_QUEUE_FIELD_NUMBER: _ClassVar[int]
    STATE_NS_FIELD_NUMBER: _ClassVar[int]
    PENDING_CHILDREN_FIELD_NUMBER: _ClassVar[int]
    KEEP_LAST_PENDING_FIELD_NUMBER: _ClassVar[int]
    REQUEST_HASH_FIELD_NUMBER: _ClassVar[int]
    PARENTS_FIELD_NUMBER: _ClassVar[int]
    CHILDREN_FIELD_NUMBER: _ClassVar[int]
    CHILDREN_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    CHILDREN_FAILED_FIELD_NUMBER: _ClassVar[int]
    FLOW_FIELD_NUMBER: _ClassVar[int]
    FLOW_NODE_FIELD_NUMBER: _ClassVar[int]
    FAILED_CHILD_FIELD_NUMBER: _ClassVar[int]
    DEFERRED_FAILURE_FIELD_NUMBER: _ClassVar[int]
    RETRY_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_RUN_FIELD_NUMBER: _ClassVar[int]
    HOLDS_SUBJECT_FIELD_NUMBER: _ClassVar[int]
    id: str
    queue: str
    task: TaskSpec
    opts: EnqueueOpts
    state: JobState
    shard: int
    seq: int
    epoch: int
    worker: str
    deadline_ns: int
    attempt: int
    stalled: int
    created_ns: int
    processed_ns: int
    finished_ns: int
    due_ns: int
    result: Payload
    errors: _containers.RepeatedCompositeFieldContainer[JobError]
    progress: bytes
    log_count: int
    subject_blocked: bool
    lease_started_ns: int
    attempts_max: int
    origin_queue: str
    state_ns: int
    pending_children: int
    keep_last_pending: bool
    request_hash: bytes
    parents: _containers.RepeatedCompositeFieldContainer[ParentRef]
    children: int
    children_completed: int
    children_failed: int
    flow: str
    flow_node: str
    failed_child: str
    deferred_failure: str
    retry_epoch: int
    subject_run: _containers.RepeatedScalarFieldContainer[str]
    holds_subject: bool
    def __init__(self, id: _Optional[str] = ..., queue: _Optional[str] = ..., task: _Optional[_Union[TaskSpec, _Mapping]] = ..., opts: _Optional[_Union[EnqueueOpts, _Mapping]] = ..., state: _Optional[_Union[JobState, str]] = ..., shard: _Optional[int] = ..., seq: _Optional[int] = ..., epoch: _Optional[int] = ..., worker: _Optional[str] = ..., deadline_ns: _Optional[int] = ..., attempt: _Optional[int] = ..., stalled: _Optional[int] = ..., created_ns: _Optional[int] = ..., processed_ns: _Optional[int] = ..., finished_ns: _Optional[int] = ..., due_ns: _Optional[int] = ..., result: _Optional[_Union[Payload, _Mapping]] = ..., errors: _Optional[_Iterable[_Union[JobError, _Mapping]]] = ..., progress: _Optional[bytes] = ..., log_count: _Optional[int] = ..., subject_blocked: _Optional[bool] = ..., lease_started_ns: _Optional[int] = ..., attempts_max: _Optional[int] = ..., origin_queue: _Optional[str] = ..., state_ns: _Optional[int] = ..., pending_children: _Optional[int] = ..., keep_last_pending: _Optional[bool] = ..., request_hash: _Optional[bytes] = ..., parents: _Optional[_Iterable[_Union[ParentRef, _Mapping]]] = ..., children: _Optional[int] = ..., children_completed: _Optional[int] = ..., children_failed: _Optional[int] = ..., flow: _Optional[str] = ..., flow_node: _Optional[str] = ..., failed_child: _Optional[str] = ..., deferred_failure: _Optional[str] = ..., retry_epoch: _Optional[int] = ..., subject_run: _Optional[_Iterable[str]] = ..., holds_subject: _Optional[bool] = ...) -> None: ...

class RateLimit(_message.Message):
    __slots__ = ("max", "duration_ns", "sharded")
    MAX_FIELD_NUMBER: _ClassVar[int]
    DURATION_NS_FIELD_NUMBER: _ClassVar[int]
    SHARDED_FIELD_NUMBER: _ClassVar[int]
    max: int
    duration_ns: int
    sharded: bool
    def __init__(self, max: _Optional[int] = ..., duration_ns: _Optional[int] = ..., sharded: _Optional[bool] = ...) -> None: ...

class QueueConfig(_message.Message):
    __slots__ = ("name", "visibility_ns", "attempts", "backoff", "max_stalled", "rate_limit", "concurrency", "retention", "dead_letter_queue", "dead_letter_on_exhausted", "shards", "paused", "created_ns", "log_cap", "payload_limit", "defer_stalled_failure", "defer_child_failure", "skip_stalled_check", "stalled_interval_ns")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VISIBILITY_NS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_FIELD_NUMBER: _ClassVar[int]
    MAX_STALLED_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMIT_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_FIELD_NUMBER: _ClassVar[int]
    RETENTION_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_QUEUE_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_ON_EXHAUSTED_FIELD_NUMBER: _ClassVar[int]
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    CREATED_NS_FIELD_NUMBER: _ClassVar[int]
    LOG_CAP_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_LIMIT_FIELD_NUMBER: _ClassVar[int]
    DEFER_STALLED_FAILURE_FIELD_NUMBER: _ClassVar[int]
    DEFER_CHILD_FAILURE_FIELD_NUMBER: _ClassVar[int]
    SKIP_STALLED_CHECK_FIELD_NUMBER: _ClassVar[int]
    STALLED_INTERVAL_NS_FIELD_NUMBER: _ClassVar[int]
    name: str
    visibility_ns: int
    attempts: int
    backoff: Backoff
    max_stalled: int
    rate_limit: RateLimit
    concurrency: int
    retention: Retention
    dead_letter_queue: str
    dead_letter_on_exhausted: bool
    shards: int
    paused: bool
    created_ns: int
    log_cap: int
    payload_limit: int
    defer_stalled_failure: bool
    defer_child_failure: bool
    skip_stalled_check: bool
    stalled_interval_ns: int
    def __init__(self, name: _Optional[str] = ..., visibility_ns: _Optional[int] = ..., attempts: _Optional[int] = ..., backoff: _Optional[_Union[Backoff, _Mapping]] = ..., max_stalled: _Optional[int] = ..., rate_limit: _Optional[_Union[RateLimit, _Mapping]] = ..., concurrency: _Optional[int] = ..., retention: _Optional[_Union[Retention, _Mapping]] = ..., dead_letter_queue: _Optional[str] = ..., dead_letter_on_exhausted: _Optional[bool] = ..., shards: _Optional[int] = ..., paused: _Optional[bool] = ..., created_ns: _Optional[int] = ..., log_cap: _Optional[int] = ..., payload_limit: _Optional[int] = ..., defer_stalled_failure: _Optional[bool] = ..., defer_child_failure: _Optional[bool] = ..., skip_stalled_check: _Optional[bool] = ..., stalled_interval_ns: _Optional[int] = ...) -> None: ...

class ShardMeta(_message.Message):
    __slots__ = ("next_seq", "outbox_seq", "counts", "enqueued_total", "leased_total", "stalled_total", "fenced_total", "completed_total", "payload_bytes", "subject_waiting", "subject_admitted_total", "subject_wait_ns_total")
    class CountsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    class CompletedTotalEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    NEXT_SEQ_FIELD_NUMBER: _ClassVar[int]
    OUTBOX_SEQ_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    ENQUEUED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    LEASED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    STALLED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    FENCED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_BYTES_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_WAITING_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_ADMITTED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_WAIT_NS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    next_seq: int
    outbox_seq: int
    counts: _containers.ScalarMap[int, int]
    enqueued_total: int
    leased_total: int
    stalled_total: int
    fenced_total: int
    completed_total: _containers.ScalarMap[str, int]
    payload_bytes: int
    subject_waiting: int
    subject_admitted_total: int
    subject_wait_ns_total: int
    def __init__(self, next_seq: _Optional[int] = ..., outbox_seq: _Optional[int] = ..., counts: _Optional[_Mapping[int, int]] = ..., enqueued_total: _Optional[int] = ..., leased_total: _Optional[int] = ..., stalled_total: _Optional[int] = ..., fenced_total: _Optional[int] = ..., completed_total: _Optional[_Mapping[str, int]] = ..., payload_bytes: _Optional[int] = ..., subject_waiting: _Optional[int] = ..., subject_admitted_total: _Optional[int] = ..., subject_wait_ns_total: _Optional[int] = ...) -> None: ...

class QueueActivity(_message.Message):
    __slots__ = ("ready", "delayed", "oldest_ready_age_ns", "subject_waiting", "subject_admitted_total", "subject_wait_ns_total", "lease_takeovers_total")
    READY_FIELD_NUMBER: _ClassVar[int]
    DELAYED_FIELD_NUMBER: _ClassVar[int]
    OLDEST_READY_AGE_NS_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_WAITING_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_ADMITTED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_WAIT_NS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    LEASE_TAKEOVERS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    ready: int
    delayed: int
    oldest_ready_age_ns: int
    subject_waiting: int
    subject_admitted_total: int
    subject_wait_ns_total: int
    lease_takeovers_total: int
    def __init__(self, ready: _Optional[int] = ..., delayed: _Optional[int] = ..., oldest_ready_age_ns: _Optional[int] = ..., subject_waiting: _Optional[int] = ..., subject_admitted_total: _Optional[int] = ..., subject_wait_ns_total: _Optional[int] = ..., lease_takeovers_total: _Optional[int] = ...) -> None: ...

class QueueRuntime(_message.Message):
    __slots__ = ("window_start_ns", "used", "blocked_until_ns", "active")
    WINDOW_START_NS_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_UNTIL_NS_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    window_start_ns: int
    used: int
    blocked_until_ns: int
    active: int
    def __init__(self, window_start_ns: _Optional[int] = ..., used: _Optional[int] = ..., blocked_until_ns: _Optional[int] = ..., active: _Optional[int] = ...) -> None: ...

class IdempotencyRecord(_message.Message):
    __slots__ = ("request_hash", "job_id", "state", "expires_ns", "created", "call", "answers")
    REQUEST_HASH_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_NS_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    CALL_FIELD_NUMBER: _ClassVar[int]
    ANSWERS_FIELD_NUMBER: _ClassVar[int]
    request_hash: bytes
    job_id: str
    state: JobState
    expires_ns: int
    created: bool
    call: bool
    answers: _containers.RepeatedCompositeFieldContainer[CallAnswer]
    def __init__(self, request_hash: _Optional[bytes] = ..., job_id: _Optional[str] = ..., state: _Optional[_Union[JobState, str]] = ..., expires_ns: _Optional[int] = ..., created: _Optional[bool] = ..., call: _Optional[bool] = ..., answers: _Optional[_Iterable[_Union[CallAnswer, _Mapping]]] = ...) -> None: ...

class CallAnswer(_message.Message):
    __slots__ = ("job_id", "created", "state", "job_key", "dropped", "error_code", "error_message")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    JOB_KEY_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    created: bool
    state: JobState
    job_key: str
    dropped: str
    error_code: str
    error_message: str
    def __init__(self, job_id: _Optional[str] = ..., created: _Optional[bool] = ..., state: _Optional[_Union[JobState, str]] = ..., job_key: _Optional[str] = ..., dropped: _Optional[str] = ..., error_code: _Optional[str] = ..., error_message: _Optional[str] = ...) -> None: ...

class DedupRecord(_message.Message):
    __slots__ = ("job_id", "expires_ns", "pending_job_id", "pending_task", "pending_opts")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_NS_FIELD_NUMBER: _ClassVar[int]
    PENDING_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PENDING_TASK_FIELD_NUMBER: _ClassVar[int]
    PENDING_OPTS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    expires_ns: int
    pending_job_id: str
    pending_task: TaskSpec
    pending_opts: EnqueueOpts
    def __init__(self, job_id: _Optional[str] = ..., expires_ns: _Optional[int] = ..., pending_job_id: _Optional[str] = ..., pending_task: _Optional[_Union[TaskSpec, _Mapping]] = ..., pending_opts: _Optional[_Union[EnqueueOpts, _Mapping]] = ...) -> None: ...

class MetricsRecord(_message.Message):
    __slots__ = ("count", "prev_ms", "prev_count", "points")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    PREV_MS_FIELD_NUMBER: _ClassVar[int]
    PREV_COUNT_FIELD_NUMBER: _ClassVar[int]
    POINTS_FIELD_NUMBER: _ClassVar[int]
    count: int
    prev_ms: int
    prev_count: int
    points: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, count: _Optional[int] = ..., prev_ms: _Optional[int] = ..., prev_count: _Optional[int] = ..., points: _Optional[_Iterable[int]] = ...) -> None: ...

class ResultRecord(_message.Message):
    __slots__ = ("value", "expires_ns", "members", "version")
    VALUE_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_NS_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    value: Payload
    expires_ns: int
    members: int
    version: int
    def __init__(self, value: _Optional[_Union[Payload, _Mapping]] = ..., expires_ns: _Optional[int] = ..., members: _Optional[int] = ..., version: _Optional[int] = ...) -> None: ...

class ExchangeBinding(_message.Message):
    __slots__ = ("exchange", "routing_key", "queue", "expires_ns")
    EXCHANGE_FIELD_NUMBER: _ClassVar[int]
    ROUTING_KEY_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_NS_FIELD_NUMBER: _ClassVar[int]
    exchange: str
    routing_key: str
    queue: str
    expires_ns: int
    def __init__(self, exchange: _Optional[str] = ..., routing_key: _Optional[str] = ..., queue: _Optional[str] = ..., expires_ns: _Optional[int] = ...) -> None: ...

class LogLine(_message.Message):
    __slots__ = ("at_ns", "line")
    AT_NS_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    at_ns: int
    line: str
    def __init__(self, at_ns: _Optional[int] = ..., line: _Optional[str] = ...) -> None: ...

class Worker(_message.Message):
    __slots__ = ("id", "last_seen_ns", "queues")
    ID_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_NS_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    id: str
    last_seen_ns: int
    queues: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, id: _Optional[str] = ..., last_seen_ns: _Optional[int] = ..., queues: _Optional[_Iterable[str]] = ...) -> None: ...

class TokenRecord(_message.Message):
    __slots__ = ("id", "namespace", "actions", "created_ns", "expires_ns", "name", "revoked", "revoked_ns", "secret_sha256")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    CREATED_NS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_NS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    REVOKED_FIELD_NUMBER: _ClassVar[int]
    REVOKED_NS_FIELD_NUMBER: _ClassVar[int]
    SECRET_SHA256_FIELD_NUMBER: _ClassVar[int]
    id: str
    namespace: str
    actions: _containers.RepeatedScalarFieldContainer[str]
    created_ns: int
    expires_ns: int
    name: str
    revoked: bool
    revoked_ns: int
    secret_sha256: bytes
    def __init__(self, id: _Optional[str] = ..., namespace: _Optional[str] = ..., actions: _Optional[_Iterable[str]] = ..., created_ns: _Optional[int] = ..., expires_ns: _Optional[int] = ..., name: _Optional[str] = ..., revoked: _Optional[bool] = ..., revoked_ns: _Optional[int] = ..., secret_sha256: _Optional[bytes] = ...) -> None: ...

class OwnershipLease(_message.Message):
    __slots__ = ("owner", "epoch", "expires_ns", "acquired_ns")
    OWNER_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_NS_FIELD_NUMBER: _ClassVar[int]
    ACQUIRED_NS_FIELD_NUMBER: _ClassVar[int]
    owner: str
    epoch: int
    expires_ns: int
    acquired_ns: int
    def __init__(self, owner: _Optional[str] = ..., epoch: _Optional[int] = ..., expires_ns: _Optional[int] = ..., acquired_ns: _Optional[int] = ...) -> None: ...

class ServiceMember(_message.Message):
    __slots__ = ("id", "expires_ns", "started_ns")
    ID_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_NS_FIELD_NUMBER: _ClassVar[int]
    STARTED_NS_FIELD_NUMBER: _ClassVar[int]
    id: str
    expires_ns: int
    started_ns: int
    def __init__(self, id: _Optional[str] = ..., expires_ns: _Optional[int] = ..., started_ns: _Optional[int] = ...) -> None: ...

class ScheduleRecord(_message.Message):
    __slots__ = ("id", "cron", "tz", "every_ns", "limit", "start_ns", "end_ns", "offset_ns", "immediately", "queue", "task", "opts", "misfire", "misfire_grace_ns", "driver", "next_ns", "last_tick_ns", "last_job_id", "count", "created_ns", "updated_ns", "rule_hash", "last_error")
    ID_FIELD_NUMBER: _ClassVar[int]
    CRON_FIELD_NUMBER: _ClassVar[int]
    TZ_FIELD_NUMBER: _ClassVar[int]
    EVERY_NS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    START_NS_FIELD_NUMBER: _ClassVar[int]
    END_NS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_NS_FIELD_NUMBER: _ClassVar[int]
    IMMEDIATELY_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    OPTS_FIELD_NUMBER: _ClassVar[int]
    MISFIRE_FIELD_NUMBER: _ClassVar[int]
    MISFIRE_GRACE_NS_FIELD_NUMBER: _ClassVar[int]
    DRIVER_FIELD_NUMBER: _ClassVar[int]
    NEXT_NS_FIELD_NUMBER: _ClassVar[int]
    LAST_TICK_NS_FIELD_NUMBER: _ClassVar[int]
    LAST_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    CREATED_NS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_NS_FIELD_NUMBER: _ClassVar[int]
    RULE_HASH_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    id: str
    cron: str
    tz: str
    every_ns: int
    limit: int
    start_ns: int
    end_ns: int
    offset_ns: int
    immediately: bool
    queue: str
    task: TaskSpec
    opts: EnqueueOpts
    misfire: MisfirePolicy
    misfire_grace_ns: int
    driver: ScheduleDriver
    next_ns: int
    last_tick_ns: int
    last_job_id: str
    count: int
    created_ns: int
    updated_ns: int
    rule_hash: bytes
    last_error: str
    def __init__(self, id: _Optional[str] = ..., cron: _Optional[str] = ..., tz: _Optional[str] = ..., every_ns: _Optional[int] = ..., limit: _Optional[int] = ..., start_ns: _Optional[int] = ..., end_ns: _Optional[int] = ..., offset_ns: _Optional[int] = ..., immediately: _Optional[bool] = ..., queue: _Optional[str] = ..., task: _Optional[_Union[TaskSpec, _Mapping]] = ..., opts: _Optional[_Union[EnqueueOpts, _Mapping]] = ..., misfire: _Optional[_Union[MisfirePolicy, str]] = ..., misfire_grace_ns: _Optional[int] = ..., driver: _Optional[_Union[ScheduleDriver, str]] = ..., next_ns: _Optional[int] = ..., last_tick_ns: _Optional[int] = ..., last_job_id: _Optional[str] = ..., count: _Optional[int] = ..., created_ns: _Optional[int] = ..., updated_ns: _Optional[int] = ..., rule_hash: _Optional[bytes] = ..., last_error: _Optional[str] = ...) -> None: ...

class Dependency(_message.Message):
    __slots__ = ("queue", "job_id", "node", "state", "value", "error", "finished_ns", "job_key", "policy")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    FINISHED_NS_FIELD_NUMBER: _ClassVar[int]
    JOB_KEY_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    queue: str
    job_id: str
    node: str
    state: DependencyState
    value: Payload
    error: JobError
    finished_ns: int
    job_key: str
    policy: FailurePolicy
    def __init__(self, queue: _Optional[str] = ..., job_id: _Optional[str] = ..., node: _Optional[str] = ..., state: _Optional[_Union[DependencyState, str]] = ..., value: _Optional[_Union[Payload, _Mapping]] = ..., error: _Optional[_Union[JobError, _Mapping]] = ..., finished_ns: _Optional[int] = ..., job_key: _Optional[str] = ..., policy: _Optional[_Union[FailurePolicy, str]] = ...) -> None: ...

class FlowJobRef(_message.Message):
    __slots__ = ("node", "queue", "job_id")
    NODE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    node: str
    queue: str
    job_id: str
    def __init__(self, node: _Optional[str] = ..., queue: _Optional[str] = ..., job_id: _Optional[str] = ...) -> None: ...

class FlowRecord(_message.Message):
    __slots__ = ("id", "request_hash", "created_ns", "jobs")
    ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_HASH_FIELD_NUMBER: _ClassVar[int]
    CREATED_NS_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    id: str
    request_hash: bytes
    created_ns: int
    jobs: _containers.RepeatedCompositeFieldContainer[FlowJobRef]
    def __init__(self, id: _Optional[str] = ..., request_hash: _Optional[bytes] = ..., created_ns: _Optional[int] = ..., jobs: _Optional[_Iterable[_Union[FlowJobRef, _Mapping]]] = ...) -> None: ...

class ErrorDetail(_message.Message):
    __slots__ = ("reason", "field", "existing", "key", "job", "epoch", "current_epoch", "from_state", "to", "retry_after_ns", "limit", "size", "retryable")
    REASON_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    EXISTING_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    CURRENT_EPOCH_FIELD_NUMBER: _ClassVar[int]
    FROM_STATE_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_NS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    reason: str
    field: str
    existing: str
    key: str
    job: str
    epoch: int
    current_epoch: int
    from_state: str
    to: str
    retry_after_ns: int
    limit: int
    size: int
    retryable: bool
    def __init__(self, reason: _Optional[str] = ..., field: _Optional[str] = ..., existing: _Optional[str] = ..., key: _Optional[str] = ..., job: _Optional[str] = ..., epoch: _Optional[int] = ..., current_epoch: _Optional[int] = ..., from_state: _Optional[str] = ..., to: _Optional[str] = ..., retry_after_ns: _Optional[int] = ..., limit: _Optional[int] = ..., size: _Optional[int] = ..., retryable: _Optional[bool] = ...) -> None: ...

class QueueCounts(_message.Message):
    __slots__ = ("waiting", "prioritized", "delayed", "active", "waiting_children", "completed", "failed", "dead_lettered", "canceled", "paused")
    WAITING_FIELD_NUMBER: _ClassVar[int]
    PRIORITIZED_FIELD_NUMBER: _ClassVar[int]
    DELAYED_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    WAITING_CHILDREN_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERED_FIELD_NUMBER: _ClassVar[int]
    CANCELED_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    waiting: int
    prioritized: int
    delayed: int
    active: int
    waiting_children: int
    completed: int
    failed: int
    dead_lettered: int
    canceled: int
    paused: bool
    def __init__(self, waiting: _Optional[int] = ..., prioritized: _Optional[int] = ..., delayed: _Optional[int] = ..., active: _Optional[int] = ..., waiting_children: _Optional[int] = ..., completed: _Optional[int] = ..., failed: _Optional[int] = ..., dead_lettered: _Optional[int] = ..., canceled: _Optional[int] = ..., paused: _Optional[bool] = ...) -> None: ...

class ScheduleSpec(_message.Message):
    __slots__ = ("id", "cron", "tz", "every_ns", "limit", "start_ns", "end_ns", "offset_ns", "immediately", "queue", "task", "opts", "misfire", "misfire_grace_ns", "driver")
    ID_FIELD_NUMBER: _ClassVar[int]
    CRON_FIELD_NUMBER: _ClassVar[int]
    TZ_FIELD_NUMBER: _ClassVar[int]
    EVERY_NS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    START_NS_FIELD_NUMBER: _ClassVar[int]
    END_NS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_NS_FIELD_NUMBER: _ClassVar[int]
    IMMEDIATELY_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    OPTS_FIELD_NUMBER: _ClassVar[int]
    MISFIRE_FIELD_NUMBER: _ClassVar[int]
    MISFIRE_GRACE_NS_FIELD_NUMBER: _ClassVar[int]
    DRIVER_FIELD_NUMBER: _ClassVar[int]
    id: str
    cron: str
    tz: str
    every_ns: int
    limit: int
    start_ns: int
    end_ns: int
    offset_ns: int
    immediately: bool
    queue: str
    task: TaskSpec
    opts: EnqueueOpts
    misfire: MisfirePolicy
    misfire_grace_ns: int
    driver: ScheduleDriver
    def __init__(self, id: _Optional[str] = ..., cron: _Optional[str] = ..., tz: _Optional[str] = ..., every_ns: _Optional[int] = ..., limit: _Optional[int] = ..., start_ns: _Optional[int] = ..., end_ns: _Optional[int] = ..., offset_ns: _Optional[int] = ..., immediately: _Optional[bool] = ..., queue: _Optional[str] = ..., task: _Optional[_Union[TaskSpec, _Mapping]] = ..., opts: _Optional[_Union[EnqueueOpts, _Mapping]] = ..., misfire: _Optional[_Union[MisfirePolicy, str]] = ..., misfire_grace_ns: _Optional[int] = ..., driver: _Optional[_Union[ScheduleDriver, str]] = ...) -> None: ...

class FlowNode(_message.Message):
    __slots__ = ("id", "queue", "task", "opts", "depends_on", "on_failure", "join_existing")
    ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    OPTS_FIELD_NUMBER: _ClassVar[int]
    DEPENDS_ON_FIELD_NUMBER: _ClassVar[int]
    ON_FAILURE_FIELD_NUMBER: _ClassVar[int]
    JOIN_EXISTING_FIELD_NUMBER: _ClassVar[int]
    id: str
    queue: str
    task: TaskSpec
    opts: EnqueueOpts
    depends_on: _containers.RepeatedScalarFieldContainer[str]
    on_failure: FailurePolicy
    join_existing: bool
    def __init__(self, id: _Optional[str] = ..., queue: _Optional[str] = ..., task: _Optional[_Union[TaskSpec, _Mapping]] = ..., opts: _Optional[_Union[EnqueueOpts, _Mapping]] = ..., depends_on: _Optional[_Iterable[str]] = ..., on_failure: _Optional[_Union[FailurePolicy, str]] = ..., join_existing: _Optional[bool] = ...) -> None: ...

class FlowSpec(_message.Message):
    __slots__ = ("id", "nodes")
    ID_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    id: str
    nodes: _containers.RepeatedCompositeFieldContainer[FlowNode]
    def __init__(self, id: _Optional[str] = ..., nodes: _Optional[_Iterable[_Union[FlowNode, _Mapping]]] = ...) -> None: ...

class NamespaceQuotas(_message.Message):
    __slots__ = ("enqueue_rate", "stored_jobs", "payload_bytes", "active_leases", "schedules")
    ENQUEUE_RATE_FIELD_NUMBER: _ClassVar[int]
    STORED_JOBS_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_BYTES_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_LEASES_FIELD_NUMBER: _ClassVar[int]
    SCHEDULES_FIELD_NUMBER: _ClassVar[int]
    enqueue_rate: int
    stored_jobs: int
    payload_bytes: int
    active_leases: int
    schedules: int
    def __init__(self, enqueue_rate: _Optional[int] = ..., stored_jobs: _Optional[int] = ..., payload_bytes: _Optional[int] = ..., active_leases: _Optional[int] = ..., schedules: _Optional[int] = ...) -> None: ...
