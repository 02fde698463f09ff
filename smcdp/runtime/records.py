"""Session records: the one reader and writer of ``data_dir/sessions/<id>.json``.

A record is what a session left when it ended here (its result or error, traffic stats): what
``GetResult``, ``session status``, the console, a peer's heartbeat and the retention read.  Every
read goes through :class:`SessionRecords`, so a missing and a damaged file mean the same thing
wherever they are read:

* **missing** -- :meth:`SessionRecords.load` returns ``None`` (the session never ended here, or its
  record was removed by the retention);
* **damaged** (unreadable, not JSON, not an object) -- :meth:`SessionRecords.load` raises
  :class:`RecordDamaged` (DATA_LOSS, naming the file).  The operator's calls pass it on; what a *peer*
  asks (:meth:`SessionRecords.peek`) answers as for a missing record and logs the damage, since a peer
  learns nothing from this party's files.

A record that could not be written (a full disk) is kept in memory instead and served from there until
the process ends (:meth:`SessionRecords.write`), so an operator still gets the outcome.

A session that ended before it began here, past its initiator's allowance of such ends in full (the
governance counts it in one ``unbegun-summarised`` audit line, docs/security.md), keeps no file: its
record is served from memory, the newest :data:`TRANSIENT_RECORDS` of them (:meth:`SessionRecords.transient`);
a resumable one keeps its file until the retention sweep removes its checkpoint.  A member proposing and
aborting sessions as fast as the party answers left one file each, for ever.

The ``a…`` methods run the file operations in the loop's default executor: the server's loop never
blocks on the disk.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, TypedDict

from smcdp._files import atomic_write_json, json_loads
from smcdp.errors import DataLoss
from smcdp.net.server import validate_session_id

log = logging.getLogger("smcdp.records")

SUFFIX = ".json"
#: records of sessions that ended before they began, past their initiator's allowance, served from memory only
#: (about 1-2 KB each: a few MB at most); the oldest is forgotten first
TRANSIENT_RECORDS = 2048


class SessionRecord(TypedDict, total=False):
    """The fields of a record (:func:`smcdp.runtime.session.session_record` makes them)."""

    session_id: str
    protocol: str | None
    party: str
    role: str | None
    roles: dict[str, str]
    initiator: str | None
    params: dict[str, Any]
    seed: int | None
    timeout_seconds: float | None
    state: str
    result: Any
    error: dict[str, str] | None
    stats: dict[str, Any] | None
    started_at: str | None
    finished_at: str | None
    seconds: float | None
    restarts: int
    resumable: bool
    round: int | None
    #: the parties that had not confirmed holding their outputs when the session ended here ([] once every
    #: one did; absent or None if this party's role never ended: smcdp.runtime.ending)
    unconfirmed: list[str] | None
    #: the checkpoint it was restored from was damaged (its roles cannot be trusted)
    damaged: bool
    #: the record could not be written (kept in memory, served until the process ends)
    record_write_error: str
    #: "counted": the session ended before it began here, past its initiator's allowance (a resumable one's
    #: record, removed with its checkpoint by the retention sweep)
    ended_before_begin: str


class RecordDamaged(DataLoss):
    """A session record exists but cannot be read (DATA_LOSS, naming the file)."""


def write_json_atomic(path: Path, obj: Any) -> None:
    """Session records and ready files: durable, owner-only (they may hold protocol outputs)."""
    atomic_write_json(path, obj, 0o600, sort_keys=True)


#: the fields every reader of a record relies on (peers, recovery, the console): field -> (types, what)
_FIELD_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "session_id": ((str,), "a string"),
    "state": ((str,), "a string"),
    "roles": ((dict,), "an object"),
    "params": ((dict,), "an object"),
    "error": ((dict, type(None)), "an object or null"),
    "stats": ((dict, type(None)), "an object or null"),
    "unconfirmed": ((list, type(None)), "a list or null"),
}


def _wrong_field(record: dict[str, Any]) -> str | None:
    """What is wrong with a record's fields (a damaged file whose JSON still parses), or None."""
    for name, (types, what) in _FIELD_TYPES.items():
        if name in record and not isinstance(record[name], types):
            return f"{name} must be {what}, got {type(record[name]).__name__}"
    roles = record.get("roles") or {}
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in roles.items()):
        return "roles must map role names to party names"
    return None


class SessionRecords:
    """The records of the sessions that ended at party ``party`` (files in ``directory``)."""

    def __init__(self, directory: Path, party: str) -> None:
        self.directory = directory
        self.party = party
        #: records that could not be written: served from memory until the process ends
        self._unwritten: dict[str, SessionRecord] = {}
        #: records kept in memory only (:meth:`transient`), oldest first; written by session threads
        self._transient: OrderedDict[str, SessionRecord] = OrderedDict()
        self._transient_lock = threading.Lock()

    # ------------------------------------------------------------------ where
    def path(self, session_id: str) -> Path:
        return self.directory / f"{validate_session_id(session_id)}{SUFFIX}"

    def exists(self, session_id: str) -> bool:
        """A record of ``session_id`` is held here (on disk, or in memory after a failed write)."""
        return session_id in self._unwritten or session_id in self._transient or self.path(session_id).exists()

    def ids_named(self, name: str) -> set[str]:
        """Ids ``<initiator>.<name>`` of the records held here."""
        found = {p.name[: -len(SUFFIX)] for p in self.directory.glob(f"*.{name}{SUFFIX}")}
        with self._transient_lock:
            held = (*self._unwritten, *self._transient)
        return found | {sid for sid in held if sid.partition(".")[2] == name}

    @property
    def unwritten(self) -> set[str]:
        return set(self._unwritten)

    # ------------------------------------------------------------------ read
    def load(self, session_id: str) -> SessionRecord | None:
        """The record of ``session_id``; None if there is none; :class:`RecordDamaged` if it cannot be read."""
        with self._transient_lock:
            kept = self._unwritten.get(session_id) or self._transient.get(session_id)
        if kept is not None:
            return kept
        path = self.path(session_id)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise RecordDamaged(
                f"cannot read the record of session {session_id!r} ({path}): {exc}", self.party
            ) from None
        try:
            record = json_loads(raw.decode("utf-8"))
        except ValueError as exc:  # UnicodeDecodeError included
            raise RecordDamaged(
                f"the record of session {session_id!r} ({path}) is not JSON: {exc}", self.party
            ) from None
        if not isinstance(record, dict):
            raise RecordDamaged(f"the record of session {session_id!r} ({path}) is not a JSON object", self.party)
        wrong = _wrong_field(record)
        if wrong:
            raise RecordDamaged(f"the record of session {session_id!r} ({path}): {wrong}", self.party)
        return record  # type: ignore[return-value]  # the fields its readers rely on are checked

    def peek(self, session_id: str) -> SessionRecord | None:
        """:meth:`load` for what a peer asks: a damaged record is logged and answered as a missing one."""
        try:
            return self.load(session_id)
        except RecordDamaged as exc:
            log.error("%s", exc)
            return None

    def recent(self, limit: int) -> list[SessionRecord]:
        """The ``limit`` newest records on disk, newest first (blocking); damaged ones are logged and left
        out, and so is a record the retention removes meanwhile."""
        stamped = []
        for path in self.directory.glob(f"*{SUFFIX}"):
            try:
                stamped.append((path.stat().st_mtime, path.name[: -len(SUFFIX)]))
            except OSError:
                continue
        out = []
        for _mtime, sid in sorted(stamped, reverse=True)[:limit]:
            record = self.peek(sid)
            if record is not None:
                out.append(record)
        return out

    async def aload(self, session_id: str) -> SessionRecord | None:
        return await asyncio.get_running_loop().run_in_executor(None, self.load, session_id)

    async def apeek(self, session_id: str) -> SessionRecord | None:
        return await asyncio.get_running_loop().run_in_executor(None, self.peek, session_id)

    # ------------------------------------------------------------------ write
    def write(self, session_id: str, record: SessionRecord, *, overwrite: bool = True) -> SessionRecord:
        """Write ``record`` atomically (0600).  If the disk refuses, keep it in memory and return it with
        ``record_write_error`` set.  ``overwrite=False``: a record already published is left as it is."""
        path = self.path(session_id)
        if not overwrite and path.exists():
            return record
        with self._transient_lock:  # a newer record (a resumed session's end) replaces one kept in memory
            self._transient.pop(session_id, None)
        try:
            write_json_atomic(path, record)
        except OSError as exc:
            log.error("session %s: cannot write its record: %s", session_id, exc)
            record = {**record, "record_write_error": str(exc)}
            with self._transient_lock:
                self._unwritten[session_id] = record
        return record

    def transient(self, session_id: str, record: SessionRecord) -> None:
        """Serve ``record`` from memory only and remove its file: a session that ended before it began here,
        counted rather than audited in full.  Beyond :data:`TRANSIENT_RECORDS` such records the oldest is
        forgotten (a query then finds no record; its id may be proposed again -- the session computed nothing
        here).  Never raises: a file that cannot be removed stays, and the removal is logged."""
        with self._transient_lock:
            self._unwritten.pop(session_id, None)  # (a record whose write failed: served from here now)
            self._transient[session_id] = record
            self._transient.move_to_end(session_id)
            while len(self._transient) > TRANSIENT_RECORDS:
                self._transient.popitem(last=False)
        try:
            self.path(session_id).unlink(missing_ok=True)
        except OSError as exc:
            log.error("session %s: cannot remove its record file: %s", session_id, exc)

    def keep(self, session_id: str, record: SessionRecord) -> None:
        """Serve ``record`` from memory (its write failed in the session's thread)."""
        self._unwritten[session_id] = record
