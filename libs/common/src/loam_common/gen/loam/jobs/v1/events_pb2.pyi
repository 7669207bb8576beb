from loam_common.gen.loam.jobs.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobEvent(_message.Message):
    __slots__ = ("event", "queue", "job_id", "shard", "seq", "time_ns", "state", "prev_state", "name", "attempt", "worker", "epoch", "error", "data", "detail", "headers", "job_key")
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    EVENT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TIME_NS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PREV_STATE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    JOB_KEY_FIELD_NUMBER: _ClassVar[int]
    event: str
    queue: str
    job_id: str
    shard: int
    seq: int
    time_ns: int
    state: _types_pb2.JobState
    prev_state: _types_pb2.JobState
    name: str
    attempt: int
    worker: str
    epoch: int
    error: _types_pb2.JobError
    data: bytes
    detail: str
    headers: _containers.ScalarMap[str, str]
    job_key: str
    def __init__(self, event: _Optional[str] = ..., queue: _Optional[str] = ..., job_id: _Optional[str] = ..., shard: _Optional[int] = ..., seq: _Optional[int] = ..., time_ns: _Optional[int] = ..., state: _Optional[_Union[_types_pb2.JobState, str]] = ..., prev_state: _Optional[_Union[_types_pb2.JobState, str]] = ..., name: _Optional[str] = ..., attempt: _Optional[int] = ..., worker: _Optional[str] = ..., epoch: _Optional[int] = ..., error: _Optional[_Union[_types_pb2.JobError, _Mapping]] = ..., data: _Optional[bytes] = ..., detail: _Optional[str] = ..., headers: _Optional[_Mapping[str, str]] = ..., job_key: _Optional[str] = ...) -> None: ...
