"""The next session's root, drawn ahead and prepared for while the party is idle (issue 27)."""

import threading

from smcdp.runtime.offline import NextRoot


class Recorder:
    def __init__(self):
        self.roots = []
        self.cond = threading.Condition()

    def __call__(self, root):
        with self.cond:
            self.roots.append(root)
            self.cond.notify_all()

    def wait_for(self, n, timeout=10.0):
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.roots) >= n, timeout), self.roots
            return list(self.roots)


def test_the_root_prepared_at_start_is_the_first_sessions_and_the_next_waits_for_its_end():
    rec, busy = Recorder(), threading.Event()
    nr = NextRoot(rec, busy.is_set)
    nr.start()
    (r0,) = rec.wait_for(1)
    busy.set()                                   # a session runs
    assert nr.take() is r0                       # it gets the root prepared for it
    busy.clear()
    assert not threading.Event().wait(0.3) and len(rec.roots) == 1   # not before that session ended
    nr.poke()                                    # ... it ended
    roots = rec.wait_for(2)
    assert roots[1] is not r0 and roots[1].replayable and roots[1].key != r0.key
    assert nr.take() is roots[1]
    nr.close()


def test_a_root_taken_before_its_preparation_started_is_prepared_by_the_taker_once():
    rec = Recorder()
    nr = NextRoot(rec, lambda: True)             # never idle
    nr.start()                                   # the first root waits for no session, only for idleness
    root = nr.take()                             # back-to-back: the taker prepares it itself
    assert rec.roots == [root]
    root2 = nr.take()
    assert rec.roots == [root, root2] and root2 is not root
    nr.close()
    nr.poke()
    assert not threading.Event().wait(0.3) and len(rec.roots) == 2   # nothing more after close


def test_a_failing_preparation_is_logged_and_the_root_still_served(caplog):
    def boom(root):
        raise RuntimeError("disk on fire")

    nr = NextRoot(boom)
    root = nr.take()
    assert root.replayable and "preparing the next session's offline work failed" in caplog.text
    nr.close()


def test_without_prepare_first_only_the_taker_prepares_the_first_root():
    rec = Recorder()
    nr = NextRoot(rec)
    nr.start(prepare_first=False)
    assert not threading.Event().wait(0.3) and rec.roots == []
    root = nr.take()
    assert rec.roots == [root]
    nr.poke()
    assert rec.wait_for(2)[1] is not root                       # the next one as usual, once idle
    nr.close()
