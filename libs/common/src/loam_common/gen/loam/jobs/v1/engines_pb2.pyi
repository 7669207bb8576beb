from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EngineKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ENGINE_KIND_UNSPECIFIED: _ClassVar[EngineKind]
    ENGINE_KIND_SAIL: _ClassVar[EngineKind]
    ENGINE_KIND_FLINK: _ClassVar[EngineKind]
ENGINE_KIND_UNSPECIFIED: EngineKind
ENGINE_KIND_SAIL: EngineKind
ENGINE_KIND_FLINK: EngineKind

class EngineJob(_message.Message):
    __slots__ = ("engine", "name", "artifact", "config")
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
    engine: EngineKind
    name: str
    artifact: str
    config: _containers.ScalarMap[str, str]
    def __init__(self, engine: _Optional[_Union[EngineKind, str]] = ..., name: _Optional[str] = ..., artifact: _Optional[str] = ..., config: _Optional[_Mapping[str, str]] = ...) -> None: ...

class EngineAction(_message.Message):
    __slots__ = ("action",)
    ACTION_FIELD_NUMBER: _ClassVar[int]
    action: str
    def __init__(self, action: _Optional[str] = ...) -> None: ...
