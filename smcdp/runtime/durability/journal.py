"""A session's message journal at one party (``journal.log`` in its checkpoint directory).

Every message received is stored durably *before* the sender is told it was
delivered, every message sent is stored durably *before* the first attempt to
send it, and acknowledgements are recorded after them.  A role replayed after
a crash (:mod:`smcdp.runtime.durability.checkpoint`, docs/fault-tolerance.md)
reads its received messages from here and looks up what it sends.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import threading
import time
from pathlib import Path
from typing import Iterable

from smcdp.errors import InvalidMessage

_IN, _OUT, _DELIVERED = 1, 2, 3
#: record header: kind (1 byte), header length (4), data length (8)
_HEAD = struct.Struct(">BIQ")
#: largest journal header (role, tag, type name and digest as JSON)
_MAX_HEADER = 4096


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

    def inbound_sizes(self) -> list[tuple[str, str, int]]:
        """(sender role, tag, bytes) of every message received, without reading the messages
        (a resume charges them to the session's envelope before it reloads them; issue 24)."""
        with self._lock:
            return [(role, tag, length) for role, tag, _type, _off, length in self._inbound]

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
