"""What the console and ``/metrics`` read about a party: one small read-model.

The facts already exist in the party; this module gathers them without changing how a session
runs:

* sessions -- the live ones (``Party.sessions``: state, ``ch.progress()`` round and step, the
  channel's :class:`~smcdp.net.channel.TrafficStats`), the proposals waiting for the operator
  (the governor's proposal store) and the ended ones (``Party.records``);
* traffic -- bytes sent per peer from the channels' stats; bytes received and messages refused
  from the mailbox server, which reports every delivery and refusal to its
  :class:`~smcdp.net.server.PeerHost` (``inbound_delivered`` / ``inbound_refused``);
* peers -- probed every ``[console] probe_seconds`` by :class:`PeerProber`: grpc.health.v1
  over the party's own mutual-TLS channel (up or down, round-trip time) and the certificate the
  peer presents in a TLS handshake (subject, issuer, expiry);
* budgets -- the governance ledger (:mod:`smcdp.runtime.governance.charges`, :mod:`smcdp.dp.ledger`);
* audit -- the tail of ``audit.jsonl`` and :func:`smcdp.runtime.governance.audit.verify_log`.

What it never reads or returns: keys, inputs, outputs (a record's ``result``), seeds and
randomness roots (a record's ``seed``; only *whether* a session was seeded), checkpoints.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import logging
import socket
import ssl
import threading
import time
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from grpc_health.v1 import health_pb2, health_pb2_grpc

from smcdp.dp.budget import fmt_amount
from smcdp.net.config import parse_address
from smcdp.net.grpc_channel import PeerConnector
from smcdp.net.tls import party_identity_name
from smcdp.runtime.governance.audit import read_entries, verify_log
from smcdp.states import PENDING_APPROVAL, ProposalState, SessionState

log = logging.getLogger("smcdp.console")

#: ended sessions listed (most recent records first)
MAX_RECORDS = 200
#: audit lines shown
AUDIT_TAIL = 50
#: fields of a session record the console may show (never result, seed, params' secrets)
_RECORD_FIELDS = (
    "session_id",
    "protocol",
    "role",
    "roles",
    "initiator",
    "state",
    "error",
    "started_at",
    "finished_at",
    "seconds",
    "restarts",
    "resumable",
    "timeout_seconds",
)
#: audit fields never shown (none of today's events carries them; a later one might)
_SECRET_WORDS = ("seed", "secret", "key", "randomness", "private", "result", "output", "input")


def _now_iso() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


@dataclass
class PeerHealth:
    """The last probe of one peer."""

    name: str
    address: str
    up: bool | None = None  # None: not probed yet
    rtt_ms: float | None = None
    status: str = "not probed yet"
    probed_at: str | None = None
    cert_subject: str | None = None
    cert_issuer: str | None = None
    cert_not_after: str | None = None
    cert_days_left: float | None = None
    cert_error: str | None = None

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def cert_facts(cert: x509.Certificate) -> dict:
    left = (cert.not_valid_after_utc - _dt.datetime.now(_dt.UTC)).total_seconds() / 86400
    return {
        "cert_subject": cert.subject.rfc4514_string(),
        "cert_issuer": cert.issuer.rfc4514_string(),
        "cert_not_after": cert.not_valid_after_utc.isoformat(timespec="seconds"),
        "cert_days_left": round(left, 1),
    }


def _peer_certificate(
    address: str, party: str, tls, cert_file: Path, key_file: Path, timeout: float
) -> x509.Certificate:
    """The certificate ``party`` presents at ``address``, checked against the federation's CA and for ``party``'s
    identity name (as the party's own channels check it: :func:`~smcdp.net.tls.party_identity_name`)."""
    host, port = parse_address(address, f"peers.{party}")
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=tls.ca_pem.decode("ascii"))
    ctx.check_hostname = True
    ctx.set_alpn_protocols(["h2"])
    # the party's own certificate as client certificate: the peer requires one (mutual TLS)
    ctx.load_cert_chain(str(cert_file), str(key_file))
    with socket.create_connection((host, port), timeout=timeout) as raw:
        with ctx.wrap_socket(raw, server_hostname=party_identity_name(party)) as s:
            der = s.getpeercert(binary_form=True)
    assert der is not None  # the handshake verified a certificate (CERT_REQUIRED), so the peer sent one
    return x509.load_der_x509_certificate(der)


class PeerProber:
    """Probes every configured peer every ``interval`` seconds (on the party's event loop)."""

    def __init__(self, config, tls, interval: float) -> None:
        self.config = config
        self.tls = tls
        self.interval = interval
        self.peers = {p: PeerHealth(p, a) for p, a in sorted(config.peers.items())}
        self._task: asyncio.Task | None = None
        self._connector: PeerConnector | None = None

    def start(self) -> None:
        self._connector = PeerConnector(self.config, self.tls)
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
        if self._connector is not None:
            await self._connector.close()

    async def _run(self) -> None:
        while True:
            await asyncio.gather(*(self.probe(p) for p in self.peers), return_exceptions=True)
            await asyncio.sleep(self.interval)

    async def probe(self, party: str) -> PeerHealth:
        h = self.peers[party]
        timeout = max(1.0, min(5.0, self.interval / 2))
        assert self._connector is not None  # start() made it before it started the probing task
        stub = health_pb2_grpc.HealthStub(self._connector.channel(party))
        t0 = time.perf_counter()
        try:
            reply = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout)
            h.rtt_ms = round((time.perf_counter() - t0) * 1000, 2)
            h.up = reply.status == health_pb2.HealthCheckResponse.SERVING
            h.status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
        except Exception as exc:  # noqa: BLE001 - grpc.RpcError and the like: the peer is down
            h.up, h.rtt_ms = False, None
            code = getattr(exc, "code", None)
            h.status = code().name if callable(code) else type(exc).__name__
        h.probed_at = _now_iso()
        if h.up:
            try:
                cert = await asyncio.get_running_loop().run_in_executor(
                    None,
                    _peer_certificate,
                    h.address,
                    party,
                    self.tls,
                    self.config.tls.cert,
                    self.config.tls.key,
                    timeout,
                )
                for k, v in cert_facts(cert).items():
                    setattr(h, k, v)
                h.cert_error = None
            except Exception as exc:  # noqa: BLE001 - shown on the page, the probe goes on
                h.cert_error = f"{type(exc).__name__}: {exc}"[:200]
        return h


class Observatory:
    """Counters the transport and the sessions report into, and the views the console renders.

    ``inbound_*`` are called from the server's event loop, ``session_ended`` from it too
    (``Party._ended``); the views are built on that loop or, for file reads, in its executor.
    """

    def __init__(self, party) -> None:
        self.party = party
        self._lock = threading.Lock()
        self.received_by_peer: Counter[str] = Counter()
        self.refused_by_reason: Counter[str] = Counter()
        self.refused_by_peer: Counter[str] = Counter()
        self.sent_by_peer_ended: Counter[str] = Counter()  # sessions that ended in this process
        self.sessions_by_outcome: Counter[tuple[str, str]] = Counter()
        self.durations: deque[tuple[str, float]] = deque(maxlen=10000)
        self.listeners: list = []  # metrics: called on each event
        self.prober: PeerProber | None = None
        self.started_at = _now_iso()

    # ---------------------------------------------------------------- events
    def inbound_delivered(self, peer: str, nbytes: int, duplicate: bool) -> None:
        with self._lock:
            self.received_by_peer[peer] += nbytes
        for fn in self.listeners:
            fn("received", peer=peer, nbytes=nbytes)

    def inbound_refused(self, peer: str | None, code: str) -> None:
        reason = code.lower()
        with self._lock:
            self.refused_by_reason[reason] += 1
            self.refused_by_peer[peer or "(unidentified)"] += 1
        for fn in self.listeners:
            fn("refused", peer=peer, reason=reason)

    def session_ended(self, record: dict) -> None:
        roles = record.get("roles") or {}
        stats = record.get("stats") or {}
        with self._lock:
            for role, n in (stats.get("per_peer_sent") or {}).items():
                self.sent_by_peer_ended[roles.get(role, role)] += int(n)
            self.sessions_by_outcome[(str(record.get("protocol")), str(record.get("state")))] += 1
        for fn in self.listeners:
            fn(
                "session",
                protocol=str(record.get("protocol")),
                state=str(record.get("state")),
                seconds=record.get("seconds"),
            )

    # ---------------------------------------------------------------- views
    def bytes_sent_by_peer(self) -> dict[str, int]:
        """Ended sessions' bytes plus what the live ones sent so far, per peer."""
        with self._lock:
            out = Counter(self.sent_by_peer_ended)
        for s in list(self.party.sessions.values()):
            traffic = _live_traffic(s)
            for peer, t in traffic.items():
                out[peer] += t["sent"]
        return dict(out)

    def live_sessions(self) -> list[dict]:
        return [_live_view(s) for s in list(self.party.sessions.values())]

    def pending_proposals(self) -> list[dict]:
        gov = self.party.governor
        out = []
        for p in gov.proposals.all():
            d = gov.describe(p)
            out.append(
                {
                    "session_id": d["session_id"],
                    "protocol": d["protocol"],
                    "roles": d["roles"],
                    "role": d["role"],
                    "initiator": d["initiator"],
                    "state": _proposal_state(d["state"]),
                    "started_at": d["received_at"],
                    "finished_at": d["decided_at"],
                    "seconds": None,
                    "round": None,
                    "step": "",
                    "error": ({"message": d["reason"]} if d["reason"] else None),
                    "traffic": {},
                    "epsilon": d["epsilon"],
                    "kind": "proposal",
                    "expires_at": d["expires_at"],
                    "waiting_for": self.party.name if d["state"] == ProposalState.PENDING else None,
                }
            )
        return out

    def ended_sessions(self, limit: int = MAX_RECORDS) -> list[dict]:
        """Records on disk (blocking file reads: call in an executor)."""
        return [record_view(rec) for rec in self.party.records.recent(limit)]

    def sessions(self) -> list[dict]:
        """Every session this party knows: live, waiting for approval, ended (blocking reads)."""
        by_id: dict[str, dict] = {}
        for v in self.ended_sessions():
            by_id[v["session_id"]] = v
        for v in self.pending_proposals():
            if v["session_id"] not in by_id or v["state"] == PENDING_APPROVAL:
                by_id.setdefault(v["session_id"], v)
                if v["state"] == PENDING_APPROVAL:
                    by_id[v["session_id"]] = v
        for v in self.live_sessions():
            by_id[v["session_id"]] = v
        order = {PENDING_APPROVAL: 0, SessionState.RUNNING.value: 1, SessionState.PREPARED.value: 2}
        return sorted(by_id.values(), key=lambda v: (order.get(v["state"], 3), _neg_time(v.get("started_at"))))

    def session(self, session_id: str) -> dict | None:
        """One session with its timeline from the audit log (blocking reads)."""
        view = next((v for v in self.sessions() if v["session_id"] == session_id), None)
        if view is None:
            return None
        timeline = [e for e in self.audit_entries(limit=None) if e.get("session") == session_id]
        if view.get("finished_at") and not any(e.get("event") == "session-end" for e in timeline):
            timeline.append({"time": view["finished_at"], "event": "session-end", "state": view["state"]})
        return dict(view, timeline=timeline)

    def budgets(self) -> list[dict]:
        """Per dataset of this party's ledger: totals and every charge (blocking reads)."""
        charges = self.party.governor.charges
        if charges is None or charges.budget is None:
            return []
        ledger = charges.budget.ledger
        out = []
        for ds in ledger.datasets():
            st = ledger.status(ds)
            rows = [
                {
                    "id": c.id,
                    "session": c.key,
                    "state": c.state,
                    "epsilon": fmt_amount(c.epsilon),
                    "delta": fmt_amount(c.delta),
                    "note": c.note,
                    "time": c.created_at,
                    "settled_at": c.settled_at,
                    "reason": c.reason,
                }
                for c in ledger.history(ds)
            ]
            out.append(
                {
                    "dataset": ds,
                    "rule": st.rule,
                    "epsilon": fmt_amount(st.epsilon),
                    "delta": fmt_amount(st.delta),
                    "spent_epsilon": fmt_amount(st.spent_epsilon),
                    "spent_delta": fmt_amount(st.spent_delta),
                    "reserved_epsilon": fmt_amount(st.reserved_epsilon),
                    "reserved_delta": fmt_amount(st.reserved_delta),
                    "remaining_epsilon": fmt_amount(st.remaining_epsilon),
                    "remaining_delta": fmt_amount(st.remaining_delta),
                    "remaining_epsilon_float": float(st.remaining_epsilon),
                    "mine": ds == charges.dataset,
                    "charges": rows,
                }
            )
        return out

    def audit_entries(self, limit: int | None = AUDIT_TAIL) -> list[dict]:
        data_dir = self.party.config.data_dir
        if not (Path(data_dir) / "audit.jsonl").exists():
            return []
        entries = [
            redact(e) if e is not None else {"event": "(unreadable line)", "seq": i}
            for i, e, _raw in read_entries(data_dir)
        ]
        return entries if limit is None else entries[-limit:]

    def audit(self) -> dict:
        data_dir = self.party.config.data_dir
        try:
            v = verify_log(data_dir).as_dict()
        except FileNotFoundError:
            v = {"ok": False, "lines": 0, "problem": "no audit log yet"}
        return {"verification": v, "tail": self.audit_entries()}

    def peers(self) -> list[dict]:
        if self.prober is None:
            return [PeerHealth(p, a).as_dict() for p, a in sorted(self.party.config.peers.items())]
        return [h.as_dict() for h in self.prober.peers.values()]

    def own_certificate(self) -> dict:
        cert = x509.load_pem_x509_certificate(self.party.tls.cert_pem)
        return cert_facts(cert)


def _proposal_state(state: str) -> str:
    return PENDING_APPROVAL if state == ProposalState.PENDING else f"proposal {state}"


def _neg_time(t: str | None) -> float:
    if not t:
        return 0.0
    try:
        return -_dt.datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def _traffic(roles: dict, stats: dict) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for key, kind in (("per_peer_sent", "sent"), ("per_peer_received", "received")):
        for role, n in (stats.get(key) or {}).items():
            peer = roles.get(role, role)
            out.setdefault(peer, {"sent": 0, "received": 0})[kind] += int(n)
    return out


def _live_traffic(s) -> dict[str, dict]:
    if s.record is not None:
        return _traffic(dict(s.spec.roles), s.record.get("stats") or {})
    ch = s.channel
    if ch is None:
        return {}
    return _traffic(
        dict(s.spec.roles),
        {"per_peer_sent": dict(ch.stats.per_peer_sent), "per_peer_received": dict(ch.stats.per_peer_received)},
    )


def _live_view(s) -> dict:
    st = s.status()
    started = s.started_at
    try:
        elapsed = time.time() - _dt.datetime.fromisoformat(started).timestamp()
    except ValueError:
        elapsed = None
    rec = s.record or {}
    return {
        "session_id": s.spec.session_id,
        "protocol": s.spec.protocol,
        "roles": dict(s.spec.roles),
        "role": s.role,
        "initiator": s.initiator,
        "state": st["state"],
        "round": st["round"],
        "step": st["step"],
        "started_at": started,
        "finished_at": rec.get("finished_at"),
        "seconds": rec.get("seconds") if rec else elapsed,
        "error": st["error"],
        "traffic": _live_traffic(s),
        "restarts": st["restarts"],
        "kind": "session",
        "seconds_left": st.get("seconds_left"),
        "peers_seen": st.get("peers"),
        "waiting_for": st.get("waiting_for"),
    }


def record_view(rec: dict) -> dict:
    """A session record without what the console must not show (result, seed, params)."""
    v = {k: rec.get(k) for k in _RECORD_FIELDS}
    v["seeded"] = rec.get("seed") is not None
    v["traffic"] = _traffic(rec.get("roles") or {}, rec.get("stats") or {})
    v["round"], v["step"], v["kind"] = None, "", "session"
    return v


def redact(entry: dict) -> dict:
    """An audit entry without fields whose name says they could hold a secret."""
    return {
        k: ("(hidden)" if any(w in k.lower() for w in _SECRET_WORDS) and k != "seeded" else v) for k, v in entry.items()
    }


def uniq(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))
