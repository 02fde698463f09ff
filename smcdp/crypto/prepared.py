"""Paillier keys made before the session that will use them: a key owner's offline phase, done while the
party is idle.

A party that will own a session's key -- keyword recognition's Alice -- derives that key from the
session's randomness root (:mod:`smcdp.primitives.rng`).  When the root of its *next* session is known
ahead (the runtime draws it before the session exists: :mod:`smcdp.runtime.offline`), the party can make
the key, build its tables and fill a stock of obfuscators between sessions; the session then
:meth:`~KeyShelf.take`\\ s them by a label derived from the same root, instead of doing that work while its
peer waits.

What stays as it was:

* the key is exactly the one the session derives from its root; a session that finds nothing prepared
  (a replay after a crash, a seeded experiment, another key size) derives it itself;
* obfuscators come from the OS CSPRNG, are made for one key and go to one session (``take`` removes the
  entry); key material lives in the party's memory only, as during a session;
* the shelf holds at most ``capacity`` entries (the party's: 2, the next session's and one that a session
  of another kind left): preparing another discards the oldest, and
  :meth:`~KeyShelf.clear` (the party stopping) discards everything.

The key and its tables are made at normal priority (a session may be about to wait for them); the
obfuscators then at the lowest (nice 19): they take only the cores that running sessions leave idle,
and a ``take`` stops them.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from smcdp.crypto.obfuscation import ObfuscatorPool
from smcdp.crypto.paillier import PrivateKey
from smcdp.crypto.threads import lower_priority

log = logging.getLogger("smcdp.crypto")

#: obfuscators made per step of the background fill (a take waits for at most one step to end)
STEP = 64
#: the most obfuscators one prepared key holds (512 bytes each at 2048 bits: 16 MB)
MAX_OBFUSCATORS = 32768


@dataclass
class Prepared:
    """What a session takes off the shelf: its key (tables built) and a stock of obfuscators for it."""

    key: PrivateKey
    obfuscators: ObfuscatorPool
    stock: int  # obfuscators made ahead when the session took them


class _Job:
    def __init__(self, label: bytes, make_key: Callable[[], PrivateKey], uses: int, count: int) -> None:
        self.label, self.make_key = label, make_key
        self.uses, self.count = max(1, int(uses)), max(0, min(int(count), MAX_OBFUSCATORS))
        self.stop = threading.Event()  # stop filling the stock (taken, or dropped)
        self.dropped = threading.Event()  # nobody will take it: stop before the tables too
        self.key_ready = threading.Event()
        self.key: PrivateKey | None = None
        self.pool: ObfuscatorPool | None = None
        self.thread = threading.Thread(target=self._run, name="smcdp-prepare", daemon=True)

    def _run(self) -> None:
        try:
            key = self.make_key()
            if self.dropped.is_set():  # discarded or replaced while the key was made: no tables for nobody
                return
            key.prepare(self.uses)  # tables, both primes on two threads
            self.pool = ObfuscatorPool.for_private_key(key, capacity=max(1, self.count), background=False)
            self.key = key
        except Exception:  # noqa: BLE001 - nothing prepared: the session derives its key itself
            log.exception("preparing a session key failed; its session will make it itself")
            return
        finally:
            self.key_ready.set()
        lower_priority()  # the stock only uses idle cores
        self.pool.fill(self.count, step=STEP, stop=self.stop)


class KeyShelf:
    """Keys prepared for sessions to come, by label (see the module docstring)."""

    def __init__(self, capacity: int = 1) -> None:
        self.capacity = max(1, int(capacity))
        self._jobs: collections.OrderedDict[bytes, _Job] = collections.OrderedDict()
        self._lock = threading.Lock()

    def prepare(self, label: bytes, make_key: Callable[[], PrivateKey], *, uses: int, obfuscators: int) -> None:
        """Start making ``make_key()`` (tables sized for ``uses`` encryptions) and ``obfuscators`` of its
        obfuscators in the background, under ``label``; an entry already under ``label`` is kept."""
        job = _Job(bytes(label), make_key, uses, obfuscators)
        with self._lock:
            if job.label in self._jobs:
                return
            self._jobs[job.label] = job
            while len(self._jobs) > self.capacity:
                _, old = self._jobs.popitem(last=False)
                old.dropped.set()
                old.stop.set()
        job.thread.start()

    def take(self, label: bytes) -> Prepared | None:
        """The key prepared under ``label`` (waiting for the key and its tables if they are still being
        made) with the obfuscators made so far; None if nothing was prepared under it."""
        with self._lock:
            job = self._jobs.pop(bytes(label), None)
        if job is None:
            return None
        job.stop.set()
        job.key_ready.wait()
        if job.key is None or job.pool is None:
            return None
        return Prepared(job.key, job.pool, job.pool.stats()["stock"])

    def discard(self, label: bytes) -> None:
        """Stop and drop what is being prepared under ``label``, without waiting for it (a session took its
        root for a key of the other kind: nothing will take it).  A job still making its key stops after it."""
        with self._lock:
            job = self._jobs.pop(bytes(label), None)
        if job is not None:
            job.dropped.set()
            job.stop.set()

    def clear(self) -> None:
        """Discard everything prepared (the party is stopping)."""
        with self._lock:
            jobs, self._jobs = list(self._jobs.values()), collections.OrderedDict()
        for job in jobs:
            job.dropped.set()
            job.stop.set()

    def __len__(self) -> int:
        with self._lock:
            return len(self._jobs)


#: the party process's shelf
SHELF = KeyShelf(capacity=2)
