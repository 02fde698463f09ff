"""What authenticates a party's checkpoints and journals: one key in its data directory.

``data_dir/sessions/durability.key`` holds 32 bytes from the OS CSPRNG, mode 0600,
created the first time the party checkpoints a session.  Each checkpoint and each
journal record carries a MAC (HMAC-SHA256, 128 bits) under a key derived from it and
the session's id, so:

* a flipped bit, a truncated record or a record spliced in from another session's
  journal does not verify, and the scan says which file and which record
  (docs/fault-tolerance.md, "How a damaged file is told from a torn tail");
* a record is never accepted as something it is not: its kind, sequence number,
  lengths, role, tag and type are all under the MAC.

The MAC is not a secret-keeping device: whoever can read the data directory can read
the key.  It makes damage (a failing disk, a stray write, a restore mixing files from
two backups) certain to be noticed, where a plain checksum would let a damaged length
field or a record of another session through.
"""

from __future__ import annotations

import hmac
import os
from pathlib import Path

from smcdp._files import atomic_write
from smcdp.errors import DataLoss, SmcdpError, resource_failure

KEY_FILE = "durability.key"
KEY_BYTES = 32
#: bytes of every MAC (HMAC-SHA256 truncated; 128 bits)
MAC_BYTES = 16


def durability_key(sessions_dir: Path, party: str) -> bytes:
    """This party's durability key (created, 0600, if it has none yet)."""
    path = Path(sessions_dir) / KEY_FILE
    try:
        key = path.read_bytes()
    except FileNotFoundError:
        key = _create(path)
    if len(key) != KEY_BYTES:
        raise DataLoss(
            f"the durability key {path} of party {party} is damaged ({len(key)} bytes, not "
            f"{KEY_BYTES}): no checkpoint of this party can be verified; move it away to start "
            "afresh (every checkpointed session is then reported as damaged)",
            party,
        )
    return key


def _create(path: Path) -> bytes:
    """Write a fresh key atomically: another thread or process creating it at once wins or loses whole."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = os.urandom(KEY_BYTES)
    try:
        atomic_write(path, key, 0o600, replace=False)
    except FileExistsError:
        return path.read_bytes()
    return key


class Mac:
    """HMAC-SHA256 (first :data:`MAC_BYTES` bytes) under a key bound to one purpose and session."""

    __slots__ = ("_key",)

    def __init__(self, key: bytes, purpose: str, session_id: str) -> None:
        self._key = hmac.digest(key, f"smcdp/durability/v2/{purpose}/{session_id}".encode(), "sha256")

    def tag(self, *parts: bytes) -> bytes:
        # one call into OpenSSL (the HMAC object and its updates cost twice as much per record)
        return hmac.digest(self._key, parts[0] if len(parts) == 1 else b"".join(parts), "sha256")[:MAC_BYTES]

    def verify(self, tag: bytes, *parts: bytes) -> bool:
        return hmac.compare_digest(tag, self.tag(*parts))


def local_failure(exc: OSError, party: str, what: str) -> SmcdpError:
    """A failed read or write of this party's durable state: NoSpace ("no space left at PARTY: WHAT")
    when a local resource ran out, else DataLoss naming the party."""
    return resource_failure(exc, party, what) or DataLoss(f"party {party} {what}: {exc}", party)
