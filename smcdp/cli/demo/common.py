"""What every ``smcdp demo`` command shares: party names, progress, key-size warnings, result checks.

Every demo starts one OS process per party on loopback with fresh
certificates (mutual TLS) in a temporary directory, runs one session, stops
the processes and writes a JSON result.  Progress and a readable summary go
to stderr; the JSON (a contract, see each command's help) goes to ``--out``
or stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from smcdp._files import atomic_write
from smcdp.cli.argtypes import positive_float
from smcdp.cli.keys import ceremony_request, generate
from smcdp.client import PartyClient
from smcdp.crypto.paillier import KEY_KINDS
from smcdp.dp.budget import fmt_amount
from smcdp.dp.ledger import Ledger
from smcdp.errors import InvalidMessage, SmcdpError
from smcdp.net.config import Timeouts
from smcdp.net.grpc_channel import error_for_code
from smcdp.net.limits import MIB, Limits
from smcdp.net.server import new_session_id
from smcdp.plugins.base import SessionSummary
from smcdp.plugins.keygen import PROTOCOL as KEY_CEREMONY
from smcdp.plugins.keystore import KeyStore
from smcdp.plugins.registry import get_plugin
from smcdp.progress import Task, task
from smcdp.runtime.chaos import Chaos, ChaosAction
from smcdp.runtime.governance.charges import DEFAULT_LEDGER
from smcdp.runtime.governance.policy import DEFAULT_MAX_RECEIVE_MIB, Policy, ProtocolRules, rules_for_layout
from smcdp.runtime.local import LocalCluster
from smcdp.states import SessionState

#: the name of the key group a demo's ``--threshold`` makes among its data parties
DEMO_KEY_GROUP = "demo"
DATA_PARTY_NAMES = ("alice", "bob", "carol", "erin", "frank", "grace", "heidi", "ivan", "judy", "mallory")


def data_party_names(n: int) -> list[str]:
    return [DATA_PARTY_NAMES[i] if i < len(DATA_PARTY_NAMES) else f"party{i + 1}" for i in range(n)]


def governed(
    protocol: str, roles: dict[str, str], params: dict, *, initiator: str, seed: int | None
) -> tuple[dict, SessionSummary]:
    """LocalCluster options giving every party an explicit [policy] that admits exactly this
    session layout (initiator, roles, where outputs go), and ``allow_seeded`` only when the demo
    was given a seed; and the session's summary."""
    plugin = get_plugin(protocol)
    summary = plugin.summary(plugin.validate_params(params, roles), roles)
    rules = rules_for_layout(
        roles, initiators=[initiator], coordinating_roles=plugin.coordinating_roles, summary=summary
    )
    if seed is not None:
        say(
            "WARNING: --seed makes every party accept the initiator's seed ([policy] allow_seeded = true): "
            "protocol randomness and DP noise become reproducible. Experiments only."
        )
    return (
        {
            "policies": {party: Policy(protocols={protocol: r}) for party, r in rules.items()},
            "allow_seeded": seed is not None,
        },
        summary,
    )


def ceremony_rules(names: list[str], threshold: int, key_bits: int) -> dict[str, ProtocolRules]:
    """Every data party's ``[policy.key-ceremony]`` rules admitting exactly the demo's key ceremony: among
    ``names`` (share-index order), started by the first of them, ``--threshold`` and ``--key-bits`` as given
    (checked here, before any process starts)."""
    roles, params = ceremony_request(names[0], names, DEMO_KEY_GROUP, threshold, key_bits, False)
    plugin = get_plugin(KEY_CEREMONY)
    params = plugin.validate_params(params, roles)
    summary = plugin.summary(params, roles)
    rules = rules_for_layout(
        roles, initiators=[names[0]], coordinating_roles=plugin.coordinating_roles, summary=summary
    )
    # the ceremony's byte envelope allows for 30 times the expected candidates: from 768-bit keys up it exceeds
    # the default max_receive_mib (docs/governance.md), so each party admits what its [limits] let it receive
    for role, party in roles.items():
        derived = plugin.traffic_envelope(params, roles, role)
        if derived is not None:
            most = -(-Limits().envelope(derived).session_bytes // MIB)
            if most > DEFAULT_MAX_RECEIVE_MIB:
                rules[party] = replace(rules[party], max_receive_mib=most)
    return rules


def add_rules(options: dict, protocol: str, rules: Mapping[str, ProtocolRules]) -> None:
    """Adds ``rules`` for ``protocol`` to the policies :func:`governed` made (``options["policies"]``)."""
    policies = options["policies"]
    for party, r in rules.items():
        policies[party] = replace(policies[party], protocols={**policies[party].protocols, protocol: r})


def key_ceremony(cluster: LocalCluster, names: list[str], threshold: int, key_bits: int) -> dict:
    """Run the key ceremony among the data parties ``names`` of ``cluster`` as ``smcdp keys generate`` does
    (the same code: the first party starts it, the estimate and the progress go to stderr) and return the
    JSON's ``key`` block: kind, threshold, parties (names), generation_seconds, group, fingerprint, … .
    Every party stores its share under :data:`DEMO_KEY_GROUP` in its data directory's key store (an earlier
    run's group of that name in a ``--keep-dir`` is refreshed)."""
    client = PartyClient.from_config(cluster.configs[names[0]])
    refresh = KeyStore(cluster.data_dir(names[0]) / "keys").exists(DEMO_KEY_GROUP)
    say(
        f"key ceremony among {', '.join(names)}: a dealer-free ({threshold}, {len(names)}) threshold Paillier key "
        f"of {key_bits} bits, group {DEMO_KEY_GROUP!r} (at 2048 bits this takes minutes; docs/crypto.md)"
    )
    made = generate(
        client,
        names,
        DEMO_KEY_GROUP,
        threshold,
        key_bits,
        replace=refresh,
        timeout=cluster.session_seconds,
    )
    say(f"key ceremony done in {made['generation_seconds']:.1f} s ({made['candidates']} candidate moduli)")
    return {
        "kind": "threshold",
        "threshold": made["threshold"],
        "parties": list(made["parties"]),
        "generation_seconds": made["generation_seconds"],
        "group": made["group"],
        "fingerprint": made["fingerprint"],
        "key_bits": key_bits,
        "candidates": made["candidates"],
        "session_id": made["session_id"],
    }


def ledger_budgets(cluster: LocalCluster, names: list[str]) -> dict:
    """The JSON's ``budgets``: every data party's ledger (its dataset is named after it) as it stands."""
    out = {}
    for n in names:
        st = Ledger(cluster.data_dir(n) / DEFAULT_LEDGER).status(n)
        out[n] = {
            "dataset": n,
            "epsilon": fmt_amount(st.epsilon),
            "spent_epsilon": fmt_amount(st.spent_epsilon),
            "reserved_epsilon": fmt_amount(st.reserved_epsilon),
            "remaining_epsilon": fmt_amount(st.remaining_epsilon),
        }
    return out


def say(msg: str) -> None:
    print(f"[smcdp demo] {msg}", file=sys.stderr, flush=True)


def add_key_kind_argument(p: argparse.ArgumentParser) -> None:
    """``--key-kind``: the key owner's Paillier key kind (keyword, speaker)."""
    p.add_argument(
        "--key-kind",
        choices=KEY_KINDS,
        default="standard",
        help="alice's Paillier key: standard (default) or subgroup (decryption about 4x cheaper, another "
        "hardness assumption; the demo's policies admit it: docs/crypto.md, 'Subgroup keys')",
    )


def key_kind_param(kind: str) -> dict[str, str]:
    """The session parameter for ``kind``: none for the standard key (the sessions' default)."""
    return {} if kind == "standard" else {"key_kind": kind}


def check_key_bits_arg(bits: int) -> bool:
    """True if insecure keys must be allowed; warns on stderr."""
    if bits < 256:
        raise InvalidMessage("--key-bits must be at least 256 (and 2048 for real use)")
    if bits < 2048:
        say(f"WARNING: {bits}-bit Paillier keys are INSECURE; allowed here for quick runs only")
        return True
    return False


def with_progress(
    label: str,
    fn: Callable[[Task], Any],
    *,
    total: float | None = None,
    unit: str = "round",
    watch: Callable[[], tuple[float, str] | None] | None = None,
    every: float = 1.0,
) -> Any:
    """Run ``fn(task)`` under a progress display on stderr (smcdp.progress: a bar with rate and ETA on a
    terminal, plain lines otherwise).  ``fn`` may advance the task itself (``total`` sessions, say);
    ``watch`` is polled every ``every`` seconds for (completed, what) -- a session's round and step."""
    with task(label, total, unit) as t:
        stop = threading.Event()

        def poll() -> None:
            assert watch is not None  # the thread runs only with a watch
            while not stop.wait(every):
                try:
                    got = watch()
                except SmcdpError:  # not registered yet, or the party restarting: ask again later
                    continue
                if got is not None:
                    t.update(completed=got[0], description=f"{label} ({got[1]})")

        th = threading.Thread(target=poll, daemon=True, name="demo-progress") if watch is not None else None
        if th is not None:
            th.start()
        try:
            out = fn(t)
        finally:
            stop.set()
            if th is not None:
                th.join(timeout=5)
        if watch is not None:  # the last rounds may have run between two polls: show how it ended
            try:
                got = watch()
            except SmcdpError:
                got = None
            if got is not None:
                t.update(completed=got[0], description=f"{label} ({got[1]})")
        return out


def session_watch(cluster: LocalCluster, party: str, session_id: str) -> Callable[[], tuple[float, str] | None]:
    """A ``watch`` for :func:`with_progress`: the round and step of ``session_id`` at ``party``."""
    client = PartyClient.from_config(cluster.configs[party])

    def watch() -> tuple[float, str] | None:
        st = client.status(session_id)
        if st.round is None:  # no round known (an ended session's old record): keep the last one shown
            return None
        return float(max(0, st.round)), st.state.value + (f", {st.step}" if st.step else "")

    return watch


def require_success(records: dict[str, dict]) -> None:
    """Raise the session's failure if any party did not succeed, naming the culprit."""
    failed = {p: r for p, r in records.items() if r.get("state") != SessionState.SUCCEEDED}
    if failed:
        # a surviving party's record says how the session ended and who caused it
        p, r = min(failed.items(), key=lambda kv: kv[1].get("state") != SessionState.FAILED)
        err = r.get("error") or {}
        culprit = err.get("origin")
        raise error_for_code(
            err.get("code") or "UNKNOWN",
            f"session failed at {p}: [{err.get('code')}] {err.get('message')}"
            + (f" (culprit: {culprit})" if culprit and culprit != p else ""),
            culprit,
        )


# ------------------------------------------------------------------ faults on purpose
@dataclass
class Faults:
    """``--chaos`` actions and the parties' ``peer_grace_seconds`` for one demo run."""

    actions: list[ChaosAction] = field(default_factory=list)
    peer_grace: float | None = None

    def check(self, parties: Iterable[str]) -> None:
        """Refuse a ``--chaos`` action naming a party the demo does not run -- before any party process starts."""
        names = sorted(parties)
        for a in self.actions:
            if a.party not in names:
                raise InvalidMessage(
                    f"--chaos names {a.party!r}, which is not a party of this demo ({', '.join(names)})"
                )

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Faults:
        return cls(
            [ChaosAction.parse(t) for t in (getattr(args, "chaos", None) or [])], getattr(args, "peer_grace", None)
        )


def add_fault_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--chaos",
        action="append",
        metavar="ACTION:PARTY:WHEN[,restart=no][,for=S]",
        help="a fault during the session (repeatable): kill (SIGKILL; restarted from its config after "
        "1 s unless restart=no) or stop (SIGSTOP, SIGCONT after for=SECONDS) a party once its "
        "status reports round=R or after=SECONDS; the JSON gains restarts",
    )
    p.add_argument(
        "--peer-grace",
        type=positive_float,
        metavar="SECONDS",
        help="every party's [timeouts] peer_grace_seconds (default 30)",
    )


def run_session(
    cluster: LocalCluster,
    faults: Faults | None,
    label: str,
    protocol: str,
    roles: Mapping[str, str],
    params: Mapping[str, Any],
    *,
    initiator: str,
    seed: int | None = None,
) -> tuple[dict[str, dict], dict]:
    """One session on ``cluster`` with ``faults`` carried out meanwhile; (records, {"restarts", "chaos"})."""
    sid = new_session_id(protocol)
    grace = cluster.peer_grace_seconds or Timeouts().peer_grace_seconds
    say(
        f"session {initiator}.{sid}: waiting at most {cluster.session_seconds + 60:.0f} s (its deadline and a minute); "
        f"a party silent for {grace:g} s (peer_grace_seconds) ends it sooner, naming the party"
    )
    chaos = None
    if faults is not None and faults.actions:
        chaos = Chaos(cluster, faults.actions, sid).start()
        say("chaos: " + "; ".join(a.describe() for a in faults.actions))
    try:
        records = with_progress(
            label,
            lambda _t: cluster.run(protocol, roles, params, initiator=initiator, seed=seed, session_id=sid),
            watch=session_watch(cluster, initiator, sid),
        )
    finally:
        if chaos is not None:
            chaos.finish()
    if any(r.get("resumable") for r in records.values()):
        say(resume_hint(cluster, f"{initiator}.{sid}", initiator))
    info: dict[str, Any] = {"restarts": 0 if chaos is None else chaos.restarts}
    if chaos is not None:
        info["chaos"] = chaos.events
        if chaos.error is not None:
            raise SmcdpError(f"a --chaos action failed: {chaos.error}")
    return records, info


def resume_hint(cluster: LocalCluster, session_id: str, initiator: str) -> str:
    """How to resume a session that failed resumably, from this demo's directory -- which only a ``--keep-dir``
    keeps: without one the demo removes it, and the session's checkpoints with it, on exit."""
    if not cluster.keep:
        return (
            f"session {session_id} failed resumably, but this demo removes its directory on exit: "
            "run it with --keep-dir DIR to be able to resume such a session"
        )
    starts = " ".join(f"smcdp party --config {cluster.configs[p]} &" for p in sorted(cluster.configs))
    return (
        f"session {session_id} failed resumably; to resume it, start every party again from the kept directory "
        f"({starts}), then run: smcdp session resume {session_id} --config {cluster.configs[initiator]}"
    )


def dump_json(obj: Any, path: str | os.PathLike | None) -> None:
    text = json.dumps(obj, indent=2)
    if path is None or str(path) == "-":
        print(text)
        return
    atomic_write(path, (text + "\n").encode("utf-8"))
