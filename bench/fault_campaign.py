"""A seeded fault campaign against real party processes: per fault, did the session end *identical* to the
undisturbed one, *named and resumable* (and did the resume then end identical), *named* (a fault the design
does not continue, e.g. a damaged checkpoint: every party names the same culprit), or was it *lost* (a split
outcome, a different result, a hang, an unnamed failure)?

    PYTHONPATH=. .venv/bin/python bench/fault_campaign.py --faults 24 --seed 1 [--kinds link] [--json out.json]

One loopback cluster per protocol (mutual TLS, one OS process per party, small explicitly insecure keys,
seeded sessions, so that two sessions' results can be compared bit for bit): power iteration (trent, alice, bob), dp-aggregate
(charlie, dave, alice, bob) and keyword recognition (alice, bob, the test fixture's 98 frames).  Each
protocol first runs undisturbed (the reference); then ``--faults`` faults, drawn by ``--seed`` in turn over
the protocols, each a fresh session:

* ``kill`` -- SIGKILL of a role at a round (its failpoint, :mod:`smcdp.runtime.failpoints`), restarted;
* ``kill-two`` -- two roles killed at the same round (both armed at once), both restarted;
* ``pause`` -- SIGSTOP of a role longer than the peers' grace, then SIGCONT: the session fails naming it,
  resumably, and is resumed at the initiator;
* ``down`` -- a role killed and kept down past the grace, then started again and the session resumed;
* ``journal-cut`` / ``journal-flip`` / ``journal-zero`` -- a role killed, its journal cut short inside what
  a sync covered, one bit flipped or 64 bytes zeroed in it, then restarted (named DATA_LOSS, resumed);
* ``checkpoint`` -- a role killed and a byte of its ``checkpoint.json`` changed (named, not resumable);
* ``link-corrupt`` -- bytes of one direction of one link's TLS stream corrupted (a userspace proxy on every
  link, :mod:`tests.support.link_proxy`) for a moment well within the grace: the transport's errors are
  retried and the session ends identical;
* ``link-oneway`` -- one link carries nothing from sender to receiver past the grace (a one-way black hole):
  named as the link ``A→B``, resumable, identical once resumed;
* ``link-both`` -- two parties' links to each other carry nothing either way past the grace: each side sees
  a silent peer, so the records may name either end (both ends are accepted as "named"), resumable.

``--kinds link`` selects the three link faults, ``--kinds process`` the others.

Prints one line per fault and a summary; ``--json`` writes every outcome.  docs/fault-tolerance.md quotes a
run.  Wall time: about 20-40 s per fault on two quiet cores.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from smcdp.net.server import namespaced, new_session_id  # noqa: E402
from smcdp.runtime import client, failpoints  # noqa: E402
from smcdp.runtime.chaos import Chaos, ChaosAction  # noqa: E402
from smcdp.runtime.durability import journal  # noqa: E402
from smcdp.runtime.durability.integrity import KEY_FILE, Mac  # noqa: E402
from smcdp.runtime.local import LocalCluster  # noqa: E402
from tests.support.link_proxy import ProxiedCluster  # noqa: E402

GRACE = 12.0
PROCESS_KINDS = ("kill", "kill-two", "pause", "down", "journal-cut", "journal-flip", "journal-zero", "checkpoint")
LINK_KINDS = ("link-corrupt", "link-oneway", "link-both")
KINDS = PROCESS_KINDS + LINK_KINDS
GROUPS = {"process": PROCESS_KINDS, "link": LINK_KINDS}
KEYWORD_DATA = ROOT / "tests" / "data" / "keyword"


class Protocol:
    """One protocol's cluster, session and reference result."""

    def __init__(self, name, parties, roles, params, initiator, rounds, seed=None):
        self.name, self.parties, self.roles, self.params = name, parties, roles, params
        self.initiator, self.rounds, self.seed = initiator, rounds, seed
        self.cluster: LocalCluster | None = None
        self.reference: dict | None = None

    def result(self, records: dict) -> dict:
        """What must come out identical: every party's result, without timings and statistics."""
        out = {}
        for party, rec in records.items():
            res = dict(rec.get("result") or {})
            for k in ("stats", "timings", "round_seconds", "seconds", "share_file", "model_file", "u_file", "x_file"):
                res.pop(k, None)
            out[party] = res
        return out


def _protocols(tmp: Path) -> list[Protocol]:
    rng = np.random.default_rng(3)
    pi = {"trent": {}}
    for name, cols in (("alice", 5), ("bob", 7)):
        A = rng.normal(size=(6, cols))
        A /= np.linalg.norm(A, axis=0)
        np.save(tmp / f"{name}.npy", A)
        pi[name] = {"power-iteration": {"data": tmp / f"{name}.npy"}}
    dpa = {"charlie": {}, "dave": {}}
    for name, n in (("alice", 60), ("bob", 45)):
        X = rng.normal(size=(n, 3))
        X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
        y = np.where(X @ np.array([1.0, -0.5, 0.2]) > 0, 1, -1)
        np.savez(tmp / f"{name}.npz", X=X, y=y)
        dpa[name] = {"dp-aggregate": {"data": tmp / f"{name}.npz"}}
    kw = {
        "alice": {"keyword": {"utterance": KEYWORD_DATA / "utterance_98.npy"}},
        "bob": {"keyword": {"models": KEYWORD_DATA / "models.npz"}},
    }
    return [
        Protocol(
            "power-iteration",
            pi,
            {"trent": "trent", "party1": "alice", "party2": "bob"},
            {"n_parties": 2, "key_bits": 512, "p": 0.9, "tol": 1e-10, "max_iterations": 400},
            "trent",
            (1, 12),
            seed=5,
        ),
        Protocol(
            "dp-aggregate",
            dpa,
            {"charlie": "charlie", "dave": "dave", "party1": "alice", "party2": "bob"},
            {"n_parties": 2, "dim": 3, "epsilon": 1.0, "lam": 0.05, "key_bits": 768, "dgk_bits": 512, "dgk_t": 64},
            "charlie",
            (1, 3),
            seed=5,
        ),
        Protocol(
            "keyword",
            kw,
            {"alice": "alice", "bob": "bob"},
            {"key_bits": 768, "debug_reveal": True},
            "alice",
            (2, 90),
            seed=5,
        ),
    ]


# ----------------------------------------------------------------------------------------- damage
def _records(d: Path, sid: str) -> tuple[list, int]:
    key = (d.parent / KEY_FILE).read_bytes()
    recs = journal.scan((d / "journal.log").read_bytes(), Mac(key, "journal", sid)).records
    _, _, durable = journal.HEAD.unpack((d / "journal.log.head").read_bytes()[: journal.HEAD.size])
    return [r for r in recs if r.offset + r.length <= durable], durable


def _damage(kind: str, d: Path, sid: str, rng: random.Random) -> str:
    """Apply ``kind`` to the checkpoint directory ``d`` of a killed party; says what it did."""
    if kind in ("kill", "kill-two"):
        return ""
    path = d / "journal.log"
    raw = bytearray(path.read_bytes())
    covered, durable = _records(d, sid)
    if kind == "checkpoint":
        meta = d / "checkpoint.json"
        body = json.loads(meta.read_text())
        body["restarts"] = int(body.get("restarts", 0)) + 7  # valid JSON, another content: its MAC fails
        meta.write_text(json.dumps(body, indent=2, sort_keys=True))
        return "checkpoint.json's restarts changed"
    if not covered:
        return "nothing durable to damage yet"
    r = rng.choice(covered)
    if kind == "journal-cut":
        start = bytes(raw).rfind(journal.REC_MAGIC, 0, r.offset)
        path.write_bytes(bytes(raw[:start]))
        return f"journal cut at byte {start} of {len(raw)} (its head covers {durable})"
    if kind == "journal-flip":
        at = r.offset + rng.randrange(max(1, r.length)) if r.length else r.offset - 1
        raw[at] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(raw))
        return f"bit flipped at byte {at}"
    at = max(len(journal.FILE_MAGIC), r.offset - rng.randrange(64))
    raw[at : at + 64] = bytes(len(raw[at : at + 64]))
    path.write_bytes(bytes(raw))
    return f"64 bytes zeroed at byte {at}"


class KillDamageRestart(threading.Thread):
    """Kill ``party`` at ``round`` (its failpoint), apply ``kind``'s damage while it is down, restart it."""

    def __init__(self, cluster: LocalCluster, party: str, sid: str, round_: int, kind: str, rng: random.Random):
        super().__init__(daemon=True)
        self.cluster, self.party, self.sid, self.round, self.kind, self.rng = cluster, party, sid, round_, kind, rng
        self.what = "not reached"
        self.done = False
        self._halt = threading.Event()

    def run(self) -> None:
        where = self.cluster.failpoint_dir(self.party)
        failpoints.arm_kill(where, self.sid, self.round)
        # (not in cluster.restarting until it died: a session that ends before the round must not make
        # the cluster wait for a restart that never comes)
        while self.cluster.procs[self.party].poll() is None:
            if self._halt.wait(0.05):
                failpoints.disarm(where)
                return
        self.cluster.kill(self.party, restart=True)
        failpoints.disarm(where)
        self.what = _damage(
            self.kind, self.cluster.data_dir(self.party) / "sessions" / f"{self.sid}.d", self.sid, self.rng
        )
        self.cluster.restart(self.party)
        self.done = True

    def finish(self) -> None:
        self._halt.set()
        self.join(120)


# ----------------------------------------------------------------------------------------- links
class LinkFault(threading.Thread):
    """Once the initiator's session reports ``round``, apply ``kind`` to the link ``src``→``dst``: corrupt one
    direction for a moment well within the grace, or make it (``link-both``: both links between the two)
    carry nothing until :meth:`finish` (the session ended)."""

    def __init__(self, p: Protocol, sid: str, round_: int, kind: str, link: tuple[str, str], direction: str):
        super().__init__(daemon=True)
        self.p, self.sid, self.round, self.kind, self.link, self.direction = p, sid, round_, kind, link, direction
        self.done = False
        self.what = "not reached"
        self._halt = threading.Event()

    @property
    def cluster(self) -> ProxiedCluster:
        assert isinstance(self.p.cluster, ProxiedCluster)
        return self.p.cluster

    def _reached(self) -> bool:
        while not self._halt.wait(0.05):
            try:
                rec = client.get_result(self.cluster.configs[self.p.initiator], self.sid, timeout=5)
            except Exception:  # noqa: BLE001 - not registered yet
                continue
            if (rec.get("round") or 0) >= self.round:
                return True
        return False

    def _faults(self) -> list[tuple[tuple[str, str], str, str]]:
        src, dst = self.link
        if self.kind == "link-corrupt":
            return [(self.link, self.direction, "corrupt")]
        if self.kind == "link-oneway":
            return [(self.link, "up", "drop")]
        return [(link, d, "drop") for link in ((src, dst), (dst, src)) for d in ("up", "down")]

    def run(self) -> None:
        if not self._reached():
            return
        faults = self._faults()
        for link, direction, fault in faults:
            self.cluster.proxies[link].set_fault(direction, fault)
        self.done = True
        proxy = self.cluster.proxies[self.link]
        try:
            if self.kind == "link-corrupt":
                # a few chunks corrupted (its connections break, new ones fail their handshakes), well
                # within the grace; then the link carries again
                end = time.monotonic() + 0.4 * GRACE
                while proxy.faulted(self.direction) < 3 and time.monotonic() < end and not self._halt.wait(0.05):
                    pass
            else:
                self._halt.wait()
        finally:
            for link, direction, _ in faults:
                self.cluster.proxies[link].set_fault(direction, None)
            arrow = "→".join(self.link)
            self.what = {
                "link-corrupt": f"{arrow} {self.direction} corrupted ({proxy.faulted(self.direction)} chunks)",
                "link-oneway": f"{arrow} carried nothing",
                "link-both": f"{arrow} and back carried nothing",
            }[self.kind]

    def finish(self) -> None:
        self._halt.set()
        self.join(120)


# ----------------------------------------------------------------------------------------- one fault
def _classify(p: Protocol, records: dict, ends: tuple[str, str] | None = None) -> tuple[str, str]:
    """``ends``: a link cut both ways between these two -- each side sees a silent peer, and a record naming
    either of them names the fault."""
    states = {party: r.get("state") for party, r in records.items()}
    if set(states.values()) == {"succeeded"}:
        got = p.result(records)
        if got == p.reference:
            return "identical", ""
        assert p.reference is not None
        differ = sorted(
            f"{party}.{k}" for party in got for k in got[party] if got[party][k] != p.reference[party].get(k)
        )
        return "lost", f"succeeded with another result ({', '.join(differ)})"
    if "succeeded" in states.values():
        return "lost", f"split outcome: {states}"
    culprits = {(r.get("error") or {}).get("origin") for r in records.values()}
    links = sorted({str((r.get("error") or {}).get("link")) for r in records.values()} - {"None"})
    named = f"culprit {', '.join(sorted(map(str, culprits)))}" + (f", link {', '.join(links)}" if links else "")
    if None in culprits or (len(culprits) != 1 and not (ends is not None and culprits <= set(ends))):
        return "lost", f"no single culprit: {sorted(map(str, culprits))}"
    resumable = all(r.get("resumable") for r in records.values() if r.get("state") == "failed")
    return ("named-resumable" if resumable else "named"), named


def run_fault(p: Protocol, kind: str, rng: random.Random) -> dict:
    c = p.cluster
    assert c is not None
    parties = sorted(set(p.roles.values()))
    victims = rng.sample(parties, 2 if kind == "kill-two" or kind in LINK_KINDS else 1)
    at = rng.randint(*p.rounds)
    sid = namespaced(p.initiator, new_session_id(p.name))
    out: dict = {"protocol": p.name, "fault": kind, "parties": victims, "round": at, "session": sid}
    chaos = None
    damagers: list[KillDamageRestart] = []
    linker = None
    if kind in LINK_KINDS:  # the link victims[0]→victims[1]
        direction = rng.choice(("up", "down"))
        linker = LinkFault(p, sid, at, kind, (victims[0], victims[1]), direction)
        linker.start()
    elif kind == "pause":
        chaos = Chaos(c, [ChaosAction.parse(f"stop:{victims[0]}:round={at},for={GRACE + 10:g}")], sid).start()
    elif kind == "down":
        chaos = Chaos(c, [ChaosAction.parse(f"kill:{victims[0]}:round={at},restart=no")], sid).start()
    else:  # each victim's failpoint armed at once (two kills at the same round), its damage, a restart
        damagers = [KillDamageRestart(c, v, sid, at, kind, rng) for v in victims]
        for d in damagers:
            d.start()
    t0 = time.monotonic()
    try:
        records = c.run(p.name, p.roles, p.params, initiator=p.initiator, seed=p.seed, timeout=600, session_id=sid)
    finally:
        if linker is not None:
            linker.finish()
            out["damage"] = linker.what
        if chaos is not None:
            chaos.finish()
        for d in damagers:
            d.finish()
        if kind.startswith(("journal", "checkpoint")):
            out["damage"] = "; ".join(d.what for d in damagers)
    if kind == "down" and victims[0] in c.down:
        # back after the others gave up: it learns how the session ended from them (its own record
        # then says failed) before the operator resumes it
        c.restart(victims[0])
        end = time.monotonic() + 120
        records[victims[0]] = c._record(victims[0], sid, end)
    happened = (
        (chaos is None or all(e["done"] for e in chaos.events))
        and all(d.done for d in damagers)
        and (linker is None or linker.done)
    )
    if not happened:  # the session ended before the fault's round: no fault, nothing to judge
        out.update(outcome="not-reached", detail="the session ended before the fault's round")
        return out
    ends = (victims[0], victims[1]) if kind == "link-both" else None
    outcome, detail = _classify(p, records, ends)
    if outcome == "named-resumable":
        try:
            client.resume_session(c.configs[p.initiator], sid, timeout=600)
            end = time.monotonic() + 120
            again = {party: c._record(party, sid, end) for party in parties}
            after, why = _classify(p, again)
            outcome = "named-resumed-identical" if after == "identical" else "lost"
            detail += f"; resumed: {after} {why}".rstrip()
        except Exception as exc:  # noqa: BLE001 - a refused resume is an outcome of its own
            outcome, detail = "lost", f"{detail}; resume refused: {exc}"
    out.update(outcome=outcome, detail=detail, seconds=round(time.monotonic() - t0, 1))
    return out


def _cluster(p: Protocol, tmp: Path, linked: bool) -> LocalCluster:
    """The protocol's loopback cluster; ``linked``: every party reaches every other through a proxy of its own
    (the link faults switch it)."""
    kw = dict(
        allow_insecure_keys=True, workdir=tmp / p.name, peer_grace_seconds=GRACE, open_policy=True, allow_seeded=True
    )
    if not linked:
        return LocalCluster(p.parties, **kw)
    names = sorted(p.parties)
    return ProxiedCluster(p.parties, links=[(a, b) for a in names for b in names if a != b], **kw)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--faults", type=int, default=24, help="how many faults (in turn over the protocols)")
    ap.add_argument("--seed", type=int, default=1, help="the campaign's seed (which role, round and kind)")
    ap.add_argument(
        "--kinds",
        default=",".join(KINDS),
        help=f"comma-separated subset of {','.join(KINDS)}, or a group: {', '.join(GROUPS)}",
    )
    ap.add_argument("--protocols", default="power-iteration,dp-aggregate,keyword")
    ap.add_argument("--json", help="write every outcome here")
    args = ap.parse_args()
    kinds = [kind for k in args.kinds.split(",") if k for kind in GROUPS.get(k, (k,))]
    if any(k not in KINDS for k in kinds):
        ap.error(f"--kinds: one of {KINDS}")
    rng = random.Random(args.seed)
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="smcdp-faults-") as tmp:
        protocols = [p for p in _protocols(Path(tmp)) if p.name in args.protocols.split(",")]
        clusters = []
        try:
            for p in protocols:
                p.cluster = _cluster(p, Path(tmp), linked=any(k in LINK_KINDS for k in kinds)).__enter__()
                clusters.append(p.cluster)
                ref = p.cluster.run(p.name, p.roles, p.params, initiator=p.initiator, seed=p.seed, timeout=600)
                assert {r["state"] for r in ref.values()} == {"succeeded"}, ref
                p.reference = p.result(ref)
                print(f"{p.name}: reference session succeeded", flush=True)
            for i in range(args.faults):
                p = protocols[i % len(protocols)]
                o = run_fault(p, rng.choice(kinds), rng)
                outcomes.append(o)
                print(
                    f"{i + 1:3d} {o['protocol']:16s} {o['fault']:13s} {','.join(o['parties']):14s} round {o['round']:3d}: "
                    f"{o['outcome']} {o.get('detail', '')} {o.get('damage', '')}".rstrip(),
                    flush=True,
                )
        finally:
            for c in clusters:
                c.stop()
    counts = Counter(o["outcome"] for o in outcomes)
    print("summary: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    if args.json:
        Path(args.json).write_text(json.dumps({"seed": args.seed, "outcomes": outcomes, "counts": counts}, indent=2))
    return 1 if counts.get("lost") else 0


if __name__ == "__main__":
    sys.exit(main())
