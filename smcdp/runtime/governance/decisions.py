"""What becomes of a proposal that waits for this party's operator (docs/governance.md).

:class:`Decisions` is the one place a waiting proposal changes state: queued (bounded per peer and in
all), approved or rejected by the operator, withdrawn by an Abort, expired past
``limits.approval_timeout_seconds``, and started when the initiator repeats its ``Propose`` after the
approval.  The states and their files are :mod:`smcdp.runtime.governance.approvals`';
:class:`~smcdp.runtime.governance.gate.Governor` decides which proposals wait and delegates here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from smcdp.errors import DeadlineExceeded, InvalidMessage, PreconditionFailed, ResourceExhausted, SmcdpError
from smcdp.net.grpc_channel import AlreadyExists, NotFound
from smcdp.net.server import PendingApproval, SessionSpec
from smcdp.plugins.base import DataBound, OutputFlow, SessionSummary
from smcdp.runtime.config import PartyConfig
from smcdp.runtime.governance import views
from smcdp.runtime.governance.approvals import Proposal, ProposalStore, check_reason
from smcdp.runtime.governance.audit import AuditLog
from smcdp.runtime.governance.exact import ExactSessions, QuotaRefused
from smcdp.runtime.governance.policy import (
    OutOfBounds,
    PolicyDenied,
    Refusal,
    refusal,
    releases_exact,
    untested_bounds,
)
from smcdp.runtime.governance.reservations import Reservations
from smcdp.runtime.limits import fair_share
from smcdp.states import ProposalState

#: audits a refusal (the governor's, throttled per peer): (peer, error, proposal, session)
RefusalAudit = Callable[[str, SmcdpError, Mapping[str, Any] | None, str | None], None]


class ApprovalExpired(DeadlineExceeded, Refusal):
    """The operator did not approve within ``limits.approval_timeout_seconds``."""


class QueueFull(ResourceExhausted, Refusal):
    """Too many proposals already wait for this party's operator (RESOURCE_EXHAUSTED)."""


class Decisions:
    """The proposals waiting for one party's operator and every decision on them."""

    def __init__(
        self,
        config: PartyConfig,
        name: str,
        proposals: ProposalStore,
        reservations: Reservations,
        exact: ExactSessions,
        audit: AuditLog,
        lock: threading.RLock,
        refused: RefusalAudit,
    ) -> None:
        self.config = config
        self.name = name
        self.proposals = proposals
        self.reservations = reservations
        self.exact = exact
        self.audit = audit
        #: the governor's lock: a decision and an admission never interleave
        self._lock = lock
        self._refused = refused

    def _pending(self) -> PendingApproval:
        return PendingApproval(f"waiting for the operator of party {self.name!r} to approve (smcdp session approve)")

    # ------------------------------------------------------------------ a proposal that waits
    def waiting_for_operator(self, session_id: str, peer: str) -> bool:
        """A proposal of ``session_id`` waits here for this party's operator, and ``peer`` takes part in it."""
        p = self.proposals.get(session_id)
        return p is not None and p.state == ProposalState.PENDING and peer in p.roles.values()

    def check_queue(self, peer: str, sid: str) -> None:
        """The approval queue is bounded per peer and in all (else one peer can leave hundreds waiting)."""
        lim = self.config.limits
        waiting = [p for p in self.proposals.all() if ProposalState(p.state).open]
        mine = sum(p.initiator == peer for p in waiting)
        n = len(self.config.proposers)
        share = fair_share(lim.pending_approvals_per_peer, lim.pending_approvals_total, n)
        if mine >= share:
            raise refusal(
                QueueFull,
                self.name,
                sid,
                "limits.pending_approvals_per_peer",
                f"{peer!r} already has {mine} proposals waiting for its operator "
                f"(limits.pending_approvals_per_peer = {lim.pending_approvals_per_peer}, and its share of "
                f"limits.pending_approvals_total = {lim.pending_approvals_total} among the {n} peers the policy "
                f"admits: {share})",
            )
        if len(waiting) >= lim.pending_approvals_total:
            raise refusal(
                QueueFull,
                self.name,
                sid,
                "limits.pending_approvals_total",
                f"{len(waiting)} proposals already wait for its operator "
                f"(limits.pending_approvals_total = {lim.pending_approvals_total})",
            )

    def queue(
        self, peer: str, spec: SessionSpec, role: str, summary: SessionSummary | None, charges: bool
    ) -> PendingApproval:
        """Keep an admitted proposal for the operator (its file survives a restart) until it expires."""
        now = time.time()
        p = self.proposals.save(
            Proposal(
                session_id=spec.session_id,
                protocol=spec.protocol,
                roles=dict(spec.roles),
                params=dict(spec.params),
                seed=spec.seed,
                timeout_seconds=spec.timeout_seconds,
                initiator=peer,
                role=role,
                summary=None if summary is None else summary.as_dict(),
                charges_budget=charges,
                received_at=now,
                expires_at=now + self.config.limits.approval_timeout_seconds,
            )
        )
        self.audit.append(
            "pending",
            session=spec.session_id,
            rule=f"policy.{spec.protocol}.approval",
            expires_at=views.iso(p.expires_at),
        )
        return self._pending()

    def repeat(self, p: Proposal, peer: str, spec: SessionSpec) -> SessionSpec | PendingApproval:
        """A Propose for a session this party already keeps a proposal of: still waiting, started
        (once approved), or refused with the operator's reason."""
        sid = p.session_id
        if not p.same_request(peer, spec):
            raise AlreadyExists(f"session {sid!r} already exists at party {self.name!r} (another proposal)")
        p = self.expire_one(p)
        if p.state == ProposalState.PENDING:
            return self._pending()
        if p.state == ProposalState.APPROVED:
            outputs = [
                OutputFlow(o["name"], tuple(o["recipients"]), tuple(o["sources"]), bool(o["dp"]))
                for o in (p.summary or {}).get("outputs", ())
            ]
            exact = releases_exact(outputs, p.role, p.roles, self.name)
            # a proposal waiting for its operator is a peer's: what it tests is counted
            bounds = [DataBound.from_dict(b) for b in (p.summary or {}).get("data_bounds", {}).get(p.role, ())]
            tests = untested_bounds(self.exact.policy, p.protocol, bounds)
            try:  # another session may have taken the last exact or bound-test slot since the operator approved
                self.exact.check(sid, p.protocol, exact, tests)
            except QuotaRefused as exc:
                self.reservations.give_back(sid, str(exc))
                self.proposals.decide(p, ProposalState.REJECTED.value, str(exc))
                self._refused(peer, exc, None, sid)
                raise
            self.proposals.decide(p, ProposalState.STARTED.value, p.reason)
            self.exact.accepted(sid, p.role, "operator", p.protocol, exact, tests)
            return p.spec()
        if p.state == ProposalState.REJECTED:
            raise refusal(PolicyDenied, self.name, sid, "approval", f"its operator rejected the session: {p.reason}")
        if p.state == ProposalState.EXPIRED:
            raise refusal(
                ApprovalExpired,
                self.name,
                sid,
                "approval",
                "its operator did not approve the session within its approval timeout "
                f"(limits.approval_timeout_seconds = {self.config.limits.approval_timeout_seconds:g})",
            )
        raise refusal(OutOfBounds, self.name, sid, "approval", f"the proposal is {p.state} here")

    # ------------------------------------------------------------------ the operator's decisions
    def approve(self, session_id: str, charges: bool | None = None, summary: SessionSummary | None = None) -> dict:
        """``charges``, ``summary``: whether the session costs budget and what, by today's policy, budget and
        plug-in (the governor's check when the operator approves); None: as decided when it was queued."""
        with self._lock:
            p = self.expire_one(self.proposal(session_id))
            if p.state == ProposalState.APPROVED:
                return views.describe(p)
            if p.state != ProposalState.PENDING:
                raise PreconditionFailed(f"proposal {session_id!r} is {p.state}; only a pending one can be approved")
            if p.charges_budget if charges is None else charges:
                cost = summary if summary is not None else SessionSummary(**_summary_args(p.summary))
                c = self.reservations.reserve(session_id, cost, p.initiator, refuse=False)
                self.reservations.audit_amount("reserved", c, session=session_id)
            p = self.proposals.decide(p, ProposalState.APPROVED.value)
            self.audit.append("approved", session=session_id, by="operator")
            return views.describe(p)

    def reject(self, session_id: str, reason: str) -> dict:
        try:
            reason = check_reason(reason)
        except ValueError as exc:
            raise InvalidMessage(str(exc)) from None
        with self._lock:
            p = self.expire_one(self.proposal(session_id))
            if not ProposalState(p.state).open:
                raise PreconditionFailed(
                    f"proposal {session_id!r} is {p.state}; only a pending or approved one can be rejected"
                )
            self.reservations.give_back(session_id, f"rejected by the operator: {reason}")
            p = self.proposals.decide(p, ProposalState.REJECTED.value, reason)
            self.audit.append("rejected", session=session_id, by="operator", reason=reason)
            return views.describe(p)

    # ------------------------------------------------------------------ a proposal's other ends
    def withdraw(self, peer: str, session_id: str, message: str) -> bool:
        """An Abort for a proposal still waiting here; True if there was one."""
        with self._lock:
            p = self.proposals.get(session_id)
            if p is None or not ProposalState(p.state).open or peer not in p.roles.values():
                return False
            self.reservations.give_back(session_id, f"withdrawn: {peer} aborted the session")
            self.proposals.decide(p, ProposalState.WITHDRAWN.value, f"{peer}: {message}"[:1000])
            self.audit.append("withdrawn", session=session_id, peer=peer, message=message)
            return True

    def expire(self) -> None:
        with self._lock:
            for p in self.proposals.all():
                self.expire_one(p)

    def expire_one(self, p: Proposal) -> Proposal:
        """``p``, expired first if it is still open past its approval timeout."""
        if not ProposalState(p.state).open or time.time() < p.expires_at:
            return p
        self.reservations.give_back(p.session_id, "the proposal expired before the initiator started it")
        p = self.proposals.decide(
            p, ProposalState.EXPIRED.value, "not approved and started within the approval timeout"
        )
        self.audit.append("expired", session=p.session_id)
        return p

    def proposal(self, session_id: str) -> Proposal:
        p = self.proposals.get(session_id)
        if p is None:
            raise NotFound(f"party {self.name!r} has no proposal {session_id!r}")
        return p


def _summary_args(d: Mapping[str, Any] | None) -> dict:
    """A stored summary dict back into SessionSummary's arguments (outputs are not needed to reserve)."""
    d = dict(d or {})
    return {
        "protocol": d.get("protocol", ""),
        "key_bits": d.get("key_bits", {}),
        "data_roles": tuple(d.get("data_roles", ())),
        "coordinator_roles": tuple(d.get("coordinator_roles", ())),
        "outputs": (),
        "epsilon": d.get("epsilon"),
        "delta": d.get("delta", 0.0),
        "rho": d.get("rho"),
        "record_bound": d.get("record_bound"),
    }


__all__ = ["ApprovalExpired", "Decisions", "QueueFull"]
