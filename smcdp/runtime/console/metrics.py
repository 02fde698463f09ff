"""Prometheus metrics of one party, served at ``/metrics`` on the console's address.

One :class:`~prometheus_client.CollectorRegistry` per party, never the global one: several
parties in one process (tests, ``smcdp demo`` in-process) keep their own counts, and nothing
else a library registers globally leaks into a party's scrape.

Events (a message received or refused, a session ended) update counters and the session
histogram as they happen; the rest is read at scrape time from the party's read-model
(:mod:`smcdp.runtime.console.readmodel`): bytes sent (ended sessions plus the live ones so
far), peers' health, budgets, live sessions and the process's Paillier operation counts.

Labels hold party names, protocol names, dataset names, status codes and operation names:
all bounded by the configuration or by code, never by what a peer writes (an unidentified
sender is ``peer=""``).
"""

from __future__ import annotations

import datetime as _dt
import logging

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from smcdp.crypto.counters import snapshot as paillier_snapshot
from smcdp.net.server import connection_cap
from smcdp.states import PENDING_APPROVAL

log = logging.getLogger("smcdp.console")

#: session durations: from a second (tests, small keys) to a day
SESSION_BUCKETS = (1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class PartyMetrics:
    """The metrics of one party, fed by its :class:`~smcdp.runtime.console.readmodel.Observatory`."""

    def __init__(self, observatory) -> None:
        self.obs = observatory
        self.registry = CollectorRegistry(auto_describe=True)
        party = observatory.party.name
        self.sessions_total = Counter(
            "smcdp_sessions",
            "Sessions that ended at this party, by protocol and final state",
            ["protocol", "state"],
            registry=self.registry,
        )
        self.session_seconds = Histogram(
            "smcdp_session_seconds",
            "Running time of the sessions that ended (from Begin to the end)",
            ["protocol"],
            buckets=SESSION_BUCKETS,
            registry=self.registry,
        )
        self.bytes_received = Counter(
            "smcdp_bytes_received",
            "Bytes of session messages accepted from each peer",
            ["peer"],
            registry=self.registry,
        )
        self.refused = Counter(
            "smcdp_messages_refused",
            "Session messages this party refused, by gRPC status code",
            ["reason"],
            registry=self.registry,
        )
        for peer in observatory.party.config.peers:  # every peer is listed from the start
            self.bytes_received.labels(peer=peer)
        for reason in ("resource_exhausted", "invalid_argument", "permission_denied", "failed_precondition"):
            self.refused.labels(reason=reason)
        self.registry.register(_Collector(observatory, party))
        # process_open_fds against smcdp_connection_cap shows a connection flood (docs/security.md)
        ProcessCollector(registry=self.registry)
        observatory.listeners.append(self._on_event)

    def _on_event(self, kind: str, **kw) -> None:
        if kind == "received":
            self.bytes_received.labels(peer=kw["peer"]).inc(kw["nbytes"])
        elif kind == "refused":
            self.refused.labels(reason=kw["reason"]).inc()
        elif kind == "session":
            self.sessions_total.labels(protocol=kw["protocol"], state=kw["state"]).inc()
            if isinstance(kw.get("seconds"), (int, float)):
                self.session_seconds.labels(protocol=kw["protocol"]).observe(kw["seconds"])

    def exposition(self) -> bytes:
        """The text format (blocking: reads the ledger; call in an executor)."""
        return generate_latest(self.registry)


class _Collector:
    """Values read at scrape time."""

    def __init__(self, obs, party: str) -> None:
        self.obs = obs
        self.party = party

    def describe(self):
        return []  # values appear only when collected (no fixed label sets to announce)

    def collect(self):
        obs = self.obs
        sent = CounterMetricFamily("smcdp_bytes_sent", "Bytes of session messages sent to each peer", labels=["peer"])
        totals = obs.bytes_sent_by_peer()
        for peer in sorted(set(obs.party.config.peers) | set(totals)):
            sent.add_metric([peer], totals.get(peer, 0))
        yield sent

        up = GaugeMetricFamily(
            "smcdp_peer_up", "1 if the peer answered its last health probe with SERVING", labels=["peer"]
        )
        rtt = GaugeMetricFamily("smcdp_peer_rtt_seconds", "Round-trip time of the last health probe", labels=["peer"])
        expiry = GaugeMetricFamily(
            "smcdp_peer_certificate_expiry_timestamp_seconds",
            "notAfter of the certificate the peer presented (Unix time)",
            labels=["peer"],
        )
        for h in obs.peers():
            up.add_metric([h["name"]], 1.0 if h["up"] else 0.0)
            if h["rtt_ms"] is not None:
                rtt.add_metric([h["name"]], h["rtt_ms"] / 1000.0)
            if h["cert_not_after"]:
                expiry.add_metric([h["name"]], _dt.datetime.fromisoformat(h["cert_not_after"]).timestamp())
        yield up
        yield rtt
        yield expiry

        live = GaugeMetricFamily(
            "smcdp_sessions_active", "Sessions at this party now, by protocol and state", labels=["protocol", "state"]
        )
        counts: dict[tuple[str, str], int] = {}
        for s in obs.live_sessions():
            counts[(s["protocol"], s["state"])] = counts.get((s["protocol"], s["state"]), 0) + 1
        try:
            for p in obs.pending_proposals():
                if p["state"] == PENDING_APPROVAL:
                    counts[(p["protocol"], "pending_approval")] = counts.get((p["protocol"], "pending_approval"), 0) + 1
        except Exception:  # noqa: BLE001 - a scrape never fails for one family
            log.exception("metrics: proposals")
        for (proto, state), n in sorted(counts.items()):
            live.add_metric([proto, state], n)
        yield live

        remaining = GaugeMetricFamily(
            "smcdp_budget_epsilon_remaining",
            "Privacy budget (epsilon) not yet spent or reserved, per dataset",
            labels=["dataset"],
        )
        spent = GaugeMetricFamily("smcdp_budget_epsilon_spent", "Epsilon charged, per dataset", labels=["dataset"])
        reserved = GaugeMetricFamily(
            "smcdp_budget_epsilon_reserved", "Epsilon held by open reservations", labels=["dataset"]
        )
        total = GaugeMetricFamily("smcdp_budget_epsilon_total", "Total epsilon budget, per dataset", labels=["dataset"])
        try:
            for b in obs.budgets():
                remaining.add_metric([b["dataset"]], b["remaining_epsilon_float"])
                spent.add_metric([b["dataset"]], float(b["spent_epsilon"]))
                reserved.add_metric([b["dataset"]], float(b["reserved_epsilon"]))
                total.add_metric([b["dataset"]], float(b["epsilon"]))
        except Exception:  # noqa: BLE001
            log.exception("metrics: budgets")
        yield remaining
        yield spent
        yield reserved
        yield total

        ops = CounterMetricFamily(
            "smcdp_paillier_operations", "Paillier operations done by this party's process, by operation", labels=["op"]
        )
        for op, n in paillier_snapshot().items():
            ops.add_metric([op], n)
        yield ops
        yield GaugeMetricFamily(
            "smcdp_connection_cap",
            "The most connections this party's server holds at once per listening address (its open-file limit "
            "less a reserve for its own files)",
            value=connection_cap(),
        )
