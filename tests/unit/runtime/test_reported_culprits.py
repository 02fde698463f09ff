"""A peer's word is its word (docs/fault-tolerance.md, "What a peer's word can put in a record").

A member named another party -- or the receiver itself -- as the culprit of a failure, in an Abort, in its
answer to a heartbeat or in a refusal's ``smcdp-origin``, and the receiver recorded that party as the origin,
charged the restart to it, and, named itself, took the failure for its own and aborted everyone as itself.
Now the origin is the peer that said so (its certificate names it), the party it named is kept as its claim
(``reported_culprit``), and that party becomes the origin only where this party confirms it: its own watcher
(for itself: it was stopped), the named party's own answer, or the named party silent here too.
"""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import grpc
import pytest

from smcdp.errors import SessionAborted, SmcdpError
from smcdp.net.grpc_channel import call_with_retry, remote_failure
from smcdp.net.limits import Limits
from smcdp.runtime.console.pages import error_text
from smcdp.runtime.ending import Ending
from smcdp.runtime.initiator import failure_of
from smcdp.runtime.limits import check_resume, restart_culprit
from smcdp.runtime.liveness import Watcher
from smcdp.runtime.peers import PeerDesk
from smcdp.runtime.session import Session
from smcdp.runtime.states import Lifecycle

SID = "alice.s"
ROLES = {"a": "alice", "b": "bob", "c": "charlie"}
GRACE = 1.2  # the watcher's interval 0.2 s, a pause of over 0.6 s is a stall


class _Session:
    """What PeerDesk.abort needs of a live session: its roles, and the failure it is ended with."""

    def __init__(self) -> None:
        self.spec = SimpleNamespace(roles=ROLES)
        self.failures: list[BaseException] = []

    def fail_threadsafe(self, exc: BaseException) -> None:
        self.failures.append(exc)


def _abort(receiver: str, peer: str, culprit: str | None, link: str | None = None) -> BaseException:
    """``peer``'s Abort of SID at ``receiver`` (PeerDesk.abort, as the server calls it): the failure it ends the
    session with."""
    s = _Session()
    core = SimpleNamespace(
        name=receiver,
        sessions={SID: s},
        session_for=lambda p, sid: s,
        governor=SimpleNamespace(aborted=lambda *a: None),
    )
    desk = PeerDesk(core, None, None, None)  # type: ignore[arg-type]
    asyncio.run(desk.abort(peer, SID, "UNAVAILABLE", f"role b ({culprit}) failed: gone", culprit, link))
    [exc] = s.failures
    return exc


class _Channel:
    """The session's channel as Session._fail uses it: the Aborts it sends, and each participant's answer to
    the one heartbeat that asks about a culprit (an answer, or an exception: no answer)."""

    def __init__(self, answers: dict | None = None, last_heard: dict | None = None) -> None:
        self.answers = answers or {}
        self.last_heard = last_heard or {}
        self.aborts: list[dict] = []
        self.asked: list[str] = []

    async def send_abort(self, code, message, timeout=5.0, culprit=None, link=None):
        self.aborts.append({"code": code, "culprit": culprit, "link": link})
        return {}

    async def heartbeat(self, party, incarnation, timeout, about=()):
        self.asked.append(party)
        answer = self.answers.get(party, SimpleNamespace(state="running", culprit=""))
        if isinstance(answer, list):  # one answer a heartbeat, the last one from then on
            answer = answer.pop(0) if len(answer) > 1 else answer[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer


def _session(me: str) -> Session:
    """``me``'s Session of SID, as far as ending it (Session._fail) goes."""
    s = Session.__new__(Session)
    timeouts = SimpleNamespace(connect_seconds=1.0, peer_grace_seconds=GRACE)
    s.party = SimpleNamespace(name=me, incarnation=f"{me}1", config=SimpleNamespace(timeouts=timeouts))
    s.spec = SimpleNamespace(session_id=SID, roles=ROLES)
    s.role = next(r for r, p in ROLES.items() if p == me)
    s.lifecycle = Lifecycle()
    s.checkpoint = SimpleNamespace(release_reserve=lambda: None)
    s.ending = Ending(poll=1.0)
    s.watcher = Watcher(me, f"{me}1", SID, ROLES, GRACE, lambda exc, culprit: None)
    s.deadline = time.monotonic() + 60
    return s


def _fail(me: str, exc: BaseException, ch: _Channel, s: Session | None = None) -> dict:
    """The error ``me``'s record gets when its session ends with ``exc`` (and the Aborts it sends: ``ch.aborts``)."""
    error, _ = asyncio.run((s or _session(me))._fail(ch, exc))  # type: ignore[arg-type]
    return error


class _Unreachable(grpc.RpcError):
    def code(self):
        return grpc.StatusCode.UNAVAILABLE

    def details(self):
        return "failed to connect to all addresses"


# ----------------------------------------------------------------- an Abort naming the receiver itself
def test_an_abort_naming_its_receiver_makes_it_neither_blame_itself_nor_abort_everyone_as_itself():
    """The review's scenario: alice's one Abort, to bob only, culprit 'bob'.  Bob recorded origin bob and
    aborted charlie as himself ("role b (bob) failed"), whose record then named bob too."""
    exc = _abort("bob", "alice", "bob")
    assert (exc.origin, exc.reported_by, exc.reported_culprit) == ("alice", "alice", "bob")
    ch = _Channel()
    error = _fail("bob", exc, ch)
    assert error["origin"] == "alice" and error["reported_by"] == "alice" and error["reported_culprit"] == "bob"
    assert "corroborated" not in error
    assert ch.aborts == []  # not detected here: nobody is told "bob failed" in bob's name
    # and the restart it costs is not bob's: a claim alice made and bob could not confirm
    meta = {"session_id": SID, "state": "failed", "error": error}
    assert restart_culprit(meta, "bob") == "bob (reported by alice)"


def test_a_party_takes_itself_for_the_culprit_only_on_its_own_watchers_word():
    """Bob was stopped (SIGSTOP) past the grace: alice names him, and his record names himself too -- what every
    record of such a session says (test_a_pause_longer_than_the_grace_fails_cleanly_and_resume_completes).  His
    own watcher saw it: its rounds stopped while the session's thread did not run.  A role computing on the
    session's loop stops the rounds too, but its thread runs: no stall."""
    s = _session("bob")
    gap = 3 * s.watcher.pause
    s.watcher._tick = (time.monotonic() - gap, time.thread_time())  # the latest round, and no CPU since
    assert s.watcher.stalled() >= gap
    ch = _Channel()
    error = _fail("bob", _abort("bob", "alice", "bob"), ch, s)
    assert error["origin"] == "bob" and error["reported_by"] == "alice" and "did not run" in error["corroborated"]
    assert ch.aborts == []  # still alice's news: bob does not tell the others in his own name

    busy = _session("bob")
    busy.watcher._tick = (time.monotonic() - gap, time.thread_time() - gap)  # the role computed all along
    assert busy.watcher.stalled() == 0.0
    assert _fail("bob", _abort("bob", "alice", "bob"), _Channel(), busy)["origin"] == "alice"
    recent = _session("bob")  # a stall the watcher noted, long enough, ended just now
    recent.watcher._stall = (time.monotonic(), gap)
    assert recent.watcher.stalled() == gap
    recent.watcher._stall = (time.monotonic() - 2 * GRACE, gap)  # ... or over a grace ago: not this failure's
    assert recent.watcher.stalled() == 0.0


# ----------------------------------------------------------------- naming a third party
def test_an_abort_naming_a_live_third_party_is_the_aborters_claim_and_charged_to_neither():
    """Alice tells charlie that bob failed; bob, asked, says the session runs there.  Before: charlie's record
    said origin bob and his restarts were charged to bob ("after failures of bob")."""
    ch = _Channel()
    error = _fail("charlie", _abort("charlie", "alice", "bob"), ch)
    assert set(ch.asked) == {"bob"}  # heartbeats to the party the claim names, nobody else
    assert (error["origin"], error["reported_culprit"]) == ("alice", "bob") and "corroborated" not in error
    assert ch.aborts == []
    meta = {"session_id": SID, "state": "failed", "deadline_epoch": 1000.0, "began_epoch": 900.0, "error": error}
    bucket = restart_culprit(meta, "charlie")
    assert bucket == "bob (reported by alice)"
    lim = Limits(max_restarts=2)
    with pytest.raises(SmcdpError, match="after failures of 'bob' as reported by 'alice' \\(not confirmed here\\)"):
        check_resume([], "alice", dict(meta, restarts=2, restarts_by={bucket: 2}), lim, "charlie", now=999.0)
    crashed = dict(meta, error={"code": "UNAVAILABLE", "origin": "bob"})  # bob's own failure: all his restarts
    check_resume([], "alice", dict(crashed, restarts=2, restarts_by={bucket: 2}), lim, "charlie", now=999.0)


@pytest.mark.parametrize(
    "answer, how",
    [
        (_Unreachable(), "does not answer 'charlie', never heard from here"),  # dead: as its detector saw it
        (SimpleNamespace(state="failed", culprit="bob"), "'bob' names itself"),  # its own word
        (SimpleNamespace(state="unknown", culprit=""), "'bob' no longer knows the session"),  # lost its checkpoint
    ],
)
def test_a_culprit_confirmed_here_is_the_origin_so_every_record_names_a_dead_party(answer, how):
    """The relay that makes a session end the same way everywhere still works where it is true: alice saw bob
    fall silent and aborts naming him; charlie names bob once bob does not answer him either (and charlie has not
    heard from him for half the grace), or bob says so himself."""
    ch = _Channel({"bob": answer})
    error = _fail("charlie", _abort("charlie", "alice", "bob"), ch)
    assert error["origin"] == "bob" and error["reported_by"] == "alice" and how in error["corroborated"]
    meta = {"session_id": SID, "state": "failed", "error": error}
    assert restart_culprit(meta, "charlie") == "bob"


def test_a_named_party_still_telling_the_others_is_asked_again():
    """Bob failed himself and sends his Aborts (up to 5 s to a peer he cannot reach) before his record -- what
    his heartbeats answer -- says so: meanwhile he answers "running".  Charlie, who heard of it from alice's
    relay, asks again (test_link_faults: trent learned alice's failed link from bob while alice's Abort to him
    was lost, and alice answered "running" until it timed out)."""
    running, failed = SimpleNamespace(state="running", culprit=""), SimpleNamespace(state="failed", culprit="bob")
    ch = _Channel({"bob": [running, running, failed]})
    error = _fail("charlie", _abort("charlie", "alice", "bob"), ch)
    assert error["origin"] == "bob" and ch.asked == ["bob"] * 3
    ch = _Channel()  # bob runs on, all along: asked for a while, then alice's word stays hers
    t0 = time.monotonic()
    assert _fail("charlie", _abort("charlie", "alice", "bob"), ch)["origin"] == "alice"
    assert 1.0 <= time.monotonic() - t0 < 5.0 and len(ch.asked) > 2


class _HeardFrom(dict):
    """last_heard of a party whose messages keep arriving (its heartbeats' answers do not)."""

    def get(self, key, default=None):
        return time.monotonic()

    def __getitem__(self, key):
        return time.monotonic()


def test_a_party_heard_from_just_now_is_not_confirmed_by_one_unanswered_heartbeat():
    ch = _Channel({"bob": _Unreachable()}, last_heard=_HeardFrom(b=0.0))  # bob's messages keep arriving
    error = _fail("charlie", _abort("charlie", "alice", "bob"), ch)
    assert (error["origin"], error["reported_culprit"]) == ("alice", "bob")


def test_a_party_heard_from_lately_is_asked_again_until_it_answers_or_falls_silent():
    """A party killed and restarting does not answer at first, though it was heard from lately: deciding at the
    first failed heartbeat left the record to how fast it came back (CI of 807806b: trent's deleted checkpoint,
    a loaded host, alice's record named bob).  It is asked again: once back it says it no longer knows the
    session; one that stays silent for half the grace is confirmed by its silence."""
    back = _Channel(
        {"bob": [_Unreachable(), _Unreachable(), SimpleNamespace(state="unknown", culprit="")]},
        last_heard={"b": time.monotonic()},
    )
    error = _fail("charlie", _abort("charlie", "alice", "bob"), back)
    assert error["origin"] == "bob" and "no longer knows" in error["corroborated"] and back.asked.count("bob") >= 3
    gone = _Channel({"bob": _Unreachable()}, last_heard={"b": time.monotonic()})
    error = _fail("charlie", _abort("charlie", "alice", "bob"), gone)
    assert error["origin"] == "bob" and "does not answer" in error["corroborated"]


def test_a_link_is_recorded_only_from_its_sending_end_and_charged_to_it_only_then():
    """Alice's Abort names bob and the link bob→charlie; bob does not confirm: the link is alice's claim too,
    kept as ``reported_link``, and restarts are charged to the claim, not to the link's bucket."""
    ch = _Channel()
    error = _fail("charlie", _abort("charlie", "alice", "bob", "bob→charlie"), ch)
    assert error["origin"] == "alice" and "link" not in error and error["reported_link"] == "bob→charlie"
    assert restart_culprit({"state": "failed", "error": error}, "charlie") == "bob (reported by alice)"
    # alice's own link: her own observation, as before (liveness.LinkLost), charged to the link
    own = _fail("charlie", _abort("charlie", "alice", None, "alice→charlie"), _Channel())
    assert own["origin"] == "alice" and own["link"] == "alice→charlie"
    assert restart_culprit({"state": "failed", "error": own}, "charlie") == "alice→charlie"
    # a record whose link does not start at its origin is nobody's observation here: the origin is charged
    odd = {"state": "failed", "error": {"code": "UNAVAILABLE", "origin": "alice", "link": "bob→charlie"}}
    assert restart_culprit(odd, "charlie") == "alice"


# ----------------------------------------------------------------- a refusal's smcdp-origin, a heartbeat's answer
@pytest.mark.parametrize("named", ["zed", "charlie"])
def test_a_refusals_smcdp_origin_naming_another_party_is_the_refusers_claim(named):
    """origin.py of the review: bob refuses alice's message with smcdp-origin 'zed' (no participant) and alice's
    record said origin zed.  Now the refuser is the origin; a participant it names is its claim, weighed like an
    Abort's; a name outside the session is dropped."""

    async def refused(timeout):
        raise grpc.aio.AioRpcError(
            grpc.StatusCode.UNAVAILABLE,
            grpc.aio.Metadata(),
            grpc.aio.Metadata(("smcdp-origin", named)),
            "no space left at bob",
        )

    with pytest.raises(SessionAborted) as info:
        asyncio.run(call_with_retry("message 'x' to role b", "bob", "b:1", time.monotonic() + 5, refused, 1.0))
    assert (info.value.origin, info.value.reported_by, info.value.reported_culprit) == ("bob", "bob", named)
    error = _fail("alice", info.value, _Channel())
    assert error["origin"] == "bob" and error.get("reported_culprit") == (None if named == "zed" else "charlie")
    assert "zed" not in repr(error)


def test_a_heartbeat_answer_naming_this_party_is_the_answerers_word():
    """Bob answers alice's heartbeat: the session failed there, culprit alice.  Before, alice adopted it as her
    own failure (origin alice) and aborted everyone as herself."""

    class _FailedAtBob:
        last_heard: dict = {}

        async def heartbeat(self, party, incarnation, timeout, about=()):
            return SimpleNamespace(state="failed", incarnation="b1", code="UNAVAILABLE", culprit="alice", link="")

    lost: list[BaseException] = []
    w = Watcher("alice", "a1", SID, ROLES, GRACE, lambda exc, culprit: lost.append(exc))
    asyncio.run(asyncio.wait_for(w.watch(_FailedAtBob()), 4 * GRACE))
    [exc] = lost
    ch = _Channel()
    error = _fail("alice", exc, ch)
    assert error["origin"] in ("bob", "charlie") and error["reported_culprit"] == "alice" and ch.aborts == []


# ----------------------------------------------------------------- the initiator, the console
def test_an_initiators_failure_keeps_whose_word_a_refusal_was():
    """A participant refusing the initiator's Begin with smcdp-origin naming another: the initiator's failure
    names the refuser, and keeps the claim for the session to weigh."""
    refusal = remote_failure("UNAVAILABLE", "x", "bob", reported_by="bob", reported_culprit="charlie")
    exc = failure_of("Begin", [("bob", refusal)])
    assert (exc.code, exc.origin, exc.reported_by, exc.reported_culprit) == ("UNAVAILABLE", "bob", "bob", "charlie")


def test_the_console_says_whose_word_an_unconfirmed_culprit_is():
    err = {"code": "UNAVAILABLE", "message": "m", "origin": "alice", "reported_by": "alice", "reported_culprit": "bob"}
    assert error_text(err) == "UNAVAILABLE: m (origin alice, who reports bob as the culprit: not confirmed here)"
    assert error_text({"code": "UNAVAILABLE", "message": "m", "origin": "bob"}) == "UNAVAILABLE: m (origin bob)"
