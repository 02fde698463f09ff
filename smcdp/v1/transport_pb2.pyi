from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Envelope(_message.Message):
    __slots__ = ("session_id", "tag", "type_name", "chunk_index", "chunk_count", "total_size", "data")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    TYPE_NAME_FIELD_NUMBER: _ClassVar[int]
    CHUNK_INDEX_FIELD_NUMBER: _ClassVar[int]
    CHUNK_COUNT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    tag: str
    type_name: str
    chunk_index: int
    chunk_count: int
    total_size: int
    data: bytes
    def __init__(self, session_id: _Optional[str] = ..., tag: _Optional[str] = ..., type_name: _Optional[str] = ..., chunk_index: _Optional[int] = ..., chunk_count: _Optional[int] = ..., total_size: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("duplicate", "bytes")
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    duplicate: bool
    bytes: int
    def __init__(self, duplicate: _Optional[bool] = ..., bytes: _Optional[int] = ...) -> None: ...

class SessionSpec(_message.Message):
    __slots__ = ("session_id", "protocol", "roles", "params_json", "timeout_seconds", "seed")
    class RolesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    PARAMS_JSON_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    protocol: str
    roles: _containers.ScalarMap[str, str]
    params_json: str
    timeout_seconds: float
    seed: int
    def __init__(self, session_id: _Optional[str] = ..., protocol: _Optional[str] = ..., roles: _Optional[_Mapping[str, str]] = ..., params_json: _Optional[str] = ..., timeout_seconds: _Optional[float] = ..., seed: _Optional[int] = ...) -> None: ...

class ProposeReply(_message.Message):
    __slots__ = ("role", "pending", "detail")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    role: str
    pending: bool
    detail: str
    def __init__(self, role: _Optional[str] = ..., pending: _Optional[bool] = ..., detail: _Optional[str] = ...) -> None: ...

class SessionRef(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class BeginReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AbortRequest(_message.Message):
    __slots__ = ("session_id", "code", "message", "culprit", "link")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CULPRIT_FIELD_NUMBER: _ClassVar[int]
    LINK_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    code: str
    message: str
    culprit: str
    link: str
    def __init__(self, session_id: _Optional[str] = ..., code: _Optional[str] = ..., message: _Optional[str] = ..., culprit: _Optional[str] = ..., link: _Optional[str] = ...) -> None: ...

class AbortReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("session_id", "incarnation", "round", "about")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    ABOUT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    incarnation: str
    round: int
    about: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, session_id: _Optional[str] = ..., incarnation: _Optional[str] = ..., round: _Optional[int] = ..., about: _Optional[_Iterable[str]] = ...) -> None: ...

class HeartbeatReply(_message.Message):
    __slots__ = ("state", "incarnation", "round", "code", "culprit", "link", "about_heard_seconds")
    STATE_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    CULPRIT_FIELD_NUMBER: _ClassVar[int]
    LINK_FIELD_NUMBER: _ClassVar[int]
    ABOUT_HEARD_SECONDS_FIELD_NUMBER: _ClassVar[int]
    state: str
    incarnation: str
    round: int
    code: str
    culprit: str
    link: str
    about_heard_seconds: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, state: _Optional[str] = ..., incarnation: _Optional[str] = ..., round: _Optional[int] = ..., code: _Optional[str] = ..., culprit: _Optional[str] = ..., link: _Optional[str] = ..., about_heard_seconds: _Optional[_Iterable[float]] = ...) -> None: ...

class ResumeReply(_message.Message):
    __slots__ = ("role",)
    ROLE_FIELD_NUMBER: _ClassVar[int]
    role: str
    def __init__(self, role: _Optional[str] = ...) -> None: ...

class WaitingNotice(_message.Message):
    __slots__ = ("session_id", "party")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PARTY_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    party: str
    def __init__(self, session_id: _Optional[str] = ..., party: _Optional[str] = ...) -> None: ...

class WaitingReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SignedAuditHead(_message.Message):
    __slots__ = ("statement", "signature", "certificate")
    STATEMENT_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    CERTIFICATE_FIELD_NUMBER: _ClassVar[int]
    statement: bytes
    signature: bytes
    certificate: bytes
    def __init__(self, statement: _Optional[bytes] = ..., signature: _Optional[bytes] = ..., certificate: _Optional[bytes] = ...) -> None: ...

class WitnessQuery(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WitnessedHeads(_message.Message):
    __slots__ = ("heads",)
    HEADS_FIELD_NUMBER: _ClassVar[int]
    heads: _containers.RepeatedCompositeFieldContainer[SignedAuditHead]
    def __init__(self, heads: _Optional[_Iterable[_Union[SignedAuditHead, _Mapping]]] = ...) -> None: ...

class StartSessionRequest(_message.Message):
    __slots__ = ("protocol", "roles", "params_json", "session_id", "timeout_seconds", "seed")
    class RolesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    PARAMS_JSON_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    protocol: str
    roles: _containers.ScalarMap[str, str]
    params_json: str
    session_id: str
    timeout_seconds: float
    seed: int
    def __init__(self, protocol: _Optional[str] = ..., roles: _Optional[_Mapping[str, str]] = ..., params_json: _Optional[str] = ..., session_id: _Optional[str] = ..., timeout_seconds: _Optional[float] = ..., seed: _Optional[int] = ...) -> None: ...

class ListSessionsRequest(_message.Message):
    __slots__ = ("pending_only",)
    PENDING_ONLY_FIELD_NUMBER: _ClassVar[int]
    pending_only: bool
    def __init__(self, pending_only: _Optional[bool] = ...) -> None: ...

class SessionInfo(_message.Message):
    __slots__ = ("session_id", "state", "info_json")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    INFO_JSON_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    state: str
    info_json: str
    def __init__(self, session_id: _Optional[str] = ..., state: _Optional[str] = ..., info_json: _Optional[str] = ...) -> None: ...

class SessionList(_message.Message):
    __slots__ = ("sessions",)
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[SessionInfo]
    def __init__(self, sessions: _Optional[_Iterable[_Union[SessionInfo, _Mapping]]] = ...) -> None: ...

class DecisionRequest(_message.Message):
    __slots__ = ("session_id", "reason")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    reason: str
    def __init__(self, session_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class SessionRecord(_message.Message):
    __slots__ = ("session_id", "state", "record_json")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    RECORD_JSON_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    state: str
    record_json: str
    def __init__(self, session_id: _Optional[str] = ..., state: _Optional[str] = ..., record_json: _Optional[str] = ...) -> None: ...

class SessionStatus(_message.Message):
    __slots__ = ("session_id", "state", "status_json")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STATUS_JSON_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    state: str
    status_json: str
    def __init__(self, session_id: _Optional[str] = ..., state: _Optional[str] = ..., status_json: _Optional[str] = ...) -> None: ...
