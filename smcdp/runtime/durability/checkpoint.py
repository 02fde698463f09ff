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

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Mapping

from smcdp._files import atomic_write, atomic_write_json
from smcdp.errors import PreconditionFailed
from smcdp.primitives.rng import KEY_BYTES, Randomness
from smcdp.runtime.durability.journal import FileJournal

META = "checkpoint.json"
ROOT_KEY = "root.key"
JOURNAL = "journal.log"
VERSION = 1
SUFFIX = ".d"

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
