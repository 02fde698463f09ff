"""The initiator: sessions this party starts or resumes for its operator (docs/transport.md, life cycle).

1. The session is proposed to this party itself (:class:`~smcdp.runtime.admission.Admission`), then to
   every other participant: one at a time in name order when it reserves privacy budget (concurrent
   sessions then contend for budgets in one order), all at once otherwise.
2. When every participant accepted, ``Begin`` goes to each and this party's role starts.
3. A refusal or an unreachable participant fails the session everywhere, naming that party.

The operator's call runs as a task of the party's own (:meth:`Initiator.detached`): a session never
depends on its caller staying connected.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any

from smcdp.errors import InvalidMessage, PermissionDenied, SmcdpError
from smcdp.net.grpc_channel import (
    AlreadyExists,
    call_with_retry,
    error_for_code,
    status_code_of,
    with_claim,
    with_origin,
)
from smcdp.net.server import SessionSpec, namespaced, new_session_id, parse_roles
from smcdp.plugins.registry import get_plugin
from smcdp.runtime.admission import Admission
from smcdp.runtime.core import PartyCore
from smcdp.runtime.governance.approvals import propose_until_decided
from smcdp.runtime.late import bring_to_end
from smcdp.runtime.recovery import Recovery
from smcdp.runtime.session import Session
from smcdp.v1 import transport_pb2 as tpb

log = logging.getLogger("smcdp.party")


class Initiator:
    """Starting and resuming the sessions a party (``core``) initiates."""

    def __init__(self, core: PartyCore, admission: Admission, recovery: Recovery) -> None:
        self.core = core
        self._admission = admission
        self._recovery = recovery
        #: operators' start/resume calls, run detached (a reference is held until they end)
        self._tasks: set[asyncio.Task] = set()
        #: session id -> its proposals and Begins, run once however many start calls name the session
        self._starting: dict[str, asyncio.Future[dict]] = {}

    async def detached(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run an operator's ``coro`` (start or resume a session) as a task of the party's own.

        gRPC cancels a handler whose caller went away (a closed CLI, a short deadline).  A session must
        not depend on that: cancelled between its proposals and its Begins it would hang at every
        participant until its deadline.  The task holds a reference here until it ends; the handler
        only waits for it, shielded.
        """
        return await asyncio.shield(self._spawn(coro))

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task:
        """``coro`` as a task of the party's own, referenced here until it ends."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)

        def settled(t: asyncio.Task) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:  # retrieved: the caller may be gone
                log.debug("operator call ended with %s", t.exception())

        task.add_done_callback(settled)
        return task

    # ------------------------------------------------------------ start
    async def start(
        self,
        protocol: str,
        roles: Mapping[str, str],
        params: Mapping[str, Any],
        session_id: str | None,
        timeout: float | None,
        seed: int | None,
    ) -> dict:
        core = self.core
        core.refuse_when_shutting_down()
        roles = parse_roles(roles)
        if core.name not in roles.values():
            raise InvalidMessage(f"the initiating party {core.name!r} must hold a role in the session (roles: {roles})")
        sid = namespaced(core.name, session_id or new_session_id(protocol))
        spec = SessionSpec(sid, protocol, roles, dict(params), timeout or core.config.timeouts.session_seconds, seed)
        await self._admission.propose(core.name, spec)
        return await self._once(core.sessions[sid])

    async def _once(self, s: Session, steps: Callable[[Session], Coroutine[Any, Any, dict]] | None = None) -> dict:
        """Steps 1 and 2 of ``s`` (or the ``steps`` of its resume), started by the first call that names it; a
        repeated operator call (a client that made its start twice: its transport lost the first, which arrived
        after all), or a start naming a session being resumed, waits for them instead of proposing again --
        two proposal flows at once raced each other at every participant."""
        sid = s.spec.session_id
        flow = self._starting.get(sid)
        if flow is None:
            flow = self._starting[sid] = self._spawn((steps or self._propose_and_begin)(s))
            flow.add_done_callback(lambda _f: self._starting.pop(sid, None))
        return await asyncio.shield(flow)

    def continue_restored(self, s: Session) -> None:
        """A session this party initiated that its process left between its proposals and ``Begin`` (it
        restarted): propose it again -- a participant that holds it prepared answers as before, a retried
        Propose being idempotent -- and begin it.  Run detached once the party serves; the session then
        ends as the operator's call would have ended it."""
        log.warning(
            "session %s: proposing again and beginning it (this party restarted before it began)", s.spec.session_id
        )
        self._spawn(self._once(s))

    async def _propose_and_begin(self, s: Session) -> dict:
        """Steps 1 (the others) and 2: propose ``s`` to every other participant, then Begin everywhere."""
        spec = s.spec
        msg = tpb.SessionSpec(
            session_id=spec.session_id,
            protocol=spec.protocol,
            roles=spec.roles,
            params_json=json.dumps(spec.params),
            timeout_seconds=spec.timeout_seconds,
        )
        if spec.seed is not None:
            msg.seed = spec.seed
        others = sorted(p for p in spec.roles.values() if p != self.core.name)
        if _reserves_budget(s):
            failures = await self._propose_in_order(s, msg, others)
        else:
            failures = await self._propose_at_once(s, msg, others)
        if failures:
            s.fail_threadsafe(failure_of("Propose", failures))
            s.begin_threadsafe()
        else:
            await self._begin_all(s, others)
        return await asyncio.wrap_future(s.done)

    async def _propose_in_order(
        self, s: Session, msg: tpb.SessionSpec, others: Sequence[str]
    ) -> list[tuple[str, BaseException]]:
        """One participant at a time, in name order (docs/governance.md §4): concurrent sessions then
        contend for budgets in the same order, so a session refused at one party never holds another
        party's budget that a later session needed.  A Propose is repeated while the party's operator
        decides.  Returns the refusal, if any."""
        for i, p in enumerate(others):
            try:
                await propose_until_decided(
                    functools.partial(self._call, p, "Propose", msg, s),
                    p,
                    s.spec.session_id,
                    lambda: s.deadline,
                    functools.partial(self._waiting_for, s, p, others[:i]),
                )
            except Exception as exc:  # noqa: BLE001 - reported by the caller, naming the party
                return [(p, exc)]
        return []

    async def _propose_at_once(
        self, s: Session, msg: tpb.SessionSpec, others: Sequence[str]
    ) -> list[tuple[str, BaseException]]:
        """Every participant at once: a session that reserves no budget gives concurrent sessions no budget
        to contend for in an order, and its set-up then costs one round trip instead of one per
        participant.  After a refusal, proposals that wait for an operator are not repeated, calls under
        way get ``timeouts.connect_seconds`` to finish (so that the abort which follows finds the sessions
        they prepare), and calls still going then -- retrying a party that cannot be reached -- are
        stopped: the refusal is reported within seconds, not at the session's deadline.  Returns the
        refusals, in name order."""
        given_up = asyncio.Event()
        accepted: list[str] = []

        async def one(p: str) -> None:
            try:
                if (
                    await propose_until_decided(
                        lambda: self._call(p, "Propose", msg, s),
                        p,
                        s.spec.session_id,
                        lambda: s.deadline,
                        lambda: self._waiting_for(s, p, [q for q in others if q in accepted]),
                        given_up,
                    )
                    is not None
                ):
                    accepted.append(p)
            except Exception:
                given_up.set()
                raise

        if not others:  # the initiator holds every role
            return []
        # not smcdp._aio.all_or_first_failure: after a refusal the calls under way get a grace to finish,
        # and every refusal is reported, not only the first
        tasks = [asyncio.ensure_future(one(p)) for p in others]
        stop = asyncio.ensure_future(given_up.wait())
        try:
            while not given_up.is_set() and not all(t.done() for t in tasks):
                await asyncio.wait([*tasks, stop], return_when=asyncio.FIRST_COMPLETED)
            await asyncio.wait(tasks, timeout=self.core.config.timeouts.connect_seconds)
        finally:
            stop.cancel()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        # a call stopped because another party refused is no refusal of its own
        return [
            (p, e) for p, t in zip(others, tasks, strict=True) if not t.cancelled() and (e := t.exception()) is not None
        ]

    async def _waiting_for(self, s: Session, party: str, accepted: Sequence[str]) -> None:
        """``party``'s operator decides: this party and those that accepted keep waiting."""
        core = self.core
        s.await_approval(party)
        ref = tpb.WaitingNotice(session_id=s.spec.session_id, party=party)

        async def tell(p: str) -> None:
            assert core.connector is not None
            try:
                await core.connector.mailbox(p).Waiting(ref, timeout=core.config.timeouts.connect_seconds)
            except Exception as exc:  # noqa: BLE001 - best effort: it repeats with the next poll
                log.info("session %s: could not tell %s that it waits for %s: %s", s.spec.session_id, p, party, exc)

        await asyncio.gather(*(tell(p) for p in accepted))

    # ------------------------------------------------------------ resume
    async def resume(self, session_id: str) -> dict:
        """Continue a resumably failed session this party initiated (every participant replays); or, if it
        succeeded here, bring the participants that failed after it to the same end (:mod:`.late`)."""
        core = self.core
        core.refuse_when_shutting_down()
        flow = self._starting.get(session_id)
        if flow is not None:  # a resume (or start) of it under way: a repeated call gets its record too
            return await asyncio.shield(flow)
        try:
            cp = self._recovery.resumable_checkpoint(session_id)
        except AlreadyExists:  # it succeeded here
            return await bring_to_end(core, session_id)
        if cp.meta["initiator"] != core.name:
            raise PermissionDenied(
                f"session {session_id!r} was initiated by {cp.meta['initiator']!r}; only its operator can resume it"
            )
        s = await self._recovery.resume_locally(cp)
        return await self._once(s, self._resume_everywhere)

    async def _resume_everywhere(self, s: Session) -> dict:
        """A resume's steps 1 and 2: ``Resume`` to every other participant, then Begin where it was resumed."""
        session_id, core = s.spec.session_id, self.core
        others = [p for p in s.spec.roles.values() if p != core.name]
        outcomes = await asyncio.gather(
            *(self._call(p, "Resume", tpb.SessionRef(session_id=session_id), s) for p in others), return_exceptions=True
        )
        done_already = {p for p, e in zip(others, outcomes) if isinstance(e, AlreadyExists)}
        failures = [(p, e) for p, e in zip(others, outcomes) if isinstance(e, BaseException) and p not in done_already]
        if failures:
            failure = failure_of("Resume", failures)
            if status_code_of(failure).name == "RESOURCE_EXHAUSTED":
                # no slot or budget there now: the session stays resumable
                origin = getattr(failure, "origin", None)
                failure = with_claim(
                    with_origin(
                        error_for_code(
                            "UNAVAILABLE", f"{failure} (RESOURCE_EXHAUSTED; the session stays resumable)", origin
                        ),
                        origin,
                    ),
                    failure,
                )
            s.fail_threadsafe(failure)
            s.begin_threadsafe()
        else:
            await self._begin_all(s, [p for p in others if p not in done_already])
        return await asyncio.wrap_future(s.done)

    # ------------------------------------------------------------ calls to the participants
    async def _call(self, party: str, method: str, request, s: Session):
        core = self.core
        assert core.connector is not None
        stub = core.connector.mailbox(party)
        return await call_with_retry(
            f"{method} of session {s.spec.session_id}",
            party,
            core.config.address_of(party),
            s.deadline,
            lambda t: getattr(stub, method)(request, timeout=t),
            core.config.timeouts.connect_seconds,
        )

    async def _begin_all(self, s: Session, parties: Sequence[str]) -> None:
        ref = tpb.SessionRef(session_id=s.spec.session_id)
        outcomes = await asyncio.gather(*(self._call(p, "Begin", ref, s) for p in parties), return_exceptions=True)
        failures = [(p, e) for p, e in zip(parties, outcomes, strict=True) if isinstance(e, BaseException)]
        if failures:
            s.fail_threadsafe(failure_of("Begin", failures))
        s.begin_threadsafe()


def _reserves_budget(s: Session) -> bool:
    """Does the session reserve privacy budget at its data parties (a DP release)?  A plug-in that does not
    describe its sessions is taken to (its proposals then go in order)."""
    try:
        summary = get_plugin(s.spec.protocol).summary(s.spec.params, s.spec.roles)
    except Exception:  # noqa: BLE001 - a plug-in's summary failing: the order that is safe for budgets
        return True
    return summary is None or summary.epsilon is not None


def failure_of(call: str, failures: Sequence[tuple[str, BaseException]]) -> SmcdpError:
    """The failure of a call to several participants, with the first one's code and origin: the party that
    refused or could not be reached (or the party its error names), not the caller.  A party the refusal
    only claims is where it started stays its claim (``reported_culprit``, :func:`~smcdp.net.grpc_channel.with_claim`)."""
    party, first = failures[0]
    origin = getattr(first, "origin", None) or party
    text = "; ".join(f"{p}: {e}" for p, e in failures)
    failure = with_origin(error_for_code(status_code_of(first).name, f"{call} failed: {text}", origin), origin)
    return with_claim(failure, first)
