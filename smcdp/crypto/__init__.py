"""The Paillier core: keys, encrypted vectors, fixed-point encodings and the optional C accelerator.

The public names below are what protocols, plugins and users build on (docs/crypto.md).  They are
exported lazily (PEP 562 ``__getattr__``, as in :mod:`smcdp.dp`): ``import smcdp.crypto.native``
does not import the vector code or the generated protobuf modules.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "PublicKey": "paillier",
    "PrivateKey": "paillier",
    "generate_keypair": "paillier",
    "save_public_key": "paillier",
    "save_private_key": "paillier",
    "load_public_key": "paillier",
    "load_private_key": "paillier",
    "EncryptedVector": "vector",
    "Packing": "encoding",
    "UNPACKED": "encoding",
    "DEFAULT_FRAC_BITS": "encoding",
    "encode_fixed": "encoding",
    "decode_fixed": "encoding",
    "ObfuscatorPool": "obfuscation",
    "CryptoThreads": "threads",
}

__all__ = [
    "DEFAULT_FRAC_BITS",
    "UNPACKED",
    "CryptoThreads",
    "EncryptedVector",
    "ObfuscatorPool",
    "Packing",
    "PrivateKey",
    "PublicKey",
    "decode_fixed",
    "encode_fixed",
    "generate_keypair",
    "load_private_key",
    "load_public_key",
    "save_private_key",
    "save_public_key",
]
assert sorted(__all__) == sorted(_LAZY)


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'smcdp.crypto' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{mod}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
