"""Who may make this party do what: the gate every proposal passes (docs/governance.md).

:class:`Governor` is what :class:`smcdp.runtime.party.Party` calls on ``Propose``, when a
session is resumed or restored (:meth:`Governor.readmit`: admitted again), on the
operator's approve/reject/list/show, when a session reaches its release point and when it
ends, and for the peers' signed audit heads.  It composes

* deny by default, the seed rule and the ``[policy]`` (:mod:`smcdp.runtime.governance.policy`),
  evaluated on the plug-in's :class:`~smcdp.plugins.base.SessionSummary` of the proposal;
* operator approval (:mod:`smcdp.runtime.governance.approvals`), its queue bounded per peer, and
  the decisions on a waiting proposal (:mod:`smcdp.runtime.governance.decisions`);
* the privacy budget (:mod:`smcdp.runtime.governance.charges`);
* the audit trail (:mod:`smcdp.runtime.governance.audit`): every proposal, decision (with the rule),
  reservation, charge, release, abort and session end -- one peer's refusals past an allowance
  counted, not written one by one;
* the witnesses (:mod:`smcdp.runtime.governance.witness`): this party's head signed for its
  peers, theirs kept.

Everything here runs before a session exists: no input file is opened until the
proposal has passed every check (the plug-in reads inputs only in ``run_role``, after
``Begin``).  Methods are synchronous (files, SQLite) and thread-safe; the party calls
them from executor threads, never on its event loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from smcdp.errors import PreconditionFailed, SmcdpError
from smcdp.net.channel import Channel
from smcdp.net.grpc_channel import NotFound
from smcdp.net.server import PendingApproval, SessionSpec
from smcdp.plugins.base import ProtocolPlugin, SessionContext, SessionSummary
from smcdp.plugins.keystore import stored_groups
from smcdp.plugins.registry import get_plugin
from smcdp.runtime.config import PartyConfig
from smcdp.runtime.governance import views
from smcdp.runtime.governance.approvals import Proposal, ProposalStore, proposals_dir
from smcdp.runtime.governance.audit import AuditLog, RefusalThrottle, read_entries
from smcdp.runtime.governance.charges import SessionCharges
from smcdp.runtime.governance.decisions import ApprovalExpired, Decisions, QueueFull
from smcdp.runtime.governance.exact import ExactSessions, QuotaRefused
from smcdp.runtime.governance.policy import (
    OutOfBounds,
    check_seed,
    check_seeded_key,
    evaluate,
    refusal,
    releases_exact,
    untested_bounds,
)
from smcdp.runtime.governance.reservations import BudgetRefused, Reservations
from smcdp.runtime.governance.unbegun import Unbegun
from smcdp.runtime.governance.witness import Witnessing, WitnessStore
from smcdp.states import ProposalState, SessionState

log = logging.getLogger("smcdp.governance")

#: audit events that show a budget dataset's ledger in use (its total set, a reservation, a charge)
LEDGER_EVENTS = ("budget-set", "reserved", "charged")

#: how often waiting proposals are checked for expiry
EXPIRY_PERIOD = 1.0


def warnings_for(config: PartyConfig) -> list[str]:
    """What a party prints loudly at start-up about its governance settings."""
    out = []
    pol = config.policy
    if pol is None:
        out.append(
            f"party {config.name} has no [policy]: it refuses EVERY session a peer proposes (deny by "
            "default); only its own operator may start sessions. Write a [policy] "
            "(docs/governance.md) saying what it joins."
        )
    elif not pol.restricts:
        out.append(
            f"party {config.name} has [policy] open = true: ANY peer in [peers] may start ANY session "
            "involving it, in any role, with any parameters (only the seed rule holds). Test "
            "deployments only: write a [policy] (docs/governance.md) before this party holds real data."
        )
    elif not pol.protocols:
        out.append(
            f"party {config.name} joins no protocol (its [policy] has no [policy.<protocol>] table): "
            "every proposal will be refused."
        )
    if pol is not None and pol.allow_seeded:
        out.append(
            f"UNSAFE: party {config.name} has [policy] allow_seeded = true: a session's seed, chosen by "
            "the initiating peer, replaces this party's own randomness, DP noise included, so a "
            "release can be recomputed and its noise subtracted. Tests and demos only."
        )
    if config.inputs and config.budget is None:
        what = "are refused" if pol is not None and pol.restricts else "are NOT charged to any budget"
        out.append(
            f"party {config.name} has inputs but no [budget]: differentially private releases over its data {what}."
        )
    return out


class Governor:
    """Policy, approvals, budget and audit of one party."""

    def __init__(self, config: PartyConfig, name: str, tls=None) -> None:
        self.config = config
        self.name = name
        self.policy = config.policy
        self.audit = AuditLog(config.data_dir, name)
        #: the peers' signed audit heads this party keeps, and its TLS key that signs its own (``tls``, a
        #: :class:`~smcdp.net.tls.TlsMaterial`; without it nothing is witnessed)
        self.tls = tls
        self.witnesses = WitnessStore(config.data_dir, name, b"" if tls is None else tls.ca_pem)
        self.witnessing = Witnessing(self.witnesses, self.audit, tls)
        self.charges = SessionCharges(config.budget, config.data_dir, name) if config.budget else None
        self.proposals = ProposalStore(proposals_dir(config.data_dir))
        self._lock = threading.RLock()
        #: which admitted session holds which budget entry
        self.reservations = Reservations(self.charges, self.audit, name, self._lock)
        #: refusals per peer and window: the first few in full, then a count, so one peer's flood stays a few lines
        self.throttle = RefusalThrottle()
        #: proposals accepted automatically whose audit lines wait for Begin: per peer and window only the
        #: first few of those that end before it are written in full, the others counted, as refusals are
        self.unbegun = Unbegun(self.audit, self._lock)
        #: sessions releasing exact outputs from this party's data, against max_exact_sessions
        self.exact = ExactSessions(self.policy, self.audit, name, self._lock)
        #: the plug-in of a protocol, to admit a proposal again when its operator approves it: the registry's, or
        #: the one a proposal of the protocol was last admitted with in this process (tests' own plug-ins)
        self.plugin_for: Callable[[str], ProtocolPlugin] = get_plugin
        self._plugins: dict[str, ProtocolPlugin] = {}
        #: what becomes of the proposals that wait for the operator
        self.decisions = Decisions(
            config, name, self.proposals, self.reservations, self.exact, self.audit, self._lock, self._refused
        )

    # ------------------------------------------------------------------ lifecycle
    def start(self, live: Iterable[str] = ()) -> None:
        """Open the audit log (repairing a torn tail), the ledger and the proposals; reconcile.

        ``live``: sessions this party will continue from their checkpoints (restored after
        a crash, or waiting for ``session resume``): their reservations stay open."""
        used = next(
            (f"{d.name}/ exists" for d in (proposals_dir(self.config.data_dir), self.witnesses.dir) if d.is_dir()), None
        )
        repaired = self.audit.open(used_before=used)
        if repaired is not None:
            log.warning(
                "audit log: repaired an incomplete last line (a crash mid-write); the fragment is kept in %s",
                repaired["saved_as"],
            )
        changed = self.charges.open(self._ledger_used_before()) if self.charges is not None else None
        try:
            self.proposals.load()
        except ValueError as exc:
            raise PreconditionFailed(str(exc)) from None
        pol = self.policy
        self.exact.load(self.config.data_dir)
        self.audit.append(
            "start",
            policy=None if pol is None else pol.as_dict(),
            budget=None if self.charges is None else self.charges.status(),
        )
        if changed is not None:
            assert self.charges is not None  # only an opened [budget] ledger reports a change
            self.audit.append(
                "budget-set",
                dataset=self.charges.dataset,
                epsilon_before=changed[0],
                epsilon=changed[1],
                source=str(self.config.source or "configuration"),
            )
        self.expire()
        self._reconcile(set(live))
        for text in warnings_for(self.config):
            log.warning("!!! %s", text)

    def _ledger_used_before(self) -> str | None:
        """Where this party's (verified) audit trail first shows its budget dataset's ledger in use: its budget set,
        a reservation or a charge -- or None."""
        assert self.charges is not None
        dataset = self.charges.dataset
        for line, entry, _raw in read_entries(self.config.data_dir):
            if entry and entry.get("event") in LEDGER_EVENTS and entry.get("dataset") == dataset:
                return f"audit line {line}: {entry['event']}"
        return None

    def stop(self) -> None:
        try:
            self._summarise(self.throttle.flush())
            self.unbegun.stop()
            self.audit.append("stop")
        except SmcdpError as exc:  # pragma: no cover - the log was broken earlier; say so, stop anyway
            log.error("audit log: %s", exc)
        self.audit.close()

    def _reconcile(self, live: set[str]) -> None:
        """After a restart: release the open reservations of sessions that no longer run here; an approved
        proposal the initiator has not picked up yet and a session continued from its checkpoint
        (``live``) keep theirs (:meth:`Reservations.reconcile`)."""
        approved = {p.session_id for p in self.proposals.all() if p.state == ProposalState.APPROVED}
        self.reservations.reconcile(approved | live)

    async def expiry_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(EXPIRY_PERIOD)
            try:
                await loop.run_in_executor(None, self.expire)
                await loop.run_in_executor(None, self._summarise, self.throttle.due())
                await loop.run_in_executor(None, self.unbegun.due)
            except SmcdpError as exc:  # pragma: no cover - logged; the next round tries again
                log.error("expiring proposals: %s", exc)

    def _summarise(self, summaries: list[dict]) -> None:
        for summary in summaries:
            self.audit.append("refusals-summarised", **summary)

    # ------------------------------------------------------------------ admission
    def admit(self, peer: str, spec: SessionSpec, plugin: ProtocolPlugin, role: str) -> SessionSpec | PendingApproval:
        """Decide on a proposal (``spec.params`` already normalised by the plug-in).

        Returns the spec to prepare (its timeout shortened by an approval wait), or
        :class:`PendingApproval`; raises the refusal.  Idempotent for a repeated proposal.
        """
        with self._lock:
            self._plugins[spec.protocol] = plugin
            prop = self.proposals.get(spec.session_id)
            if prop is not None:
                return self.decisions.repeat(prop, peer, spec)
            return self._first(peer, spec, plugin, role)

    def _first(self, peer: str, spec: SessionSpec, plugin: ProtocolPlugin, role: str) -> SessionSpec | PendingApproval:
        sid = spec.session_id
        proposal = _proposal(peer, spec, role)
        reserved = None
        try:
            summary, charges = self._check(peer, spec, plugin, role)
            approval = self.policy.approval_for(spec.protocol) if self.policy is not None else "auto"
            exact = summary is not None and releases_exact(summary.outputs, role, spec.roles, self.name)
            bounds = summary.data_bounds.get(role, ()) if summary else ()
            uncovered = untested_bounds(self.policy, spec.protocol, bounds)
            # its own operator's session is its own decision, not counted; the trail still names what it tests
            tests, own = ((), uncovered) if peer == self.name else (uncovered, ())
            self.exact.check(sid, spec.protocol, exact, tests)
            pending = approval == "operator" and peer != self.name
            if pending:
                self.decisions.check_queue(peer, sid)
            elif charges:
                assert summary is not None  # _check finds a cost only in a summary
                reserved = self.reservations.reserve(sid, summary, peer, refuse=True)
        except SmcdpError as exc:
            self._refused(peer, exc, proposal)  # a flood of refusals is counted, not written one by one
            raise
        if not pending and reserved is None and not exact and not tests and peer != self.name:
            # nothing reserved or counted: its lines wait for Begin (an abort before it is summarised)
            self.unbegun.keep(
                sid, [("proposal", proposal), ("accepted", dict(session=sid, role=role, approval="auto"))]
            )
            return spec
        self.audit.append("proposal", **proposal)
        if pending:
            return self.decisions.queue(peer, spec, role, summary, charges)
        if reserved is not None:
            self.reservations.audit_amount("reserved", reserved, session=sid)
        how = "auto" if peer != self.name else "own operator"
        self.exact.accepted(sid, role, how, spec.protocol, exact, tests, noted=own)
        return spec

    def _check(
        self, peer: str, spec: SessionSpec, plugin: ProtocolPlugin, role: str
    ) -> tuple[SessionSummary | None, bool]:
        """The policy's checks on a proposal (nothing written): (its summary, whether it costs budget)."""
        sid = spec.session_id
        if self.policy is None:  # deny by default: refused before anything else is looked at
            evaluate(
                None,
                me=self.name,
                session_id=sid,
                initiator=peer,
                role=role,
                roles=spec.roles,
                summary=None,
                allow_insecure_keys=self.config.allow_insecure_keys,
            )
        check_seed(spec.seed, self.policy, self.name, sid)
        summary = self._summary(plugin, spec)
        check_seeded_key(spec.seed, summary, self.name, sid)
        # the receive limit the session would have here: its protocol's envelope capped by [limits] (None: none)
        derived = plugin.traffic_envelope(dict(spec.params), dict(spec.roles), role)
        envelope = None if derived is None else self.config.limits.envelope(derived)
        evaluate(
            self.policy,
            me=self.name,
            session_id=sid,
            initiator=peer,
            role=role,
            roles=spec.roles,
            summary=summary,
            allow_insecure_keys=self.config.allow_insecure_keys,
            receive_bytes=None if envelope is None else envelope.session_bytes,
            key_groups=stored_groups(self.config.data_dir / "keys", self.config.allow_insecure_keys)
            if summary is not None and summary.key == "single"
            else None,
        )
        costs = summary is not None and summary.epsilon is not None and role in summary.data_roles
        if costs and self.charges is None and self.policy is not None and self.policy.restricts:
            raise refusal(
                OutOfBounds,
                self.name,
                sid,
                "budget",
                "it has no privacy budget ([budget]) and the session releases a "
                "differentially private output computed from its data",
            )
        return summary, costs and self.charges is not None

    def _refused(
        self, peer: str, exc: SmcdpError, proposal: Mapping[str, Any] | None, session: str | None = None, **fields: Any
    ) -> None:
        """Audit a refusal: in full while ``peer`` is within its allowance, else counted."""
        rule = getattr(exc, "rule", None) or "validation"
        session = (proposal or {}).get("session", session)
        ended, in_full = self.throttle.refused(peer, rule, session)
        self._summarise(ended)
        if in_full:
            if proposal is not None:
                self.audit.append("proposal", **proposal)
            self.audit.append("refused", session=session, rule=rule, code=exc.code, message=str(exc), **fields)

    def readmit(
        self,
        initiator: str,
        spec: SessionSpec,
        plugin: ProtocolPlugin,
        role: str,
        how: str,
        precheck: Callable[[], None] | None = None,
    ) -> None:
        """A session continues from its checkpoint (``how``: "resume" or "restore"): admitted again
        by today's policy and budget, so a resume is no way around them.  Its reservation, if it still
        holds one, stays; if it was released (the session failed resumably, or the party restarted
        meanwhile) and its release point was not reached, the cost is reserved again; a cost already
        charged stays charged and the replay re-sends the same output."""
        sid = spec.session_id
        with self._lock:
            reserved = None
            try:
                if precheck is not None:  # the party's limits (restarts, deadline, slots, envelope)
                    precheck()
                summary, charges = self._check(initiator, spec, plugin, role)
                res = self.reservations
                if charges and sid not in res.held and not res.was_charged(sid):
                    held = res.open_reservation(sid)
                    if held is not None:
                        res.keep(sid, held.key)
                    else:
                        assert summary is not None  # _check finds a cost only in a summary
                        reserved = res.reserve(sid, summary, initiator, refuse=True)
            except SmcdpError as exc:
                self._refused(initiator, exc, None, sid, how=how)
                raise
            if reserved is not None:
                self.reservations.audit_amount("reserved", reserved, session=sid, why=f"{how}: admitted again")
            # with what the session is: a proposal accepted with nothing reserved had its lines kept back
            # until Begin (governance.unbegun), and a crash before Begin lost them
            self.audit.append("readmitted", how=how, **_proposal(initiator, spec, role))

    def _summary(self, plugin: ProtocolPlugin, spec: SessionSpec) -> SessionSummary | None:
        try:
            return plugin.summary(spec.params, spec.roles)
        except PreconditionFailed:
            # a third-party plug-in without a summary: only a party without protocol rules runs it
            if self.policy is not None and self.policy.restricts:
                raise refusal(
                    OutOfBounds,
                    self.name,
                    spec.session_id,
                    "summary",
                    f"the plug-in of {spec.protocol!r} does not describe its sessions, so this "
                    "party's policy cannot admit them",
                ) from None
            return None

    # ------------------------------------------------------------------ operator decisions (governance.decisions)
    def approve(self, session_id: str) -> dict:
        """The operator approves a pending proposal -- admitted again by today's policy and budget first, as a
        resume is: a proposal queued before a restart that changed ``[policy]`` or ``[budget]`` was approved under
        the old decision (a session whose cost was not charged then released its output with no charge, a
        review).  One that no longer passes is rejected with the refusal's reason (its proposer learns it on its
        next Propose) and the refusal raised to the operator."""
        with self._lock:
            p = self.decisions.expire_one(self.decisions.proposal(session_id))
            charges, summary = None, None
            if p.state == ProposalState.PENDING:
                try:
                    plugin = self._plugins.get(p.protocol) or self.plugin_for(p.protocol)
                    summary, charges = self._check(p.initiator, p.spec(), plugin, p.role)
                except SmcdpError as exc:
                    reason = f"no longer admitted here: {exc}"
                    self.proposals.decide(p, ProposalState.REJECTED.value, reason)
                    self.audit.append("rejected", session=session_id, by="policy", reason=reason)
                    raise
            # today's cost is what is reserved (a plug-in's cost may change across a restart or an upgrade)
            return self.decisions.approve(session_id, charges=charges, summary=summary)

    def reject(self, session_id: str, reason: str) -> dict:
        return self.decisions.reject(session_id, reason)

    def withdraw(self, peer: str, session_id: str, message: str) -> bool:
        """An Abort for a proposal still waiting here; True if there was one."""
        return self.decisions.withdraw(peer, session_id, message)

    def expire(self) -> None:
        self.decisions.expire()

    def _give_back(self, session_id: str, reason: str) -> None:
        self.reservations.give_back(session_id, reason)

    # ------------------------------------------------------------------ running sessions
    def wrap(self, plugin: ProtocolPlugin, session_id: str) -> ProtocolPlugin:
        """The plug-in a session runs: with a release gate and settlement when its cost is reserved."""
        if session_id not in self.reservations.held:
            return plugin
        return _Governed(plugin, self, session_id)

    def release_point(self, session_id: str) -> None:
        """The session's output may leave this party from now on: the reservation becomes a charge."""
        self.reservations.release_point(session_id)

    def settle(self, session_id: str, succeeded: bool, reason: str) -> None:
        """At the end of a session: commit what is still reserved on success, release it on failure."""
        self.reservations.settle(session_id, succeeded, reason)

    def session_done(self, session_id: str, record: Mapping[str, Any], began: bool = True) -> bool:
        """A session ended here (called from its thread).  Never raises: the record is written already.
        False if it ended before Begin past its initiator's allowance -- counted in an ``unbegun-summarised``
        line, not audited in full: nothing of it need stay on disk (the session keeps its record in memory).

        A session that failed resumably gives its reservation back too (else one Abort
        UNAVAILABLE from any participant would hold it for ever); ``session resume`` admits
        it again (:meth:`readmit`).  One that ended before its role began here (``began`` false:
        aborted or expired between Propose and Begin) computed nothing from this party's data and
        gives back its place in ``max_exact_sessions`` (else proposals made at once, one of
        them refused, would spend every other party's allowance; any initiator could spend it so)."""
        err = record.get("error") or {}
        resumable = record.get("state") == SessionState.FAILED and record.get("resumable")
        try:
            if not began:
                self.exact.give_back(session_id)
            self.settle(session_id, record.get("state") == SessionState.SUCCEEDED, str(err.get("message", "")))
            if not self.unbegun.ended(session_id, str(record.get("initiator") or ""), began):
                return False  # ended before Begin, past its initiator's allowance: counted
            self.audit.append(
                "session-end",
                session=session_id,
                state="failed-resumable" if resumable else record.get("state"),
                code=err.get("code"),
                origin=err.get("origin"),
                message=err.get("message"),
                # a failure a peer reported: whose word it was, and a culprit it named that this party did not
                # confirm (runtime.liveness.weigh_claim); absent otherwise
                reported_by=err.get("reported_by"),
                reported_culprit=err.get("reported_culprit")
                if err.get("reported_culprit") != err.get("origin")
                else None,
            )
        except SmcdpError as exc:  # e.g. a session ending while the party shuts down (audit closed)
            log.error("session %s: could not settle or audit its end: %s", session_id, exc)
        return True

    def checkpoint_deleted(self, info: Mapping[str, Any], retention: float) -> None:
        """The retention sweep removed a session's checkpoint and journal."""
        sid = str(info["session"])
        with self._lock:
            self._give_back(sid, "its checkpoint was deleted: the session cannot continue")
        self.audit.append(
            "checkpoint-deleted",
            **dict(info),
            reason=f"the session ended over limits.failed_retention_seconds = {retention:g} s ago",
        )

    def prune(self, retention: float) -> None:
        """Forget decided proposals older than ``retention`` (their decisions are in the audit trail)."""
        with self._lock:
            gone = self.proposals.prune(time.time() - retention)
        if gone:
            self.audit.append(
                "proposals-pruned",
                count=len(gone),
                sessions=gone[:20],
                reason=f"decided over limits.failed_retention_seconds = {retention:g} s ago",
            )

    def aborted(self, peer: str, session_id: str, code: str, message: str) -> None:
        fields = dict(session=session_id, peer=peer, code=code, message=message)
        if not self.unbegun.add(session_id, "abort", fields):  # before Begin: kept with the proposal's lines
            self.audit.append("abort", **fields)

    def abandon(self, session_id: str, reason: str) -> None:
        """Admitted but never prepared (its thread did not start, the party began stopping): it computed
        nothing from this party's data, so its reservation and its place in ``max_exact_sessions`` go back.
        Never raises (a party stopping may have closed its audit)."""
        try:
            self.exact.give_back(session_id)
            self.unbegun.write(session_id)
            self.settle(session_id, False, reason)
        except SmcdpError as exc:
            log.error("session %s: could not settle its abandoned admission: %s", session_id, exc)

    # ------------------------------------------------------------------ operator views (governance.views)
    def waiting_status(self, session_id: str) -> dict | None:
        """GetStatus of a proposal that waits for this party's operator (None if there is none)."""
        p = self.proposals.get(session_id)
        return None if p is None or p.state != ProposalState.PENDING else views.waiting_status(p, self.name)

    def describe(self, p: Proposal) -> dict:
        return views.describe(p)

    def list_sessions(
        self,
        pending_only: bool,
        live: Mapping[str, Mapping[str, Any]],
        recorded: Callable[[int], Iterable[Mapping[str, Any]]] = lambda limit: (),
    ) -> list[dict]:
        """The proposals, and unless ``pending_only`` the live sessions and the newest ended ones
        (``recorded(limit)``: the records, newest first; blocking)."""
        with self._lock:
            self.expire()
            proposals = [p for p in self.proposals.all() if not pending_only or p.state == ProposalState.PENDING]
        if pending_only:
            return [views.describe(p) for p in proposals]
        return views.session_list(proposals, live, recorded, self.reservations)

    def show(self, session_id: str, record: Mapping[str, Any] | None) -> dict:
        with self._lock:
            p = self.proposals.get(session_id)
            if p is not None:
                p = self.decisions.expire_one(p)
        if p is None and record is None:
            raise NotFound(f"party {self.name!r} has no session or proposal {session_id!r}")
        if p is not None:
            out = views.describe(p)
        else:
            assert record is not None  # neither: NotFound above
            out = views.describe_record(record, self.reservations)
        if p is not None and record is not None:
            out["session"] = views.describe_record(record, self.reservations)
        return out


class _Governed(ProtocolPlugin):
    """A plug-in whose session holds a budget reservation: release gate and settlement."""

    def __init__(self, inner: ProtocolPlugin, governor: Governor, session_id: str) -> None:
        self.inner = inner
        self.name = inner.name
        self.coordinating_roles = inner.coordinating_roles
        self.governor = governor
        self.session_id = session_id

    def validate_params(self, params, roles):
        return self.inner.validate_params(params, roles)

    def summary(self, params, roles):
        return self.inner.summary(params, roles)

    def traffic_envelope(self, params, roles, role):
        # without this a governed session (a DP release charged to the budget) would fall back to
        # the [limits] ceilings -- 2 GiB -- instead of its protocol's envelope
        return self.inner.traffic_envelope(params, roles, role)

    def prepare_next(self, root, inputs, allow_insecure_keys):
        return self.inner.prepare_next(root, inputs, allow_insecure_keys)

    async def run_role(self, role: str, ch: Channel, ctx: SessionContext) -> dict:
        ctx = dataclasses.replace(ctx, on_release=lambda: self.governor.release_point(self.session_id))
        try:
            result = await self.inner.run_role(role, ch, ctx)
        except BaseException as exc:
            self.governor.settle(self.session_id, False, f"{type(exc).__name__}: {exc}")
            raise
        self.governor.settle(self.session_id, True, "")
        return result


__all__ = ["ApprovalExpired", "BudgetRefused", "Governor", "QueueFull", "QuotaRefused", "warnings_for"]


def _proposal(peer: str, spec: SessionSpec, role: str) -> dict[str, Any]:
    """What the audit trail records of a proposal (and of a session admitted again)."""
    return dict(
        session=spec.session_id,
        peer=peer,
        protocol=spec.protocol,
        role=role,
        roles=dict(spec.roles),
        params=dict(spec.params),
        seeded=spec.seed is not None,
        timeout_seconds=spec.timeout_seconds,
    )
