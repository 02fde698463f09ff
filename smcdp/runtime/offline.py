"""The party's offline phase for its next session, done while it is idle (issue 27).

A role's randomness root (:class:`~smcdp.primitives.rng.Randomness`) is 32 bytes from the OS CSPRNG that
the party draws for each session it joins without a seed, and keeps in that session's checkpoint.
:class:`NextRoot` draws the root of the *next* such session ahead of time and lets every protocol
plug-in start the work a role would do first with it (:meth:`ProtocolPlugin.prepare_next
<smcdp.plugins.base.ProtocolPlugin.prepare_next>`: keyword's Alice makes her key pair, its tables and
obfuscators).  When a session comes, it gets that root -- the same secret it would have drawn, only
drawn earlier and never used for anything else -- and finds its offline work done.  A session of
another kind simply uses the root; what was prepared for it is dropped when the next root is prepared.

Nothing about what is stored or sent changes: the root goes to the checkpoint (0600) when a session
takes it, as before; prepared key material stays in the party's memory; a seeded session (experiments)
never takes the drawn root.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

from smcdp.primitives.rng import Randomness

log = logging.getLogger("smcdp.party")


#: how often a waiting preparation looks again whether the party is idle (it is also woken when a session ends)
IDLE_POLL_SECONDS = 0.5


class NextRoot:
    """The root of the party's next unseeded session, with ``prepare(root)`` run for it once the party is
    idle -- after the session that took the previous root has ended (it may teach the preparation what to
    make: keyword's key size) and ``busy()`` is false (the work then takes no core a session wants) -- or,
    at the latest, when a session takes the root before that (back-to-back sessions: the session then
    waits for what it would have made itself anyway, and nothing is made twice)."""

    def __init__(self, prepare: Callable[[Randomness], None], busy: Callable[[], bool] = lambda: False) -> None:
        self._prepare = prepare
        self._busy = busy
        self._cond = threading.Condition()
        self._root: Randomness | None = None
        self._started = False
        self._closed = False
        self._ends = 0                      # sessions ended so far (poke)

    def start(self, prepare_first: bool = True) -> None:
        """Draw the first root (the party has just started); ``prepare_first=False``: prepare for it only if
        a session takes it (nothing is known yet about what to make)."""
        with self._cond:
            if self._root is None:
                self._next(after_ends=0 if prepare_first else None)

    def take(self) -> Randomness:
        """The root for the session starting now (prepared for, or being prepared); the next one is drawn."""
        with self._cond:
            if self._root is None:
                self._next(after_ends=0)
            root, started = self._root, self._started
            self._next(after_ends=self._ends + 1)      # once the session taking this root has ended
        if not started:
            self._run(root)
        return root

    def poke(self) -> None:
        """A session ended: a waiting preparation looks again whether the party is idle."""
        with self._cond:
            self._ends += 1
            self._cond.notify_all()

    def close(self) -> None:
        """Prepare nothing more (the party is stopping)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _next(self, after_ends: int | None) -> None:
        """A new root, prepared for after ``after_ends`` sessions have ended and the party is idle (None: only
        by the session that takes it)."""
        self._root, self._started = Randomness.fresh(), False
        if after_ends is not None:
            threading.Thread(target=self._wait_idle, args=(self._root, after_ends), name="smcdp-next-root",
                             daemon=True).start()

    def _wait_idle(self, root: Randomness, after_ends: int) -> None:
        with self._cond:
            while not self._closed and self._root is root and not self._started and \
                    (self._ends < after_ends or self._busy()):
                self._cond.wait(IDLE_POLL_SECONDS)
            if self._closed or self._root is not root or self._started:
                return                      # stopping, or a session took the root and prepared it itself
            self._started = True
        self._run(root)

    def _run(self, root: Randomness) -> None:
        try:
            self._prepare(root)
        except Exception:   # noqa: BLE001 - the session does the work itself; never its failure
            log.exception("preparing the next session's offline work failed")
