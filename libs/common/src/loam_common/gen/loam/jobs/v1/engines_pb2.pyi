from loam_common.gen.loam.jobs.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EngineKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ENGINE_KIND_UNSPECIFIED: _ClassVar[EngineKind]
    ENGINE_KIND_SAIL: _ClassVar[EngineKind]
    ENGINE_KIND_FLINK: _ClassVar[EngineKind]
    ENGINE_KIND_SPARK_JVM: _ClassVar[EngineKind]

class EngineRunState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ENGINE_RUN_STATE_UNSPECIFIED: _ClassVar[EngineRunState]
    ENGINE_RUN_STATE_QUEUED: _ClassVar[EngineRunState]
    ENGINE_RUN_STATE_RUNNING: _ClassVar[EngineRunState]
    ENGINE_RUN_STATE_RETRYING: _ClassVar[EngineRunState]
    ENGINE_RUN_STATE_SUCCEEDED: _ClassVar[EngineRunState]
    ENGINE_RUN_STATE_FAILED: _ClassVar[EngineRunState]
    ENGINE_RUN_STATE_CANCELED: _ClassVar[EngineRunState]
ENGINE_KIND_UNSPECIFIED: EngineKind
ENGINE_KIND_SAIL: EngineKind
ENGINE_KIND_FLINK: EngineKind
ENGINE_KIND_SPARK_JVM: EngineKind
ENGINE_RUN_STATE_UNSPECIFIED: EngineRunState
ENGINE_RUN_STATE_QUEUED: EngineRunState
ENGINE_RUN_STATE_RUNNING: EngineRunState
ENGINE_RUN_STATE_RETRYING: EngineRunState
ENGINE_RUN_STATE_SUCCEEDED: EngineRunState
ENGINE_RUN_STATE_FAILED: EngineRunState
ENGINE_RUN_STATE_CANCELED: EngineRunState

class EngineJob(_message.Message):
    __slots__ = ("engine", "name", "artifact", "config", "attempts", "backoff", "timeout_ns", "spark_batch", "spark_submit", "flink")
    class ConfigEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_NS_FIELD_NUMBER: _ClassVar[int]
    SPARK_BATCH_FIELD_NUMBER: _ClassVar[int]
    SPARK_SUBMIT_FIELD_NUMBER: _ClassVar[int]
    FLINK_FIELD_NUMBER: _ClassVar[int]
    engine: EngineKind
    name: str
    artifact: str
    config: _containers.ScalarMap[str, str]
    attempts: int
    backoff: _types_pb2.Backoff
    timeout_ns: int
    spark_batch: SparkBatch
    spark_submit: SparkSubmit
    flink: FlinkDeployment
    def __init__(self, engine: _Optional[_Union[EngineKind, str]] = ..., name: _Optional[str] = ..., artifact: _Optional[str] = ..., config: _Optional[_Mapping[str, str]] = ..., attempts: _Optional[int] = ..., backoff: _Optional[_Union[_types_pb2.Backoff, _Mapping]] = ..., timeout_ns: _Optional[int] = ..., spark_batch: _Optional[_Union[SparkBatch, _Mapping]] = ..., spark_submit: _Optional[_Union[SparkSubmit, _Mapping]] = ..., flink: _Optional[_Union[FlinkDeployment, _Mapping]] = ...) -> None: ...

class SparkBatch(_message.Message):
    __slots__ = ("entrypoint", "source", "args", "conf", "python_deps")
    class ConfEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ENTRYPOINT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    CONF_FIELD_NUMBER: _ClassVar[int]
    PYTHON_DEPS_FIELD_NUMBER: _ClassVar[int]
    entrypoint: str
    source: bytes
    args: _containers.RepeatedScalarFieldContainer[str]
    conf: _containers.ScalarMap[str, str]
    python_deps: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, entrypoint: _Optional[str] = ..., source: _Optional[bytes] = ..., args: _Optional[_Iterable[str]] = ..., conf: _Optional[_Mapping[str, str]] = ..., python_deps: _Optional[_Iterable[str]] = ...) -> None: ...

class SparkSubmit(_message.Message):
    __slots__ = ("entrypoint", "source", "args", "conf", "master")
    class ConfEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ENTRYPOINT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    CONF_FIELD_NUMBER: _ClassVar[int]
    MASTER_FIELD_NUMBER: _ClassVar[int]
    entrypoint: str
    source: bytes
    args: _containers.RepeatedScalarFieldContainer[str]
    conf: _containers.ScalarMap[str, str]
    master: str
    def __init__(self, entrypoint: _Optional[str] = ..., source: _Optional[bytes] = ..., args: _Optional[_Iterable[str]] = ..., conf: _Optional[_Mapping[str, str]] = ..., master: _Optional[str] = ...) -> None: ...

class FlinkDeployment(_message.Message):
    __slots__ = ("deployment", "entrypoint", "source", "sql", "entry_class", "args", "parallelism", "config", "upgrade_mode", "allow_non_restored_state", "savepoint", "savepoint_interval_s", "artifact")
    class ConfigEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    ENTRYPOINT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SQL_FIELD_NUMBER: _ClassVar[int]
    ENTRY_CLASS_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    UPGRADE_MODE_FIELD_NUMBER: _ClassVar[int]
    ALLOW_NON_RESTORED_STATE_FIELD_NUMBER: _ClassVar[int]
    SAVEPOINT_FIELD_NUMBER: _ClassVar[int]
    SAVEPOINT_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    deployment: str
    entrypoint: str
    source: bytes
    sql: str
    entry_class: str
    args: _containers.RepeatedScalarFieldContainer[str]
    parallelism: int
    config: _containers.ScalarMap[str, str]
    upgrade_mode: str
    allow_non_restored_state: bool
    savepoint: str
    savepoint_interval_s: int
    artifact: str
    def __init__(self, deployment: _Optional[str] = ..., entrypoint: _Optional[str] = ..., source: _Optional[bytes] = ..., sql: _Optional[str] = ..., entry_class: _Optional[str] = ..., args: _Optional[_Iterable[str]] = ..., parallelism: _Optional[int] = ..., config: _Optional[_Mapping[str, str]] = ..., upgrade_mode: _Optional[str] = ..., allow_non_restored_state: _Optional[bool] = ..., savepoint: _Optional[str] = ..., savepoint_interval_s: _Optional[int] = ..., artifact: _Optional[str] = ...) -> None: ...

class EngineAction(_message.Message):
    __slots__ = ("action", "savepoint", "version", "flink")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    SAVEPOINT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    FLINK_FIELD_NUMBER: _ClassVar[int]
    action: str
    savepoint: str
    version: int
    flink: FlinkDeployment
    def __init__(self, action: _Optional[str] = ..., savepoint: _Optional[str] = ..., version: _Optional[int] = ..., flink: _Optional[_Union[FlinkDeployment, _Mapping]] = ...) -> None: ...

class FlinkSavepointRecord(_message.Message):
    __slots__ = ("path", "version", "job_id", "taken_ns", "reason")
    PATH_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TAKEN_NS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    path: str
    version: int
    job_id: str
    taken_ns: int
    reason: str
    def __init__(self, path: _Optional[str] = ..., version: _Optional[int] = ..., job_id: _Optional[str] = ..., taken_ns: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class FlinkStatus(_message.Message):
    __slots__ = ("deployment", "state", "version", "versions", "job_id", "savepoints", "pending_action", "pending_step", "last_error", "timings_ms", "actions_requested", "actions_done", "last_action", "last_action_error", "live", "status_requested")
    class TimingsMsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SAVEPOINTS_FIELD_NUMBER: _ClassVar[int]
    PENDING_ACTION_FIELD_NUMBER: _ClassVar[int]
    PENDING_STEP_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_MS_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_DONE_FIELD_NUMBER: _ClassVar[int]
    LAST_ACTION_FIELD_NUMBER: _ClassVar[int]
    LAST_ACTION_ERROR_FIELD_NUMBER: _ClassVar[int]
    LIVE_FIELD_NUMBER: _ClassVar[int]
    STATUS_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    deployment: str
    state: str
    version: int
    versions: int
    job_id: str
    savepoints: _containers.RepeatedCompositeFieldContainer[FlinkSavepointRecord]
    pending_action: str
    pending_step: str
    last_error: str
    timings_ms: _containers.ScalarMap[str, float]
    actions_requested: int
    actions_done: int
    last_action: str
    last_action_error: str
    live: FlinkJobLive
    status_requested: int
    def __init__(self, deployment: _Optional[str] = ..., state: _Optional[str] = ..., version: _Optional[int] = ..., versions: _Optional[int] = ..., job_id: _Optional[str] = ..., savepoints: _Optional[_Iterable[_Union[FlinkSavepointRecord, _Mapping]]] = ..., pending_action: _Optional[str] = ..., pending_step: _Optional[str] = ..., last_error: _Optional[str] = ..., timings_ms: _Optional[_Mapping[str, float]] = ..., actions_requested: _Optional[int] = ..., actions_done: _Optional[int] = ..., last_action: _Optional[str] = ..., last_action_error: _Optional[str] = ..., live: _Optional[_Union[FlinkJobLive, _Mapping]] = ..., status_requested: _Optional[int] = ...) -> None: ...

class FlinkJobLive(_message.Message):
    __slots__ = ("seq", "read_ns", "job_id", "state", "all_running", "restarts", "checkpoints_completed", "checkpoints_failed", "last_checkpoint_path", "last_checkpoint_ns", "savepoint_in_progress", "restored_from", "error")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    READ_NS_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ALL_RUNNING_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTS_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTS_FAILED_FIELD_NUMBER: _ClassVar[int]
    LAST_CHECKPOINT_PATH_FIELD_NUMBER: _ClassVar[int]
    LAST_CHECKPOINT_NS_FIELD_NUMBER: _ClassVar[int]
    SAVEPOINT_IN_PROGRESS_FIELD_NUMBER: _ClassVar[int]
    RESTORED_FROM_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    seq: int
    read_ns: int
    job_id: str
    state: str
    all_running: bool
    restarts: int
    checkpoints_completed: int
    checkpoints_failed: int
    last_checkpoint_path: str
    last_checkpoint_ns: int
    savepoint_in_progress: bool
    restored_from: str
    error: str
    def __init__(self, seq: _Optional[int] = ..., read_ns: _Optional[int] = ..., job_id: _Optional[str] = ..., state: _Optional[str] = ..., all_running: _Optional[bool] = ..., restarts: _Optional[int] = ..., checkpoints_completed: _Optional[int] = ..., checkpoints_failed: _Optional[int] = ..., last_checkpoint_path: _Optional[str] = ..., last_checkpoint_ns: _Optional[int] = ..., savepoint_in_progress: _Optional[bool] = ..., restored_from: _Optional[str] = ..., error: _Optional[str] = ...) -> None: ...

class EngineRunAttempt(_message.Message):
    __slots__ = ("attempt", "started_ns", "finished_ns", "exit_code", "error", "runner", "pid")
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    STARTED_NS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_NS_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RUNNER_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    started_ns: int
    finished_ns: int
    exit_code: int
    error: str
    runner: str
    pid: int
    def __init__(self, attempt: _Optional[int] = ..., started_ns: _Optional[int] = ..., finished_ns: _Optional[int] = ..., exit_code: _Optional[int] = ..., error: _Optional[str] = ..., runner: _Optional[str] = ..., pid: _Optional[int] = ...) -> None: ...

class EngineRun(_message.Message):
    __slots__ = ("id", "job", "state", "created_ns", "started_ns", "finished_ns", "attempts", "exit_code", "error", "queue", "schedule", "log_count", "cancel_requested", "epoch", "flink", "restarted_from")
    ID_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CREATED_NS_FIELD_NUMBER: _ClassVar[int]
    STARTED_NS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_NS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    LOG_COUNT_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    FLINK_FIELD_NUMBER: _ClassVar[int]
    RESTARTED_FROM_FIELD_NUMBER: _ClassVar[int]
    id: str
    job: EngineJob
    state: EngineRunState
    created_ns: int
    started_ns: int
    finished_ns: int
    attempts: _containers.RepeatedCompositeFieldContainer[EngineRunAttempt]
    exit_code: int
    error: str
    queue: str
    schedule: str
    log_count: int
    cancel_requested: bool
    epoch: int
    flink: FlinkStatus
    restarted_from: str
    def __init__(self, id: _Optional[str] = ..., job: _Optional[_Union[EngineJob, _Mapping]] = ..., state: _Optional[_Union[EngineRunState, str]] = ..., created_ns: _Optional[int] = ..., started_ns: _Optional[int] = ..., finished_ns: _Optional[int] = ..., attempts: _Optional[_Iterable[_Union[EngineRunAttempt, _Mapping]]] = ..., exit_code: _Optional[int] = ..., error: _Optional[str] = ..., queue: _Optional[str] = ..., schedule: _Optional[str] = ..., log_count: _Optional[int] = ..., cancel_requested: _Optional[bool] = ..., epoch: _Optional[int] = ..., flink: _Optional[_Union[FlinkStatus, _Mapping]] = ..., restarted_from: _Optional[str] = ...) -> None: ...

class EngineLogLine(_message.Message):
    __slots__ = ("n", "at_ns", "stream", "line")
    N_FIELD_NUMBER: _ClassVar[int]
    AT_NS_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    n: int
    at_ns: int
    stream: str
    line: str
    def __init__(self, n: _Optional[int] = ..., at_ns: _Optional[int] = ..., stream: _Optional[str] = ..., line: _Optional[str] = ...) -> None: ...
