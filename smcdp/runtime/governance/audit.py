"""A party's audit trail: ``data_dir/audit.jsonl``, one JSON object per line, hash-chained.

Every line is canonical JSON (sorted keys, no spaces, ASCII only: any other
character, a newline included, is a ``\\uXXXX`` escape, so a string a peer chose can
never start a line of its own) with

* ``seq``   -- 1, 2, 3, ... (its line number);
* ``prev``  -- the SHA-256 (hex) of the previous line's bytes, without its newline
  (64 zeros for the first line);
* ``time``, ``party``, ``event`` and the event's fields.

Appends are durable: the line is written with one ``write`` to a file opened with
O_APPEND and fsync-ed; then ``audit.head`` (the number of lines and the SHA-256 of the
last one) is replaced atomically.  The head is what makes removing lines from the *end*
evident -- a chain alone cannot show that.  Readers take a shared ``flock`` on the log,
the writer an exclusive one, so ``smcdp audit verify`` of a running party sees whole
appends only.

:func:`verify_log` names the first bad line after any change, removal, reordering or
truncation.  A crash can leave only one kind of damage: an incomplete last line written
after the head's last line.  Verify reports it as *torn* (exit status 3, not 0); the
party, when it next starts, moves the fragment to ``audit.jsonl.torn-<line>`` (kept, not
deleted), cuts it from the log and appends a ``torn-tail-repaired`` event recording the
fragment's length and SHA-256, so the chain stays whole and the repair is itself on
record.  Any other damage stops the party at start-up: an unverifiable log is evidence,
and a party must not keep appending to it (move it aside and start a new one with
:func:`start_new_log`, ``smcdp audit new``).  So does a log that is missing where the party
kept one before: it is never restarted silently, which would hide the loss.

Tamper-evidence has the usual limit: whoever can rewrite both files entirely can forge a
consistent history.  The peers anchor it: they keep this party's signed heads
(:mod:`smcdp.runtime.governance.witness`), and ``smcdp audit verify --witnesses`` compares.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import hashlib
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from smcdp._files import atomic_write, json_loads
from smcdp.errors import PreconditionFailed

LOG_NAME = "audit.jsonl"
HEAD_NAME = "audit.head"
GENESIS = "0" * 64
#: a field whose JSON is larger than this is stored as its length and SHA-256
MAX_FIELD_BYTES = 64 * 1024


class AuditError(PreconditionFailed):
    """The audit log cannot be verified; the party does not append to it."""


def encode(entry: dict) -> bytes:
    return json.dumps(entry, sort_keys=True, ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode("ascii")


def _sha(line: bytes) -> str:
    return hashlib.sha256(line).hexdigest()


def _bounded(value: Any) -> Any:
    try:
        text = json.dumps(value, sort_keys=True, ensure_ascii=True, allow_nan=False)
    except (TypeError, ValueError):
        value = repr(value)
        text = json.dumps(value, ensure_ascii=True)
    if len(text) <= MAX_FIELD_BYTES:
        return json.loads(text)
    return {"omitted_bytes": len(text), "sha256": hashlib.sha256(text.encode("ascii")).hexdigest()}


@dataclass
class Verification:
    """The outcome of :func:`verify_log`."""

    ok: bool
    lines: int  # complete lines whose chain verified
    head: str  # SHA-256 of the last verified line (GENESIS for an empty log)
    bad_line: int | None = None  # the first bad line (1-based), None if ok
    problem: str | None = None
    torn: bool = False  # the only damage is an incomplete last line (a crash mid-write)
    note: str | None = None  # e.g. "the head is one line behind"

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("ok", "lines", "head", "bad_line", "problem", "torn", "note")}


def _read_head(path: Path) -> tuple[dict | None, str | None]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None, None
    try:
        head = json_loads(raw)
        if not (
            isinstance(head, dict)
            and isinstance(head.get("lines"), int)
            and head["lines"] >= 0
            and isinstance(head.get("sha256"), str)
            and len(head["sha256"]) == 64
        ):
            raise ValueError("fields")
    except ValueError:
        return None, f"{path.name} is not a valid head record"
    return head, None


def _check_line(line: bytes, seq: int, prev: str) -> tuple[int, str] | None:
    """(first bad line, problem) or None."""
    try:
        entry = json_loads(line)
    except ValueError:
        return seq, f"line {seq}: not valid JSON"
    if not isinstance(entry, dict):
        return seq, f"line {seq}: not a JSON object"
    if entry.get("seq") != seq:
        return seq, (
            f"line {seq}: sequence number {entry.get('seq')!r} where {seq} is expected "
            "(a line was removed, inserted or moved)"
        )
    if entry.get("prev") != prev:
        if seq == 1:
            return 1, "line 1: the first line must have prev = 64 zeros (lines before it were removed)"
        return seq - 1, (
            f"line {seq - 1}: its hash is not the one line {seq} records "
            f"(line {seq - 1} was changed, or the prev field of line {seq})"
        )
    try:
        canonical = encode(entry)
    except ValueError:  # NaN or Infinity, which no line the log writes holds
        return seq, f"line {seq}: not in canonical form (a NaN or Infinity: the line was edited)"
    if canonical != line:
        return seq, f"line {seq}: not in canonical form (the line was edited)"
    return None


def verify_bytes(data: bytes, head: dict | None, head_problem: str | None = None) -> Verification:
    parts = data.split(b"\n")
    complete, tail = parts[:-1], parts[-1]
    hashes: list[str] = []
    prev = GENESIS
    for i, line in enumerate(complete, 1):
        bad = _check_line(line, i, prev)
        if bad is not None:
            good = bad[0] - 1
            return Verification(False, good, hashes[good - 1] if good else GENESIS, bad[0], bad[1])
        prev = _sha(line)
        hashes.append(prev)
    n = len(complete)
    note = None
    if head_problem is not None:
        return Verification(False, n, prev, n or 1, head_problem)
    if head is None:
        if n > 1:
            return Verification(False, n, prev, n, f"{HEAD_NAME} is missing although the log has {n} lines")
        if n == 1:
            note = "no head yet (a crash between the first line and its head)"
    else:
        k = head["lines"]
        if k > n:
            what = f"line {n + 1} is incomplete and " if tail else ""
            return Verification(
                False,
                n,
                prev,
                n + 1,
                f"line {n + 1}: the log is truncated: {what}the head records {k} lines, "
                f"the log holds {n} complete ones",
            )
        if k > 0 and hashes[k - 1] != head["sha256"]:
            return Verification(
                False,
                n,
                prev,
                k,
                f"line {k}: it differs from the line the head recorded (the last line was changed or replaced)",
            )
        if k == 0 and head["sha256"] != GENESIS:
            return Verification(False, n, prev, 1, f"{HEAD_NAME} records no lines but a non-zero hash")
        if n - k > 1:
            return Verification(
                False,
                n,
                prev,
                k + 2,
                f"line {k + 2}: lines after {k + 1} were added without the party recording them in the head",
            )
        if n - k == 1:
            note = "the head is one line behind (a crash between a line and its head)"
    if tail:
        return Verification(
            False,
            n,
            prev,
            n + 1,
            f"line {n + 1} is incomplete ({len(tail)} bytes without a "
            "newline): a write interrupted by a crash; the party repairs it when it starts",
            torn=True,
            note=note,
        )
    return Verification(True, n, prev, note=note)


@dataclass
class _Snapshot:
    data: bytes
    head: dict | None
    head_problem: str | None


def _snapshot(log_path: Path, head_path: Path) -> _Snapshot:
    fd = os.open(log_path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read()
        head, problem = _read_head(head_path)
    finally:
        os.close(fd)  # closing the descriptor drops the lock
    return _Snapshot(data, head, problem)


def verify_log(data_dir: str | os.PathLike) -> Verification:
    """Verify ``data_dir/audit.jsonl`` against its chain and ``audit.head``."""
    d = Path(data_dir)
    log_path = d / LOG_NAME
    if not log_path.exists():
        raise FileNotFoundError(f"{log_path} does not exist")
    snap = _snapshot(log_path, d / HEAD_NAME)
    return verify_bytes(snap.data, snap.head, snap.head_problem)


def read_entries(data_dir: str | os.PathLike) -> Iterator[tuple[int, dict | None, bytes]]:
    """(line number, parsed entry or None, raw bytes) for every line, complete or not."""
    snap = _snapshot(Path(data_dir) / LOG_NAME, Path(data_dir) / HEAD_NAME)
    for i, line in enumerate(snap.data.split(b"\n"), 1):
        if not line:
            continue
        try:
            entry = json_loads(line)
        except ValueError:
            entry = None
        yield i, entry if isinstance(entry, dict) else None, line


_FIRST = ("seq", "time", "event", "session")


def format_entry(entry: dict) -> str:
    """One readable line; every string JSON-escaped (no terminal control characters reach the screen)."""
    head = f"{entry.get('seq', '?'):>6} {entry.get('time', '?')} {entry.get('event', '?'):<20}"
    if "session" in entry:
        head += f" session={json.dumps(entry['session'])}"
    rest = " ".join(
        f"{k}={json.dumps(v, ensure_ascii=True, sort_keys=True)}"
        for k, v in sorted(entry.items())
        if k not in _FIRST and k not in ("prev", "party")
    )
    return f"{head} {rest}".rstrip()


def utc_now(timespec: str = "milliseconds") -> str:
    """The UTC time as the audit trail writes it (ISO 8601, ``Z``)."""
    return _dt.datetime.now(_dt.UTC).isoformat(timespec=timespec).replace("+00:00", "Z")


class AuditLog:
    """The append side, used by one party process (thread-safe)."""

    def __init__(self, data_dir: Path, party: str) -> None:
        self.dir = Path(data_dir)
        self.path = self.dir / LOG_NAME
        self.head_path = self.dir / HEAD_NAME
        self.party = party
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._seq = 0
        self._prev = GENESIS
        self._first: str | None = None  # SHA-256 of line 1: the log's identity (witnessed heads)
        self._broken: str | None = None

    def open(self, used_before: str | None = None) -> dict | None:
        """Verify the log, repair a torn tail, and get ready to append.

        Returns the ``torn-tail-repaired`` entry if there was one to repair; raises
        :class:`AuditError` if the log is damaged otherwise, or missing although the data
        directory was used before (``used_before`` says how it shows; ``audit.head`` left
        behind shows it too): a lost log is not restarted silently, its operator
        starts a new one explicitly (:func:`start_new_log`, ``smcdp audit new``).
        """
        self.dir.mkdir(parents=True, exist_ok=True)
        if not self.path.exists():
            why = f"{HEAD_NAME} is still there" if self.head_path.exists() else used_before
            if why:
                raise AuditError(
                    f"audit log {self.path} is missing although this party kept one before ({why}). It is not "
                    f"restarted silently: find it, or start a new one explicitly with 'smcdp audit new --config "
                    f"FILE --reason TEXT' (the new log's first line records that, and the old head)"
                )
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            data = self.path.read_bytes()
            head, head_problem = _read_head(self.head_path)
            v = verify_bytes(data, head, head_problem)
            if not v.ok and not v.torn:
                raise AuditError(
                    f"audit log {self.path} fails verification at line {v.bad_line}: {v.problem}. "
                    f"It is evidence: keep it, move {LOG_NAME} and {HEAD_NAME} aside, start a new log "
                    "('smcdp audit new --config FILE --reason TEXT') and start the party again"
                )
            fragment = b""
            if v.torn:
                fragment = data[data.rfind(b"\n") + 1 :]
                saved = self.dir / f"{LOG_NAME}.torn-{v.lines + 1}"
                k = 1
                while saved.exists():
                    k += 1
                    saved = self.dir / f"{LOG_NAME}.torn-{v.lines + 1}.{k}"
                atomic_write(saved, fragment, 0o600)
                os.truncate(self.path, len(data) - len(fragment))
                os.fsync(fd)
            self._fd, fd = fd, -1
            self._seq, self._prev = v.lines, v.head
            self._first = _sha(data.split(b"\n", 1)[0]) if v.lines else None
            self._write_head()  # completes a head left one line behind by a crash
        finally:
            if fd >= 0:
                os.close(fd)
            elif self._fd is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        if fragment:
            return self.append(
                "torn-tail-repaired", line=v.lines + 1, bytes=len(fragment), sha256=_sha(fragment), saved_as=saved.name
            )
        return None

    def _write_head(self) -> None:
        atomic_write(self.head_path, encode({"lines": self._seq, "sha256": self._prev}) + b"\n", 0o600)

    def append(self, event: str, **fields: Any) -> dict:
        """Write one event durably; returns the entry.  Fields must be JSON-serialisable
        (others are stored as their repr); large ones as their length and SHA-256."""
        with self._lock:
            if self._fd is None:
                raise AuditError(f"audit log {self.path} is not open")
            if self._broken:
                raise AuditError(
                    f"audit log {self.path} cannot be appended to since a write failed "
                    f"({self._broken}); restart the party to repair it"
                )
            entry = {k: _bounded(v) for k, v in fields.items() if v is not None}
            entry.update(seq=self._seq + 1, prev=self._prev, time=utc_now(), party=self.party, event=event)
            line = encode(entry)
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                buf = line + b"\n"
                try:
                    while buf:
                        buf = buf[os.write(self._fd, buf) :]
                    os.fsync(self._fd)
                except OSError as exc:
                    self._broken = str(exc)
                    raise AuditError(f"cannot append to audit log {self.path}: {exc}") from None
                self._seq += 1
                self._prev = _sha(line)
                if self._seq == 1:
                    self._first = self._prev
                self._write_head()
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            return entry

    def state(self) -> tuple[str, int, str] | None:
        """(log id = SHA-256 of line 1, lines, SHA-256 of the last line) as appended so far."""
        head = self.head()
        return None if head is None else head[:3]

    def head(self) -> tuple[str, int, str, str] | None:
        """:meth:`state` and the UTC time it was read (to the microsecond), taken under the log's lock:
        heads read one after the other are ordered by that time as by their lengths (a witness relies on it)."""
        with self._lock:
            if self._fd is None or self._first is None:
                return None
            return self._first, self._seq, self._prev, utc_now("microseconds")

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def start_new_log(data_dir: str | os.PathLike, party: str, reason: str, by: str) -> dict:
    """Start a new audit log where there is none, on purpose (``smcdp audit new``).

    Refuses when ``audit.jsonl`` exists.  The new log's first line, event ``log-started``,
    records the reason, who ran it, and the head the lost log left behind (``audit.head``,
    if any -- its line count and last hash, which witnesses can confirm).  Returns that line.
    """
    d = Path(data_dir)
    if (d / LOG_NAME).exists():
        raise AuditError(f"{d / LOG_NAME} exists: a new log is started only where the log is missing")
    old, problem = _read_head(d / HEAD_NAME)
    if old is not None or problem is not None:
        os.replace(d / HEAD_NAME, d / f"{HEAD_NAME}.before-{utc_now().replace(':', '')}")
    log = AuditLog(d, party)
    log.open()
    try:
        return log.append("log-started", reason=reason, by=by, previous_head=old, previous_head_problem=problem)
    finally:
        log.close()


# ---------------------------------------------------------------------- refusals per peer
#: refusals of one peer recorded in full per window; beyond that they are counted
REFUSALS_IN_FULL = 10
REFUSAL_WINDOW_SECONDS = 60.0
#: session ids a summary names (the first and the last are always among them)
SUMMARY_SESSIONS = 5


@dataclass
class _Window:
    started: float  # time.monotonic()
    started_at: str  # wall clock, for the record
    count: int = 0
    rules: Counter = field(default_factory=Counter)
    sessions: list = field(default_factory=list)
    last_session: str | None = None


class RefusalThrottle:
    """How many of one peer's refusals the audit trail records line by line.

    500 refused proposals from one peer used to append 1,000 fsync-ed lines (476 KB).
    Now, per peer and window of ``window`` seconds, the first ``in_full`` refusals are
    recorded as before (``proposal`` and ``refused``); the others are only counted, by
    rule, and the count is appended as one ``refusals-summarised`` event when the
    window ends (:meth:`due`, from the governor's periodic loop, or the peer's next
    refusal) or the party stops (:meth:`flush`).  The chain stays one chain: a summary
    is an ordinary line.  Peers are names from verified certificates (bounded by
    ``[peers]``), so the state is bounded too.
    """

    def __init__(self, in_full: int = REFUSALS_IN_FULL, window: float = REFUSAL_WINDOW_SECONDS) -> None:
        self.in_full = in_full
        self.window = window
        self._lock = threading.Lock()
        self._peers: dict[str, _Window] = {}

    def refused(self, peer: str, rule: str, session: str | None, now: float | None = None) -> tuple[list[dict], bool]:
        """Count one refusal of ``peer``: (summaries of windows that ended, to append first;
        whether to record this refusal in full)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            out = self._close(now, [peer])
            w = self._peers.get(peer)
            if w is None:
                w = self._peers[peer] = _Window(now, utc_now())
            w.count += 1
            if w.count <= self.in_full:
                return out, True
            w.rules[rule] += 1
            if session is not None:
                if len(w.sessions) < SUMMARY_SESSIONS - 1:
                    w.sessions.append(session)
                w.last_session = session
            return out, False

    def due(self, now: float | None = None) -> list[dict]:
        """Summaries of every window that has ended."""
        now = time.monotonic() if now is None else now
        with self._lock:
            return self._close(now, list(self._peers))

    def flush(self) -> list[dict]:
        """Summaries of every window, ended or not (the party stops)."""
        with self._lock:
            return self._close(float("inf"), list(self._peers))

    def _close(self, now: float, peers: list[str]) -> list[dict]:
        out = []
        for peer in peers:
            w = self._peers.get(peer)
            if w is None or now - w.started < self.window:
                continue
            del self._peers[peer]
            counted = sum(w.rules.values())
            if counted:
                sessions = w.sessions + ([w.last_session] if w.last_session not in w.sessions else [])
                out.append(
                    {
                        "peer": peer,
                        "refused": counted,
                        "recorded_in_full": w.count - counted,
                        "rules": dict(sorted(w.rules.items())),
                        "since": w.started_at,
                        "until": utc_now(),
                        "sessions": [x for x in sessions if x is not None],
                    }
                )
        return out
