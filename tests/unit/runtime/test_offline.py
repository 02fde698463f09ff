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
    busy.set()  # a session runs
    assert nr.take() is r0  # it gets the root prepared for it
    busy.clear()
    assert not threading.Event().wait(0.3) and len(rec.roots) == 1  # not before that session ended
    nr.poke()  # ... it ended
    roots = rec.wait_for(2)
    assert roots[1] is not r0 and roots[1].replayable and roots[1].key != r0.key
    assert nr.take() is roots[1]
    nr.close()


def test_a_root_taken_before_the_party_was_idle_is_not_prepared_for():
    rec = Recorder()
    nr = NextRoot(rec, lambda: True)  # never idle
    nr.start()
    root = nr.take()  # back-to-back: the session does its own work
    root2 = nr.take()
    assert root2 is not root and root.replayable and root2.replayable
    nr.poke()
    nr.poke()
    assert not threading.Event().wait(0.6) and rec.roots == []  # nothing made, nothing made twice
    nr.close()


def test_a_failing_preparation_is_logged_and_the_root_still_served(caplog):
    failed = threading.Event()

    def boom(root):
        failed.set()
        raise RuntimeError("disk on fire")

    nr = NextRoot(boom)
    nr.start()
    assert failed.wait(10)
    root = nr.take()
    assert root.replayable
    for _ in range(200):  # the log line follows the exception on that thread
        if "preparing the next session's offline work failed" in caplog.text:
            break
        threading.Event().wait(0.05)
    assert "preparing the next session's offline work failed" in caplog.text
    nr.close()


def test_without_prepare_first_only_the_roots_after_a_session_are_prepared_for():
    rec = Recorder()
    nr = NextRoot(rec)
    nr.start(prepare_first=False)
    assert not threading.Event().wait(0.3) and rec.roots == []
    root = nr.take()
    nr.poke()  # its session ended
    (nxt,) = rec.wait_for(1)
    assert nxt is not root and nr.take() is nxt
    nr.close()


def test_a_session_that_comes_before_the_preparing_thread_prepares_its_due_root_itself():
    """Deterministic back-to-back: the last session ended and the party is idle, so the root is due; the
    session that takes it makes sure it is prepared (once) before it starts."""
    rec = Recorder()
    gate = threading.Event()
    nr = NextRoot(rec, lambda: not gate.is_set())  # "busy" until the gate opens
    nr.start(prepare_first=False)
    nr.take()
    nr.poke()  # that session ended; the thread still sees busy
    gate.set()  # idle now: the root is due
    root = nr.take()  # ... and taken at once
    assert rec.wait_for(1) == [root]
    assert not threading.Event().wait(0.6) and rec.roots == [root]  # prepared once, not twice
    nr.close()
