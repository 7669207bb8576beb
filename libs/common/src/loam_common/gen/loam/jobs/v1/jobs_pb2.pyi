from loam_common.gen.loam.jobs.v1 import engines_pb2 as _engines_pb2
from loam_common.gen.loam.jobs.v1 import events_pb2 as _events_pb2
from loam_common.gen.loam.jobs.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LeaseToken(_message.Message):
    __slots__ = ("queue", "job", "epoch")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    queue: str
    job: str
    epoch: int
    def __init__(self, queue: _Optional[str] = ..., job: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class EnqueueRequest(_message.Message):
    __slots__ = ("queue", "task", "opts")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    OPTS_FIELD_NUMBER: _ClassVar[int]
    queue: str
    task: _types_pb2.TaskSpec
    opts: _types_pb2.EnqueueOpts
    def __init__(self, queue: _Optional[str] = ..., task: _Optional[_Union[_types_pb2.TaskSpec, _Mapping]] = ..., opts: _Optional[_Union[_types_pb2.EnqueueOpts, _Mapping]] = ...) -> None: ...

class Enqueued(_message.Message):
    __slots__ = ("job", "created", "state", "job_key", "dropped")
    JOB_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    JOB_KEY_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    job: str
    created: bool
    state: _types_pb2.JobState
    job_key: str
    dropped: str
    def __init__(self, job: _Optional[str] = ..., created: _Optional[bool] = ..., state: _Optional[_Union[_types_pb2.JobState, str]] = ..., job_key: _Optional[str] = ..., dropped: _Optional[str] = ...) -> None: ...

class EnqueueResponse(_message.Message):
    __slots__ = ("enqueued",)
    ENQUEUED_FIELD_NUMBER: _ClassVar[int]
    enqueued: Enqueued
    def __init__(self, enqueued: _Optional[_Union[Enqueued, _Mapping]] = ...) -> None: ...

class BulkItem(_message.Message):
    __slots__ = ("task", "opts")
    TASK_FIELD_NUMBER: _ClassVar[int]
    OPTS_FIELD_NUMBER: _ClassVar[int]
    task: _types_pb2.TaskSpec
    opts: _types_pb2.EnqueueOpts
    def __init__(self, task: _Optional[_Union[_types_pb2.TaskSpec, _Mapping]] = ..., opts: _Optional[_Union[_types_pb2.EnqueueOpts, _Mapping]] = ...) -> None: ...

class EnqueueBulkRequest(_message.Message):
    __slots__ = ("queue", "jobs", "idempotency")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_FIELD_NUMBER: _ClassVar[int]
    queue: str
    jobs: _containers.RepeatedCompositeFieldContainer[BulkItem]
    idempotency: _types_pb2.Idempotency
    def __init__(self, queue: _Optional[str] = ..., jobs: _Optional[_Iterable[_Union[BulkItem, _Mapping]]] = ..., idempotency: _Optional[_Union[_types_pb2.Idempotency, _Mapping]] = ...) -> None: ...

class ItemError(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class EnqueueBulkResult(_message.Message):
    __slots__ = ("enqueued", "error")
    ENQUEUED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    enqueued: Enqueued
    error: ItemError
    def __init__(self, enqueued: _Optional[_Union[Enqueued, _Mapping]] = ..., error: _Optional[_Union[ItemError, _Mapping]] = ...) -> None: ...

class EnqueueBulkResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[EnqueueBulkResult]
    def __init__(self, results: _Optional[_Iterable[_Union[EnqueueBulkResult, _Mapping]]] = ...) -> None: ...

class WriteItem(_message.Message):
    __slots__ = ("enqueue", "cancel", "result_set")
    class Cancel(_message.Message):
        __slots__ = ("queue", "job", "reason")
        QUEUE_FIELD_NUMBER: _ClassVar[int]
        JOB_FIELD_NUMBER: _ClassVar[int]
        REASON_FIELD_NUMBER: _ClassVar[int]
        queue: str
        job: str
        reason: str
        def __init__(self, queue: _Optional[str] = ..., job: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...
    ENQUEUE_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    RESULT_SET_FIELD_NUMBER: _ClassVar[int]
    enqueue: EnqueueRequest
    cancel: WriteItem.Cancel
    result_set: ResultSetRequest
    def __init__(self, enqueue: _Optional[_Union[EnqueueRequest, _Mapping]] = ..., cancel: _Optional[_Union[WriteItem.Cancel, _Mapping]] = ..., result_set: _Optional[_Union[ResultSetRequest, _Mapping]] = ...) -> None: ...

class WriteBatchRequest(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[WriteItem]
    def __init__(self, items: _Optional[_Iterable[_Union[WriteItem, _Mapping]]] = ...) -> None: ...

class WriteOutcome(_message.Message):
    __slots__ = ("enqueued", "canceled", "result_stored")
    class Canceled(_message.Message):
        __slots__ = ("job",)
        JOB_FIELD_NUMBER: _ClassVar[int]
        job: str
        def __init__(self, job: _Optional[str] = ...) -> None: ...
    class ResultStored(_message.Message):
        __slots__ = ("key",)
        KEY_FIELD_NUMBER: _ClassVar[int]
        key: str
        def __init__(self, key: _Optional[str] = ...) -> None: ...
    ENQUEUED_FIELD_NUMBER: _ClassVar[int]
    CANCELED_FIELD_NUMBER: _ClassVar[int]
    RESULT_STORED_FIELD_NUMBER: _ClassVar[int]
    enqueued: Enqueued
    canceled: WriteOutcome.Canceled
    result_stored: WriteOutcome.ResultStored
    def __init__(self, enqueued: _Optional[_Union[Enqueued, _Mapping]] = ..., canceled: _Optional[_Union[WriteOutcome.Canceled, _Mapping]] = ..., result_stored: _Optional[_Union[WriteOutcome.ResultStored, _Mapping]] = ...) -> None: ...

class WriteBatchResponse(_message.Message):
    __slots__ = ("outcomes",)
    OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    outcomes: _containers.RepeatedCompositeFieldContainer[WriteOutcome]
    def __init__(self, outcomes: _Optional[_Iterable[_Union[WriteOutcome, _Mapping]]] = ...) -> None: ...

class LeaseRequest(_message.Message):
    __slots__ = ("queues", "worker", "max", "wait_ns", "names", "visibility_ns", "subject_batch")
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    WAIT_NS_FIELD_NUMBER: _ClassVar[int]
    NAMES_FIELD_NUMBER: _ClassVar[int]
    VISIBILITY_NS_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_BATCH_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedScalarFieldContainer[str]
    worker: str
    max: int
    wait_ns: int
    names: _containers.RepeatedScalarFieldContainer[str]
    visibility_ns: int
    subject_batch: int
    def __init__(self, queues: _Optional[_Iterable[str]] = ..., worker: _Optional[str] = ..., max: _Optional[int] = ..., wait_ns: _Optional[int] = ..., names: _Optional[_Iterable[str]] = ..., visibility_ns: _Optional[int] = ..., subject_batch: _Optional[int] = ...) -> None: ...

class ChildrenSummary(_message.Message):
    __slots__ = ("pending", "completed", "failed")
    PENDING_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    pending: int
    completed: int
    failed: int
    def __init__(self, pending: _Optional[int] = ..., completed: _Optional[int] = ..., failed: _Optional[int] = ...) -> None: ...

class Lease(_message.Message):
    __slots__ = ("token", "task", "attempt", "stalled", "deadline_ns", "parent", "children", "opts", "created_ns", "deferred_failure", "retry_epoch", "last_error")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    STALLED_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_NS_FIELD_NUMBER: _ClassVar[int]
    PARENT_FIELD_NUMBER: _ClassVar[int]
    CHILDREN_FIELD_NUMBER: _ClassVar[int]
    OPTS_FIELD_NUMBER: _ClassVar[int]
    CREATED_NS_FIELD_NUMBER: _ClassVar[int]
    DEFERRED_FAILURE_FIELD_NUMBER: _ClassVar[int]
    RETRY_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    token: LeaseToken
    task: _types_pb2.TaskSpec
    attempt: int
    stalled: int
    deadline_ns: int
    parent: _types_pb2.ParentRef
    children: ChildrenSummary
    opts: _types_pb2.EnqueueOpts
    created_ns: int
    deferred_failure: str
    retry_epoch: int
    last_error: _types_pb2.JobError
    def __init__(self, token: _Optional[_Union[LeaseToken, _Mapping]] = ..., task: _Optional[_Union[_types_pb2.TaskSpec, _Mapping]] = ..., attempt: _Optional[int] = ..., stalled: _Optional[int] = ..., deadline_ns: _Optional[int] = ..., parent: _Optional[_Union[_types_pb2.ParentRef, _Mapping]] = ..., children: _Optional[_Union[ChildrenSummary, _Mapping]] = ..., opts: _Optional[_Union[_types_pb2.EnqueueOpts, _Mapping]] = ..., created_ns: _Optional[int] = ..., deferred_failure: _Optional[str] = ..., retry_epoch: _Optional[int] = ..., last_error: _Optional[_Union[_types_pb2.JobError, _Mapping]] = ...) -> None: ...

class LeaseResponse(_message.Message):
    __slots__ = ("leases",)
    LEASES_FIELD_NUMBER: _ClassVar[int]
    leases: _containers.RepeatedCompositeFieldContainer[Lease]
    def __init__(self, leases: _Optional[_Iterable[_Union[Lease, _Mapping]]] = ...) -> None: ...

class ExtendRequest(_message.Message):
    __slots__ = ("token", "by_ns")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    BY_NS_FIELD_NUMBER: _ClassVar[int]
    token: LeaseToken
    by_ns: int
    def __init__(self, token: _Optional[_Union[LeaseToken, _Mapping]] = ..., by_ns: _Optional[int] = ...) -> None: ...

class ExtendResponse(_message.Message):
    __slots__ = ("deadline_ns",)
    DEADLINE_NS_FIELD_NUMBER: _ClassVar[int]
    deadline_ns: int
    def __init__(self, deadline_ns: _Optional[int] = ...) -> None: ...

class Outcome(_message.Message):
    __slots__ = ("ok", "retry", "fail", "release", "delay", "wait_children", "rate_limited", "retention", "metrics", "clock_ms")
    class Ok(_message.Message):
        __slots__ = ("result", "if_no_pending_children")
        RESULT_FIELD_NUMBER: _ClassVar[int]
        IF_NO_PENDING_CHILDREN_FIELD_NUMBER: _ClassVar[int]
        result: _types_pb2.Payload
        if_no_pending_children: bool
        def __init__(self, result: _Optional[_Union[_types_pb2.Payload, _Mapping]] = ..., if_no_pending_children: _Optional[bool] = ...) -> None: ...
    class Retry(_message.Message):
        __slots__ = ("error", "after_ns")
        ERROR_FIELD_NUMBER: _ClassVar[int]
        AFTER_NS_FIELD_NUMBER: _ClassVar[int]
        error: _types_pb2.JobError
        after_ns: int
        def __init__(self, error: _Optional[_Union[_types_pb2.JobError, _Mapping]] = ..., after_ns: _Optional[int] = ...) -> None: ...
    class Fail(_message.Message):
        __slots__ = ("error", "dead_letter")
        ERROR_FIELD_NUMBER: _ClassVar[int]
        DEAD_LETTER_FIELD_NUMBER: _ClassVar[int]
        error: _types_pb2.JobError
        dead_letter: bool
        def __init__(self, error: _Optional[_Union[_types_pb2.JobError, _Mapping]] = ..., dead_letter: _Optional[bool] = ...) -> None: ...
    class Release(_message.Message):
        __slots__ = ("after_ns",)
        AFTER_NS_FIELD_NUMBER: _ClassVar[int]
        after_ns: int
        def __init__(self, after_ns: _Optional[int] = ...) -> None: ...
    class Delay(_message.Message):
        __slots__ = ("until_ns",)
        UNTIL_NS_FIELD_NUMBER: _ClassVar[int]
        until_ns: int
        def __init__(self, until_ns: _Optional[int] = ...) -> None: ...
    class WaitChildren(_message.Message):
        __slots__ = ()
        def __init__(self) -> None: ...
    class RateLimited(_message.Message):
        __slots__ = ("for_ns",)
        FOR_NS_FIELD_NUMBER: _ClassVar[int]
        for_ns: int
        def __init__(self, for_ns: _Optional[int] = ...) -> None: ...
    class Metrics(_message.Message):
        __slots__ = ("at_ms", "max_data_points")
        AT_MS_FIELD_NUMBER: _ClassVar[int]
        MAX_DATA_POINTS_FIELD_NUMBER: _ClassVar[int]
        at_ms: int
        max_data_points: int
        def __init__(self, at_ms: _Optional[int] = ..., max_data_points: _Optional[int] = ...) -> None: ...
    OK_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    FAIL_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    DELAY_FIELD_NUMBER: _ClassVar[int]
    WAIT_CHILDREN_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMITED_FIELD_NUMBER: _ClassVar[int]
    RETENTION_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    CLOCK_MS_FIELD_NUMBER: _ClassVar[int]
    ok: Outcome.Ok
    retry: Outcome.Retry
    fail: Outcome.Fail
    release: Outcome.Release
    delay: Outcome.Delay
    wait_children: Outcome.WaitChildren
    rate_limited: Outcome.RateLimited
    retention: _types_pb2.Retention
    metrics: Outcome.Metrics
    clock_ms: int
    def __init__(self, ok: _Optional[_Union[Outcome.Ok, _Mapping]] = ..., retry: _Optional[_Union[Outcome.Retry, _Mapping]] = ..., fail: _Optional[_Union[Outcome.Fail, _Mapping]] = ..., release: _Optional[_Union[Outcome.Release, _Mapping]] = ..., delay: _Optional[_Union[Outcome.Delay, _Mapping]] = ..., wait_children: _Optional[_Union[Outcome.WaitChildren, _Mapping]] = ..., rate_limited: _Optional[_Union[Outcome.RateLimited, _Mapping]] = ..., retention: _Optional[_Union[_types_pb2.Retention, _Mapping]] = ..., metrics: _Optional[_Union[Outcome.Metrics, _Mapping]] = ..., clock_ms: _Optional[int] = ...) -> None: ...

class CompleteRequest(_message.Message):
    __slots__ = ("token", "outcome")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    token: LeaseToken
    outcome: Outcome
    def __init__(self, token: _Optional[_Union[LeaseToken, _Mapping]] = ..., outcome: _Optional[_Union[Outcome, _Mapping]] = ...) -> None: ...

class Completed(_message.Message):
    __slots__ = ("state", "moved")
    STATE_FIELD_NUMBER: _ClassVar[int]
    MOVED_FIELD_NUMBER: _ClassVar[int]
    state: _types_pb2.JobState
    moved: bool
    def __init__(self, state: _Optional[_Union[_types_pb2.JobState, str]] = ..., moved: _Optional[bool] = ...) -> None: ...

class CompleteResponse(_message.Message):
    __slots__ = ("completed",)
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    completed: Completed
    def __init__(self, completed: _Optional[_Union[Completed, _Mapping]] = ...) -> None: ...

class CompleteBatchRequest(_message.Message):
    __slots__ = ("items", "lease")
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[CompleteRequest]
    lease: LeaseRequest
    def __init__(self, items: _Optional[_Iterable[_Union[CompleteRequest, _Mapping]]] = ..., lease: _Optional[_Union[LeaseRequest, _Mapping]] = ...) -> None: ...

class CompleteBatchResult(_message.Message):
    __slots__ = ("completed", "error")
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    completed: Completed
    error: ItemError
    def __init__(self, completed: _Optional[_Union[Completed, _Mapping]] = ..., error: _Optional[_Union[ItemError, _Mapping]] = ...) -> None: ...

class CompleteBatchResponse(_message.Message):
    __slots__ = ("results", "leases")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    LEASES_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[CompleteBatchResult]
    leases: _containers.RepeatedCompositeFieldContainer[Lease]
    def __init__(self, results: _Optional[_Iterable[_Union[CompleteBatchResult, _Mapping]]] = ..., leases: _Optional[_Iterable[_Union[Lease, _Mapping]]] = ...) -> None: ...

class EndLeaseWaitRequest(_message.Message):
    __slots__ = ("queues", "worker")
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedScalarFieldContainer[str]
    worker: str
    def __init__(self, queues: _Optional[_Iterable[str]] = ..., worker: _Optional[str] = ...) -> None: ...

class EndLeaseWaitResponse(_message.Message):
    __slots__ = ("ended",)
    ENDED_FIELD_NUMBER: _ClassVar[int]
    ended: int
    def __init__(self, ended: _Optional[int] = ...) -> None: ...

class ReportRequest(_message.Message):
    __slots__ = ("token", "progress", "log_line", "data")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    LOG_LINE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    token: LeaseToken
    progress: bytes
    log_line: str
    data: _types_pb2.Payload
    def __init__(self, token: _Optional[_Union[LeaseToken, _Mapping]] = ..., progress: _Optional[bytes] = ..., log_line: _Optional[str] = ..., data: _Optional[_Union[_types_pb2.Payload, _Mapping]] = ...) -> None: ...

class ReportResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ScheduleRequest(_message.Message):
    __slots__ = ("spec", "next_ns", "advance", "if_next_ns", "iteration_task", "iteration_opts", "replace_job_id", "if_updated_ns")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    NEXT_NS_FIELD_NUMBER: _ClassVar[int]
    ADVANCE_FIELD_NUMBER: _ClassVar[int]
    IF_NEXT_NS_FIELD_NUMBER: _ClassVar[int]
    ITERATION_TASK_FIELD_NUMBER: _ClassVar[int]
    ITERATION_OPTS_FIELD_NUMBER: _ClassVar[int]
    REPLACE_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    IF_UPDATED_NS_FIELD_NUMBER: _ClassVar[int]
    spec: _types_pb2.ScheduleSpec
    next_ns: int
    advance: bool
    if_next_ns: int
    iteration_task: _types_pb2.TaskSpec
    iteration_opts: _types_pb2.EnqueueOpts
    replace_job_id: str
    if_updated_ns: int
    def __init__(self, spec: _Optional[_Union[_types_pb2.ScheduleSpec, _Mapping]] = ..., next_ns: _Optional[int] = ..., advance: _Optional[bool] = ..., if_next_ns: _Optional[int] = ..., iteration_task: _Optional[_Union[_types_pb2.TaskSpec, _Mapping]] = ..., iteration_opts: _Optional[_Union[_types_pb2.EnqueueOpts, _Mapping]] = ..., replace_job_id: _Optional[str] = ..., if_updated_ns: _Optional[int] = ...) -> None: ...

class ScheduleResponse(_message.Message):
    __slots__ = ("id", "schedule", "changed", "iteration_job_id", "replaced")
    ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    ITERATION_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    REPLACED_FIELD_NUMBER: _ClassVar[int]
    id: str
    schedule: _types_pb2.ScheduleRecord
    changed: bool
    iteration_job_id: str
    replaced: bool
    def __init__(self, id: _Optional[str] = ..., schedule: _Optional[_Union[_types_pb2.ScheduleRecord, _Mapping]] = ..., changed: _Optional[bool] = ..., iteration_job_id: _Optional[str] = ..., replaced: _Optional[bool] = ...) -> None: ...

class UnscheduleRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class UnscheduleResponse(_message.Message):
    __slots__ = ("removed",)
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    removed: bool
    def __init__(self, removed: _Optional[bool] = ...) -> None: ...

class GetScheduleRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class GetScheduleResponse(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: _types_pb2.ScheduleRecord
    def __init__(self, schedule: _Optional[_Union[_types_pb2.ScheduleRecord, _Mapping]] = ...) -> None: ...

class ListSchedulesRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListSchedulesResponse(_message.Message):
    __slots__ = ("schedules", "next_page_token")
    SCHEDULES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    schedules: _containers.RepeatedCompositeFieldContainer[_types_pb2.ScheduleRecord]
    next_page_token: str
    def __init__(self, schedules: _Optional[_Iterable[_Union[_types_pb2.ScheduleRecord, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class FlowRequest(_message.Message):
    __slots__ = ("graph",)
    GRAPH_FIELD_NUMBER: _ClassVar[int]
    graph: _types_pb2.FlowSpec
    def __init__(self, graph: _Optional[_Union[_types_pb2.FlowSpec, _Mapping]] = ...) -> None: ...

class FlowResponse(_message.Message):
    __slots__ = ("flow", "jobs", "created")
    class JobsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    FLOW_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    flow: str
    jobs: _containers.ScalarMap[str, str]
    created: bool
    def __init__(self, flow: _Optional[str] = ..., jobs: _Optional[_Mapping[str, str]] = ..., created: _Optional[bool] = ...) -> None: ...

class GetFlowRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class GetFlowResponse(_message.Message):
    __slots__ = ("flow",)
    FLOW_FIELD_NUMBER: _ClassVar[int]
    flow: _types_pb2.FlowRecord
    def __init__(self, flow: _Optional[_Union[_types_pb2.FlowRecord, _Mapping]] = ...) -> None: ...

class SubmitEngineJobRequest(_message.Message):
    __slots__ = ("job", "schedule")
    JOB_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    job: _engines_pb2.EngineJob
    schedule: _types_pb2.ScheduleSpec
    def __init__(self, job: _Optional[_Union[_engines_pb2.EngineJob, _Mapping]] = ..., schedule: _Optional[_Union[_types_pb2.ScheduleSpec, _Mapping]] = ...) -> None: ...

class SubmitEngineJobResponse(_message.Message):
    __slots__ = ("run", "record", "schedule")
    RUN_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    run: str
    record: _engines_pb2.EngineRun
    schedule: str
    def __init__(self, run: _Optional[str] = ..., record: _Optional[_Union[_engines_pb2.EngineRun, _Mapping]] = ..., schedule: _Optional[str] = ...) -> None: ...

class ControlEngineJobRequest(_message.Message):
    __slots__ = ("run", "action")
    RUN_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    run: str
    action: _engines_pb2.EngineAction
    def __init__(self, run: _Optional[str] = ..., action: _Optional[_Union[_engines_pb2.EngineAction, _Mapping]] = ...) -> None: ...

class ControlEngineJobResponse(_message.Message):
    __slots__ = ("action", "record")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    action: str
    record: _engines_pb2.EngineRun
    def __init__(self, action: _Optional[str] = ..., record: _Optional[_Union[_engines_pb2.EngineRun, _Mapping]] = ...) -> None: ...

class GetEngineRunRequest(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: str
    def __init__(self, run: _Optional[str] = ...) -> None: ...

class GetEngineRunResponse(_message.Message):
    __slots__ = ("record",)
    RECORD_FIELD_NUMBER: _ClassVar[int]
    record: _engines_pb2.EngineRun
    def __init__(self, record: _Optional[_Union[_engines_pb2.EngineRun, _Mapping]] = ...) -> None: ...

class ListEngineRunsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListEngineRunsResponse(_message.Message):
    __slots__ = ("runs", "next_page_token")
    RUNS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[_engines_pb2.EngineRun]
    next_page_token: str
    def __init__(self, runs: _Optional[_Iterable[_Union[_engines_pb2.EngineRun, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListEngineRunLogsRequest(_message.Message):
    __slots__ = ("run", "after", "limit", "wait_ns")
    RUN_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    WAIT_NS_FIELD_NUMBER: _ClassVar[int]
    run: str
    after: int
    limit: int
    wait_ns: int
    def __init__(self, run: _Optional[str] = ..., after: _Optional[int] = ..., limit: _Optional[int] = ..., wait_ns: _Optional[int] = ...) -> None: ...

class ListEngineRunLogsResponse(_message.Message):
    __slots__ = ("lines", "finished")
    LINES_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    lines: _containers.RepeatedCompositeFieldContainer[_engines_pb2.EngineLogLine]
    finished: bool
    def __init__(self, lines: _Optional[_Iterable[_Union[_engines_pb2.EngineLogLine, _Mapping]]] = ..., finished: _Optional[bool] = ...) -> None: ...

class Selector(_message.Message):
    __slots__ = ("job", "queue", "flow", "schedule")
    JOB_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    FLOW_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    job: LeaseToken
    queue: str
    flow: str
    schedule: str
    def __init__(self, job: _Optional[_Union[LeaseToken, _Mapping]] = ..., queue: _Optional[str] = ..., flow: _Optional[str] = ..., schedule: _Optional[str] = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ("selector", "cursor", "without_cloudevent")
    SELECTOR_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    WITHOUT_CLOUDEVENT_FIELD_NUMBER: _ClassVar[int]
    selector: Selector
    cursor: bytes
    without_cloudevent: bool
    def __init__(self, selector: _Optional[_Union[Selector, _Mapping]] = ..., cursor: _Optional[bytes] = ..., without_cloudevent: _Optional[bool] = ...) -> None: ...

class WatchResponse(_message.Message):
    __slots__ = ("snapshot", "event", "cursor", "counts", "schedule", "flow", "ready", "cloudevent")
    class CloudeventEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    FLOW_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    CLOUDEVENT_FIELD_NUMBER: _ClassVar[int]
    snapshot: _types_pb2.Job
    event: _events_pb2.JobEvent
    cursor: bytes
    counts: _types_pb2.QueueCounts
    schedule: _types_pb2.ScheduleRecord
    flow: _types_pb2.FlowRecord
    ready: bool
    cloudevent: _containers.ScalarMap[str, str]
    def __init__(self, snapshot: _Optional[_Union[_types_pb2.Job, _Mapping]] = ..., event: _Optional[_Union[_events_pb2.JobEvent, _Mapping]] = ..., cursor: _Optional[bytes] = ..., counts: _Optional[_Union[_types_pb2.QueueCounts, _Mapping]] = ..., schedule: _Optional[_Union[_types_pb2.ScheduleRecord, _Mapping]] = ..., flow: _Optional[_Union[_types_pb2.FlowRecord, _Mapping]] = ..., ready: _Optional[bool] = ..., cloudevent: _Optional[_Mapping[str, str]] = ...) -> None: ...

class WatchCursor(_message.Message):
    __slots__ = ("positions",)
    class Position(_message.Message):
        __slots__ = ("queue", "shard", "seq")
        QUEUE_FIELD_NUMBER: _ClassVar[int]
        SHARD_FIELD_NUMBER: _ClassVar[int]
        SEQ_FIELD_NUMBER: _ClassVar[int]
        queue: str
        shard: int
        seq: int
        def __init__(self, queue: _Optional[str] = ..., shard: _Optional[int] = ..., seq: _Optional[int] = ...) -> None: ...
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    positions: _containers.RepeatedCompositeFieldContainer[WatchCursor.Position]
    def __init__(self, positions: _Optional[_Iterable[_Union[WatchCursor.Position, _Mapping]]] = ...) -> None: ...

class QueueOp(_message.Message):
    __slots__ = ("create", "update", "pause", "resume", "drain", "clean", "obliterate", "counts", "retry_all", "promote_all", "set_rate_limit", "set_concurrency", "workers", "metrics", "redrive_dead_letters", "trim_events", "rate_limit_for")
    class Create(_message.Message):
        __slots__ = ("config",)
        CONFIG_FIELD_NUMBER: _ClassVar[int]
        config: _types_pb2.QueueConfig
        def __init__(self, config: _Optional[_Union[_types_pb2.QueueConfig, _Mapping]] = ...) -> None: ...
    class Update(_message.Message):
        __slots__ = ("config", "fields")
        CONFIG_FIELD_NUMBER: _ClassVar[int]
        FIELDS_FIELD_NUMBER: _ClassVar[int]
        config: _types_pb2.QueueConfig
        fields: _containers.RepeatedScalarFieldContainer[str]
        def __init__(self, config: _Optional[_Union[_types_pb2.QueueConfig, _Mapping]] = ..., fields: _Optional[_Iterable[str]] = ...) -> None: ...
    class Pause(_message.Message):
        __slots__ = ()
        def __init__(self) -> None: ...
    class Resume(_message.Message):
        __slots__ = ()
        def __init__(self) -> None: ...
    class Drain(_message.Message):
        __slots__ = ("delayed", "limit")
        DELAYED_FIELD_NUMBER: _ClassVar[int]
        LIMIT_FIELD_NUMBER: _ClassVar[int]
        delayed: bool
        limit: int
        def __init__(self, delayed: _Optional[bool] = ..., limit: _Optional[int] = ...) -> None: ...
    class Clean(_message.Message):
        __slots__ = ("state", "grace_ns", "limit")
        STATE_FIELD_NUMBER: _ClassVar[int]
        GRACE_NS_FIELD_NUMBER: _ClassVar[int]
        LIMIT_FIELD_NUMBER: _ClassVar[int]
        state: _types_pb2.JobState
        grace_ns: int
        limit: int
        def __init__(self, state: _Optional[_Union[_types_pb2.JobState, str]] = ..., grace_ns: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...
    class Obliterate(_message.Message):
        __slots__ = ("force",)
        FORCE_FIELD_NUMBER: _ClassVar[int]
        force: bool
        def __init__(self, force: _Optional[bool] = ...) -> None: ...
    class Counts(_message.Message):
        __slots__ = ()
        def __init__(self) -> None: ...
    class RetryAll(_message.Message):
        __slots__ = ("state",)
        STATE_FIELD_NUMBER: _ClassVar[int]
        state: _types_pb2.JobState
        def __init__(self, state: _Optional[_Union[_types_pb2.JobState, str]] = ...) -> None: ...
    class PromoteAll(_message.Message):
        __slots__ = ()
        def __init__(self) -> None: ...
    class SetRateLimit(_message.Message):
        __slots__ = ("rate_limit",)
        RATE_LIMIT_FIELD_NUMBER: _ClassVar[int]
        rate_limit: _types_pb2.RateLimit
        def __init__(self, rate_limit: _Optional[_Union[_types_pb2.RateLimit, _Mapping]] = ...) -> None: ...
    class SetConcurrency(_message.Message):
        __slots__ = ("concurrency",)
        CONCURRENCY_FIELD_NUMBER: _ClassVar[int]
        concurrency: int
        def __init__(self, concurrency: _Optional[int] = ...) -> None: ...
    class Workers(_message.Message):
        __slots__ = ()
        def __init__(self) -> None: ...
    class Metrics(_message.Message):
        __slots__ = ("kind",)
        KIND_FIELD_NUMBER: _ClassVar[int]
        kind: str
        def __init__(self, kind: _Optional[str] = ...) -> None: ...
    class RedriveDeadLetters(_message.Message):
        __slots__ = ("limit",)
        LIMIT_FIELD_NUMBER: _ClassVar[int]
        limit: int
        def __init__(self, limit: _Optional[int] = ...) -> None: ...
    class TrimEvents(_message.Message):
        __slots__ = ("before_ns",)
        BEFORE_NS_FIELD_NUMBER: _ClassVar[int]
        before_ns: int
        def __init__(self, before_ns: _Optional[int] = ...) -> None: ...
    class RateLimitFor(_message.Message):
        __slots__ = ("for_ns",)
        FOR_NS_FIELD_NUMBER: _ClassVar[int]
        for_ns: int
        def __init__(self, for_ns: _Optional[int] = ...) -> None: ...
    CREATE_FIELD_NUMBER: _ClassVar[int]
    UPDATE_FIELD_NUMBER: _ClassVar[int]
    PAUSE_FIELD_NUMBER: _ClassVar[int]
    RESUME_FIELD_NUMBER: _ClassVar[int]
    DRAIN_FIELD_NUMBER: _ClassVar[int]
    CLEAN_FIELD_NUMBER: _ClassVar[int]
    OBLITERATE_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    RETRY_ALL_FIELD_NUMBER: _ClassVar[int]
    PROMOTE_ALL_FIELD_NUMBER: _ClassVar[int]
    SET_RATE_LIMIT_FIELD_NUMBER: _ClassVar[int]
    SET_CONCURRENCY_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    REDRIVE_DEAD_LETTERS_FIELD_NUMBER: _ClassVar[int]
    TRIM_EVENTS_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMIT_FOR_FIELD_NUMBER: _ClassVar[int]
    create: QueueOp.Create
    update: QueueOp.Update
    pause: QueueOp.Pause
    resume: QueueOp.Resume
    drain: QueueOp.Drain
    clean: QueueOp.Clean
    obliterate: QueueOp.Obliterate
    counts: QueueOp.Counts
    retry_all: QueueOp.RetryAll
    promote_all: QueueOp.PromoteAll
    set_rate_limit: QueueOp.SetRateLimit
    set_concurrency: QueueOp.SetConcurrency
    workers: QueueOp.Workers
    metrics: QueueOp.Metrics
    redrive_dead_letters: QueueOp.RedriveDeadLetters
    trim_events: QueueOp.TrimEvents
    rate_limit_for: QueueOp.RateLimitFor
    def __init__(self, create: _Optional[_Union[QueueOp.Create, _Mapping]] = ..., update: _Optional[_Union[QueueOp.Update, _Mapping]] = ..., pause: _Optional[_Union[QueueOp.Pause, _Mapping]] = ..., resume: _Optional[_Union[QueueOp.Resume, _Mapping]] = ..., drain: _Optional[_Union[QueueOp.Drain, _Mapping]] = ..., clean: _Optional[_Union[QueueOp.Clean, _Mapping]] = ..., obliterate: _Optional[_Union[QueueOp.Obliterate, _Mapping]] = ..., counts: _Optional[_Union[QueueOp.Counts, _Mapping]] = ..., retry_all: _Optional[_Union[QueueOp.RetryAll, _Mapping]] = ..., promote_all: _Optional[_Union[QueueOp.PromoteAll, _Mapping]] = ..., set_rate_limit: _Optional[_Union[QueueOp.SetRateLimit, _Mapping]] = ..., set_concurrency: _Optional[_Union[QueueOp.SetConcurrency, _Mapping]] = ..., workers: _Optional[_Union[QueueOp.Workers, _Mapping]] = ..., metrics: _Optional[_Union[QueueOp.Metrics, _Mapping]] = ..., redrive_dead_letters: _Optional[_Union[QueueOp.RedriveDeadLetters, _Mapping]] = ..., trim_events: _Optional[_Union[QueueOp.TrimEvents, _Mapping]] = ..., rate_limit_for: _Optional[_Union[QueueOp.RateLimitFor, _Mapping]] = ...) -> None: ...

class QueueAdminRequest(_message.Message):
    __slots__ = ("queue", "op")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    queue: str
    op: QueueOp
    def __init__(self, queue: _Optional[str] = ..., op: _Optional[_Union[QueueOp, _Mapping]] = ...) -> None: ...

class QueueAdminResponse(_message.Message):
    __slots__ = ("config", "counts", "affected", "workers", "rate_limit_ttl_ns", "rate_limit_used", "metrics", "activity")
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    AFFECTED_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMIT_TTL_NS_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMIT_USED_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    ACTIVITY_FIELD_NUMBER: _ClassVar[int]
    config: _types_pb2.QueueConfig
    counts: _types_pb2.QueueCounts
    affected: int
    workers: _containers.RepeatedCompositeFieldContainer[_types_pb2.Worker]
    rate_limit_ttl_ns: int
    rate_limit_used: int
    metrics: _types_pb2.MetricsRecord
    activity: _types_pb2.QueueActivity
    def __init__(self, config: _Optional[_Union[_types_pb2.QueueConfig, _Mapping]] = ..., counts: _Optional[_Union[_types_pb2.QueueCounts, _Mapping]] = ..., affected: _Optional[int] = ..., workers: _Optional[_Iterable[_Union[_types_pb2.Worker, _Mapping]]] = ..., rate_limit_ttl_ns: _Optional[int] = ..., rate_limit_used: _Optional[int] = ..., metrics: _Optional[_Union[_types_pb2.MetricsRecord, _Mapping]] = ..., activity: _Optional[_Union[_types_pb2.QueueActivity, _Mapping]] = ...) -> None: ...

class JobOp(_message.Message):
    __slots__ = ("get", "remove", "retry", "promote", "change_priority", "change_delay", "update_data", "logs", "cancel", "remove_dedup_key", "children", "progress", "add_log", "clear_logs", "get_dedup", "remove_child_dependency")
    class Get(_message.Message):
        __slots__ = ()
        def __init__(self) -> None: ...
    class Remove(_message.Message):
        __slots__ = ("children",)
        CHILDREN_FIELD_NUMBER: _ClassVar[int]
        children: bool
        def __init__(self, children: _Optional[bool] = ...) -> None: ...
    class Retry(_message.Message):
        __slots__ = ("keep_attempts",)
        KEEP_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
        keep_attempts: bool
        def __init__(self, keep_attempts: _Optional[bool] = ...) -> None: ...
    class Promote(_message.Message):
        __slots__ = ()
        def __init__(self) -> None: ...
    class ChangePriority(_message.Message):
        __slots__ = ("priority", "lifo")
        PRIORITY_FIELD_NUMBER: _ClassVar[int]
        LIFO_FIELD_NUMBER: _ClassVar[int]
        priority: int
        lifo: bool
        def __init__(self, priority: _Optional[int] = ..., lifo: _Optional[bool] = ...) -> None: ...
    class ChangeDelay(_message.Message):
        __slots__ = ("delay_ns",)
        DELAY_NS_FIELD_NUMBER: _ClassVar[int]
        delay_ns: int
        def __init__(self, delay_ns: _Optional[int] = ...) -> None: ...
    class UpdateData(_message.Message):
        __slots__ = ("data",)
        DATA_FIELD_NUMBER: _ClassVar[int]
        data: _types_pb2.Payload
        def __init__(self, data: _Optional[_Union[_types_pb2.Payload, _Mapping]] = ...) -> None: ...
    class Logs(_message.Message):
        __slots__ = ("start", "end")
        START_FIELD_NUMBER: _ClassVar[int]
        END_FIELD_NUMBER: _ClassVar[int]
        start: int
        end: int
        def __init__(self, start: _Optional[int] = ..., end: _Optional[int] = ...) -> None: ...
    class Cancel(_message.Message):
        __slots__ = ()
        def __init__(self) -> None: ...
    class RemoveDedupKey(_message.Message):
        __slots__ = ("dedup_id",)
        DEDUP_ID_FIELD_NUMBER: _ClassVar[int]
        dedup_id: str
        def __init__(self, dedup_id: _Optional[str] = ...) -> None: ...
    class Children(_message.Message):
        __slots__ = ()
        def __init__(self) -> None: ...
    class Progress(_message.Message):
        __slots__ = ("progress",)
        PROGRESS_FIELD_NUMBER: _ClassVar[int]
        progress: bytes
        def __init__(self, progress: _Optional[bytes] = ...) -> None: ...
    class AddLog(_message.Message):
        __slots__ = ("line", "keep")
        LINE_FIELD_NUMBER: _ClassVar[int]
        KEEP_FIELD_NUMBER: _ClassVar[int]
        line: str
        keep: int
        def __init__(self, line: _Optional[str] = ..., keep: _Optional[int] = ...) -> None: ...
    class ClearLogs(_message.Message):
        __slots__ = ("keep",)
        KEEP_FIELD_NUMBER: _ClassVar[int]
        keep: int
        def __init__(self, keep: _Optional[int] = ...) -> None: ...
    class GetDedup(_message.Message):
        __slots__ = ("dedup_id",)
        DEDUP_ID_FIELD_NUMBER: _ClassVar[int]
        dedup_id: str
        def __init__(self, dedup_id: _Optional[str] = ...) -> None: ...
    class RemoveChildDependency(_message.Message):
        __slots__ = ()
        def __init__(self) -> None: ...
    GET_FIELD_NUMBER: _ClassVar[int]
    REMOVE_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    PROMOTE_FIELD_NUMBER: _ClassVar[int]
    CHANGE_PRIORITY_FIELD_NUMBER: _ClassVar[int]
    CHANGE_DELAY_FIELD_NUMBER: _ClassVar[int]
    UPDATE_DATA_FIELD_NUMBER: _ClassVar[int]
    LOGS_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    REMOVE_DEDUP_KEY_FIELD_NUMBER: _ClassVar[int]
    CHILDREN_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    ADD_LOG_FIELD_NUMBER: _ClassVar[int]
    CLEAR_LOGS_FIELD_NUMBER: _ClassVar[int]
    GET_DEDUP_FIELD_NUMBER: _ClassVar[int]
    REMOVE_CHILD_DEPENDENCY_FIELD_NUMBER: _ClassVar[int]
    get: JobOp.Get
    remove: JobOp.Remove
    retry: JobOp.Retry
    promote: JobOp.Promote
    change_priority: JobOp.ChangePriority
    change_delay: JobOp.ChangeDelay
    update_data: JobOp.UpdateData
    logs: JobOp.Logs
    cancel: JobOp.Cancel
    remove_dedup_key: JobOp.RemoveDedupKey
    children: JobOp.Children
    progress: JobOp.Progress
    add_log: JobOp.AddLog
    clear_logs: JobOp.ClearLogs
    get_dedup: JobOp.GetDedup
    remove_child_dependency: JobOp.RemoveChildDependency
    def __init__(self, get: _Optional[_Union[JobOp.Get, _Mapping]] = ..., remove: _Optional[_Union[JobOp.Remove, _Mapping]] = ..., retry: _Optional[_Union[JobOp.Retry, _Mapping]] = ..., promote: _Optional[_Union[JobOp.Promote, _Mapping]] = ..., change_priority: _Optional[_Union[JobOp.ChangePriority, _Mapping]] = ..., change_delay: _Optional[_Union[JobOp.ChangeDelay, _Mapping]] = ..., update_data: _Optional[_Union[JobOp.UpdateData, _Mapping]] = ..., logs: _Optional[_Union[JobOp.Logs, _Mapping]] = ..., cancel: _Optional[_Union[JobOp.Cancel, _Mapping]] = ..., remove_dedup_key: _Optional[_Union[JobOp.RemoveDedupKey, _Mapping]] = ..., children: _Optional[_Union[JobOp.Children, _Mapping]] = ..., progress: _Optional[_Union[JobOp.Progress, _Mapping]] = ..., add_log: _Optional[_Union[JobOp.AddLog, _Mapping]] = ..., clear_logs: _Optional[_Union[JobOp.ClearLogs, _Mapping]] = ..., get_dedup: _Optional[_Union[JobOp.GetDedup, _Mapping]] = ..., remove_child_dependency: _Optional[_Union[JobOp.RemoveChildDependency, _Mapping]] = ...) -> None: ...

class JobAdminRequest(_message.Message):
    __slots__ = ("queue", "job", "op")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    queue: str
    job: str
    op: JobOp
    def __init__(self, queue: _Optional[str] = ..., job: _Optional[str] = ..., op: _Optional[_Union[JobOp, _Mapping]] = ...) -> None: ...

class JobAdminResponse(_message.Message):
    __slots__ = ("job", "logs", "log_count", "removed", "children")
    JOB_FIELD_NUMBER: _ClassVar[int]
    LOGS_FIELD_NUMBER: _ClassVar[int]
    LOG_COUNT_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    CHILDREN_FIELD_NUMBER: _ClassVar[int]
    job: _types_pb2.Job
    logs: _containers.RepeatedCompositeFieldContainer[_types_pb2.LogLine]
    log_count: int
    removed: bool
    children: _containers.RepeatedCompositeFieldContainer[_types_pb2.Dependency]
    def __init__(self, job: _Optional[_Union[_types_pb2.Job, _Mapping]] = ..., logs: _Optional[_Iterable[_Union[_types_pb2.LogLine, _Mapping]]] = ..., log_count: _Optional[int] = ..., removed: _Optional[bool] = ..., children: _Optional[_Iterable[_Union[_types_pb2.Dependency, _Mapping]]] = ...) -> None: ...

class JobAdminBatchRequest(_message.Message):
    __slots__ = ("queue", "items")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    queue: str
    items: _containers.RepeatedCompositeFieldContainer[JobAdminBatchItem]
    def __init__(self, queue: _Optional[str] = ..., items: _Optional[_Iterable[_Union[JobAdminBatchItem, _Mapping]]] = ...) -> None: ...

class JobAdminBatchItem(_message.Message):
    __slots__ = ("job", "op")
    JOB_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    job: str
    op: JobOp
    def __init__(self, job: _Optional[str] = ..., op: _Optional[_Union[JobOp, _Mapping]] = ...) -> None: ...

class JobAdminBatchResult(_message.Message):
    __slots__ = ("response", "error")
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    response: JobAdminResponse
    error: ItemError
    def __init__(self, response: _Optional[_Union[JobAdminResponse, _Mapping]] = ..., error: _Optional[_Union[ItemError, _Mapping]] = ...) -> None: ...

class JobAdminBatchResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[JobAdminBatchResult]
    def __init__(self, results: _Optional[_Iterable[_Union[JobAdminBatchResult, _Mapping]]] = ...) -> None: ...

class QueryRequest(_message.Message):
    __slots__ = ("queue", "states", "name", "since_ns", "until_ns", "page_size", "page_token")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SINCE_NS_FIELD_NUMBER: _ClassVar[int]
    UNTIL_NS_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    queue: str
    states: _containers.RepeatedScalarFieldContainer[_types_pb2.JobState]
    name: str
    since_ns: int
    until_ns: int
    page_size: int
    page_token: str
    def __init__(self, queue: _Optional[str] = ..., states: _Optional[_Iterable[_Union[_types_pb2.JobState, str]]] = ..., name: _Optional[str] = ..., since_ns: _Optional[int] = ..., until_ns: _Optional[int] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class QueryResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[_types_pb2.Job]
    next_page_token: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[_types_pb2.Job, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ResultGetRequest(_message.Message):
    __slots__ = ("key", "wait_ns", "after_version")
    KEY_FIELD_NUMBER: _ClassVar[int]
    WAIT_NS_FIELD_NUMBER: _ClassVar[int]
    AFTER_VERSION_FIELD_NUMBER: _ClassVar[int]
    key: str
    wait_ns: int
    after_version: int
    def __init__(self, key: _Optional[str] = ..., wait_ns: _Optional[int] = ..., after_version: _Optional[int] = ...) -> None: ...

class ResultGetResponse(_message.Message):
    __slots__ = ("value", "found", "version")
    VALUE_FIELD_NUMBER: _ClassVar[int]
    FOUND_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    value: _types_pb2.Payload
    found: bool
    version: int
    def __init__(self, value: _Optional[_Union[_types_pb2.Payload, _Mapping]] = ..., found: _Optional[bool] = ..., version: _Optional[int] = ...) -> None: ...

class ResultMGetRequest(_message.Message):
    __slots__ = ("keys",)
    KEYS_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, keys: _Optional[_Iterable[str]] = ...) -> None: ...

class MaybePayload(_message.Message):
    __slots__ = ("value", "found")
    VALUE_FIELD_NUMBER: _ClassVar[int]
    FOUND_FIELD_NUMBER: _ClassVar[int]
    value: _types_pb2.Payload
    found: bool
    def __init__(self, value: _Optional[_Union[_types_pb2.Payload, _Mapping]] = ..., found: _Optional[bool] = ...) -> None: ...

class ResultMGetResponse(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedCompositeFieldContainer[MaybePayload]
    def __init__(self, values: _Optional[_Iterable[_Union[MaybePayload, _Mapping]]] = ...) -> None: ...

class ResultSetRequest(_message.Message):
    __slots__ = ("key", "value", "ttl_ns")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    TTL_NS_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: _types_pb2.Payload
    ttl_ns: int
    def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_types_pb2.Payload, _Mapping]] = ..., ttl_ns: _Optional[int] = ...) -> None: ...

class ResultSetResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ResultSetManyRequest(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[ResultSetRequest]
    def __init__(self, items: _Optional[_Iterable[_Union[ResultSetRequest, _Mapping]]] = ...) -> None: ...

class ResultSetManyResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ResultDeleteRequest(_message.Message):
    __slots__ = ("key",)
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: str
    def __init__(self, key: _Optional[str] = ...) -> None: ...

class ResultDeleteResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ResultIncrRequest(_message.Message):
    __slots__ = ("key", "member", "ttl_ns")
    KEY_FIELD_NUMBER: _ClassVar[int]
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    TTL_NS_FIELD_NUMBER: _ClassVar[int]
    key: str
    member: str
    ttl_ns: int
    def __init__(self, key: _Optional[str] = ..., member: _Optional[str] = ..., ttl_ns: _Optional[int] = ...) -> None: ...

class ResultIncrResponse(_message.Message):
    __slots__ = ("size", "added")
    SIZE_FIELD_NUMBER: _ClassVar[int]
    ADDED_FIELD_NUMBER: _ClassVar[int]
    size: int
    added: bool
    def __init__(self, size: _Optional[int] = ..., added: _Optional[bool] = ...) -> None: ...

class ResultExpireRequest(_message.Message):
    __slots__ = ("key", "ttl_ns")
    KEY_FIELD_NUMBER: _ClassVar[int]
    TTL_NS_FIELD_NUMBER: _ClassVar[int]
    key: str
    ttl_ns: int
    def __init__(self, key: _Optional[str] = ..., ttl_ns: _Optional[int] = ...) -> None: ...

class ResultExpireResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ExchangeBindRequest(_message.Message):
    __slots__ = ("exchange", "routing_key", "queue", "ttl_ns")
    EXCHANGE_FIELD_NUMBER: _ClassVar[int]
    ROUTING_KEY_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    TTL_NS_FIELD_NUMBER: _ClassVar[int]
    exchange: str
    routing_key: str
    queue: str
    ttl_ns: int
    def __init__(self, exchange: _Optional[str] = ..., routing_key: _Optional[str] = ..., queue: _Optional[str] = ..., ttl_ns: _Optional[int] = ...) -> None: ...

class ExchangeBindResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ExchangeUnbindRequest(_message.Message):
    __slots__ = ("exchange", "routing_key", "queue")
    EXCHANGE_FIELD_NUMBER: _ClassVar[int]
    ROUTING_KEY_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    exchange: str
    routing_key: str
    queue: str
    def __init__(self, exchange: _Optional[str] = ..., routing_key: _Optional[str] = ..., queue: _Optional[str] = ...) -> None: ...

class ExchangeUnbindResponse(_message.Message):
    __slots__ = ("removed",)
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    removed: bool
    def __init__(self, removed: _Optional[bool] = ...) -> None: ...

class ExchangeBindingsRequest(_message.Message):
    __slots__ = ("exchange",)
    EXCHANGE_FIELD_NUMBER: _ClassVar[int]
    exchange: str
    def __init__(self, exchange: _Optional[str] = ...) -> None: ...

class ExchangeBindingsResponse(_message.Message):
    __slots__ = ("bindings",)
    BINDINGS_FIELD_NUMBER: _ClassVar[int]
    bindings: _containers.RepeatedCompositeFieldContainer[_types_pb2.ExchangeBinding]
    def __init__(self, bindings: _Optional[_Iterable[_Union[_types_pb2.ExchangeBinding, _Mapping]]] = ...) -> None: ...

class ExchangePublishRequest(_message.Message):
    __slots__ = ("exchange", "type", "routing_key", "task", "opts")
    EXCHANGE_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    ROUTING_KEY_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    OPTS_FIELD_NUMBER: _ClassVar[int]
    exchange: str
    type: _types_pb2.ExchangeType
    routing_key: str
    task: _types_pb2.TaskSpec
    opts: _types_pb2.EnqueueOpts
    def __init__(self, exchange: _Optional[str] = ..., type: _Optional[_Union[_types_pb2.ExchangeType, str]] = ..., routing_key: _Optional[str] = ..., task: _Optional[_Union[_types_pb2.TaskSpec, _Mapping]] = ..., opts: _Optional[_Union[_types_pb2.EnqueueOpts, _Mapping]] = ...) -> None: ...

class ExchangeRouted(_message.Message):
    __slots__ = ("queue", "result")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    queue: str
    result: EnqueueBulkResult
    def __init__(self, queue: _Optional[str] = ..., result: _Optional[_Union[EnqueueBulkResult, _Mapping]] = ...) -> None: ...

class ExchangePublishResponse(_message.Message):
    __slots__ = ("routed",)
    ROUTED_FIELD_NUMBER: _ClassVar[int]
    routed: _containers.RepeatedCompositeFieldContainer[ExchangeRouted]
    def __init__(self, routed: _Optional[_Iterable[_Union[ExchangeRouted, _Mapping]]] = ...) -> None: ...

class GetQuotasRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SetQuotasRequest(_message.Message):
    __slots__ = ("quotas", "reset")
    QUOTAS_FIELD_NUMBER: _ClassVar[int]
    RESET_FIELD_NUMBER: _ClassVar[int]
    quotas: _types_pb2.NamespaceQuotas
    reset: bool
    def __init__(self, quotas: _Optional[_Union[_types_pb2.NamespaceQuotas, _Mapping]] = ..., reset: _Optional[bool] = ...) -> None: ...

class GetQuotasResponse(_message.Message):
    __slots__ = ("quotas", "source", "usage")
    QUOTAS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    quotas: _types_pb2.NamespaceQuotas
    source: str
    usage: _types_pb2.NamespaceQuotas
    def __init__(self, quotas: _Optional[_Union[_types_pb2.NamespaceQuotas, _Mapping]] = ..., source: _Optional[str] = ..., usage: _Optional[_Union[_types_pb2.NamespaceQuotas, _Mapping]] = ...) -> None: ...

class SetQuotasResponse(_message.Message):
    __slots__ = ("quotas", "source", "usage")
    QUOTAS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    quotas: _types_pb2.NamespaceQuotas
    source: str
    usage: _types_pb2.NamespaceQuotas
    def __init__(self, quotas: _Optional[_Union[_types_pb2.NamespaceQuotas, _Mapping]] = ..., source: _Optional[str] = ..., usage: _Optional[_Union[_types_pb2.NamespaceQuotas, _Mapping]] = ...) -> None: ...
