"""The party's offline phase for its next session, done while it is idle.

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
from collections.abc import Callable

from smcdp.primitives.rng import Randomness

log = logging.getLogger("smcdp.party")


#: how often the preparing thread looks again whether the party is idle (it is also woken when a session ends)
IDLE_POLL_SECONDS = 0.5


class NextRoot:
    """The root of the party's next unseeded session, with ``prepare(root)`` run for it on one thread of its
    own once the party is idle: after the session that took the previous root has ended (it may teach the
    preparation what to make: keyword's key size) and while ``busy()`` is false (the work then takes no
    core a session wants).  A root that a session takes before that is not prepared for at all: that
    session does its own work, as without this class -- nothing is made twice, and a burst of proposals
    costs no extra work."""

    def __init__(self, prepare: Callable[[Randomness], None], busy: Callable[[], bool] = lambda: False) -> None:
        self._prepare = prepare
        self._busy = busy
        self._cond = threading.Condition()
        self._root: Randomness | None = None
        self._after: int | None = None  # prepare the current root once this many sessions have ended
        self._ends = 0  # sessions ended so far (poke)
        self._closed = False
        self._preparing: Randomness | None = None  # the root the preparing thread is starting work for
        self._thread: threading.Thread | None = None

    def start(self, prepare_first: bool = True) -> None:
        """Draw the first root (the party has just started); ``prepare_first=False``: do not prepare for it
        (nothing is known yet about what to make)."""
        with self._cond:
            if self._root is None:
                self._root, self._after = Randomness.fresh(), (0 if prepare_first else None)
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="smcdp-next-root", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def take(self) -> Randomness:
        """The root for the session starting now, prepared for if the party was idle since the last session
        ended (by the preparing thread, or here if that thread has not got to it yet; the hooks only start
        the work, so this is quick); the next one is drawn, to be prepared for once this session has ended."""
        with self._cond:
            root = self._root if self._root is not None else Randomness.fresh()
            due = self._root is not None and self._due()
            self._root, self._after = Randomness.fresh(), self._ends + 1
            while self._preparing is root:  # the preparing thread is starting its work: let it finish
                self._cond.wait()
            self._cond.notify_all()
        if due:
            self._run(root)
        return root

    def poke(self) -> None:
        """A session ended: the preparing thread looks again whether the party is idle."""
        with self._cond:
            self._ends += 1
            self._cond.notify_all()

    def close(self) -> None:
        """Prepare nothing more (the party is stopping)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _due(self) -> bool:
        return self._after is not None and self._ends >= self._after and not self._busy()

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not self._due():
                    self._cond.wait(IDLE_POLL_SECONDS)
                if self._closed:
                    return
                root, self._after, self._preparing = self._root, None, self._root  # each root once
                assert root is not None  # _due() needs _after, which is only ever set with a root
            try:
                self._run(root)
            finally:
                with self._cond:
                    self._preparing = None
                    self._cond.notify_all()

    def _run(self, root: Randomness) -> None:
        try:
            self._prepare(root)
        except Exception:  # noqa: BLE001 - the session does the work itself; never its failure
            log.exception("preparing the next session's offline work failed")
