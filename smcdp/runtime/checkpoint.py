"""A session's checkpoint at one party: what it needs to continue after its process died.

``data_dir/sessions/<id>.d/`` (mode 0700) holds:

* ``checkpoint.json`` -- the agreed session (protocol, roles, parameters,
  timeout, initiator), this party's role, the session's state ("prepared",
  "running", or "failed" with ``resumable``), its wall-clock deadline, how
  often it was restarted, and a fingerprint of the input files the role read;
* ``root.key`` -- the 32-byte root of the role's randomness
  (:class:`smcdp.primitives.rng.Randomness`), drawn by this party from the OS
  CSPRNG when the session was proposed (or derived from an experiment seed the
  party's policy allowed).  Private material: 0600 from creation, like the key
  files, never sent anywhere, deleted with the checkpoint;
* ``journal.log`` -- every message received (stored durably *before* the
  sender is told it was delivered) and every message sent (stored durably
  *before* the first attempt to send it), with the acknowledgements.

Resume is a **deterministic replay** (docs/fault-tolerance.md): the restarted
role runs again from its first step with the same randomness root, its channel
pre-loaded with every message it had received, and every message it sends
looked up in the journal -- already acknowledged: not sent again; journaled but
not acknowledged: sent again with the *same bytes*.  So no protocol needs code
to save and restore its state, a replay can never send two different messages
under one tag, and it re-draws no mask, key or DP noise.

The checkpoint is removed when the session succeeds, or fails in a way that
cannot be continued; it is kept (state "failed", ``resumable``) when the
session failed because a participant was unreachable or shut down, so that
``smcdp session resume ID`` can continue it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

from smcdp._files import atomic_write, atomic_write_json
from smcdp.errors import InvalidMessage, PreconditionFailed
from smcdp.primitives.rng import KEY_BYTES, Randomness

META = "checkpoint.json"
ROOT_KEY = "root.key"
JOURNAL = "journal.log"
VERSION = 1
SUFFIX = ".d"

_IN, _OUT, _DELIVERED = 1, 2, 3
#: record header: kind (1 byte), header length (4), data length (8)
_HEAD = struct.Struct(">BIQ")
#: largest journal header (role, tag, type name and digest as JSON)
_MAX_HEADER = 4096


class CheckpointError(PreconditionFailed):
    """A checkpoint is missing, damaged or does not match what is being resumed."""


def input_fingerprint(paths: Mapping[str, str]) -> dict[str, list]:
    """name -> [size, mtime_ns] of each configured input (every file under a directory input).

    A resume refuses to replay over inputs that changed: the replay would not
    reproduce what the role sent.
    """
    out: dict[str, list] = {}
    for name, path in sorted(paths.items()):
        p = Path(path)
        try:
            if p.is_dir():
                files = sorted(q for q in p.rglob("*") if q.is_file())
                out[name] = [[str(q.relative_to(p)), q.stat().st_size, q.stat().st_mtime_ns] for q in files]
            else:
                st = p.stat()
                out[name] = [st.st_size, st.st_mtime_ns]
        except OSError:
            out[name] = ["missing"]
    return out


class FileJournal:
    """An append-only journal file implementing :class:`smcdp.net.channel.Journal`.

    Records: ``kind | header length | data length | header JSON | data``, the
    header naming the role, tag, type and the SHA-256 of the data.  Received
    and outgoing messages are fsync-ed before they count; acknowledgements are
    only flushed (losing one means sending identical bytes once more, which the
    receiver ignores).  A record cut short by a crash is dropped when the
    journal is reopened -- it was never acknowledged, so nothing depended on it.
    Outgoing messages are kept as file offsets, not in memory.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._inbound: list[tuple[str, str, str, int, int]] = []          # role, tag, type, offset, length
        self._outbound: dict[tuple[str, str], tuple[str, int, int]] = {}  # (to, tag) -> type, offset, length
        self._delivered: set[tuple[str, str]] = set()
        self.bytes_written = 0
        self.records_written = 0
        #: wall time spent writing (and fsync-ing) journal records: the cost of checkpointing
        self.seconds_writing = 0.0
        self._scan()
        self._fh = open(self.path, "ab", buffering=0)  # noqa: SIM115 - kept open for the session

    # ------------------------------------------------------------------ reading
    def _scan(self) -> None:
        if not self.path.exists():
            fd = os.open(self.path, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o600)
            os.close(fd)
            return
        good = 0
        with open(self.path, "rb") as f:
            data = f.read()
        pos = 0
        while pos + _HEAD.size <= len(data):
            kind, hlen, dlen = _HEAD.unpack_from(data, pos)
            end = pos + _HEAD.size + hlen + dlen
            if kind not in (_IN, _OUT, _DELIVERED) or hlen > _MAX_HEADER or end > len(data):
                break
            try:
                head = json.loads(data[pos + _HEAD.size:pos + _HEAD.size + hlen])
            except ValueError:
                break
            off = pos + _HEAD.size + hlen
            body = data[off:end]
            if kind != _DELIVERED and hashlib.sha256(body).hexdigest() != head.get("h"):
                break
            key = (head["r"], head["t"])
            if kind == _IN:
                self._inbound.append((head["r"], head["t"], head["y"], off, dlen))
            elif kind == _OUT:
                self._outbound[key] = (head["y"], off, dlen)
            else:
                self._delivered.add(key)
            pos = good = end
        if good < len(data):  # a torn tail: never acknowledged, drop it
            with open(self.path, "r+b") as f:
                f.truncate(good)
                f.flush()
                os.fsync(f.fileno())

    def _read(self, off: int, length: int) -> bytes:
        with open(self.path, "rb") as f:
            f.seek(off)
            return f.read(length)

    # ----------------------------------------------------------- Journal protocol
    def inbound(self) -> Iterable[tuple[str, str, str, bytes]]:
        with self._lock:
            items = list(self._inbound)
        for role, tag, type_name, off, length in items:
            yield role, tag, type_name, self._read(off, length)

    def record_inbound(self, sender_role: str, tag: str, type_name: str, data: bytes, durable: bool = True) -> None:
        with self._lock:
            off = self._append(_IN, sender_role, tag, type_name, data, sync=durable)
            self._inbound.append((sender_role, tag, type_name, off, len(data)))

    def sync(self) -> None:
        """fsync the journal: every record written so far is durable (one file, appended in order)."""
        t0 = time.perf_counter()
        os.fsync(self._fh.fileno())
        with self._lock:
            self.seconds_writing += time.perf_counter() - t0

    def outbound(self, to_role: str, tag: str) -> tuple[str, bytes] | None:
        with self._lock:
            entry = self._outbound.get((to_role, tag))
        if entry is None:
            return None
        type_name, off, length = entry
        return type_name, self._read(off, length)

    def record_outbound(self, to_role: str, tag: str, type_name: str, data: bytes) -> None:
        with self._lock:
            off = self._append(_OUT, to_role, tag, type_name, data, sync=True)
            self._outbound[(to_role, tag)] = (type_name, off, len(data))

    def mark_delivered(self, to_role: str, tag: str) -> None:
        with self._lock:
            if (to_role, tag) in self._delivered:
                return
            self._append(_DELIVERED, to_role, tag, "", b"", sync=False)
            self._delivered.add((to_role, tag))

    def delivered(self, to_role: str, tag: str) -> bool:
        with self._lock:
            return (to_role, tag) in self._delivered

    # ------------------------------------------------------------------ writing
    def _append(self, kind: int, role: str, tag: str, type_name: str, data: bytes, *, sync: bool) -> int:
        head = {"r": role, "t": tag, "y": type_name}
        if kind != _DELIVERED:
            head["h"] = hashlib.sha256(data).hexdigest()
        hb = json.dumps(head, separators=(",", ":")).encode()
        if len(hb) > _MAX_HEADER:
            raise InvalidMessage("journal record header too long (tag or type name)")
        t0 = time.perf_counter()
        start = self._fh.seek(0, os.SEEK_END)
        rec = _HEAD.pack(kind, len(hb), len(data)) + hb
        self._fh.write(rec + data)
        if sync:
            os.fsync(self._fh.fileno())
        self.seconds_writing += time.perf_counter() - t0
        self.bytes_written += len(rec) + len(data)
        self.records_written += 1
        return start + len(rec)

    def stats(self) -> dict:
        return {"journal_bytes": self.bytes_written, "journal_records": self.records_written,
                "journal_seconds": round(self.seconds_writing, 6),
                "received": len(self._inbound), "sent": len(self._outbound), "acknowledged": len(self._delivered)}

    def close(self) -> None:
        try:
            self._fh.close()
        except OSError:
            pass


class Checkpoint:
    """One session's checkpoint directory at this party (see the module docstring)."""

    def __init__(self, directory: Path, meta: dict) -> None:
        self.dir = directory
        self.meta = meta
        self._journal: FileJournal | None = None

    # ---------------------------------------------------------------- life cycle
    @staticmethod
    def directory(sessions_dir: Path, session_id: str) -> Path:
        return sessions_dir / f"{session_id}{SUFFIX}"

    @classmethod
    def create(cls, sessions_dir: Path, *, session_id: str, protocol: str, roles: Mapping[str, str],
               params: Mapping[str, Any], timeout_seconds: float, seed: int | None, initiator: str, role: str,
               randomness: Randomness, inputs: Mapping[str, str]) -> "Checkpoint":
        if not randomness.replayable:
            raise ValueError("a checkpoint needs a replayable randomness root")
        d = cls.directory(sessions_dir, session_id)
        if d.exists():
            raise CheckpointError(f"session {session_id!r} already has a checkpoint here")
        d.mkdir(mode=0o700, parents=False)
        os.chmod(d, 0o700)  # whatever the umask
        atomic_write(d / ROOT_KEY, randomness.key, 0o600)
        meta = {
            "kind": "smcdp-session-checkpoint", "version": VERSION,
            "session_id": session_id, "protocol": protocol, "roles": dict(roles), "params": dict(params),
            "timeout_seconds": float(timeout_seconds), "seed": seed, "initiator": initiator, "role": role,
            "seeded": randomness.seeded, "state": "prepared", "resumable": False, "restarts": 0,
            "deadline_epoch": time.time() + float(timeout_seconds), "created": time.time(),
            "inputs": input_fingerprint(inputs), "error": None,
        }
        cp = cls(d, meta)
        cp._write_meta()
        return cp

    @classmethod
    def load(cls, directory: Path) -> "Checkpoint":
        try:
            meta = json.loads((directory / META).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise CheckpointError(f"{directory} holds no {META}") from None
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"cannot read the checkpoint in {directory}: {exc}") from None
        if not isinstance(meta, dict) or meta.get("kind") != "smcdp-session-checkpoint" \
                or meta.get("version") != VERSION:
            raise CheckpointError(f"{directory / META} is not a version-{VERSION} smcdp session checkpoint")
        missing = {"session_id", "protocol", "roles", "params", "timeout_seconds", "initiator", "role", "state",
                   "deadline_epoch", "inputs"} - set(meta)
        if missing:
            raise CheckpointError(f"{directory / META} lacks {sorted(missing)}")
        return cls(directory, meta)

    @classmethod
    def scan(cls, sessions_dir: Path) -> list["Checkpoint"]:
        """Every checkpoint under ``sessions_dir`` (damaged ones are skipped by the caller's choice: raised)."""
        if not sessions_dir.is_dir():
            return []
        return [cls.load(d) for d in sorted(sessions_dir.glob(f"*{SUFFIX}")) if d.is_dir()]

    def remove(self) -> None:
        """Delete the checkpoint, root key and journal included."""
        if self._journal is not None:
            self._journal.close()
            self._journal = None
        shutil.rmtree(self.dir, ignore_errors=True)

    # -------------------------------------------------------------------- access
    @property
    def session_id(self) -> str:
        return self.meta["session_id"]

    def randomness(self) -> Randomness:
        try:
            key = (self.dir / ROOT_KEY).read_bytes()
        except OSError as exc:
            raise CheckpointError(f"session {self.session_id}: cannot read its randomness root: {exc}") from None
        if len(key) != KEY_BYTES:
            raise CheckpointError(f"session {self.session_id}: its randomness root is damaged")
        return Randomness(key, seeded=bool(self.meta.get("seeded")))

    @property
    def journal(self) -> FileJournal:
        if self._journal is None:
            self._journal = FileJournal(self.dir / JOURNAL)
        return self._journal

    def check_inputs(self, inputs: Mapping[str, str]) -> None:
        now = input_fingerprint(inputs)
        if now != self.meta["inputs"]:
            changed = sorted(k for k in set(now) | set(self.meta["inputs"])
                             if now.get(k) != self.meta["inputs"].get(k))
            raise CheckpointError(f"session {self.session_id} cannot resume: its inputs changed since it started "
                                  f"({', '.join(changed)}); a replay would not reproduce what this party sent")

    def set_state(self, state: str, **fields: Any) -> None:
        self.meta["state"] = state
        self.meta.update(fields)
        self._write_meta()

    def _write_meta(self) -> None:
        atomic_write_json(self.dir / META, self.meta, 0o600, sort_keys=True)

    def close(self) -> None:
        if self._journal is not None:
            self._journal.close()
            self._journal = None
