from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PaillierPublicKey(_message.Message):
    __slots__ = ("n", "subgroup_base", "subgroup_bits")
    N_FIELD_NUMBER: _ClassVar[int]
    SUBGROUP_BASE_FIELD_NUMBER: _ClassVar[int]
    SUBGROUP_BITS_FIELD_NUMBER: _ClassVar[int]
    n: bytes
    subgroup_base: bytes
    subgroup_bits: int
    def __init__(self, n: _Optional[bytes] = ..., subgroup_base: _Optional[bytes] = ..., subgroup_bits: _Optional[int] = ...) -> None: ...

class PaillierKeyPair(_message.Message):
    __slots__ = ("n", "p", "q", "subgroup_base", "subgroup_bits", "alpha_p", "alpha_q")
    N_FIELD_NUMBER: _ClassVar[int]
    P_FIELD_NUMBER: _ClassVar[int]
    Q_FIELD_NUMBER: _ClassVar[int]
    SUBGROUP_BASE_FIELD_NUMBER: _ClassVar[int]
    SUBGROUP_BITS_FIELD_NUMBER: _ClassVar[int]
    ALPHA_P_FIELD_NUMBER: _ClassVar[int]
    ALPHA_Q_FIELD_NUMBER: _ClassVar[int]
    n: bytes
    p: bytes
    q: bytes
    subgroup_base: bytes
    subgroup_bits: int
    alpha_p: bytes
    alpha_q: bytes
    def __init__(self, n: _Optional[bytes] = ..., p: _Optional[bytes] = ..., q: _Optional[bytes] = ..., subgroup_base: _Optional[bytes] = ..., subgroup_bits: _Optional[int] = ..., alpha_p: _Optional[bytes] = ..., alpha_q: _Optional[bytes] = ...) -> None: ...

class CiphertextVector(_message.Message):
    __slots__ = ("ciphertexts", "exponent", "length", "slots_per_ciphertext", "slot_bits", "key_fingerprint")
    CIPHERTEXTS_FIELD_NUMBER: _ClassVar[int]
    EXPONENT_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    SLOTS_PER_CIPHERTEXT_FIELD_NUMBER: _ClassVar[int]
    SLOT_BITS_FIELD_NUMBER: _ClassVar[int]
    KEY_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    ciphertexts: _containers.RepeatedScalarFieldContainer[bytes]
    exponent: int
    length: int
    slots_per_ciphertext: int
    slot_bits: int
    key_fingerprint: bytes
    def __init__(self, ciphertexts: _Optional[_Iterable[bytes]] = ..., exponent: _Optional[int] = ..., length: _Optional[int] = ..., slots_per_ciphertext: _Optional[int] = ..., slot_bits: _Optional[int] = ..., key_fingerprint: _Optional[bytes] = ...) -> None: ...

class Floats(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, values: _Optional[_Iterable[float]] = ...) -> None: ...

class Ints(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, values: _Optional[_Iterable[int]] = ...) -> None: ...

class BigInts(_message.Message):
    __slots__ = ("magnitude", "negative")
    MAGNITUDE_FIELD_NUMBER: _ClassVar[int]
    NEGATIVE_FIELD_NUMBER: _ClassVar[int]
    magnitude: _containers.RepeatedScalarFieldContainer[bytes]
    negative: _containers.RepeatedScalarFieldContainer[bool]
    def __init__(self, magnitude: _Optional[_Iterable[bytes]] = ..., negative: _Optional[_Iterable[bool]] = ...) -> None: ...

class Matrix(_message.Message):
    __slots__ = ("rows", "cols", "values")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    COLS_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    rows: int
    cols: int
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, rows: _Optional[int] = ..., cols: _Optional[int] = ..., values: _Optional[_Iterable[float]] = ...) -> None: ...

class Flag(_message.Message):
    __slots__ = ("value",)
    VALUE_FIELD_NUMBER: _ClassVar[int]
    value: bool
    def __init__(self, value: _Optional[bool] = ...) -> None: ...

class Text(_message.Message):
    __slots__ = ("value",)
    VALUE_FIELD_NUMBER: _ClassVar[int]
    value: str
    def __init__(self, value: _Optional[str] = ...) -> None: ...

class Blobs(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, values: _Optional[_Iterable[bytes]] = ...) -> None: ...

class RelayedRelease(_message.Message):
    __slots__ = ("role", "release", "proof")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    PROOF_FIELD_NUMBER: _ClassVar[int]
    role: str
    release: CiphertextVector
    proof: BigInts
    def __init__(self, role: _Optional[str] = ..., release: _Optional[_Union[CiphertextVector, _Mapping]] = ..., proof: _Optional[_Union[BigInts, _Mapping]] = ...) -> None: ...

class RelayedReleases(_message.Message):
    __slots__ = ("releases",)
    RELEASES_FIELD_NUMBER: _ClassVar[int]
    releases: _containers.RepeatedCompositeFieldContainer[RelayedRelease]
    def __init__(self, releases: _Optional[_Iterable[_Union[RelayedRelease, _Mapping]]] = ...) -> None: ...

class PowerIterationRound(_message.Message):
    __slots__ = ("gram", "converged", "contribution")
    GRAM_FIELD_NUMBER: _ClassVar[int]
    CONVERGED_FIELD_NUMBER: _ClassVar[int]
    CONTRIBUTION_FIELD_NUMBER: _ClassVar[int]
    gram: CiphertextVector
    converged: bool
    contribution: CiphertextVector
    def __init__(self, gram: _Optional[_Union[CiphertextVector, _Mapping]] = ..., converged: _Optional[bool] = ..., contribution: _Optional[_Union[CiphertextVector, _Mapping]] = ...) -> None: ...

class PowerIterationReply(_message.Message):
    __slots__ = ("blinded_gram", "stop", "block")
    BLINDED_GRAM_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    BLOCK_FIELD_NUMBER: _ClassVar[int]
    blinded_gram: CiphertextVector
    stop: bool
    block: CiphertextVector
    def __init__(self, blinded_gram: _Optional[_Union[CiphertextVector, _Mapping]] = ..., stop: _Optional[bool] = ..., block: _Optional[_Union[CiphertextVector, _Mapping]] = ...) -> None: ...
