"""Admission: what a party checks before it takes part in a session a peer proposes.

In order, cheapest first, before any input is read (docs/governance.md, docs/security.md):

1. the proposer holds a role, this party holds one, every participant has an address here;
2. the proposer's slots, the session's timeout and seed (``smcdp.runtime.limits``);
3. the plug-in accepts the parameters and a byte envelope follows from them;
4. governance: the seed rule, the policy, the operator's approval, the budget reservation, the audit;
5. the session is created -- its randomness root, its checkpoint, its thread, its channel.

A retried ``Propose`` of a session it already created gets the same answer (the first reply was lost).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from smcdp.errors import (
    InvalidMessage,
    NoSpace,
    PermissionDenied,
    PreconditionFailed,
    SmcdpError,
    Unavailable,
    resource_failure,
)
from smcdp.net.grpc_channel import AlreadyExists, with_origin
from smcdp.net.server import PendingApproval, SessionSpec, check_namespace, parse_roles
from smcdp.plugins.registry import get_plugin
from smcdp.primitives.rng import Randomness
from smcdp.runtime.core import READY_SECONDS, PartyCore
from smcdp.runtime.durability.checkpoint import Checkpoint
from smcdp.runtime.limits import check_proposal
from smcdp.runtime.session import Session
from smcdp.runtime.states import Phase

log = logging.getLogger("smcdp.party")

#: the phases of a session that a repeated proposal may be answered for
_ALIVE = frozenset({Phase.PREPARED, Phase.BEGUN, Phase.RUNNING})


class Admission:
    """The proposals made to a party (``core``)."""

    def __init__(self, core: PartyCore) -> None:
        self.core = core
        #: session id -> the admission of a proposal under way: an identical one arriving meanwhile (a retried
        #: Propose whose first copy is still being admitted) waits for it and then gets its answer
        self._admitting: dict[str, asyncio.Task[str | PendingApproval]] = {}

    async def propose(self, peer: str, spec: SessionSpec) -> str | PendingApproval:
        """Register a session proposed by ``peer``; return this party's role (or that it waits for its
        operator's approval)."""
        core = self.core
        core.refuse_when_shutting_down()
        check_namespace(peer, spec.session_id)  # no member can take another's session ids
        roles = parse_roles(spec.roles)
        if peer not in roles.values():
            raise PermissionDenied(f"party {peer!r} proposed session {spec.session_id!r} but holds no role in it")
        mine = [r for r, p in roles.items() if p == core.name]
        if not mine:
            raise InvalidMessage(
                f"party {core.name!r} holds no role in the proposed session {spec.session_id!r} (roles: {roles})"
            )
        unknown = sorted(p for p in roles.values() if p != core.name and p not in core.config.peers)
        if unknown:
            raise PreconditionFailed(
                f"party {core.name!r} has no address for {', '.join(unknown)} "
                "(they are not in the [peers] table of its configuration)"  # no file path: the proposer is a peer
            )
        self._check_slots(peer, spec)  # slots, timeout and seed rules before any validation work
        if spec.session_id in self._admitting:
            while (first := self._admitting.get(spec.session_id)) is not None:
                # the same id is being admitted: two copies of one Propose (a retry that overtook the first
                # reply, or an operator's start made twice) raced through governance and both created the
                # session -- the second failed on the checkpoint the first had made.  This copy waits for the
                # first, then gets the answer of a repeated proposal (or the refusal of another one)
                await asyncio.wait({first})
            self._check_slots(peer, spec)  # again: it held no slot while it waited
        # The admission runs as a task of this party's own, not in the caller's handler: gRPC cancels a handler
        # whose caller went away (a short deadline, a closed channel), but the governance work it started in a
        # thread goes on -- a copy let in at the cancellation ran governance a second time beside it.  The
        # admission ends as it would have; a retried Propose gets its answer as a repeated proposal.
        # A proposal being admitted holds a pending slot of its initiator until its session exists -- counted
        # from here, with no await since the slot check, so that a proposal checked next sees it.
        registered = core.admission(peer)
        admitting = asyncio.get_running_loop().create_task(self._admit(peer, spec, roles, mine[0], registered))
        self._admitting[spec.session_id] = admitting

        def settled(t: asyncio.Task) -> None:
            registered()  # (idempotent) also for a task cancelled before it ran
            if self._admitting.get(spec.session_id) is t:
                del self._admitting[spec.session_id]
            if not t.cancelled():
                t.exception()  # retrieved: its caller may be gone

        admitting.add_done_callback(settled)
        return await asyncio.shield(admitting)

    async def settle(self, timeout: float) -> None:
        """Wait (at most ``timeout`` s) for the admissions under way: the party is stopping, and governance
        must not be closed under them."""
        if self._admitting:
            await asyncio.wait(list(self._admitting.values()), timeout=timeout)

    def _check_slots(self, peer: str, spec: SessionSpec) -> None:
        """The proposer's slots, the session's timeout and seed rules (unless the session exists: a repeat)."""
        core = self.core
        if spec.session_id not in core.sessions:
            check_proposal(
                core.sessions.values(),
                peer,
                spec,
                core.config.limits,
                core.name,
                core.admitting,
                len(core.config.proposers),
            )

    async def _admit(
        self, peer: str, spec: SessionSpec, roles: dict[str, str], role: str, registered: Callable[[], None]
    ) -> str | PendingApproval:
        core = self.core
        plugin = get_plugin(spec.protocol)
        params = _checked_params(plugin, spec, roles, role)
        repeated = self._repeated(peer, spec, roles, params)
        if repeated is not None:
            return repeated
        failed = self._failed_early(peer, spec, roles, params)
        if failed is not None:  # a copy of a proposal whose session failed here before it began: its answer
            raise failed
        if (
            spec.session_id in core.sessions
            or core.records.exists(spec.session_id)
            or Checkpoint.directory(core.sessions_dir, spec.session_id).exists()
        ):
            raise AlreadyExists(f"session {spec.session_id!r} already exists at party {core.name!r}")
        spec = SessionSpec(spec.session_id, spec.protocol, roles, params, spec.timeout_seconds, spec.seed)
        # governance: seed rule, policy, approval, budget reservation, audit.  Refuses before any input
        # is read; may answer "pending" (operator approval).
        admitted = await asyncio.get_running_loop().run_in_executor(None, core.governor.admit, peer, spec, plugin, role)
        if isinstance(admitted, PendingApproval):
            return admitted
        repeated = self._repeated(peer, spec, roles, params)  # admitted twice concurrently
        if repeated is not None:
            return repeated
        if spec.session_id in core.sessions:  # another proposal took this id meanwhile (its reservation)
            raise AlreadyExists(f"session {spec.session_id!r} already exists at party {core.name!r}")
        spec, plugin = admitted, core.governor.wrap(plugin, spec.session_id)
        # the role's randomness root: this party's own secret, or -- only where its policy allows
        # seeded sessions (the governor refused a seed otherwise) -- the experiment seed
        randomness = (
            await asyncio.get_running_loop().run_in_executor(None, core.next_root.take)
            if spec.seed is None
            else Randomness.from_seed(spec.seed)
        )
        if core.shutting_down:  # it began stopping meanwhile: no new session now (its sessions are being ended)
            core.governor.abandon(spec.session_id, "the party is shutting down")
            raise with_origin(Unavailable(f"party {core.name} is shutting down"), core.name)
        cp = Checkpoint.create(
            core.sessions_dir,
            session_id=spec.session_id,
            protocol=spec.protocol,
            roles=roles,
            params=params,
            timeout_seconds=spec.timeout_seconds,
            seed=spec.seed,
            initiator=peer,
            role=role,
            randomness=randomness,
        )
        s = Session(core, spec, role, plugin, peer, cp)
        core.register(s)
        registered()  # it holds its slot as a session from now on, not twice
        await core.wait_ready(s)
        if s.channel is None:
            core.governor.abandon(spec.session_id, "its thread did not start")
            what = f"session {spec.session_id}: its thread did not start"
            # this party out of file descriptors or memory: UNAVAILABLE naming the cause, not INTERNAL
            failure = (s.thread_error and resource_failure(s.thread_error, core.name, what)) or (
                SmcdpError(f"{what}: {s.thread_error}")
                if s.thread_error
                # no error and no thread within the wait: this party is overloaded, which passes (resumable)
                else NoSpace(f"party {core.name} is overloaded: {what} within {READY_SECONDS:g} s", core.name)
            )
            # and the session ends so: a thread that starts after all finds the failure and ends it, and a
            # retried copy of this proposal meanwhile is not answered as accepted
            s.fail_threadsafe(failure)
            raise failure
        log.info("session %s (%s) proposed by %s; %s plays %s", spec.session_id, spec.protocol, peer, core.name, role)
        return role

    def _same(
        self, peer: str, spec: SessionSpec, roles: Mapping[str, str], params: Mapping[str, Any]
    ) -> Session | None:
        """The session this very proposal created here, if it is still in memory."""
        existing = self.core.sessions.get(spec.session_id)
        if (
            existing is not None
            and existing.initiator == peer
            and existing.spec.protocol == spec.protocol
            and dict(existing.spec.roles) == dict(roles)
            and dict(existing.spec.params) == params
            and existing.spec.seed == spec.seed
        ):
            return existing
        return None

    def _failed_early(
        self, peer: str, spec: SessionSpec, roles: Mapping[str, str], params: Mapping[str, Any]
    ) -> BaseException | None:
        """The failure of the session this proposal created, if it failed here before its role began (its
        thread did not start): what the first copy was answered, which its caller may not have heard."""
        existing = self._same(peer, spec, roles, params)
        if existing is not None and not existing.has_run and existing.lifecycle.phase not in _ALIVE:
            return existing.early_failure
        return None

    def _repeated(
        self, peer: str, spec: SessionSpec, roles: Mapping[str, str], params: Mapping[str, Any]
    ) -> str | None:
        """The role of a live session this very proposal already created (a retried Propose)."""
        existing = self._same(peer, spec, roles, params)
        if (
            existing is not None
            and not existing.done.done()
            and existing.lifecycle.phase in _ALIVE  # not a session whose end is decided
        ):
            # A retried Propose (the first reply was lost or late): the same proposal is accepted again.
            log.info("session %s: repeated proposal from %s accepted again", spec.session_id, peer)
            return existing.role
        return None


def _checked_params(plugin, spec: SessionSpec, roles: dict[str, str], role: str) -> dict[str, Any]:
    """The plug-in's normal form of the proposed parameters, whose byte envelope must follow from them
    now rather than in the session's thread; JSON, since the checkpoint and record keep them."""
    try:
        params = plugin.validate_params(dict(spec.params), dict(roles))
        plugin.traffic_envelope(params, dict(roles), role)
    except SmcdpError:
        raise
    except (ValueError, TypeError, KeyError, ArithmeticError) as exc:  # a plug-in's gap: still the
        raise InvalidMessage(
            f"invalid parameters for {spec.protocol!r}: "  # caller's parameters
            f"{type(exc).__name__}: {exc}"
        ) from None
    try:
        json.dumps(params)
    except (TypeError, ValueError) as exc:
        raise SmcdpError(f"plugin {spec.protocol!r} normalised params to non-JSON: {exc}") from None
    return params
