"""A session's message journal at one party (``journal.log`` in its checkpoint directory).

Every message received is stored durably *before* the sender is told it was
delivered; every message sent is written *before* it first leaves (a killed
process keeps it) and made durable by the group commit while it travels; and
acknowledgements are recorded after them.  A role replayed after a crash
(:mod:`smcdp.runtime.durability.checkpoint`, docs/fault-tolerance.md) reads its
received messages from here and looks up what it sends.

Format (version 2).  A 16-byte file header, then records::

    prefix  magic "\\xd7J" | kind | 0 | sequence number (8) | header length (2) | data length (8)
    MAC     over the prefix (16 bytes)
    header  JSON: role, tag, type name and the data's SHA-256
    MAC     over the prefix and the header (16 bytes)
    data

The MACs are HMAC-SHA256 under the party's durability key bound to the session
(:mod:`smcdp.runtime.durability.integrity`); sequence numbers run 0, 1, 2, … so a
record missing, repeated or moved is noticed.  The scan is strict: every record
verifies or the journal is *damaged*, and :class:`JournalDamaged` names the file,
the party and each damaged record (its kind, role and tag where its header still
verifies).  A damaged record is never dropped silently and never read as another.

**Torn tail.**  One thing is not damage: the last record cut short by a crash.
Records are appended in order and a received message is acknowledged only once a
sync covered it, so a crash can only cut the record being written, after which
nothing follows.  The scan calls the end of the file a torn tail --
dropped, with a log line -- exactly when, after the last intact record,

* fewer bytes than a prefix and its MAC remain, and those that remain agree with
  the start of the next record (magic, kind, sequence number), or
* the prefix verifies (so its lengths are authentic) but the record runs past the
  end of the file, or
* only zero bytes remain (a file system that extended the file before its data
  reached the disk, after a power cut).

Everything else -- a MAC that fails where the bytes are all there, a sequence
number out of order, bytes after a short record -- is damage.

**The head.**  What the scan alone cannot see is a file cut short *at a record
boundary* by something other than a crash (a truncation, a restore from an older
copy, a deleted file recreated empty): that looks like an earlier crash, although the
records it lost had been made durable -- and acknowledged to the peers.  So a journal
opened with ``head=True`` (every checkpoint since format 3) keeps ``journal.log.head``
beside it: the number of records and bytes the last ``fsync`` covered, under the
session's MAC, rewritten after every sync.  A crash can only cut what follows the
head; a journal shorter than its head, a head without its journal, a journal with
records but no head, or a head that does not verify is damage.  (The head is written
after the sync it describes and not synced itself: after a power cut it may be older
than the journal, never newer, so it never calls a real torn tail damage.  Only its
first content is synced, when it is opened, so that it is never found empty.)
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import logging
import os
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii as _quote  # what json.dumps quotes with
from pathlib import Path

from smcdp._files import fsync_dir
from smcdp.errors import DataLoss, InvalidMessage, SmcdpError
from smcdp.runtime.durability.integrity import MAC_BYTES, Mac, local_failure

log = logging.getLogger("smcdp.durability")

IN, OUT, DELIVERED = 1, 2, 3
KIND_NAMES = {IN: "a message received", OUT: "a message sent", DELIVERED: "an acknowledgement"}
FILE_MAGIC = b"smcdp journal 2\n"
HEAD_MAGIC = b"smcdpJH1"
#: magic, records, bytes (the length of the journal file the last sync covered)
HEAD = struct.Struct(">8sQQ")
HEAD_SUFFIX = ".head"
REC_MAGIC = b"\xd7J"
#: magic, kind, reserved, sequence number, header length, data length
PREFIX = struct.Struct(">2sBBQHQ")
#: largest record header (role, tag, type name and digest as JSON)
MAX_HEADER = 4096
_START = PREFIX.size + MAC_BYTES
#: the MAC of an unauthenticated journal (tests, tools): a checksum with a public key
_PUBLIC_KEY = bytes(32)


@dataclass(frozen=True)
class Damage:
    """One damaged stretch of a journal: where, and what is known of the record(s) there."""

    offset: int
    what: str
    kind: int | None = None
    role: str | None = None
    tag: str | None = None
    type_name: str | None = None
    digest: str | None = None  #: SHA-256 (hex) of the damaged record's data, if its header verified


class JournalDamaged(DataLoss):
    """A journal holds records that do not verify (see the module docstring)."""

    def __init__(self, message: str, origin: str | None, damage: list[Damage]) -> None:
        super().__init__(message, origin)
        self.damage = damage


@dataclass(frozen=True)
class _Record:
    kind: int
    role: str
    tag: str
    type_name: str
    digest: str
    offset: int  # of the data
    length: int


@dataclass
class Scan:
    """What a strict scan found: the intact records, the damage, and where the file really ends."""

    records: list[_Record]
    damage: list[Damage]
    end: int  # the file's length without a torn tail
    torn: int  # bytes of a torn tail (0 if none)
    next_seq: int


def scan(data: bytes, mac: Mac) -> Scan:
    """Read every record of a journal's bytes strictly (pure: no I/O; fuzzed by the tests)."""
    records: list[_Record] = []
    damage: list[Damage] = []
    n = len(data)
    if not any(data):
        # nothing of it but zeros: a new journal cut short by a power cut before its first sync, on a file
        # system that extends a file before it writes the data (its header is synced with its first records).
        # Were records acknowledged, the head says so, and the journal shorter than its head is damage
        return Scan(records, damage, 0, n, 0)
    if n < len(FILE_MAGIC):
        if FILE_MAGIC.startswith(data):
            return Scan(records, damage, 0, n, 0)  # cut short while being created
        return Scan(records, [Damage(0, "the file header is damaged (the file is shorter than a header)")], n, 0, 0)
    if data[: len(FILE_MAGIC)] != FILE_MAGIC:
        damage.append(Damage(0, "the file header is damaged (not a version-2 smcdp journal)"))
    pos, seq = len(FILE_MAGIC), 0
    while pos < n:
        rest = n - pos
        if rest < _START:
            if _consistent_start(data[pos:], seq) or not any(data[pos:]):
                return Scan(records, damage, pos, rest, seq)
            damage.append(
                Damage(
                    pos, f"record {seq}: its first {rest} bytes, at the end of the file, are not the start of a record"
                )
            )
            return Scan(records, damage, n, 0, seq)
        prefix = data[pos : pos + PREFIX.size]
        if not mac.verify(data[pos + PREFIX.size : pos + _START], b"p", prefix):
            if not any(data[pos:]):
                return Scan(records, damage, pos, rest, seq)  # zero-filled tail
            nxt = _resync(data, pos + 1, seq, mac)
            if nxt is None:
                damage.append(Damage(pos, f"record {seq} and everything after it (bytes {pos}..{n}) do not verify"))
                return Scan(records, damage, n, 0, seq)
            npos, nseq = nxt
            lost = f"records {seq}..{nseq - 1}" if nseq - 1 > seq else f"record {seq}"
            damage.append(Damage(pos, f"{lost} (bytes {pos}..{npos}) do not verify"))
            pos, seq = npos, nseq
            continue
        magic, kind, _, rseq, hlen, dlen = PREFIX.unpack(prefix)
        if magic != REC_MAGIC or kind not in KIND_NAMES or hlen > MAX_HEADER:
            damage.append(Damage(pos, f"record {seq} has an impossible prefix under a valid MAC"))
            return Scan(records, damage, n, 0, seq)
        end = pos + _START + hlen + MAC_BYTES + dlen
        if end > n:
            if rseq == seq:
                return Scan(records, damage, pos, rest, seq)  # authentic lengths past the end: torn
            damage.append(Damage(pos, f"record {rseq}, out of place, runs past the end of the file"))
            return Scan(records, damage, n, 0, seq)
        if rseq < seq:  # authentic, but a copy of an earlier record, or moved: never read twice
            damage.append(Damage(pos, f"record {rseq} appears again where record {seq} belongs"))
            pos = end
            continue
        if rseq > seq:
            lost = f"records {seq}..{rseq - 1} are" if rseq - 1 > seq else f"record {seq} is"
            damage.append(Damage(pos, f"{lost} missing before record {rseq}"))
            seq = rseq
        hstart = pos + _START
        head_bytes = data[hstart : hstart + hlen]
        head = (
            _header(head_bytes, kind)
            if mac.verify(data[hstart + hlen : hstart + hlen + MAC_BYTES], b"h", prefix, head_bytes)
            else None
        )
        desc = f"record {seq} ({KIND_NAMES[kind]}"
        if head is None:
            damage.append(Damage(pos, f"{desc}): its header does not verify", kind))
        else:
            desc += f" {'from' if kind == IN else 'to'} role {head['r']}, tag {head['t']!r})"
            off = hstart + hlen + MAC_BYTES
            if kind != DELIVERED and hashlib.sha256(data[off:end]).hexdigest() != head["h"]:
                damage.append(
                    Damage(pos, f"{desc}: its data does not verify", kind, head["r"], head["t"], head["y"], head["h"])
                )
            else:
                records.append(_Record(kind, head["r"], head["t"], head["y"], head.get("h", ""), off, dlen))
        pos, seq = end, seq + 1
    return Scan(records, damage, n, 0, seq)


def _consistent_start(tail: bytes, seq: int) -> bool:
    """Could ``tail`` be the first bytes of record ``seq`` (a record cut short)?"""
    want = PREFIX.pack(REC_MAGIC, 1, 0, seq, 0, 0)
    if tail[:2] != want[: len(tail[:2])]:
        return False
    if len(tail) > 2 and tail[2] not in KIND_NAMES:
        return False
    if len(tail) > 3 and tail[3] != 0:
        return False
    return tail[4:12] == want[4 : 4 + len(tail[4:12])]


def _resync(data: bytes, start: int, seq: int, mac: Mac) -> tuple[int, int] | None:
    """The next authentic record after damage: (offset, its sequence number), if any."""
    pos = data.find(REC_MAGIC, start)
    while pos != -1 and pos + _START <= len(data):
        prefix = data[pos : pos + PREFIX.size]
        if mac.verify(data[pos + PREFIX.size : pos + _START], b"p", prefix):
            rseq = PREFIX.unpack(prefix)[3]
            if rseq > seq:
                return pos, rseq
        pos = data.find(REC_MAGIC, pos + 1)
    return None


def _header(raw: bytes, kind: int) -> dict | None:
    try:
        head = json.loads(raw)
    except ValueError:
        return None
    keys = ("r", "t", "y") if kind == DELIVERED else ("r", "t", "y", "h")
    if not isinstance(head, dict) or not all(isinstance(head.get(k), str) for k in keys):
        return None
    return head


def _header_bytes(role: str, tag: str, type_name: str, digest: str | None) -> bytes:
    """A record's header: the bytes ``json.dumps({"r": role, "t": tag, "y": type_name[, "h": digest]},
    separators=(",", ":"))`` gives, built directly (a third of an append's Python time went into json)."""
    hb = '{"r":' + _quote(role) + ',"t":' + _quote(tag) + ',"y":' + _quote(type_name)
    return (hb + ("}" if digest is None else ',"h":' + _quote(digest) + "}")).encode()


def describe(path: Path, owner: str, damage: list[Damage]) -> str:
    shown = "; ".join(d.what for d in damage[:5]) + (f"; and {len(damage) - 5} more" if len(damage) > 5 else "")
    return f"the journal {path} of party {owner} is damaged: {shown}"


class JournalHead:
    """``journal.log.head``: how many records, and bytes, of a journal the last sync covered (see the
    module docstring), under the session's MAC.  ``fail`` turns an OSError into the party's error."""

    def __init__(self, path: Path, mac: Mac, fail: Callable[[OSError, str], BaseException]) -> None:
        self.path = path
        self._mac = mac
        self._fail = fail
        self._fd: int | None = None

    def read(self) -> tuple[int, int] | None:
        """(records, bytes), None if there is no head, (-1, -1) if it does not verify."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._fail(exc, "cannot read its journal's head") from None
        body, tag = raw[: HEAD.size], raw[HEAD.size :]
        if len(raw) != HEAD.size + MAC_BYTES or not self._mac.verify(tag, b"H", body):
            return (-1, -1)
        magic, records, end = HEAD.unpack(body)
        return (records, end) if magic == HEAD_MAGIC else (-1, -1)

    def missing_journal(self, begun: bool = False) -> Damage | None:
        """The journal file does not exist: damage if the head says it held something (or is damaged), or if
        the head is missing too although the session ``begun`` here (both are made before it begins)."""
        head = self.read()
        if head is None and begun:
            return Damage(
                0,
                "the journal and its head are both missing although the session had begun at this party (its "
                "checkpoint says so, and both are made before a session begins): deleted, or the checkpoint "
                "directory was restored without them",
            )
        if head is None or head[0] == 0:
            return None
        said = f"{head[0]} record(s) were made durable and acknowledged" if head[0] > 0 else "it does not verify"
        return Damage(
            0,
            f"the journal is missing but its head is not (the head says {said}): deleted, or the checkpoint "
            "directory was restored without it",
        )

    def behind(self, found: Scan, begun: bool = False) -> list[Damage]:
        """Damage the head shows: records it says were made durable that the journal no longer holds.  A missing
        head is damage if the journal holds records, or if the session ``begun`` here (the head and its name were
        made durable before it began, as in :meth:`missing_journal`): the journal may have been cut or zeroed
        too, and an empty scan would otherwise pass for a journal created just before a crash."""
        head = self.read()
        if head is None:
            if found.next_seq == 0 and not begun:
                return []  # created, then the process died before its first sync
            if found.next_seq == 0:
                return [
                    Damage(
                        0,
                        f"its head {self.path.name} is missing and the journal holds no record although the "
                        "session had begun at this party (the head is made before it begins): deleted, and the "
                        "journal cut or overwritten",
                    )
                ]
            return [Damage(0, f"its head {self.path.name} is missing (the journal holds {found.next_seq} record(s))")]
        records, end = head
        if records < 0:
            return [Damage(0, f"its head {self.path.name} does not verify")]
        if found.next_seq >= records and found.end >= end:
            return []
        lost = (
            f"records {found.next_seq}..{records - 1}" if records - 1 > found.next_seq else f"record {found.next_seq}"
        )
        return [
            Damage(
                found.end,
                f"{lost} ({max(0, end - found.end)} bytes) are missing: the file ends at byte {found.end} but "
                f"its head says {records} record(s), {end} bytes, were made durable and acknowledged "
                "(truncated, or replaced by an older copy; not a torn tail)",
            )
        ]

    def start(self, journal_fd: int, created: bool, records: int, end: int) -> None:
        """Open the head of a journal just opened (``journal_fd``) that holds ``records`` records, ``end`` bytes.

        A new journal (``created``): nothing in it needs to be durable yet -- a new journal lost to a power cut
        is one "cut short while being created", and the syncer's first fsync covers its file header with its
        first records.  Only the head, (0, 0), and the names of the journal and its head must be durable before
        any record is (else a power cut could leave synced records without their head, or with an empty one:
        damage), so one fsync of the head and one of the directory.  An existing journal: what a killed process
        wrote is in the page cache, not necessarily on disk, so it is synced before the head says so (else a
        power cut after this start could make an intact journal look truncated)."""
        if created:
            self.open(0, 0)  # no record, and no byte (not even the file header), was made durable yet
            return
        try:
            os.fsync(journal_fd)
        except OSError as exc:
            raise self._fail(exc, "cannot sync its journal") from None
        self.open(records, end)

    def open(self, records: int, end: int) -> None:
        """Open (or create, 0600) the head for writing and record ``records`` / ``end`` in it."""
        try:
            self._fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600)
        except OSError as exc:
            raise self._fail(exc, "cannot open its journal's head") from None
        self.write(records, end)
        try:  # a head that had grown (damage, repaired now) is cut to its size
            os.ftruncate(self._fd, HEAD.size + MAC_BYTES)
        except OSError as exc:
            raise self._fail(exc, "cannot write its journal's head") from None
        # its content synced before its name: a head that exists is never empty after a power cut (an empty
        # head does not verify, which would call an intact journal damaged)
        try:
            os.fsync(self._fd)
        except OSError as exc:
            raise self._fail(exc, "cannot sync its journal's head") from None
        fsync_dir(self.path.parent)

    def write(self, records: int, end: int) -> None:
        """Record that ``records`` records, ``end`` bytes, are durable (after the sync that made them so)."""
        if self._fd is None:
            return
        body = HEAD.pack(HEAD_MAGIC, records, end)
        try:
            os.pwrite(self._fd, body + self._mac.tag(b"H", body), 0)
        except OSError as exc:
            raise self._fail(exc, "cannot write its journal's head") from None

    def close(self, sync: bool = True) -> None:
        """Sync (unless told not to: about to be deleted) and close the head (the journal closes)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                if sync:
                    os.fsync(fd)
                os.close(fd)
            except OSError:
                pass


class FileJournal:
    """An append-only journal file implementing :class:`smcdp.net.channel.Journal`.

    ``mac``: the session's journal MAC (:class:`~smcdp.runtime.durability.integrity.Mac`);
    without one the records carry a keyed checksum under a public key (tests, tools).
    ``owner``: the party, for messages.  ``begun``: the session began at this party (its checkpoint says
    so), so its journal was made before (a session's journal and head exist before it begins): both files
    missing is damage, not a journal to create.  A damaged journal raises :class:`JournalDamaged`
    unless ``repair`` is true: then it is rewritten with its intact records only (after
    which the peers must send what it lost again: a resumed session does), and
    :attr:`repaired` lists what was lost.

    Writes never wait for the disk: :meth:`sync` makes everything written so far durable,
    and concurrent syncs share one ``fsync`` (group commit).  A received message is
    acknowledged only once a sync covered it; a sent message is synced while it travels
    (the channel starts the sync with its first transmission); acknowledgements are never
    synced on their own (losing one means sending identical bytes once more, which the
    receiver ignores).
    """

    #: seconds the syncer lingers before an fsync for the rest of a burst (group commit); a blocking
    #: :meth:`sync` -- a thread that waits -- does not linger
    COMMIT_DELAY = 0.002

    def __init__(
        self,
        path: Path,
        mac: Mac | None = None,
        *,
        owner: str = "this party",
        repair: bool = False,
        head: bool = False,
        begun: bool = False,
    ) -> None:
        self.path = Path(path)
        self.owner = owner
        self._begun = begun
        self._mac = mac or Mac(_PUBLIC_KEY, "journal", self.path.name)
        #: ``journal.log.head`` beside the journal (see the module docstring), or None when not kept
        self.head: JournalHead | None = (
            JournalHead(self.path.with_name(self.path.name + HEAD_SUFFIX), self._mac, self._local_failure)
            if head
            else None
        )
        self._lock = threading.Lock()  # the index and appends
        self._sync_cv = threading.Condition()
        self._syncing = False  # an fsync is under way
        self._lingering = False  # the syncer gathers a burst
        self._urgent = False  # a thread waits: sync now
        self._syncer_thread: threading.Thread | None = None  # started by the first sync
        self._waiters: list[tuple[int, concurrent.futures.Future]] = []  # (offset, its future)
        self._inbound: list[tuple[str, str, str, int, int]] = []  # role, tag, type, offset, length
        self._inbound_at: dict[tuple[str, str], tuple[str, int, int]] = {}  # (from, tag) -> type, offset, length
        self._outbound: dict[tuple[str, str], tuple[str, int, int]] = {}  # (to, tag) -> type, offset, length
        self._delivered: set[tuple[str, str]] = set()
        #: (to, tag) -> (type, SHA-256 hex) of sent messages whose record a repair lost
        self.lost_outbound: dict[tuple[str, str], tuple[str, str]] = {}
        #: what a repair dropped (empty unless ``repair`` found damage)
        self.repaired: list[Damage] = []
        self._broken: BaseException | None = None
        self.bytes_written = 0
        self.records_written = 0
        self.syncs = 0
        #: wall time spent writing and syncing journal records: the cost of checkpointing
        self.seconds_writing = 0.0
        self._seq = 0
        self._end = 0
        self._fd: int | None  # the open journal file, set by _open; None once closed
        created = self._open(repair)
        self._synced = self._end
        if self.head is not None:
            assert self._fd is not None
            self.head.start(self._fd, created, self._seq, self._synced)
        elif created:
            fsync_dir(self.path.parent)  # its name (see JournalHead.start)

    # ------------------------------------------------------------------ reading
    def _open(self, repair: bool) -> bool:
        """Open the journal, or create it (True: created, nothing synced yet)."""
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        except FileExistsError:
            fd = None
        except OSError as exc:
            raise self._local_failure(exc, "cannot create its journal") from None
        if fd is not None:
            damage = self.head.missing_journal(self._begun) if self.head is not None else None
            if damage is not None:
                os.close(fd)
                os.unlink(self.path)
                if not repair:
                    raise JournalDamaged(describe(self.path, self.owner, [damage]), self.owner, [damage])
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
                self.repaired = [damage]
            self._fd = fd
            self._write_at(0, [FILE_MAGIC])
            self._end = len(FILE_MAGIC)
            return True
        try:
            data = self.path.read_bytes()
        except OSError as exc:
            raise self._local_failure(exc, "cannot read its journal") from None
        found = scan(data, self._mac)
        if self.head is not None:
            found.damage.extend(self.head.behind(found, self._begun))
        if found.damage:
            if not repair:
                raise JournalDamaged(describe(self.path, self.owner, found.damage), self.owner, found.damage)
            self._rewrite(data, found)
            return False
        self._fd = os.open(self.path, os.O_RDWR)
        if found.torn:
            log.warning(
                "journal %s: dropped a torn tail of %d byte(s) (the record being written when the "
                "process died; never acknowledged)",
                self.path,
                found.torn,
            )
            os.ftruncate(self._fd, found.end)
            os.fsync(self._fd)
        if found.end == 0:  # cut short while being created
            self._write_at(0, [FILE_MAGIC])
            found.end = len(FILE_MAGIC)
        self._index(found.records)
        self._seq, self._end = found.next_seq, found.end
        return False

    def _rewrite(self, data: bytes, found: Scan) -> None:
        """Keep the intact records only, in a new file that replaces the damaged one atomically."""
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        os.fchmod(fd, 0o600)
        self._fd = fd
        self._write_at(0, [FILE_MAGIC])
        self._end = len(FILE_MAGIC)
        kept = []
        for r in found.records:
            off = self._append(r.kind, r.role, r.tag, r.type_name, data[r.offset : r.offset + r.length])
            kept.append(_Record(r.kind, r.role, r.tag, r.type_name, r.digest, off, r.length))
        self._index(kept)
        os.fsync(fd)
        os.replace(tmp, self.path)
        fsync_dir(self.path.parent)
        self.repaired = list(found.damage)
        for d in found.damage:
            if (
                d.kind == OUT
                and d.role is not None
                and d.tag is not None
                and d.type_name is not None
                and d.digest is not None
            ):  # (role and tag come from one verified header: both or neither)
                self.lost_outbound[(d.role, d.tag)] = (d.type_name, d.digest)
        log.warning(
            "%s; repaired: kept %d intact record(s)", describe(self.path, self.owner, found.damage), len(found.records)
        )

    def _index(self, records: Iterable[_Record]) -> None:
        for r in records:
            key = (r.role, r.tag)
            if r.kind == IN:
                self._inbound.append((r.role, r.tag, r.type_name, r.offset, r.length))
                self._inbound_at[key] = (r.type_name, r.offset, r.length)
            elif r.kind == OUT:
                self._outbound[key] = (r.type_name, r.offset, r.length)
            else:
                self._delivered.add(key)

    def _read(self, off: int, length: int) -> bytes:
        assert self._fd is not None  # open until close(), after which nothing is read or written
        try:
            return os.pread(self._fd, length, off)
        except OSError as exc:
            raise self._local_failure(exc, "cannot read its journal") from None

    # ----------------------------------------------------------- Journal protocol
    def inbound(self) -> Iterable[tuple[str, str, str, bytes]]:
        with self._lock:
            items = list(self._inbound)
        for role, tag, type_name, off, length in items:
            yield role, tag, type_name, self._read(off, length)

    def inbound_sizes(self) -> list[tuple[str, str, int]]:
        """(sender role, tag, bytes) of every message received, without reading the messages
        (a resume charges them to the session's envelope before it reloads them)."""
        with self._lock:
            return [(role, tag, length) for role, tag, _type, _off, length in self._inbound]

    def record_inbound(
        self, sender_role: str, tag: str, type_name: str, data: bytes, durable: bool = True, digest: bytes | None = None
    ) -> None:
        off = self._append(IN, sender_role, tag, type_name, data, digest)
        with self._lock:
            self._inbound.append((sender_role, tag, type_name, off, len(data)))
            self._inbound_at[(sender_role, tag)] = (type_name, off, len(data))
        if durable:
            self.sync()

    def sync(self) -> None:
        """Make every record written so far durable (blocks; see :meth:`durable_future`)."""
        self.durable_future(urgent=True).result()

    def durable_future(self, urgent: bool = False) -> concurrent.futures.Future[None]:
        """A future done once every record written so far is durable.

        One syncer thread per journal serves every waiter (group commit): an ``fsync`` covers
        everything written before it began, and whoever asks meanwhile waits for the next one.
        Nobody blocks a thread to wait -- an event loop awaits the future -- so a burst of
        messages never starves a thread pool of workers.  The thread lives as long as the journal
        is open: starting one per burst cost the event loop a thread start (and a GIL hand-over)
        for most messages.  The future fails with the sync's error (:class:`~smcdp.errors.NoSpace`,
        DataLoss).  ``urgent``: a thread blocks on it, so the syncer does not linger for a burst."""
        fut: concurrent.futures.Future = concurrent.futures.Future()
        with self._sync_cv:
            target = self._end
            if self._synced >= target or self._fd is None:
                fut.set_result(None)
                return fut
            self._urgent = self._urgent or urgent
            self._waiters.append((target, fut))
            if self._syncer_thread is None:
                self._syncer_thread = threading.Thread(
                    target=self._syncer, daemon=True, name=f"journal-sync-{self.path.parent.name}"
                )
                self._syncer_thread.start()
            elif urgent or not self._lingering:
                self._sync_cv.notify_all()
        return fut

    def _syncer(self) -> None:
        """Sync whenever somebody waits, until the journal is closed.

        Before each ``fsync`` it lingers :attr:`COMMIT_DELAY` seconds so that the rest of a burst joins it
        (a round's messages come and go within a millisecond or two: Trent's power-iteration rounds cost
        one fsync per message without the linger, and each one woke this thread and the event loops
        waiting on it).  Nobody's progress waits for a sync (the role reads a received message at once,
        a pipelined send does not hold the next one back): only acknowledgements come later by as much."""
        while True:
            with self._sync_cv:
                while not self._waiters and self._fd is not None:
                    self._sync_cv.wait()
                until = time.monotonic() + self.COMMIT_DELAY
                self._lingering = True  # new waiters do not cut the linger short
                while self._fd is not None and not self._urgent and time.monotonic() < until:
                    self._sync_cv.wait(until - time.monotonic())
                self._lingering = self._urgent = False
                if self._fd is None:  # closed: close() took the waiters and settles them after its fsync
                    return
                with self._lock:
                    upto, records, fd = self._end, self._seq, self._fd
                self._syncing = True
            t0 = time.perf_counter()
            error = self._broken
            if error is None:
                try:
                    os.fsync(fd)
                except OSError as exc:
                    error = self._latch(self._local_failure(exc, "cannot sync its journal"))
            if error is None:
                try:
                    if self.head is not None:
                        self.head.write(records, upto)
                except SmcdpError as exc:
                    error = exc
            with self._sync_cv:
                self._syncing = False
                if error is None:
                    self._synced = max(self._synced, upto)
                    self.syncs += 1
                    self.seconds_writing += time.perf_counter() - t0
                done = [w for w in self._waiters if error is not None or w[0] <= upto]
                self._waiters = [w for w in self._waiters if w not in done]
                self._sync_cv.notify_all()
            for _, fut in done:
                _settle(fut, error)

    def received(self, sender_role: str, tag: str) -> tuple[str, bytes] | None:
        with self._lock:
            entry = self._inbound_at.get((sender_role, tag))
        if entry is None:
            return None
        type_name, off, length = entry
        return type_name, self._read(off, length)

    def outbound(self, to_role: str, tag: str) -> tuple[str, bytes] | None:
        with self._lock:
            entry = self._outbound.get((to_role, tag))
        if entry is None:
            return None
        type_name, off, length = entry
        return type_name, self._read(off, length)

    def record_outbound(self, to_role: str, tag: str, type_name: str, data: bytes, durable: bool = True) -> None:
        off = self._append(OUT, to_role, tag, type_name, data)
        with self._lock:
            self._outbound[(to_role, tag)] = (type_name, off, len(data))
        if durable:
            self.sync()

    def mark_delivered(self, to_role: str, tag: str) -> None:
        with self._lock:
            if (to_role, tag) in self._delivered:
                return
            self._delivered.add((to_role, tag))
        self._append(DELIVERED, to_role, tag, "", b"")

    def delivered(self, to_role: str, tag: str) -> bool:
        with self._lock:
            return (to_role, tag) in self._delivered

    # ------------------------------------------------------------------ writing
    def _append(self, kind: int, role: str, tag: str, type_name: str, data: bytes, digest: bytes | None = None) -> int:
        """Write one record at the end; returns the offset of its data (``digest``: its SHA-256, if the caller
        has it).  A failed write leaves nothing."""
        if kind != DELIVERED and digest is None:
            digest = hashlib.sha256(data).digest()
        hb = _header_bytes(role, tag, type_name, None if digest is None else digest.hex())
        if len(hb) > MAX_HEADER:
            raise InvalidMessage("journal record header too long (tag or type name)")
        t0 = time.perf_counter()
        with self._lock:
            if self._broken is not None:
                raise self._broken
            prefix = PREFIX.pack(REC_MAGIC, kind, 0, self._seq, len(hb), len(data))
            rec = prefix + self._mac.tag(b"p", prefix) + hb + self._mac.tag(b"h", prefix, hb)
            start = self._end
            self._write_at(start, [rec, data])
            self._end = start + len(rec) + len(data)
            self._seq += 1
            self.bytes_written += len(rec) + len(data)
            self.records_written += 1
            self.seconds_writing += time.perf_counter() - t0
        return start + len(rec)

    def _latch(self, error: BaseException) -> BaseException:
        """A failed ``fsync`` breaks the journal for good: the kernel may report a lost write-back once and let
        the next ``fsync`` succeed, and a head written after that would vouch for records that never reached
        the disk.  Nothing more is written or synced here (the session fails, resumably where the error
        allows; a resume opens the journal anew and reads what is really there)."""
        with self._lock:
            if self._broken is None:
                self._broken = error
            return self._broken

    def _write_at(self, offset: int, parts: list[bytes]) -> None:
        total = sum(len(p) for p in parts)
        assert self._fd is not None  # open until close(), after which nothing is read or written
        try:
            done = os.pwritev(self._fd, parts, offset)
            if done != total:
                raise OSError(28, f"short write ({done} of {total} bytes)")
        except OSError as exc:
            err = self._local_failure(exc, "cannot write its journal")
            try:  # leave no partial record behind: the next one follows the last good one
                os.ftruncate(self._fd, offset)
            except OSError:
                self._broken = err  # the file's end is unknown: nothing more may be written
            raise err from None

    def _local_failure(self, exc: OSError, what: str) -> BaseException:
        return local_failure(exc, self.owner, f"{what} ({self.path})")

    def stats(self) -> dict:
        return {
            "journal_bytes": self.bytes_written,
            "journal_records": self.records_written,
            "journal_syncs": self.syncs,
            "journal_seconds": round(self.seconds_writing, 6),
            "received": len(self._inbound),
            "sent": len(self._outbound),
            "acknowledged": len(self._delivered),
        }

    def close(self, discard: bool = False) -> None:
        """Sync what is written (a message accepted but not yet acknowledged is durable all the same)
        and close; a later :meth:`sync` returns at once.  ``discard``: the journal is about to be deleted
        (its session ended for good), so nothing is synced -- an fsync of a file unlinked a moment later
        bought nothing, and it held up the end of every session at every party."""
        with self._sync_cv:
            while self._syncing:  # an fsync of this fd is under way
                self._sync_cv.wait(1.0)
            fd, self._fd = getattr(self, "_fd", None), None
            waiting, self._waiters = self._waiters, []
            self._sync_cv.notify_all()  # the syncer thread ends
        error: BaseException | None = None
        if fd is not None and discard:
            try:
                os.close(fd)
            except OSError:
                pass
        elif fd is not None:
            if self._broken is not None:
                error = self._broken  # no sync may vouch for what an earlier, failed one may have lost
            else:
                try:
                    os.fsync(fd)
                    self._synced = self._end
                    if self.head is not None:
                        self.head.write(self._seq, self._end)
                except OSError as exc:
                    error = self._local_failure(exc, "cannot sync its journal")
                except SmcdpError as exc:
                    error = exc
            try:
                os.close(fd)
            except OSError:
                pass
        if self.head is not None:
            self.head.close(sync=not discard)
        # what they waited for is durable now (or failed; or, discarded, the session ended here for good and
        # nothing of it is kept -- before, the same waiters were told after an fsync of a file deleted next)
        for _, fut in waiting:
            _settle(fut, error)


def _settle(fut: concurrent.futures.Future, error: BaseException | None) -> None:
    """Complete a sync waiter's future -- unless its waiter gave up and cancelled it (a Stream call that
    ended with Acks pending).  Setting a cancelled future raises InvalidStateError, and that killed the
    syncer thread: every later sync of the journal then waited for ever (a session hung after a peer was
    killed mid-stream)."""
    try:
        if error is None:
            fut.set_result(None)
        else:
            fut.set_exception(error)
    except concurrent.futures.InvalidStateError:
        pass  # cancelled by its waiter: nobody is listening
