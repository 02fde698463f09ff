"""Fuzz the files a party reads: each case starts from a valid file, mutates it, and runs the party's loader on it.

Loaders (``LOADERS``; each makes its valid file the way the code or the existing tests write it):

* the party's configuration TOML (``load_config``, every section: [party], [tls], [peers], [inputs], [timeouts],
  [limits], [logging], [policy] with its protocol tables, [budget], [compute], [console]);
* the protocols' input files: power iteration's ``.npy`` matrix (``open_matrix`` and every block through
  ``apply_block``, as a session reads it), dp-aggregate's ``.npz`` data set (``load_dataset``), keyword's
  utterance (``load_utterance``: ``.npy`` features or a WAV), feature files (``load_features``), WAV audio
  (``read_wav``), the keyword HMM models (``KeywordModels.load``), the speaker protocol's UBM and enrolled speaker
  models (``UBM.load``, ``SpeakerModels.load``);
* key files: a threshold key share (``load_key_share``), a key group's ``group.json`` (``KeyStore.load``), a
  Paillier private key (``load_private_key``);
* state a restarted party reads: a session record (``SessionRecords.load``), a checkpoint's ``checkpoint.json``,
  ``root.key`` and the ``durability.key`` (``Checkpoint.load``), its journal with and without a head
  (``Checkpoint.journal`` / ``FileJournal``), the audit log and its head (``verify_log``, ``read_entries``,
  ``AuditLog.open``), the budget ledger (``SessionCharges.open`` + ``Ledger.history``), waiting proposals
  (``ProposalStore.load``), witnessed heads (``heads_from_file``, ``WitnessStore.held_for``).

Mutations (deterministic: a ``random.Random`` seeded with the case id): raw bytes -- truncated at several points,
one bit flipped at a third / the middle / a drawn place, one byte inverted, emptied, random bytes, non-UTF-8 bytes
inserted, for line files a line duplicated / dropped / swapped; structured -- TOML and JSON fields given a wrong type
(string, list, table), negative / zero / huge (10^400, 1e308) / nan / inf numbers, very long or NUL strings, removed,
or joined by an unknown key, nesting 50 000 deep; ``.npy``/``.npz`` members with another dtype (object arrays holding
a pickle whose unpickling would write a marker file, complex, strings, bool), another ndim, no rows, NaN/inf entries,
a header declaring 10^12 elements on a few bytes, a member missing or added; WAV headers with impossible fields,
zero-length data, other sample widths, huge float samples; SQL-level damage to the ledger.

The oracle: loading either succeeds with a result that is still valid (finite, the right shape, what the docs
promise -- for integrity-protected files: never a changed file), or raises the loader's documented error (an
:class:`~smcdp.errors.SmcdpError`; ``ProposalStore.load`` documents ``ValueError``) whose message names the file or
the field.  Also: no unpickling, no hang (``time_limit``), no allocation of more than 4 GiB (``RLIMIT_AS`` while the
loader runs: a MemoryError is a bug, from files of a few KiB), and the files are left as they were (nothing lost or
overwritten) except where a loader documents a repair, and then nothing of the damaged bytes may be lost.

Known bugs are ``xfail(strict=True)`` in ``KNOWN_BUGS`` (id -> diagnosis): each flips to XPASS when fixed.
"""

from __future__ import annotations

import base64
import functools
import io
import json
import math
import os
import random
import sqlite3
import struct
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from smcdp.compute.kernels import apply_block
from smcdp.compute.sources import open_matrix
from smcdp.errors import SmcdpError
from tests.support.known_bugs import params_with_known_bugs, smcdp_origin
from tests.support.limits import memory_cap, time_limit

CASE_SECONDS = 10
#: what a loader may allocate beyond what the process has mapped when it starts (a MemoryError past it is a bug)
MEMORY_MARGIN = 4 << 30


# ============================================================================ mutations of bytes
def _flip(data: bytes, pos: int, mask: int = 0x01) -> bytes:
    if not data:
        return data
    pos = min(max(pos, 0), len(data) - 1)
    return data[:pos] + bytes([data[pos] ^ mask]) + data[pos + 1 :]


def _mid(rng: random.Random, n: int) -> int:
    return rng.randrange(max(1, n // 10), max(2, n * 9 // 10)) if n > 2 else 0


BYTES: dict[str, Callable[[bytes, random.Random], bytes]] = {
    "trunc-1": lambda d, r: d[:1],
    "trunc-q1": lambda d, r: d[: len(d) // 4],
    "trunc-half": lambda d, r: d[: len(d) // 2],
    "trunc-q3": lambda d, r: d[: 3 * len(d) // 4],
    "trunc-last": lambda d, r: d[:-1],
    "flip-third": lambda d, r: _flip(d, len(d) // 3),
    "flip-mid": lambda d, r: _flip(d, len(d) // 2),
    "flip-drawn": lambda d, r: _flip(d, _mid(r, len(d)), 1 << r.randrange(8)),
    "invert-mid": lambda d, r: _flip(d, len(d) // 2 + 1, 0xFF),
    "empty": lambda d, r: b"",
    "random": lambda d, r: r.randbytes(min(max(len(d), 16), 1 << 16)),
}
TEXT_BYTES = {
    **BYTES,
    "non-utf8": lambda d, r: d[: len(d) // 2] + b"\xff\xfe\xc3(" + d[len(d) // 2 :],
    "deep-nesting": lambda d, r: b"[" * 50_000 + b"]" * 50_000,
}


def _lines(d: bytes) -> list[bytes]:
    return d.split(b"\n")


def _dup_line(d: bytes, r: random.Random) -> bytes:
    ls = _lines(d)
    i = max(0, (len(ls) - 1) // 2)
    return b"\n".join(ls[: i + 1] + [ls[i]] + ls[i + 1 :])


def _drop_line(d: bytes, r: random.Random) -> bytes:
    ls = _lines(d)
    i = max(0, (len(ls) - 1) // 2)
    return b"\n".join(ls[:i] + ls[i + 1 :])


def _swap_lines(d: bytes, r: random.Random) -> bytes:
    ls = _lines(d)
    i = max(0, (len(ls) - 1) // 2 - 1)
    if i + 1 < len(ls):
        ls[i], ls[i + 1] = ls[i + 1], ls[i]
    return b"\n".join(ls)


def _deep_line(d: bytes, r: random.Random) -> bytes:
    ls = _lines(d)
    ls[max(0, (len(ls) - 1) // 2)] = b"[" * 50_000 + b"]" * 50_000
    return b"\n".join(ls)


def _nan_line(d: bytes, r: random.Random) -> bytes:
    """A number of one line replaced by NaN, which Python's json reads (the line stays otherwise canonical)."""
    return d.replace(b'"epsilon":0.5', b'"epsilon":NaN', 1)


LINE_BYTES = {
    **TEXT_BYTES,
    "dup-line": _dup_line,
    "drop-line": _drop_line,
    "swap-lines": _swap_lines,
    "deep-line": _deep_line,
    "nan-line": _nan_line,
}

DEEP = 50_000


# ============================================================================ the oracle
@dataclass
class Ctx:
    """One case's files: the one mutated (``path``), its bytes before and after the mutation."""

    path: Path
    original: bytes
    mutated: bytes
    root: Path
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Loader:
    #: writes a valid file under the directory given; returns the file the mutations change
    make: Callable[[Path], Path]
    #: what the party runs on it (given the mutated file and the case)
    load: Callable[[Ctx], Any]
    #: raises AssertionError unless the result is what the docs promise
    valid: Callable[[Any, Ctx], None]
    #: the documented errors
    errors: tuple[type[BaseException], ...] = (SmcdpError,)
    #: the loader documents rewriting what it repairs (then no damaged byte may be lost)
    repairs: bool = False
    #: the mutations of this file's bytes
    byte_mutations: dict = field(default_factory=lambda: BYTES)
    #: a raised builtin error must be exactly one of ``errors`` (not a subclass: UnicodeDecodeError is a ValueError);
    #: an SmcdpError is accepted too
    exact_type: bool = False
    #: files the loader rewrites from the others (e.g. audit.head): left out of the nothing-lost check
    derived: tuple[str, ...] = ()
    #: the docs let the loader drop damaged bytes without keeping them (a journal's torn tail)
    drops: bool = False
    #: closes what a successful load left open
    close: Callable[[Any], None] = lambda result: None


class Unpickled(Exception):
    pass


def _pickle_ran(marker: str) -> str:
    """What the pickled payload of the object-array cases calls when it is unpickled (it must never be)."""
    Path(marker).write_text("unpickled")
    return "pwned"


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (_pickle_ran, (self.marker,))


def _snapshot(root: Path) -> dict[str, bytes]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.name.endswith(("-wal", "-shm")):
            out[str(p.relative_to(root))] = p.read_bytes()
    return out


def run_case(loader: Loader, ctx: Ctx, words: tuple[str, ...], case_id: str) -> None:
    before = _snapshot(ctx.root)
    marker = ctx.root.parent / "unpickled"
    result = None
    outcome = None
    accepted = (*loader.errors, SmcdpError) if loader.exact_type else loader.errors
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with time_limit(CASE_SECONDS, case_id), memory_cap(MEMORY_MARGIN):
                result = loader.load(ctx)
        except AssertionError:
            raise
        except accepted as exc:
            if loader.exact_type and type(exc) not in loader.errors and not isinstance(exc, SmcdpError):
                pytest.fail(f"raw {type(exc).__name__} escaped at {smcdp_origin(exc)}: {exc}")
            msg = str(exc)
            named = [w for w in words if w and (w in msg or w.replace("_", " ") in msg)]
            assert named, f"unclear error: {type(exc).__name__} names neither the file nor the field {words}: {msg!r}"
            outcome = exc
        except BaseException as exc:  # noqa: BLE001 - the bug this test looks for
            if isinstance(exc, KeyboardInterrupt):
                raise
            pytest.fail(f"raw {type(exc).__name__} escaped at {smcdp_origin(exc)}: {str(exc)[:300]}")
    assert not marker.exists(), "the loader unpickled an object array (the payload ran)"
    try:
        if outcome is None:
            loader.valid(result, ctx)
    finally:
        if outcome is None:
            loader.close(result)
    after = _snapshot(ctx.root)
    before = {k: v for k, v in before.items() if Path(k).name not in loader.derived}
    if not loader.repairs:
        lost = {k for k in before if after.get(k) != before[k]}
        assert not lost, f"the loader changed or removed {sorted(lost)} ({'refused' if outcome else 'loaded'})"
    elif not loader.drops:
        rest = b"".join(v for k, v in after.items() if k not in before or after[k] != before[k])
        for k, v in before.items():
            if after.get(k) != v:
                # what a repair rewrote must be kept whole: as a prefix of the new file plus a saved fragment
                kept = after.get(k, b"")
                n = next((i for i, (a, b) in enumerate(zip(kept, v, strict=False)) if a != b), min(len(kept), len(v)))
                assert v[n:] in rest or not v[n:], f"the repair lost bytes of {k}"


# ============================================================================ TOML / JSON writers
_BARE = __import__("re").compile(r"^[A-Za-z0-9_-]+$")


def _tkey(k: str) -> str:
    return k if _BARE.match(k) else json.dumps(k)


def _tval(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_tval(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_tkey(k)} = {_tval(x)}" for k, x in v.items()) + " }"
    raise TypeError(v)


def toml_dumps(doc: dict) -> str:
    lines = [f"{_tkey(k)} = {_tval(v)}" for k, v in doc.items() if not isinstance(v, dict)]
    for k, v in doc.items():
        if isinstance(v, dict):
            lines.append(f"[{_tkey(k)}]")
            lines += [f"{_tkey(kk)} = {_tval(vv)}" for kk, vv in v.items()]
    return "\n".join(lines) + "\n"


def json_dumps(obj: Any) -> str:
    # 10**400 stays an integer; nan/inf as the JSON extensions Python's json reads (NaN, Infinity)
    return json.dumps(obj, indent=1, sort_keys=True)


HUGE_INT = 10**400
LONG = "x" * 200_000

#: (name, applies to (kinds), new value) -- kinds: "num", "str", "bool", "list", "table", "any"
VALUE_MUTATIONS: list[tuple[str, set[str], Any]] = [
    ("type-str", {"num", "bool", "list", "table"}, "12"),
    ("type-num", {"str", "list", "table"}, 5),
    ("type-list", {"num", "str", "bool", "table"}, [1, "a"]),
    ("type-table", {"num", "str", "bool", "list"}, {"a": 1}),
    ("neg", {"num"}, -1),
    ("zero", {"num"}, 0),
    ("huge-int", {"num"}, HUGE_INT),
    ("huge-float", {"num"}, 1e308),
    ("nan", {"num"}, float("nan")),
    ("inf", {"num"}, float("inf")),
    ("empty-str", {"str"}, ""),
    ("long-str", {"str"}, LONG),
    ("nul-str", {"str"}, "a\u0000b"),
    ("missing", {"num", "str", "bool", "list", "table"}, None),
    ("unknown-key", {"num", "str", "bool", "list", "table"}, None),
]


def _set(doc: dict, path: tuple[str, ...], how: str, value: Any) -> dict:
    doc = json.loads(json.dumps(doc))  # a deep copy
    *parents, leaf = path
    t = doc
    for p in parents:
        t = t[p]
    if how == "missing":
        del t[leaf]
    elif how == "unknown-key":
        t[f"{leaf}_bogus"] = 1
    else:
        t[leaf] = value
    return doc


# ============================================================================ configuration
BASE_CONFIG: dict = {
    "party": {
        "name": "alice",
        "listen": "127.0.0.1:50051",
        "data_dir": "state/alice",
        "allow_insecure_keys": False,
        "plugins": ["tests.support.echo_plugin"],
    },
    "tls": {"ca": "certs/ca.crt", "cert": "certs/alice.crt", "key": "certs/alice.key"},
    "peers": {"bob": "127.0.0.1:50052", "trent": "127.0.0.1:50053"},
    "inputs": {"power-iteration": {"data": "A.npy"}},
    "timeouts": {"connect_seconds": 10, "session_seconds": 3600, "rpc_seconds": 120, "peer_grace_seconds": 30},
    "limits": {"pending_per_peer": 4, "max_message_mib": 256, "proposal_grace_seconds": 30.0},
    "logging": {"format": "text", "level": "INFO"},
    "policy": {
        "approval": "auto",
        "power-iteration": {
            "roles": ["party*"],
            "initiators": ["trent"],
            "coordinators": ["trent"],
            "release_to": ["trent", "bob"],
            "allow_non_dp": True,
            "max_components": 8,
            "max_exact_sessions": 4,
            "period_days": 30,
            "min_key_bits": 2048,
        },
        "dp-aggregate": {
            "roles": ["party*"],
            "initiators": ["trent"],
            "max_epsilon": 1.0,
            "max_delta": 1e-9,
            "min_records": 100,
        },
    },
    "budget": {"dataset": "alice", "epsilon": 10.0, "delta": 1e-6, "rule": "linear"},
    "compute": {"engine": "local", "block_values": 4096, "workers": 2},
    "console": {"listen": "127.0.0.1:9464", "refresh_seconds": 5},
}

#: (path, kind) of the config's fields the value mutations change
CONFIG_FIELDS: list[tuple[tuple[str, ...], str]] = [
    (("party",), "table"),
    (("party", "name"), "str"),
    (("party", "listen"), "str"),
    (("party", "data_dir"), "str"),
    (("party", "allow_insecure_keys"), "bool"),
    (("party", "plugins"), "list"),
    (("tls", "ca"), "str"),
    (("peers", "bob"), "str"),
    (("inputs", "power-iteration"), "table"),
    (("inputs", "power-iteration", "data"), "str"),
    (("timeouts", "connect_seconds"), "num"),
    (("timeouts", "session_seconds"), "num"),
    (("limits", "pending_per_peer"), "num"),
    (("limits", "proposal_grace_seconds"), "num"),
    (("logging", "level"), "str"),
    (("policy", "approval"), "str"),
    (("policy", "power-iteration", "roles"), "list"),
    (("policy", "power-iteration", "initiators"), "list"),
    (("policy", "power-iteration", "max_components"), "num"),
    (("policy", "power-iteration", "period_days"), "num"),
    (("policy", "power-iteration", "min_key_bits"), "num"),
    (("policy", "dp-aggregate", "max_epsilon"), "num"),
    (("policy", "dp-aggregate", "max_delta"), "num"),
    (("policy", "dp-aggregate", "min_records"), "num"),
    (("budget", "dataset"), "str"),
    (("budget", "epsilon"), "num"),
    (("budget", "delta"), "num"),
    (("compute", "block_values"), "num"),
    (("compute", "workers"), "num"),
    (("console", "listen"), "str"),
    (("console", "refresh_seconds"), "num"),
]

#: whole-document mutations of the config: name -> the document (or its text)
CONFIG_SPECIALS: dict[str, Callable[[], dict | str]] = {
    "party-list-where-table": lambda: {**BASE_CONFIG, "party": [1, 2]},
    "policy-nested-where-flat": lambda: _set(
        BASE_CONFIG, ("policy", "power-iteration", "max_components"), "", {"a": {"b": 1}}
    ),
    "policy-protocol-not-table": lambda: _set(BASE_CONFIG, ("policy", "keyword"), "", ["x"]),
    "peers-self": lambda: _set(BASE_CONFIG, ("peers", "alice"), "", "127.0.0.1:1"),
    "unknown-section": lambda: {**BASE_CONFIG, "bogus": {"a": 1}},
    "compute-tilde-user": lambda: {
        **BASE_CONFIG,
        "compute": {"engine": "dask", "scheduler": "local", "local_directory": "~no_such_user_smcdp/dask"},
    },
    # valid: a [policy.<protocol>] min_hiding table (policy.py documents it) must write back too
    "policy-min-hiding": lambda: _set(BASE_CONFIG, ("policy", "power-iteration", "min_hiding"), "", {"blind_bits": 8}),
    "policy-min-hiding-huge": lambda: _set(
        BASE_CONFIG, ("policy", "power-iteration", "min_hiding"), "", {"blind_bits": HUGE_INT}
    ),
    "compute-threads-bool": lambda: {**BASE_CONFIG, "compute": {"engine": "local", "threads_per_worker": True}},
    "deep-array": lambda: toml_dumps(BASE_CONFIG) + "[deep]\nx = " + "[" * DEEP + "]" * DEEP + "\n",
    "deep-inline-table": lambda: toml_dumps(BASE_CONFIG) + "[deep]\nx = " + "{a=" * DEEP + "1" + "}" * DEEP + "\n",
    "long-key": lambda: toml_dumps(BASE_CONFIG) + f'[logging2]\n"{"k" * 100_000}" = 1\n',
}


def _config_make(root: Path) -> Path:
    p = root / "alice.toml"
    p.write_text(toml_dumps(BASE_CONFIG))
    return p


def _config_load(ctx: Ctx):
    from smcdp.runtime.config import load_config

    return load_config(ctx.path)


def _config_valid(cfg, ctx: Ctx) -> None:
    """A configuration that loads is one the party can run with: finite numbers, and it writes back (the module
    is its only writer) to a file that loads as the same configuration."""
    from smcdp.net.config import dumps_toml
    from smcdp.runtime.config import config_to_dict, load_config

    for v in (*vars(cfg.timeouts).values(),):
        assert math.isfinite(v) and v > 0, f"timeouts hold {v!r}"
    paths = [cfg.data_dir, *vars(cfg.tls).values(), *(p for t in cfg.inputs.values() for p in t.values())]
    if cfg.budget is not None and cfg.budget.ledger is not None:
        paths.append(cfg.budget.ledger)
    for p in paths:
        assert "\0" not in str(p), f"a path with a NUL byte was accepted: {str(p)[:40]!r}"
    assert not isinstance(cfg.compute.threads_per_worker, bool), "compute.threads_per_worker = true was accepted"
    base = ctx.path.parent
    again = ctx.root / "again.toml"
    again.write_text(dumps_toml(config_to_dict(cfg, relative_to=base)))
    try:
        assert load_config(again) == cfg.with_changes(source=again.resolve())
    finally:
        again.unlink()


CONFIG = Loader(_config_make, _config_load, _config_valid, byte_mutations=TEXT_BYTES)


# ============================================================================ arrays
def npy_bytes(arr: np.ndarray, allow_pickle: bool = False) -> bytes:
    b = io.BytesIO()
    np.save(b, arr, allow_pickle=allow_pickle)
    return b.getvalue()


def npy_header_bytes(descr: str, shape: tuple, payload: bytes) -> bytes:
    """A .npy whose header declares ``shape`` over ``payload`` (a few bytes)."""
    header = f"{{'descr': {descr!r}, 'fortran_order': False, 'shape': {tuple(shape)!r}, }}"
    pad = (64 - (10 + len(header) + 1) % 64) % 64
    header = header + " " * pad + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1") + payload


def write_npz(path: Path, members: dict[str, bytes], compressed: bool = False) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED) as z:
        for k, v in members.items():
            z.writestr(f"{k}.npy", v)


def npz_members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as z:
        return {n[:-4]: z.read(n) for n in z.namelist()}


HUGE_SHAPE = (1_000_000, 1_000_000)  # 10^12 elements

#: array mutations: name -> (applies to kinds, fn(array, marker) -> .npy bytes)
ARRAY_MUTATIONS: dict[str, tuple[set[str], Callable[[np.ndarray, Path], bytes]]] = {
    "pickled-object": ({"num", "str"}, lambda a, m: npy_bytes(np.array([_Payload(m), 1.0], dtype=object), True)),
    "complex": ({"num"}, lambda a, m: npy_bytes(np.asarray(a, dtype=np.complex128) + 1j)),
    "strings": ({"num"}, lambda a, m: npy_bytes(np.full(a.shape, "1.0"))),
    "bool": ({"num"}, lambda a, m: npy_bytes(np.ones(a.shape, dtype=bool))),
    "float16": ({"num"}, lambda a, m: npy_bytes(np.asarray(a, dtype=np.float16))),
    "uint64-max": ({"num"}, lambda a, m: npy_bytes(np.full(a.shape, np.iinfo(np.uint64).max, dtype=np.uint64))),
    "ndim-up": ({"num", "str"}, lambda a, m: npy_bytes(np.asarray(a)[..., None])),
    "scalar": ({"num", "str"}, lambda a, m: npy_bytes(np.asarray(a).ravel()[:1].reshape(()))),
    "no-rows": ({"num", "str"}, lambda a, m: npy_bytes(_rows(a)[:0])),
    "transposed": ({"num"}, lambda a, m: npy_bytes(np.ascontiguousarray(_rows(a).T))),
    "nan": ({"num"}, lambda a, m: npy_bytes(_with(a, np.nan))),
    "inf": ({"num"}, lambda a, m: npy_bytes(_with(a, -np.inf))),
    "huge": ({"num"}, lambda a, m: npy_bytes(np.asarray(a, dtype=np.float64) * 1e300)),
    "huge-header": ({"num", "str"}, lambda a, m: npy_header_bytes("<f8", HUGE_SHAPE, b"\0" * 64)),
    "short-data": ({"num"}, lambda a, m: npy_bytes(np.asarray(a, dtype=np.float64))[:-8]),
    "fortran-bad-header": ({"num"}, lambda a, m: npy_header_bytes("<f8", (2, -3), b"\0" * 48)),
    "void-dtype": ({"num"}, lambda a, m: npy_header_bytes("|V0", HUGE_SHAPE, b"")),
}


def _rows(a) -> np.ndarray:
    a = np.asarray(a)
    return a if a.ndim else a.reshape(1)


def _with(a, value) -> np.ndarray:
    b = np.array(a, dtype=np.float64)
    b.flat[b.size // 2] = value
    return b


@dataclass(frozen=True)
class NpzSpec:
    """How a valid .npz of one loader is made, and which members (with their kind) are mutated."""

    arrays: Callable[[], dict[str, np.ndarray]]
    kinds: dict[str, str]
    compressed: bool = False


def _dpa_arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 3))
    X /= 1.5 * np.linalg.norm(X, axis=1, keepdims=True)
    return {"X": X, "y": np.where(rng.random(20) > 0.5, 1, -1)}


def _kw_arrays() -> dict[str, np.ndarray]:
    from tests.unit.protocols.keyword_util import synthetic_models

    m = synthetic_models("diag", np.random.default_rng(1), D=2, N=3, d=4)
    return m.to_arrays()


def _diag_gmm(rng, C=2, d=4):
    from smcdp.speech.speaker import DiagGMM

    w = rng.uniform(0.5, 1.0, C)
    return DiagGMM(w / w.sum(), rng.normal(size=(C, d)), rng.uniform(0.5, 2.0, (C, d)))


def _ubm_arrays() -> dict[str, np.ndarray]:
    g = _diag_gmm(np.random.default_rng(2))
    return {
        "kind": np.array("ubm"),
        "format_version": np.int64(1),
        "weights": g.weights,
        "means": g.means,
        "covars": g.covars,
        "cmn": np.array("utterance"),
    }


def _spk_arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    g = _diag_gmm(rng)
    return {
        "kind": np.array("speakers"),
        "format_version": np.int64(1),
        "ubm_weights": g.weights,
        "ubm_means": g.means,
        "ubm_covars": g.covars,
        "names": np.array(["ann", "bo"]),
        "means": np.stack([g.means, g.means + 0.5]),
        "threshold": np.float64(0.25),
        "relevance": np.float64(16.0),
        "cmn": np.array("utterance"),
    }


def _npz_make(spec: NpzSpec, name: str):
    def make(root: Path) -> Path:
        p = root / name
        (np.savez_compressed if spec.compressed else np.savez)(p, **spec.arrays())
        return p

    return make


def _finite(*arrays) -> None:
    for a in arrays:
        if a is not None:
            a = np.asarray(a)
            assert a.dtype.kind in "fiu", f"dtype {a.dtype}"
            assert np.all(np.isfinite(a)), "non-finite values accepted"


def _dpa_load(ctx: Ctx):
    from smcdp.plugins.dp_aggregate import load_dataset

    return load_dataset(ctx.path)


def _dpa_valid(r, ctx: Ctx) -> None:
    X, y = r
    assert X.ndim == 2 and X.shape[0] >= 1 and y.shape == (X.shape[0],)
    _finite(X)
    assert np.all(np.linalg.norm(X, axis=1) <= 1 + 1e-9) and set(np.unique(y).tolist()) <= {-1, 1}


def _kw_load(ctx: Ctx):
    from smcdp.speech.models import KeywordModels

    return KeywordModels.load(ctx.path)


def _kw_valid(m, ctx: Ctx) -> None:
    _finite(m.startprob, m.transmat, m.means, m.covars, m.weights, m.emissionprob)
    assert len(m.words) >= 1


def _ubm_load(ctx: Ctx):
    from smcdp.speech.speaker import UBM

    return UBM.load(ctx.path)


def _ubm_valid(u, ctx: Ctx) -> None:
    _finite(u.gmm.weights, u.gmm.means, u.gmm.covars)
    assert u.epsilon is None or (math.isfinite(u.epsilon) and u.epsilon > 0)


def _spk_load(ctx: Ctx):
    from smcdp.speech.speaker import SpeakerModels

    return SpeakerModels.load(ctx.path)


def _spk_valid(m, ctx: Ctx) -> None:
    _finite(m.ubm.weights, m.ubm.means, m.ubm.covars, m.means)
    assert m.means.shape == (len(m.names), m.ubm.n_components, m.ubm.dim)
    assert math.isfinite(m.threshold) and math.isfinite(m.relevance) and m.relevance > 0, "relevance must be > 0"


NPZ_LOADERS: dict[str, tuple[NpzSpec, str, Callable, Callable]] = {
    "dpa-data": (NpzSpec(_dpa_arrays, {"X": "num", "y": "num"}), "data.npz", _dpa_load, _dpa_valid),
    "kw-models": (
        NpzSpec(_kw_arrays, {"startprob": "num", "transmat": "num", "means": "num", "words": "str"}, True),
        "models.npz",
        _kw_load,
        _kw_valid,
    ),
    "ubm": (
        NpzSpec(_ubm_arrays, {"weights": "num", "means": "num", "covars": "num", "kind": "str"}, True),
        "ubm.npz",
        _ubm_load,
        _ubm_valid,
    ),
    "speakers": (
        NpzSpec(_spk_arrays, {"means": "num", "names": "str", "threshold": "num", "relevance": "num"}, True),
        "speakers.npz",
        _spk_load,
        _spk_valid,
    ),
}


# single .npy loaders
def _matrix_make(root: Path) -> Path:
    p = root / "A.npy"
    np.save(p, np.random.default_rng(4).normal(size=(6, 300)))
    return p


def _matrix_load(ctx: Ctx):
    src = open_matrix(ctx.path, block_values=1024)
    # as a session reads it: every block through the kernel runner, whose outputs must be finite
    sums = [apply_block(src, b, lambda A: A.sum(axis=0)) for b in src.blocks]
    return src, sums


def _matrix_valid(r, ctx: Ctx) -> None:
    src, sums = r
    assert len(src.shape) == 2 and src.k >= 1 and src.n >= 1
    assert sum(s.shape[0] for s in sums) == src.n
    _finite(*sums)


def _feat_make(root: Path) -> Path:
    p = root / "f.npy"
    np.save(p, np.random.default_rng(5).normal(size=(20, 39)))
    return p


def _utt_load(ctx: Ctx):
    from smcdp.plugins.keyword import load_utterance

    return load_utterance(ctx.path)


def _utt_valid(X, ctx: Ctx) -> None:
    from smcdp.protocols.secure_forward import MAX_FRAMES

    assert (X.ndim == 2 and X.dtype.kind in "fiu") or (X.ndim == 1 and X.dtype.kind in "iu"), f"{X.dtype} {X.shape}"
    assert 1 <= X.shape[0] <= MAX_FRAMES
    _finite(X)


def _features_load(ctx: Ctx):
    from smcdp.speech.features import load_features

    return load_features(ctx.path)


def _features_valid(X, ctx: Ctx) -> None:
    assert X.ndim == 2 and X.shape[1] == 39 and X.shape[0] >= 1
    _finite(X)


NPY_LOADERS: dict[str, tuple[Callable, Callable, Callable]] = {
    "pi-matrix": (_matrix_make, _matrix_load, _matrix_valid),
    "kw-utterance-npy": (_feat_make, _utt_load, _utt_valid),
    "features": (_feat_make, _features_load, _features_valid),
}


# ============================================================================ WAV
def wav_bytes(
    samples: np.ndarray | bytes,
    *,
    rate: int = 16000,
    channels: int = 1,
    fmt: int = 1,
    bits: int = 16,
    byte_rate: int | None = None,
    block_align: int | None = None,
    data_size: int | None = None,
    riff_size: int | None = None,
) -> bytes:
    data = samples if isinstance(samples, bytes) else samples.tobytes()
    block_align = channels * bits // 8 if block_align is None else block_align
    byte_rate = rate * block_align if byte_rate is None else byte_rate
    fmt_chunk = b"fmt " + struct.pack("<IHHIIHH", 16, fmt, channels, rate, byte_rate, block_align, bits)
    data_chunk = b"data" + struct.pack("<I", len(data) if data_size is None else data_size) + data
    body = b"WAVE" + fmt_chunk + data_chunk
    return b"RIFF" + struct.pack("<I", len(body) if riff_size is None else riff_size) + body


def _tone(n: int = 4000) -> np.ndarray:
    t = np.arange(n) / 16000
    return (0.3 * np.sin(2 * np.pi * 440 * t) * 32767).astype("<i2")


WAV_SPECIALS: dict[str, Callable[[], bytes]] = {
    "riff-size-0": lambda: wav_bytes(_tone(), riff_size=0),
    "riff-size-huge": lambda: wav_bytes(_tone(), riff_size=0xFFFFFFFF),
    "data-size-huge": lambda: wav_bytes(_tone(), data_size=0xFFFFFFF0),
    "data-size-odd": lambda: wav_bytes(_tone(), data_size=7),
    "zero-length": lambda: wav_bytes(b""),
    "no-fmt": lambda: b"RIFF" + struct.pack("<I", 12) + b"WAVEdata" + struct.pack("<I", 4) + b"\0\0\0\0",
    "channels-0": lambda: wav_bytes(_tone(), channels=0, block_align=2),
    "rate-0": lambda: wav_bytes(_tone(), rate=0),
    "rate-1": lambda: wav_bytes(_tone(), rate=1),
    "rate-max": lambda: wav_bytes(_tone(), rate=0xFFFFFFFF, byte_rate=0),
    "block-align-0": lambda: wav_bytes(_tone(), block_align=0),
    "bits-0": lambda: wav_bytes(_tone(), bits=0),
    "bits-12": lambda: wav_bytes(_tone(), bits=12),
    "bits-24": lambda: wav_bytes(_tone().astype("<i4").tobytes()[: 3 * 4000], bits=24),
    "bits-64-int": lambda: wav_bytes(_tone().astype("<i8"), bits=64),
    "format-adpcm": lambda: wav_bytes(_tone(), fmt=2),
    "format-0": lambda: wav_bytes(_tone(), fmt=0),
    "float-16bit": lambda: wav_bytes(_tone(), fmt=3, bits=16),
    "float-huge": lambda: wav_bytes(np.full(4000, 1e300, dtype="<f8"), fmt=3, bits=64),
    "float-big": lambda: wav_bytes(np.full(4000, 3e38, dtype="<f4"), fmt=3, bits=32),
    "float-nan": lambda: wav_bytes(np.full(4000, np.nan, dtype="<f4"), fmt=3, bits=32),
    "float-denormal": lambda: wav_bytes(np.full(4000, 1e-310, dtype="<f8"), fmt=3, bits=64),
    "silence": lambda: wav_bytes(np.zeros(4000, dtype="<i2")),
    "one-sample": lambda: wav_bytes(np.zeros(1, dtype="<i2")),
    "channels-many": lambda: wav_bytes(_tone(4000), channels=1000, block_align=2000),
}


def _wav_make(root: Path) -> Path:
    p = root / "u.wav"
    p.write_bytes(wav_bytes(_tone()))
    return p


def _read_wav_load(ctx: Ctx):
    from smcdp.speech.audio import read_wav

    return read_wav(ctx.path)


def _read_wav_valid(a, ctx: Ctx) -> None:
    from smcdp.speech.audio import MAX_RATE, MIN_RATE

    assert a.samples.ndim == 1 and a.samples.size >= 1 and MIN_RATE <= a.rate <= MAX_RATE
    _finite(a.samples)


# ============================================================================ keys
@functools.cache
def _dealt():
    """A 512-bit Paillier key from fixed primes and a (1, 3) sharing of it from a seeded stream: the same files on
    every run, so that each case's bytes -- and its outcome -- are the same."""
    from types import SimpleNamespace
    from unittest import mock

    import gmpy2

    from smcdp.crypto import threshold
    from smcdp.crypto.paillier import PrivateKey, PublicKey

    rng = random.Random(7)
    while True:
        p, q = (int(gmpy2.next_prime(rng.getrandbits(256) | (3 << 254))) for _ in range(2))
        if p != q and math.gcd(p * q, (p - 1) * (q - 1)) == 1:
            break
    sk = PrivateKey.from_factors(PublicKey(p * q), p, q)
    with mock.patch.object(threshold, "secrets", SimpleNamespace(randbits=random.Random(8).getrandbits)):
        pub, shares = threshold.deal(sk, 3, 1)
    return sk, pub, shares


def _share_make(root: Path) -> Path:
    from smcdp.crypto.threshold import save_key_share

    p = root / "share.json"
    save_key_share(_dealt()[2][0], p)
    return p


def _share_load(ctx: Ctx):
    from smcdp.crypto.threshold import load_key_share

    return load_key_share(ctx.path, allow_insecure=True)


def _share_valid(s, ctx: Ctx) -> None:
    assert isinstance(s.index, int) and not isinstance(s.index, bool) and 1 <= s.index <= s.public.parties
    assert isinstance(s.public.share_bits, int) and not isinstance(s.public.share_bits, bool)
    s.check()


def _group_make(root: Path) -> Path:
    from smcdp.plugins.keystore import KeyGroup, KeyStore

    _sk, pub, shares = _dealt()
    info = KeyGroup("lab", pub, 1, {1: "alice", 2: "bob", 3: "carol"}, 512, "2026-12-02T00:00:00Z", "dealt", 1.5)
    KeyStore(root / "keys").save(info, shares[0], replace=False)
    return root / "keys" / "lab" / "group.json"


def _group_load(ctx: Ctx):
    from smcdp.plugins.keystore import KeyStore

    return KeyStore(ctx.root / "keys").load("lab", allow_insecure=True)


def _group_valid(g, ctx: Ctx) -> None:
    assert isinstance(g.index, int) and g.index in g.parties
    assert math.isfinite(g.generation_seconds) and g.generation_seconds >= 0, (
        f"generation_seconds {g.generation_seconds}"
    )
    assert isinstance(g.key_bits, int) and g.key_bits > 0


def _sk_make(root: Path) -> Path:
    from smcdp.crypto.paillier import save_private_key

    p = root / "paillier.key"
    save_private_key(_dealt()[0], p)
    return p


def _sk_load(ctx: Ctx):
    from smcdp.crypto.paillier import load_private_key

    return load_private_key(ctx.path, allow_insecure=True)


def _sk_valid(sk, ctx: Ctx) -> None:
    assert sk.p * sk.q == sk.public_key.n


# -- TLS material (the party's certificate, its private key, the CA bundle)
@functools.cache
def _tls_files() -> dict[str, bytes]:
    """A CA and alice's certificate and key as smcdp.net.tls makes them, with fixed keys, serial numbers, times
    and deterministic ECDSA signatures: the same bytes on every run (valid 2026..2125)."""
    import datetime as dt
    import itertools
    import tempfile
    from unittest import mock

    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec

    from smcdp.net import tls

    scalars = itertools.count(0x5EED_0001)
    sign = x509.CertificateBuilder.sign
    with (
        mock.patch.object(tls, "_now", lambda: dt.datetime(2026, 1, 1, tzinfo=dt.UTC)),
        mock.patch.object(tls.ec, "generate_private_key", lambda curve: ec.derive_private_key(next(scalars), curve)),
        mock.patch.object(tls.x509, "random_serial_number", lambda: 0x1234_5678_9ABC),
        mock.patch.object(
            x509.CertificateBuilder, "sign", lambda self, k, a, *r, **kw: sign(self, k, a, ecdsa_deterministic=True)
        ),
        tempfile.TemporaryDirectory() as d,
    ):
        ca_key, ca_cert = tls.create_ca(days=36500)
        key, cert = tls.issue_party_certificate(ca_key, ca_cert, "alice", days=36500)
        tls.write_certificate(Path(d) / "ca.crt", ca_cert)
        tls.write_certificate(Path(d) / "alice.crt", cert)
        tls.write_private_key(Path(d) / "alice.key", key)
        return {n: (Path(d) / n).read_bytes() for n in ("ca.crt", "alice.crt", "alice.key")}


def _tls_make(name: str):
    def make(root: Path) -> Path:
        for n, data in _tls_files().items():
            (root / n).write_bytes(data)
            os.chmod(root / n, 0o600)
        return root / name

    return make


P256_OID = bytes.fromhex("2a8648ce3d030107")  # prime256v1, in every certificate's public key


def _pem_der_case(fn) -> Callable:
    """A certificate's DER changed by ``fn`` and written back as PEM (a damage the PEM layer cannot see)."""

    def mutate(path: Path, rng: random.Random, root: Path) -> str:
        import base64 as b64
        import textwrap

        lines = path.read_text().strip().splitlines()
        der = fn(b64.b64decode("".join(lines[1:-1])))
        body = "\n".join(textwrap.wrap(b64.b64encode(der).decode(), 64))
        path.write_text(f"{lines[0]}\n{body}\n{lines[-1]}\n")
        return None

    return mutate


TLS_DER_MUTATIONS: dict[str, Callable[[bytes], bytes]] = {
    "curve-oid": lambda d: d.replace(P256_OID, bytes([P256_OID[0]]) + b"\x76" + P256_OID[2:]),
    "curve-oid-unknown": lambda d: d.replace(P256_OID, P256_OID[:-1] + b"\x09"),
    "cn-not-printable": lambda d: d.replace(b"alice", b"al\x00ce"),
}


def _tls_load(ctx: Ctx):
    from smcdp.net.tls import TlsMaterial

    return TlsMaterial.load(ctx.root / "ca.crt", ctx.root / "alice.crt", ctx.root / "alice.key")


def _tls_valid(m, ctx: Ctx) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    files = _tls_files()
    der = serialization.Encoding.DER
    assert m.name == "alice"
    assert x509.load_pem_x509_certificate(m.cert_pem).public_bytes(der) == x509.load_pem_x509_certificate(
        files["alice.crt"]
    ).public_bytes(der), "a changed certificate was accepted"
    pk = serialization.load_pem_private_key(m.key_pem, None)
    want = serialization.load_pem_private_key(files["alice.key"], None)
    assert pk.private_numbers() == want.private_numbers(), "a changed private key was accepted"


# ============================================================================ state files
RECORD_ID = "alice.s1"


def _record() -> dict:
    return {
        "session_id": RECORD_ID,
        "protocol": "echo",
        "party": "alice",
        "role": "a",
        "roles": {"a": "alice", "b": "bob"},
        "initiator": "alice",
        "params": {"n": 3},
        "seed": None,
        "timeout_seconds": 60.0,
        "state": "failed",
        "result": None,
        "error": {"code": "UNAVAILABLE", "message": "bob went away", "origin": "bob"},
        "stats": {"bytes_sent": 10, "bytes_received": 20},
        "started_at": "2026-12-02T00:00:00Z",
        "finished_at": "2026-12-02T00:00:01Z",
        "seconds": 1.5,
        "restarts": 0,
        "resumable": True,
        "round": None,
        "unconfirmed": [],
    }


def _record_make(root: Path) -> Path:
    from smcdp.runtime.records import SessionRecords

    d = root / "sessions"
    d.mkdir()
    SessionRecords(d, "alice").write(RECORD_ID, _record())
    return d / f"{RECORD_ID}.json"


def _record_load(ctx: Ctx):
    from smcdp.runtime.records import SessionRecords

    return SessionRecords(ctx.root / "sessions", "alice").load(RECORD_ID)


def _record_valid(r, ctx: Ctx) -> None:
    """What the record's readers rely on (peers.py, recovery.py, the console): the TypedDict's field types."""
    assert isinstance(r, dict)
    roles = r.get("roles")
    assert roles is None or (isinstance(roles, dict) and all(isinstance(v, str) for v in roles.values())), "roles"
    assert r.get("error") is None or isinstance(r["error"], dict), "error"
    assert r.get("stats") is None or isinstance(r["stats"], dict), "stats"


# -- checkpoints and journals
SID = "alice.s2"
IN_RECORDS = [("b", f"t{i}", "smcdp.v1.Ints", bytes([i]) * (40 + i)) for i in range(6)]


def _checkpoint(root: Path):
    from smcdp.primitives.rng import Randomness
    from smcdp.runtime.durability.checkpoint import Checkpoint

    sessions = root / "sessions"
    sessions.mkdir(exist_ok=True)
    cp = Checkpoint.create(
        sessions,
        session_id=SID,
        protocol="echo",
        roles={"a": "alice", "b": "bob"},
        params={"n": 3},
        timeout_seconds=60.0,
        seed=None,
        initiator="alice",
        role="a",
        randomness=Randomness.fresh(),
    )
    j = cp.journal
    for role, tag, ty, data in IN_RECORDS[:3]:
        j.record_inbound(role, tag, ty, data)
    j.record_outbound("b", "o1", "smcdp.v1.Ints", b"\x07" * 50)
    j.mark_delivered("b", "o1")
    for role, tag, ty, data in IN_RECORDS[3:]:
        j.record_inbound(role, tag, ty, data)
    cp.begin({})
    cp.close()
    return cp


def _cp_make(name: str):
    def make(root: Path) -> Path:
        cp = _checkpoint(root)
        return cp.dir / name if name != "durability.key" else cp.dir.parent / name

    return make


def _cp_load(ctx: Ctx):
    from smcdp.runtime.durability.checkpoint import Checkpoint

    return Checkpoint.load(ctx.root / "sessions" / f"{SID}.d", "alice")


def _cp_valid(cp, ctx: Ctx) -> None:
    if ctx.path.name == "checkpoint.json":
        try:
            same = json.loads(ctx.mutated) == json.loads(ctx.original)
        except (ValueError, RecursionError):  # not JSON, or nested past the recursion limit: not the same head
            same = False
        assert same, "a changed checkpoint.json was accepted"
    else:
        assert ctx.mutated == ctx.original, f"a changed {ctx.path.name} was accepted"
    assert cp.meta["session_id"] == SID


def _journal_load(ctx: Ctx):
    from smcdp.runtime.durability.checkpoint import Checkpoint

    cp = Checkpoint.load(ctx.root / "sessions" / f"{SID}.d", "alice")
    j = cp.journal  # the party's journal: with its head, begun
    return cp, list(j.inbound()), dict(j._outbound), set(j._delivered)


def _journal_close(r) -> None:
    if r is not None:
        r[0].close()


def _journal_valid(r, ctx: Ctx) -> None:
    _cp, inbound, outbound, delivered = r
    # the head covers every record: any change, a truncation included, is damage
    assert ctx.mutated == ctx.original, "a changed journal (with its head) was accepted"
    assert inbound == [tuple(x) for x in IN_RECORDS]
    assert set(outbound) == {("b", "o1")} and delivered == {("b", "o1")}


def _plain_journal_make(root: Path) -> Path:
    from smcdp.runtime.durability.journal import FileJournal

    p = root / "journal.log"
    j = FileJournal(p)
    for role, tag, ty, data in IN_RECORDS:
        j.record_inbound(role, tag, ty, data)
    j.close()
    return p


def _plain_journal_load(ctx: Ctx):
    from smcdp.runtime.durability.journal import FileJournal

    j = FileJournal(ctx.path)
    try:
        return list(j.inbound())
    finally:
        j.close()


def _plain_journal_valid(inbound, ctx: Ctx) -> None:
    # without a head a truncation is a torn tail: what is read must be a prefix of what was written, byte for byte
    assert inbound == [tuple(x) for x in IN_RECORDS[: len(inbound)]], "a record was read as another"
    if not ctx.original.startswith(ctx.mutated):
        assert ctx.mutated == ctx.original, "a journal changed mid-file was accepted"
    if len(inbound) < len(IN_RECORDS):
        assert ctx.original.startswith(ctx.mutated), "records were dropped from a journal that was not cut short"


# -- audit log
def _audit_make(root: Path) -> Path:
    from smcdp.runtime.governance.audit import AuditLog

    d = root / "data"
    log = AuditLog(d, "alice")
    log.open()
    log.append("start", policy={"approval": "auto"}, budget=None)
    for i in range(5):
        log.append("accepted", session=f"bob.s{i}", protocol="echo", role="a", exact=bool(i % 2), epsilon=0.5)
    log.append("stop")
    log.close()
    return d / "audit.jsonl"


def _audit_head_make(root: Path) -> Path:
    _audit_make(root)
    return root / "data" / "audit.head"


def _verify_load(ctx: Ctx):
    from smcdp.runtime.governance.audit import verify_log

    return verify_log(ctx.root / "data")


def _verify_valid(v, ctx: Ctx) -> None:
    if ctx.path.name == "audit.head":
        try:
            same = json.loads(ctx.mutated) == json.loads(ctx.original)
        except (ValueError, RecursionError):  # not JSON, or nested past the recursion limit: not the same head
            same = False
    else:
        same = ctx.mutated == ctx.original
    assert v.ok == same, f"verify_log says ok={v.ok} of a {'unchanged' if same else 'changed'} log: {v.problem}"


def _entries_load(ctx: Ctx):
    from smcdp.runtime.governance.audit import read_entries

    return list(read_entries(ctx.root / "data"))


def _entries_valid(entries, ctx: Ctx) -> None:
    for _i, e, raw in entries:
        assert e is None or isinstance(e, dict)
        assert isinstance(raw, bytes) and raw


def _audit_open_load(ctx: Ctx):
    from smcdp.runtime.governance.audit import AuditLog

    log = AuditLog(ctx.root / "data", "alice")
    log.open(used_before="proposals/ exists")
    return log


def _audit_open_valid(log, ctx: Ctx) -> None:
    # the party appends only to a log that verifies, or one whose last line a crash cut short
    if ctx.path.name == "audit.head":
        try:
            same = json.loads(ctx.mutated) == json.loads(ctx.original)
        except (ValueError, RecursionError):  # not JSON, or nested past the recursion limit: not the same head
            same = False
        assert same, "AuditLog.open accepted a changed head"
    else:
        cut = ctx.original.startswith(ctx.mutated) and ctx.mutated.rfind(b"\n") == ctx.original[:-1].rfind(b"\n")
        assert ctx.mutated == ctx.original or cut, "AuditLog.open accepted a changed log"


# -- ledger
def _ledger_make(root: Path) -> Path:
    from unittest import mock

    from smcdp.dp.ledger import Ledger

    d = root / "data"
    d.mkdir()
    p = d / "ledger.sqlite"
    with mock.patch("smcdp.dp.ledger.os.getpid", lambda: 4242):  # stored with each entry: the same bytes every run
        led = Ledger(p)
        led.set_budget("alice", 10.0, 1e-6)
        led.charge("alice", 0.25, note="one")
        led.reserve("alice", "bob.s1", 0.5, note="party alice: session bob.s1 (echo)")
        led.charge("alice", 1.25, note="two")
    return p


def _ledger_load(ctx: Ctx):
    from smcdp.dp.ledger import Ledger
    from smcdp.runtime.governance.charges import BudgetConfig, SessionCharges

    charges = SessionCharges(BudgetConfig("alice"), ctx.root / "data", "alice")
    charges.open(used_before=USED_BEFORE)
    status = charges.status()
    hist = Ledger(ctx.path).history("alice")
    return status, hist


def _ledger_valid(r, ctx: Ctx) -> None:
    from decimal import Decimal

    status, hist = r
    for k in ("epsilon", "spent_epsilon", "reserved_epsilon", "remaining_epsilon"):
        v = Decimal(status[k])
        assert v.is_finite(), f"{k} = {status[k]}"
    assert Decimal(status["epsilon"]) > 0 and Decimal(status["spent_epsilon"]) >= 0, status
    assert Decimal(status["remaining_epsilon"]) <= Decimal(status["epsilon"]), f"negative spending accepted: {status}"
    for c in hist:
        assert c.state in ("charged", "reserved", "released") and c.epsilon.is_finite() and c.epsilon >= 0, c


SPENT, RESERVED = "1.5", "0.5"
#: what the party's audit trail shows of the ledger made above (its charges): the governor reads it at start
#: (Governor._ledger_used_before) and a ledger lost since is refused, not made anew with the whole budget
USED_BEFORE = "audit line 3: charged"


def _ledger_configured_load(ctx: Ctx):
    """[budget] with epsilon (the usual configuration): what SessionCharges.open writes when it starts."""
    from smcdp.runtime.governance.charges import BudgetConfig, SessionCharges

    charges = SessionCharges(BudgetConfig("alice", epsilon=10.0, delta=1e-6), ctx.root / "data", "alice")
    charges.open(used_before=USED_BEFORE)
    return charges.status()


def _ledger_configured_valid(status, ctx: Ctx) -> None:
    assert (status["spent_epsilon"], status["reserved_epsilon"]) == (SPENT, RESERVED), (
        f"the ledger's history was lost and the budget granted again: {status}"
    )


def _sql(stmts: list[str]) -> Callable[[Path], None]:
    def apply(p: Path) -> None:
        con = sqlite3.connect(p, isolation_level=None)
        try:
            con.execute("PRAGMA ignore_check_constraints = 1")
            for s in stmts:
                con.execute(s)
        finally:
            con.close()

    return apply


#: name -> (the field it damages, SQL)
LEDGER_SQL: dict[str, tuple[str, list[str]]] = {
    "charge-eps-text": ("epsilon", ["UPDATE charges SET epsilon = 'abc' WHERE id = 1"]),
    "charge-eps-neg": ("epsilon", ["UPDATE charges SET epsilon = '-5' WHERE id = 1"]),
    "charge-eps-nan": ("epsilon", ["UPDATE charges SET epsilon = 'NaN' WHERE id = 1"]),
    "charge-eps-inf": ("epsilon", ["UPDATE charges SET epsilon = 'Infinity' WHERE id = 1"]),
    "charge-rho-text": ("rho", ["UPDATE charges SET rho = 'x' WHERE id = 1"]),
    "charge-state-bogus": ("state", ["UPDATE charges SET state = 'bogus' WHERE id = 1"]),
    "budget-eps-text": ("epsilon", ["UPDATE budgets SET epsilon = 'ten'"]),
    "budget-eps-neg": ("epsilon", ["UPDATE budgets SET epsilon = '-10'"]),
    "budget-rule-bogus": ("rule", ["UPDATE budgets SET rule = 'bogus'"]),
    "budget-zcdp-delta0": ("delta", ["UPDATE budgets SET rule = 'zcdp', delta = '0'"]),
    "user-version-99": ("schema", ["PRAGMA user_version = 99"]),
    "application-id": ("ledger", ["PRAGMA application_id = 7"]),
    "drop-charges": ("charges", ["DROP TABLE charges"]),
    "drop-budgets": ("budgets", ["PRAGMA foreign_keys = OFF", "DROP TABLE budgets"]),
}


def _ledger_flip_amount(p: Path) -> None:
    """One byte of a stored amount ('1.25' -> '1.2\\xb5'), in the middle of the file's data pages."""
    data = p.read_bytes()
    i = data.find(b"1.25")
    assert i > 0
    p.write_bytes(data[: i + 3] + bytes([data[i + 3] ^ 0x80]) + data[i + 4 :])


# -- proposals
def _proposal_make(root: Path) -> Path:
    from smcdp.runtime.governance.approvals import Proposal, ProposalStore

    d = root / "proposals"
    store = ProposalStore(d)
    now = 1_900_000_000.25  # fixed (the file's bytes are the same on every run); expiry is not what is tested
    p = Proposal(
        session_id="bob.s3",
        protocol="echo",
        roles={"a": "alice", "b": "bob"},
        params={"n": 3},
        seed=None,
        timeout_seconds=60.0,
        initiator="bob",
        role="a",
        summary={"protocol": "echo", "epsilon": 0.5},
        charges_budget=True,
        received_at=now,
        expires_at=now + 3600,
    )
    store.save(p)
    return d / "bob.s3.json"


def _proposal_load(ctx: Ctx):
    from smcdp.runtime.governance.approvals import ProposalStore

    store = ProposalStore(ctx.root / "proposals")
    store.load()
    return store


def _proposal_valid(store, ctx: Ctx) -> None:
    from smcdp.states import ProposalState

    for p in store.all():  # sorted by received_at, as the gate reconciles them at start-up
        ProposalState(p.state)
        assert _time_number(p.received_at), f"received_at {p.received_at!r}"
        assert _time_number(p.expires_at), f"expires_at {p.expires_at!r}"
        assert isinstance(p.roles, dict) and all(isinstance(v, str) for v in p.roles.values()), "roles"
        assert isinstance(p.params, dict), "params"
        assert _time_number(p.timeout_seconds) and p.timeout_seconds > 0, f"timeout_seconds {p.timeout_seconds!r}"
        p.spec()


def _time_number(v) -> bool:
    """A number of seconds the gate can compare with time.time() (not nan, not inf)."""
    return isinstance(v, int | float) and not isinstance(v, bool) and (isinstance(v, int) or math.isfinite(v))


# -- witnessed heads
def _head_dict(i: int) -> dict:
    return {
        "statement": json.dumps({"kind": "smcdp-audit-head", "lines": i}),
        "signature": base64.b64encode(b"sig" * 8).decode(),
        "certificate": "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    }


def _witness_make(root: Path) -> Path:
    d = root / "data" / "witness"
    d.mkdir(parents=True)
    p = d / "bob.json"
    doc = {
        "kind": "smcdp-witnessed-heads",
        "party": "bob",
        "heads": {"a" * 64: _head_dict(3)},
        "sessions": ["bob.s1"],
        "conflicts": [{"head": _head_dict(2), "after": _head_dict(1)}],
    }
    p.write_text(json_dumps(doc))
    return p


def _heads_file_load(ctx: Ctx):
    from smcdp.runtime.governance.witness import heads_from_file

    return heads_from_file(ctx.path)


def _held_for_load(ctx: Ctx):
    from smcdp.runtime.governance.witness import WitnessStore

    return WitnessStore(ctx.root / "data", "alice", b"").held_for("bob")


def _heads_valid(heads, ctx: Ctx) -> None:
    for h in heads:
        assert isinstance(h.statement, bytes) and isinstance(h.signature, bytes) and isinstance(h.certificate, bytes)


# ============================================================================ the loaders and their cases
JSON_FIELDS: dict[str, list[tuple[tuple[str, ...], str]]] = {
    "key-share": [
        (("index",), "num"),
        (("secret",), "str"),
        (("public",), "table"),
        (("public", "n"), "str"),
        (("public", "theta"), "str"),
        (("public", "parties"), "num"),
        (("public", "threshold"), "num"),
        (("public", "share_bits"), "num"),
        (("public", "verification_keys"), "list"),
    ],
    "key-group": [
        (("index",), "num"),
        (("parties",), "table"),
        (("parties", "2"), "str"),
        (("key_bits",), "num"),
        (("generation_seconds",), "num"),
        (("candidates",), "num"),
        (("fingerprint",), "str"),
        (("public", "share_bits"), "num"),
    ],
    "paillier-key": [(("n",), "str"), (("p",), "str"), (("q",), "str")],
    "session-record": [
        (("roles",), "table"),
        (("error",), "table"),
        (("stats",), "table"),
        (("state",), "str"),
    ],
    "proposal": [
        (("received_at",), "num"),
        (("expires_at",), "num"),
        (("timeout_seconds",), "num"),
        (("roles",), "table"),
        (("params",), "table"),
        (("state",), "str"),
        (("session_id",), "str"),
    ],
    "witness-file": [(("heads",), "table"), (("conflicts",), "list"), (("sessions",), "list")],
    "witness-store": [(("heads",), "table"), (("conflicts",), "list"), (("sessions",), "list")],
}

WITNESS_SPECIALS = {
    "conflict-not-object": lambda d: {**d, "conflicts": ["x"]},
    "heads-values-not-objects": lambda d: {**d, "heads": {"k": 5}},
    "head-statement-nonascii": lambda d: {**d, "heads": {"k": {**_head_dict(1), "statement": "é"}}},
}

LOADERS: dict[str, Loader] = {
    "config": CONFIG,
    **{
        name: Loader(_npz_make(spec, fname), load, valid, byte_mutations=BYTES)
        for name, (spec, fname, load, valid) in NPZ_LOADERS.items()
    },
    **{name: Loader(make, load, valid) for name, (make, load, valid) in NPY_LOADERS.items()},
    "kw-utterance-wav": Loader(_wav_make, _utt_load, _utt_valid),
    "wav": Loader(_wav_make, _read_wav_load, _read_wav_valid),
    "tls-ca": Loader(_tls_make("ca.crt"), _tls_load, _tls_valid, byte_mutations=TEXT_BYTES),
    "tls-cert": Loader(_tls_make("alice.crt"), _tls_load, _tls_valid, byte_mutations=TEXT_BYTES),
    "tls-key": Loader(_tls_make("alice.key"), _tls_load, _tls_valid, byte_mutations=TEXT_BYTES),
    "key-share": Loader(_share_make, _share_load, _share_valid, byte_mutations=TEXT_BYTES),
    "key-group": Loader(_group_make, _group_load, _group_valid, byte_mutations=TEXT_BYTES),
    "paillier-key": Loader(_sk_make, _sk_load, _sk_valid, byte_mutations=TEXT_BYTES),
    "session-record": Loader(_record_make, _record_load, _record_valid, byte_mutations=TEXT_BYTES),
    "checkpoint-json": Loader(_cp_make("checkpoint.json"), _cp_load, _cp_valid, byte_mutations=TEXT_BYTES),
    "checkpoint-root-key": Loader(_cp_make("root.key"), _cp_load, _cp_valid),
    "durability-key": Loader(_cp_make("durability.key"), _cp_load, _cp_valid),
    "journal": Loader(_cp_make("journal.log"), _journal_load, _journal_valid, close=_journal_close),
    "journal-head": Loader(_cp_make("journal.log.head"), _journal_load, _journal_valid, close=_journal_close),
    # a torn tail is dropped (never acknowledged: docs of smcdp.runtime.durability.journal)
    "journal-plain": Loader(_plain_journal_make, _plain_journal_load, _plain_journal_valid, repairs=True, drops=True),
    "audit-verify": Loader(_audit_make, _verify_load, _verify_valid, byte_mutations=LINE_BYTES),
    "audit-head-verify": Loader(_audit_head_make, _verify_load, _verify_valid, byte_mutations=TEXT_BYTES),
    "audit-entries": Loader(_audit_make, _entries_load, _entries_valid, byte_mutations=LINE_BYTES),
    "audit-open": Loader(
        _audit_make,
        _audit_open_load,
        _audit_open_valid,
        repairs=True,
        derived=("audit.head",),
        byte_mutations=LINE_BYTES,
        close=lambda log: log.close(),
    ),
    "audit-head-open": Loader(
        _audit_head_make,
        _audit_open_load,
        _audit_open_valid,
        derived=("audit.head",),
        byte_mutations=TEXT_BYTES,
        close=lambda log: log.close(),
    ),
    "ledger": Loader(_ledger_make, _ledger_load, _ledger_valid),
    "ledger-configured": Loader(
        _ledger_make, _ledger_configured_load, _ledger_configured_valid, byte_mutations={**BYTES, "deleted": None}
    ),
    "proposal": Loader(
        _proposal_make,
        _proposal_load,
        _proposal_valid,
        errors=(ValueError,),
        exact_type=True,
        byte_mutations=TEXT_BYTES,
    ),
    "witness-file": Loader(_witness_make, _heads_file_load, _heads_valid, byte_mutations=TEXT_BYTES),
    # a witness file that does not read is moved aside (kept whole under another name): documented, not a loss
    "witness-store": Loader(_witness_make, _held_for_load, _heads_valid, repairs=True, byte_mutations=TEXT_BYTES),
}


@dataclass(frozen=True)
class Case:
    id: str
    loader: str
    #: rewrites the valid file (given its path, the case's rng and the directory); returns the field it changed
    mutate: Callable[[Path, random.Random, Path], str | None]


def _bytes_case(fn) -> Callable:
    def mutate(path: Path, rng: random.Random, root: Path) -> None:
        if fn is None:  # the file is gone
            path.unlink()
            return
        path.write_bytes(fn(path.read_bytes(), rng))

    return mutate


def _json_field_case(fpath: tuple[str, ...], how: str, value: Any) -> Callable:
    def mutate(path: Path, rng: random.Random, root: Path) -> str:
        doc = json.loads(path.read_text())
        path.write_text(json_dumps(_set(doc, fpath, how, value)))
        return fpath[-1]

    return mutate


def _json_doc_case(fn) -> Callable:
    def mutate(path: Path, rng: random.Random, root: Path) -> None:
        path.write_text(json_dumps(fn(json.loads(path.read_text()))))

    return mutate


def _json_text_case(text: str) -> Callable:
    def mutate(path: Path, rng: random.Random, root: Path) -> None:
        path.write_text(text)

    return mutate


def _config_field_case(fpath: tuple[str, ...], how: str, value: Any) -> Callable:
    def mutate(path: Path, rng: random.Random, root: Path) -> str:
        path.write_text(toml_dumps(_set(BASE_CONFIG, fpath, how, value)))
        return fpath[-1]

    return mutate


def _config_special_case(fn) -> Callable:
    def mutate(path: Path, rng: random.Random, root: Path) -> None:
        doc = fn()
        path.write_text(doc if isinstance(doc, str) else toml_dumps(doc))

    return mutate


def _npz_member_case(key: str, fn) -> Callable:
    def mutate(path: Path, rng: random.Random, root: Path) -> str:
        members = npz_members(path)
        arr = np.load(io.BytesIO(members[key]), allow_pickle=False)
        members[key] = fn(arr, root.parent / "unpickled")
        write_npz(path, members)
        return key

    return mutate


def _npz_drop_case(key: str | None) -> Callable:
    def mutate(path: Path, rng: random.Random, root: Path) -> str | None:
        members = npz_members(path)
        if key is None:
            members["bogus"] = npy_bytes(np.zeros(2))
            write_npz(path, members)
            return "bogus"
        del members[key]
        write_npz(path, members)
        return key

    return mutate


def _npy_case(fn) -> Callable:
    def mutate(path: Path, rng: random.Random, root: Path) -> None:
        arr = np.load(path, allow_pickle=False)
        path.write_bytes(fn(arr, root.parent / "unpickled"))

    return mutate


def _raw_case(data_fn) -> Callable:
    def mutate(path: Path, rng: random.Random, root: Path) -> None:
        path.write_bytes(data_fn())

    return mutate


def _ledger_sql_case(field_: str, stmts: list[str]) -> Callable:
    def mutate(path: Path, rng: random.Random, root: Path) -> str:
        _sql(stmts)(path)
        return field_

    return mutate


def _build_cases() -> list[Case]:
    cases: list[Case] = []

    def add(loader: str, name: str, fn) -> None:
        cases.append(Case(f"{loader}-{name}", loader, fn))

    # raw bytes, every loader
    for lname, loader in LOADERS.items():
        for mname, fn in loader.byte_mutations.items():
            add(lname, mname, _bytes_case(fn))
    # configuration: every field x every applicable value mutation, then whole-document ones
    for fpath, kind in CONFIG_FIELDS:
        for how, kinds, value in VALUE_MUTATIONS:
            if kind in kinds:
                add("config", f"{'.'.join(fpath)}-{how}", _config_field_case(fpath, how, value))
    for name, fn in CONFIG_SPECIALS.items():
        add("config", name, _config_special_case(fn))
    # JSON files
    for lname, fields in JSON_FIELDS.items():
        for fpath, kind in fields:
            for how, kinds, value in VALUE_MUTATIONS:
                if kind in kinds and how not in ("long-str",):
                    add(lname, f"{'.'.join(fpath)}-{how}", _json_field_case(fpath, how, value))
        add(lname, "not-object", _json_text_case("[1, 2]"))
        add(lname, "float-overflow", _json_text_case('{"x": 1e400}'))
    for name, fn in WITNESS_SPECIALS.items():
        add("witness-file", name, _json_doc_case(fn))
        add("witness-store", name, _json_doc_case(fn))
    # .npz members
    for lname, (spec, _fname, _load, _valid) in NPZ_LOADERS.items():
        for key, kind in spec.kinds.items():
            for mname, (kinds, fn) in ARRAY_MUTATIONS.items():
                if kind in kinds:
                    add(lname, f"{key}-{mname}", _npz_member_case(key, fn))
            add(lname, f"{key}-missing", _npz_drop_case(key))
        add(lname, "extra-member", _npz_drop_case(None))
    # .npy files
    for lname in NPY_LOADERS:
        for mname, (kinds, fn) in ARRAY_MUTATIONS.items():
            if "num" in kinds:
                add(lname, mname, _npy_case(fn))
        add(lname, "npz-instead", _raw_case(lambda: _npz_bytes({"a": np.zeros((3, 39))})))
    # WAV
    for lname in ("wav", "kw-utterance-wav"):
        for name, fn in WAV_SPECIALS.items():
            add(lname, name, _raw_case(fn))
    # ledger
    for lname in ("tls-ca", "tls-cert"):
        for name, fn in TLS_DER_MUTATIONS.items():
            add(lname, name, _pem_der_case(fn))
    for name, (field_, stmts) in LEDGER_SQL.items():
        add("ledger", name, _ledger_sql_case(field_, stmts))
    add("ledger", "amount-byte", lambda p, r, root: _ledger_flip_amount(p))
    return cases


def _npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    b = io.BytesIO()
    np.savez(b, **arrays)
    return b.getvalue()


CASES = _build_cases()


# ============================================================================ known bugs (id -> diagnosis)
KNOWN_BUGS: dict[str, str] = {}


def _params():
    return params_with_known_bugs(CASES, KNOWN_BUGS)


@pytest.mark.parametrize("case", _params())
def test_a_damaged_file_is_refused_clearly_or_loads_valid(case: Case, tmp_path: Path) -> None:
    loader = LOADERS[case.loader]
    root = tmp_path / "files"
    root.mkdir()
    path = loader.make(root)
    original = path.read_bytes()
    rng = random.Random(case.id)
    changed = case.mutate(path, rng, root)
    ctx = Ctx(path, original, path.read_bytes() if path.exists() else b"", root)
    words = (path.name, str(path.parent.name), *(() if changed is None else (changed,)))
    run_case(loader, ctx, words, case.id)


def test_the_cases_are_deterministic_and_unique() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    assert set(KNOWN_BUGS) <= set(ids), sorted(set(KNOWN_BUGS) - set(ids))
