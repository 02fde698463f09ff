"""Liveness: while a role runs, its party probes the other participants and ends the session on a silent one.

The participants form a ring in name order and each probes its nearest predecessor and successor that
have not finished (every participant probing every other one was N(N−1) heartbeats per interval, and as
many TLS connections per session).  Every running participant is still probed by two running ones, and
one cut off from the rest sees both of its neighbours fall silent.

A participant that has not answered, and whose messages have not arrived, for ``[timeouts]
peer_grace_seconds`` ends the session with UNAVAILABLE naming it (the *culprit*); the party that detects
it first tells the others, whose records adopt the same culprit (docs/fault-tolerance.md).  A party that
was itself paused (SIGSTOP, a starved host) forgives its peers the silence of its own pause.

A silent participant that still probes this party (its heartbeats arrive here) is alive: what failed is
this party's link to it, and the session ends with :class:`LinkLost` naming "the link A→B" (this party is
the origin: the one that cannot reach the other), not with a dead peer.  One that does not probe this party
(not a ring neighbour, or its link back is cut too) is asked about: once it has been silent for half the
grace, this party's heartbeats to its ring neighbours ask how long ago they last heard from it
(``HeartbeatRequest.about``); if one of them did within half the grace, it is alive and the link is named.

What a peer says of a failure -- an Abort, a heartbeat's answer, a refusal -- is that peer's word.  The culprit
it names becomes a record's origin only once this party confirms it (:func:`weigh_claim`): by its own
observation (the party does not answer here and has been silent for half the grace; for this party itself,
its own watcher saw it stopped) or by the named party's own answer (it says the session failed there by its
own fault, or that it no longer knows the session).  Otherwise the record names the reporting peer and keeps
the claim beside it (``reported_culprit``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any, Protocol

import grpc

from smcdp.errors import PreconditionFailed, SmcdpError, Unavailable, reported
from smcdp.net.server import MAX_ABOUT, parse_link
from smcdp.states import SessionState

log = logging.getLogger("smcdp.session")


class PeerLost(Unavailable):
    """A participant stopped answering for longer than the grace: this party detected it."""

    def __init__(self, message: str, culprit: str) -> None:
        super().__init__(message)
        self.culprit = culprit
        self.origin = culprit


class LinkLost(PeerLost):
    """This party's link to a live participant carries nothing: the participant probes this party, but has
    answered none of its heartbeats and messages for longer than the grace.  ``link`` is "A→B" (A this
    party); the culprit -- the record's origin -- is A, where the failure was seen.  Its restarts are charged
    to the link, not to A (runtime.limits.restart_culprit)."""

    def __init__(self, message: str, me: str, peer: str) -> None:
        super().__init__(message, me)
        self.link = link_name(me, peer)


def link_name(sender: str, receiver: str) -> str:
    return f"{sender}→{receiver}"


def checked_link(text: str, participants: Collection[str], senders: Collection[str] | None = None) -> str | None:
    """A link a peer named ("A→B", an Abort's or a heartbeat answer's): ``text`` if it is two distinct
    ``participants`` of the session -- and, for an Abort, if A is one of ``senders`` (the aborting peer or
    the culprit it names: only the party at a link's sending end sees it carry nothing) -- else None."""
    ends = parse_link(text)
    if ends is None or not all(end in participants for end in ends):
        return None
    if senders is not None and ends[0] not in senders:
        return None
    return text


class Probed(Protocol):
    """What the watcher needs of the session's channel."""

    @property
    def last_heard(self) -> Mapping[str, float]:
        """role -> monotonic time of the last message received from it (read-only here: a property, so that
        a channel's dict matches)"""

    async def heartbeat(self, party: str, incarnation: str, timeout: float, about: Sequence[str] = ()) -> Any:
        """``party``'s answer (raises on failure), with how long ago it heard from each of ``about``."""

    # (optionally) ``awaiting``: role -> since when a message to it waits for its acknowledgement
    # (:attr:`smcdp.net.channel.Channel.awaiting`)


def ring_neighbours(ring: list[str], me: str, finished: set[str]) -> list[str]:
    """The nearest participants before and after ``me`` in ``ring`` that are not ``finished`` (one if
    they are the same, none if every other one finished)."""
    i, n = ring.index(me), len(ring)
    after = next((ring[(i + k) % n] for k in range(1, n) if ring[(i + k) % n] not in finished), None)
    before = next((ring[(i - k) % n] for k in range(1, n) if ring[(i - k) % n] not in finished), None)
    return list(dict.fromkeys(p for p in (after, before) if p is not None))


class Watcher:
    """The liveness of one session at party ``me``: :meth:`watch` probes until the role ends, and calls
    ``lose(exc, culprit)`` once if the session must end (then returns).

    ``roles``: role -> party of the session; ``grace``: ``peer_grace_seconds``.
    """

    def __init__(
        self,
        me: str,
        incarnation: str,
        session_id: str,
        roles: Mapping[str, str],
        grace: float,
        lose: Callable[[BaseException, str | None], None],
    ) -> None:
        self.me = me
        self.incarnation = incarnation
        self.session_id = session_id
        self.grace = float(grace)
        self.interval = max(0.2, min(5.0, self.grace / 6))
        #: party -> role, for every other participant
        self.peers = {party: role for role, party in roles.items() if party != me}
        self._lose = lose
        #: party -> (monotonic time of its last answer, its incarnation)
        self.peer_seen: dict[str, tuple[float, str]] = {}
        #: party -> monotonic time its last heartbeat for this session arrived here (set by the server's loop)
        self.probed_at: dict[str, float] = {}
        self._unknown: dict[str, int] = {}
        #: the participants probed besides the ring's neighbours in the last round (:meth:`_awaited`)
        self._extra: set[str] = set()
        #: a peer's answer named a culprit or link outside the session: logged once, then ignored
        self._odd_logged = False
        #: party -> monotonic time of its last answer to a heartbeat of this party's (evidence it is alive;
        #: ``peer_seen`` also holds when its silence began to count)
        self.answered_at: dict[str, float] = {}
        #: party -> (monotonic time another participant last heard from it, that participant): a third
        #: party's word that a participant this party cannot hear from is alive (:meth:`_asks`)
        self.vouched: dict[str, tuple[float, str]] = {}
        #: a gap this long between two of the watcher's rounds: this party did not run
        self.pause = max(3 * self.interval, self.grace / 2)
        #: (monotonic time, the session thread's CPU time) at the start of the watcher's latest round, and when
        #: the watcher stopped
        self._tick: tuple[float, float] | None = None
        self._stopped: tuple[float, float] | None = None
        #: the latest gap in the rounds: (monotonic time it ended, how long of it the session's thread did not run)
        self._stall: tuple[float, float] | None = None

    async def watch(self, ch: Probed) -> None:
        try:
            await self._watch(ch)
        finally:
            self._stopped = (time.monotonic(), time.thread_time())

    async def _watch(self, ch: Probed) -> None:
        ring = sorted({*self.peers, self.me})
        finished: set[str] = set()
        start = last_tick = time.monotonic()
        self._tick = (start, time.thread_time())
        paused = self.pause  # a gap this long in the watcher: this party did not run
        first = True
        probed_at = start
        while True:
            # one probe round per interval (a silent peer's probe takes up to `interval` itself: sleeping a
            # whole interval after it made the rounds 2 intervals apart, and detection up to grace + 2
            # intervals late)
            await asyncio.sleep(max(0.0, self.interval - (time.monotonic() - probed_at)))
            probed_at = now = time.monotonic()
            if now - last_tick > paused:
                self._forgive(now)
                self._note_stall(now)
            last_tick = now
            self._tick = (now, time.thread_time())
            neighbours = ring_neighbours(ring, self.me, finished)
            for p in (
                neighbours
            ):  # a peer counts from the start of the role; one probed later (a neighbour finished) from now
                self.peer_seen.setdefault(p, (start if first else now, ""))
            todo = neighbours + self._awaited(ch, now, finished, neighbours)
            first = False
            asks = self._asks(ch, now, ring, finished, todo)
            probes = todo + [p for p in asks if p not in todo]
            replies = await asyncio.gather(*(self._probe(ch, p, asks.get(p, [])) for p in probes))
            if time.monotonic() - probed_at > paused:
                # the probes, each bounded by `interval`, took far longer: this party was paused while they
                # ran (its peers had no way to answer it), so the pause is forgiven here too -- a party
                # stalled for 25 s blamed both peers for its own silence the moment it resumed
                self._forgive(time.monotonic())
                self._note_stall(time.monotonic())
            self._vouches(probes, replies, asks)
            if not self._heard(probes, replies, finished) or not self._silence(ch, todo, neighbours):
                return

    def _awaited(self, ch: Probed, now: float, finished: set[str], ring: list[str]) -> list[str]:
        """The participants outside ``ring`` (this party's neighbours) that a message from this party has
        waited on, unacknowledged, for over an interval: probed as well from now on, until it is -- else a
        link to a participant nobody probes could carry nothing until the session's deadline (in
        dp-aggregate, a data party's share to Dave)."""
        waiting = getattr(ch, "awaiting", {})
        extra = [
            p
            for p, role in self.peers.items()
            if p not in ring and p not in finished and now - waiting.get(role, now) > self.interval
        ]
        for p in extra:
            if p not in self._extra:  # its silence counts from now, not from an earlier spell of probing
                self.peer_seen[p] = (now, self.peer_seen.get(p, (0.0, ""))[1])
        self._extra = set(extra)
        return extra

    def _asks(
        self, ch: Probed, now: float, ring: list[str], finished: set[str], todo: list[str]
    ) -> dict[str, list[str]]:
        """Whom to ask about whom this round: every participant in ``todo`` silent for over half the grace that
        does not probe this party, asked of its own ring neighbours (they probe it) -- third party -> the
        participants to ask it about."""
        half = self.grace / 2
        asks: dict[str, list[str]] = {}
        for p in todo:
            heard = max(self.answered_at.get(p, -math.inf), ch.last_heard.get(self.peers[p], -math.inf))
            if (
                now - self.peer_seen[p][0] > half
                and now - heard > half
                and now - self.probed_at.get(p, -math.inf) > half
            ):
                for q in ring_neighbours(ring, p, finished):
                    if q != self.me and len(asks.get(q, [])) < MAX_ABOUT:
                        asks.setdefault(q, []).append(p)
        return asks

    def _vouches(self, probes: list[str], replies: list[Any], asks: Mapping[str, list[str]]) -> None:
        """Take in what the third parties asked this round said of the participants asked about."""
        now = time.monotonic()
        for party, reply in zip(probes, replies):
            if isinstance(reply, BaseException) or not asks.get(party):
                continue
            for about, ago in zip(asks[party], getattr(reply, "about_heard_seconds", ())):
                if 0 <= ago < math.inf and now - ago > self.vouched.get(about, (-math.inf, ""))[0]:
                    self.vouched[about] = (now - ago, party)

    def last_sign(self, party: str, last_heard: Mapping[str, float]) -> float:
        """Monotonic time of the latest sign of life of participant ``party`` here -- its answer to a heartbeat,
        its heartbeat, a message (``last_heard``: role -> time) -- or -inf."""
        if party not in self.peers:
            return -math.inf
        return max(
            self.answered_at.get(party, -math.inf),
            self.probed_at.get(party, -math.inf),
            last_heard.get(self.peers[party], -math.inf),
        )

    def silent_for(self, party: str, last_heard: Mapping[str, float]) -> float:
        """Seconds since this party last heard from ``party`` itself, or a third participant vouched for it
        (:meth:`_vouches`); inf if never."""
        last = max(self.last_sign(party, last_heard), self.vouched.get(party, (-math.inf, ""))[0])
        return time.monotonic() - last

    def _note_stall(self, now: float) -> None:
        """The watcher's rounds stopped from the start of the latest one until ``now`` (:meth:`stalled`)."""
        if self._tick is not None:
            start, cpu = self._tick
            self._stall = (now, (now - start) - (time.thread_time() - cpu))

    def stalled(self) -> float:
        """How long this party itself did not run, as its own watcher saw it, or 0: a gap between its rounds,
        ended less than a grace ago or going on now, in which the session's thread went unscheduled -- wall time
        less the thread's CPU time -- for over :attr:`pause` (SIGSTOP, a frozen host or container, a starved
        one).  A role computing on the session's loop delays the rounds too, but its thread runs meanwhile (and
        the party's server answers its heartbeats): that is no stall.  The one evidence on which this party
        takes itself for a failure's culprit when a peer says so (:func:`weigh_claim`)."""
        now, cpu = time.monotonic(), time.thread_time()
        found = 0.0
        if self._stall is not None:
            ended, idle = self._stall
            if now - ended <= self.grace and idle > self.pause:
                found = idle
        if self._tick is not None:  # the gap since the latest round (the watcher stopped, or has not run since)
            end, end_cpu = self._stopped if self._stopped is not None else (now, cpu)
            idle = (end - self._tick[0]) - (end_cpu - self._tick[1])
            if idle > self.pause:
                found = max(found, idle)
        return found

    def heard_ago(self, party: str, last_heard: Mapping[str, float], asker: str) -> float:
        """For another participant's question (``HeartbeatRequest.about``): seconds since this party last heard
        from participant ``party`` in this session -- its answer to a heartbeat, its heartbeat, a message --
        or -1 (not a participant, the asker itself, or never heard from)."""
        if party not in self.peers or party == asker:
            return -1.0
        last = self.last_sign(party, last_heard)
        # in whole seconds, rounded up: enough to tell a live participant from a silent one, not a clock of
        # when its messages reach this party
        return -1.0 if last == -math.inf else float(math.ceil(max(0.0, time.monotonic() - last)))

    def probed_by(self, party: str) -> None:
        """``party`` probed this session here: it is alive, and its link to this party carries."""
        if party in self.peers:
            self.probed_at[party] = time.monotonic()

    async def _probe(self, ch: Probed, party: str, about: list[str]):
        try:
            return await ch.heartbeat(party, self.incarnation, timeout=self.interval, about=about)
        except (grpc.RpcError, SmcdpError) as exc:
            return exc

    def _forgive(self, now: float) -> None:
        """This party itself was paused: its peers' silence over the pause is its own; start counting again
        rather than blame them."""
        for p, (_, inc) in self.peer_seen.items():
            self.peer_seen[p] = (now, inc)

    def _heard(self, todo: list[str], replies: list[Any], finished: set[str]) -> bool:
        """Take in one round's answers; False once the session was lost (a refusal, a failure elsewhere, a
        peer that forgot the session)."""
        for party, reply in zip(todo, replies):
            if isinstance(reply, BaseException):
                if isinstance(reply, grpc.RpcError) and reply.code() == grpc.StatusCode.PERMISSION_DENIED:
                    self._lose(
                        PreconditionFailed(
                            f"party {party!r} refuses heartbeats of session {self.session_id}: {reply.details()}"
                        ),
                        party,
                    )
                    return False
                continue
            _, inc = self.peer_seen.get(party, (0.0, ""))
            if inc and reply.incarnation and reply.incarnation != inc:
                log.info(
                    "session %s: party %s restarted (incarnation %s) and is back",
                    self.session_id,
                    party,
                    reply.incarnation,
                )
            self.peer_seen[party] = (time.monotonic(), reply.incarnation)
            self.answered_at[party] = self.peer_seen[party][0]
            state = reply.state  # a str: a state this party does not know is none of the three below
            if state == SessionState.SUCCEEDED:
                finished.add(party)
            elif state == SessionState.FAILED:
                # its abort did not reach us (or crossed ours): its outcome -- and its word for the culprit and
                # the failed link, which the session weighs before a record names anyone (weigh_claim)
                culprit, link = self._adopted(party, reply.culprit, getattr(reply, "link", ""))
                self._lose(
                    reported(
                        f"session {self.session_id} failed at {party} (culprit {culprit}"
                        + (f"; the link {link} carried nothing for over {self.grace:g} s)" if link else ")"),
                        reply.code or "ABORTED",
                        party,
                        culprit,
                        link,
                    ),
                    None,
                )
                return False
            elif state == SessionState.UNKNOWN:
                self._unknown[party] = self._unknown.get(party, 0) + 1
                if self._unknown[party] >= 2:
                    self._lose(
                        PeerLost(
                            f"party {party!r} (role {self.peers[party]}) no longer knows session "
                            f"{self.session_id} (restarted without its checkpoint?)",
                            party,
                        ),
                        party,
                    )
                    return False
            else:
                self._unknown.pop(party, None)
        return True

    def _adopted(self, party: str, culprit: str, link: str) -> tuple[str, str | None]:
        """The culprit and link of ``party``'s failure as this party records them: a culprit that holds no
        role in the session becomes ``party`` itself, a link that is not two distinct participants is
        dropped (a hostile peer's text reaches no record or audit trail; logged once)."""
        participants = {*self.peers, self.me}
        good_culprit = culprit if culprit in participants else party
        good_link = checked_link(link, participants) if link else None
        odd = (culprit and good_culprit != culprit) or (link and good_link is None)
        if odd and not self._odd_logged:
            self._odd_logged = True
            log.warning(
                "session %s: party %s answered with a culprit or link outside the session (%r, %r): ignored",
                self.session_id,
                party,
                culprit[:64],
                link[:64],
            )
        return good_culprit, good_link

    def _silence(self, ch: Probed, todo: list[str], neighbours: list[str] | None = None) -> bool:
        """False once a participant -- or this party itself -- has been silent past the grace.  ``neighbours``
        (default: all of ``todo``): the ring's, whose silence all at once says this party is the one cut off;
        the others in ``todo`` are probed only while a message waits on them, and their silence counts from
        then, so it cannot tell when this party was cut off."""
        neighbours = todo if neighbours is None else neighbours
        grace, now = self.grace, time.monotonic()
        unanswered = {p: now - self.peer_seen[p][0] for p in todo}  # heartbeats' silence
        quiet = {p: now - ch.last_heard.get(self.peers[p], -math.inf) for p in todo}  # its messages' silence
        resume_hint = f"the session can be resumed with 'smcdp session resume {self.session_id}'"
        # a peer whose messages arrive is alive, even if its heartbeat answers are late (a party busy with
        # twenty sessions on two cores answered no heartbeat for 30 s while its rounds went on); but the
        # heartbeats alone say when this party is the one cut off: they all stop at the same moment,
        # whereas the last message from each peer came whenever the protocol sent one
        silent = {p: unanswered[p] for p in todo if unanswered[p] > grace and quiet[p] > grace}
        if len(neighbours) >= 2 and all(unanswered[p] > grace and quiet[p] > grace / 2 for p in neighbours):
            # every other participant went silent at once: this party is the one cut off, which is also
            # what they all conclude -- so every record names the same culprit
            self._lose(
                PeerLost(
                    f"party {self.me!r} lost contact with every other participant ({', '.join(sorted(self.peers))}) "
                    f"for over {grace:g} s (peer_grace_seconds): its own network is the likely cause; "
                    f"{resume_hint} once it is connected again",
                    self.me,
                ),
                self.me,
            )
            return False
        if silent:
            party = max(silent, key=lambda p: silent[p])
            vouched_at, witness = self.vouched.get(party, (-math.inf, ""))
            probes_us = now - self.probed_at.get(party, -math.inf) <= grace / 2
            # another participant heard from it within what its own probing (an interval apart) and the
            # answer's rounding up to a second allow: it was alive then
            heard_elsewhere = now - vouched_at <= min(grace / 2, 3 * self.interval + 1.0)
            if probes_us or heard_elsewhere:
                # it probes this party all along (its link to this party carries), or another participant
                # heard from it just now: this party's link to it is what fails (a black hole one way or
                # both), not the party
                evidence = (
                    f"is alive -- its heartbeats reach {self.me!r}"
                    if probes_us
                    else f"was heard from by {witness!r} {now - vouched_at:.0f} s ago"
                )
                self._lose(
                    LinkLost(
                        f"the link {link_name(self.me, party)} carried nothing for {silent[party]:.0f} s "
                        f"(peer_grace_seconds = {grace:g}): party {party!r} (role {self.peers[party]}) "
                        f"{evidence} -- but has answered none of the heartbeats and messages "
                        f"{self.me!r} sent it; {resume_hint} once the link carries again",
                        self.me,
                        party,
                    ),
                    self.me,
                )
                return False
            self._lose(
                PeerLost(
                    f"party {party!r} (role {self.peers[party]}) has not answered for {silent[party]:.0f} s "
                    f"(peer_grace_seconds = {grace:g}); {resume_hint} once it is back",
                    party,
                ),
                party,
            )
            return False
        return True


async def weigh_claim(
    error: Mapping[str, Any],
    *,
    me: str,
    participants: Collection[str],
    watcher: Watcher,
    last_heard: Mapping[str, float],
    probe: Callable[[str], Awaitable[Any]],
    timeout: float,
    settle: float = 0.0,
    until: float | None = None,
) -> dict[str, Any]:
    """A failure's record (``error``, :func:`smcdp.runtime.session.error_dict`) as this party can vouch for it.
    ``until``: a monotonic time (the session's deadline) the wait for a silent party does not pass.

    A peer that reported the failure (``reported_by``, the record's origin) and named another party as its
    culprit (``reported_culprit``) is believed only where this party confirms it -- then that party is the
    origin, and ``corroborated`` says how:

    * this party itself: only if its own watcher saw it stopped (:meth:`Watcher.stalled`) -- never on a
      peer's word alone;
    * another participant: if it says so itself when asked (a heartbeat, ``probe``, each within ``timeout``:
      the session failed there naming it, or it no longer knows the session -- asked again for up to ``settle``
      seconds while it says the session still runs there: it may be telling the others before its record is
      written), or if it does not answer and nothing has been heard from it here for half the grace (nor any
      third party vouched for it) -- a party that does not answer but was heard from lately is asked again
      until it answers or that much silence has passed.

    Otherwise the origin stays the reporting peer, and the claim stays beside it.  A claim naming a party
    outside the session is dropped.  A link ("A→B") is the record's ``link`` only if A is its origin (only the
    party at a link's sending end sees it carry nothing); else it is kept as ``reported_link``."""
    error = dict(error)
    claimed = error.get("reported_culprit")
    if claimed is not None and (claimed not in participants or claimed == error.get("origin")):
        if claimed not in participants:
            log.warning(
                "a failure reported by %s names %r, who holds no role in the session: ignored",
                error.get("reported_by"),
                claimed,
            )
        del error["reported_culprit"]
        error.pop("reported_by", None)
        claimed = None
    if claimed:
        how = await _confirms(claimed, me, watcher, last_heard, probe, timeout, settle, deadline=until)
        if how:
            error["origin"] = claimed
            error["corroborated"] = how
    link = error.get("link")
    if link:
        ends = parse_link(link)
        if ends is None or ends[0] != error.get("origin"):
            error["reported_link"] = error.pop("link")
    return error


async def _confirms(
    party: str,
    me: str,
    watcher: Watcher,
    last_heard: Mapping[str, float],
    probe: Callable[[str], Awaitable[Any]],
    timeout: float,
    settle: float,
    deadline: float | None = None,
) -> str | None:
    """How this party confirms that the failure started at ``party`` (:func:`weigh_claim`), or None."""
    if party == me:
        stalled = watcher.stalled()
        return f"{me!r} did not run for {stalled:.0f} s (its own watcher)" if stalled else None
    start = time.monotonic()
    until = start + settle
    patience = start + watcher.grace / 2 + timeout  # a silent party's wait (below) ends here at the latest
    if deadline is not None:
        patience = min(patience, deadline)
    while True:
        try:
            reply = await asyncio.wait_for(probe(party), timeout)
        except Exception:  # noqa: BLE001 - unreachable, refused, late: no answer
            silent = watcher.silent_for(party, last_heard)
            # (also after it said the session runs there: a party that answered "running" and then stopped -- a
            # party shutting down, a container stopped mid-session -- is confirmed by its silence like any other;
            # giving up at its first unanswered heartbeat left the records to timing: a container CI run)
            if silent > watcher.grace / 2:
                since = "never heard from here" if silent == math.inf else f"last heard from here {silent:.0f} s ago"
                return f"{party!r} does not answer {me!r}, {since}"
            # heard from lately: asked again until it answers (a restarted party says it no longer knows the
            # session) or has been silent for half the grace -- deciding at the first failed probe made the record
            # depend on how fast the named party came back (CI of 807806b: a restarting trent, a loaded host).
            # A party still heard from (its messages arrive, its heartbeats' answers do not) is not confirmed.
            if time.monotonic() >= patience:
                return None
            await asyncio.sleep(max(0.1, min(0.5, watcher.grace / 2 - silent)))
            continue
        state = str(getattr(reply, "state", ""))
        if state == SessionState.UNKNOWN:
            return f"{party!r} no longer knows the session"
        if state == SessionState.FAILED:
            return f"{party!r} names itself" if getattr(reply, "culprit", "") == party else None
        if state not in (SessionState.RUNNING, SessionState.PREPARED) or time.monotonic() >= until:
            return None  # succeeded there, or still running after ``settle``: it does not say so
        await asyncio.sleep(min(0.5, max(0.0, until - time.monotonic())))
