"""The cost of checkpointing (docs/fault-tolerance.md), per protocol: the same sessions with and without it.

Each protocol runs in two clusters of real party processes (gRPC, mutual TLS, loopback) side by side:
one as shipped -- every message journaled (received ones durable before their Ack, sent ones durable
before they leave; group commit), ``checkpoint.json`` updated, inputs fingerprinted -- and one whose
parties keep no checkpoint at all (``bench/no_checkpoint``, a benchmark-only hook: such a party could
not replay anything).  Sessions alternate between the two (seeded, so both do exactly the same work);
the table gives the medians of wall and CPU seconds (all party processes) and the overhead, the
journal of the busiest party, and the same session with a party killed and restarted mid-way.
Goal (issue 26): overhead under 5 % at 2048-bit keys for each protocol.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, str(HERE.parent))

from smcdp.net.server import new_session_id  # noqa: E402
from smcdp.runtime.chaos import Chaos, ChaosAction  # noqa: E402
from smcdp.runtime.local import LocalCluster  # noqa: E402

REPO = HERE.parent
SEED = 15
NO_CHECKPOINT = {"PYTHONPATH": str(HERE / "no_checkpoint")}


def cpu_seconds(pids) -> float:
    """User + system CPU seconds of these processes so far (Linux /proc)."""
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def per_round(protocol: str, recs: dict) -> float | None:
    """Seconds per protocol round, without the session's set-up (key generation dominates it and varies):
    power iteration, the median of Trent's rounds after the first; keyword, Alice's online phase (first
    frame to keyword) per frame; None for dp-aggregate (three stages, no rounds to speak of)."""
    if protocol == "power-iteration":
        return statistics.median(recs["trent"]["result"]["round_seconds"][1:])
    if protocol == "keyword":
        t = recs["alice"]["result"]["timings"]
        return t["online"]["seconds"] / t["frames"]
    return None


def bootstrap_median(values, level=0.9, draws=4000, seed=26) -> tuple[float, float]:
    """A ``level`` bootstrap interval of the median of ``values`` (resampled with replacement): how far the
    median of this many pairs moves with the host's noise."""
    rng = np.random.default_rng(seed)
    v = np.asarray(values, dtype=float)
    meds = np.median(rng.choice(v, size=(draws, len(v)), replace=True), axis=1)
    return float(np.quantile(meds, (1 - level) / 2)), float(np.quantile(meds, (1 + level) / 2))


def _session(cluster, protocol, roles, params, initiator, chaos=None):
    sid = new_session_id(protocol)
    c = Chaos(cluster, [ChaosAction.parse(chaos)], sid).start() if chaos else None
    pids = [p.pid for p in cluster.procs.values()]
    c0, t0 = cpu_seconds(pids), time.monotonic()
    recs = cluster.run(protocol, roles, params, initiator=initiator, session_id=sid, timeout=900, seed=SEED)
    seconds, cpu = time.monotonic() - t0, cpu_seconds(pids) - c0
    if c is not None:
        c.finish()
    bad = {p: r.get("error") for p, r in recs.items() if r.get("state") != "succeeded"}
    if bad:
        raise SystemExit(f"{protocol} failed: {bad}")
    return recs, seconds, cpu


def measure(name, parties, roles, params, initiator, chaos, repeats, tmp, insecure, rounds_of, gap) -> str:
    kw = dict(allow_insecure_keys=insecure, allow_seeded=True, open_policy=True)  # deny by default since issue 24
    with (
        LocalCluster(parties, workdir=tmp / "with", **kw) as on,
        LocalCluster(parties, workdir=tmp / "without", extra_env=NO_CHECKPOINT, **kw) as off,
    ):
        runs: dict[str, list] = {"on": [], "off": []}
        # One untimed session per cluster first: a party process's first session is cold (imports,
        # tables), and the two clusters must not be measured at different temperatures.  Before each
        # timed session a pause of ``gap`` seconds lets both clusters' parties finish what they do while
        # idle (the next session's offline work, issue 27), so it runs in neither configuration's session.
        for cluster in (on, off):
            _session(cluster, name, roles, params, initiator)
        for i in range(repeats):  # alternate, so that drifts in load hit both alike
            for which in ("on", "off") if i % 2 == 0 else ("off", "on"):
                time.sleep(gap)
                runs[which].append(_session(on if which == "on" else off, name, roles, params, initiator))
        _, killed, _ = _session(on, name, roles, params, initiator, chaos)
    recs = runs["on"][0][0]
    wall = {k: statistics.median(r[1] for r in v) for k, v in runs.items()}
    cpu = {k: statistics.median(r[2] for r in v) for k, v in runs.items()}
    # each pair ran back to back: the median of their ratios is less moved by a load that drifts
    ratios = sorted(a[1] / b[1] - 1 for a, b in zip(runs["on"], runs["off"]))
    lo, hi = bootstrap_median(ratios)
    cpu_ratios = sorted(a[2] / b[2] - 1 for a, b in zip(runs["on"], runs["off"]))
    rounds_on = [per_round(name, r[0]) for r in runs["on"]]
    rounds_off = [per_round(name, r[0]) for r in runs["off"]]
    if rounds_on[0] is None:
        step = "—"
    else:
        step_ratio = statistics.median(a / b - 1 for a, b in zip(rounds_on, rounds_off))
        step = (
            f"{statistics.median(rounds_off) * 1000:.0f} → {statistics.median(rounds_on) * 1000:.0f} ms "
            f"(**{100 * step_ratio:+.1f} %**)"
        )
    cps = {p: (r.get("stats") or {}).get("checkpoint") or {} for p, r in recs.items()}
    party = max(cps, key=lambda p: cps[p].get("journal_seconds", 0.0))
    cp = cps[party]
    rounds, what = rounds_of(recs)
    print(
        f"{name}: with {[round(r[1], 2) for r in runs['on']]} s, without {[round(r[1], 2) for r in runs['off']]} s",
        file=sys.stderr,
        flush=True,
    )
    return (
        f"| {name} | {rounds} {what} | {wall['off']:.2f} s | {wall['on']:.2f} s | "
        f"**{100 * statistics.median(ratios):+.1f} %** ({100 * lo:+.1f} … {100 * hi:+.1f} %; pairs {100 * ratios[0]:+.0f} … "
        f"{100 * ratios[-1]:+.0f} %) | "
        f"{step} | {cpu['off']:.2f} s | {cpu['on']:.2f} s | {100 * statistics.median(cpu_ratios):+.1f} % | "
        f"{party}: {cp.get('journal_records', 0)} records, "
        f"{cp.get('journal_syncs', 0)} syncs, {cp.get('journal_bytes', 0) / 1024:.0f} KiB, "
        f"{cp.get('journal_seconds', 0.0) * 1000:.0f} ms writing | {killed:.2f} s |"
    )


def concurrency(parties, roles, params, initiator, n, tmp, insecure, gap) -> str:
    """``n`` sessions on one cluster as shipped (checkpoints on), one after the other and then all at once
    (each from its own thread, as n operators would start them): with two cores and three party processes,
    sessions at once should overlap one party's computing with another's waiting, so all n at once must
    take less than n serial.  Unseeded: n sessions at once with one seed would be one session id's worth of
    randomness n times."""
    from smcdp.net.limits import Limits

    limits = Limits(pending_per_peer=2 * n, pending_total=4 * n, running_per_peer=2 * n)
    kw = dict(allow_insecure_keys=insecure, open_policy=True, limits=limits)
    with LocalCluster(parties, workdir=tmp / "concurrent", **kw) as c:
        pids = [pr.pid for pr in c.procs.values()]

        def one(results, i):
            results[i] = c.run("power-iteration", roles, params, initiator=initiator, timeout=900)

        one({}, -1)  # untimed: a cold party process's first session
        time.sleep(gap)
        serial: dict = {}
        c0, t0 = cpu_seconds(pids), time.monotonic()
        for i in range(n):
            one(serial, i)
        t_serial, cpu_serial = time.monotonic() - t0, cpu_seconds(pids) - c0
        time.sleep(gap)
        together: dict = {}
        threads = [threading.Thread(target=one, args=(together, i)) for i in range(n)]
        c0, t0 = cpu_seconds(pids), time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        t_together, cpu_together = time.monotonic() - t0, cpu_seconds(pids) - c0
    for runs in (serial, together):
        bad = {
            i: {p: r.get("error") for p, r in recs.items() if r.get("state") != "succeeded"} for i, recs in runs.items()
        }
        bad = {i: b for i, b in bad.items() if b}
        if len(runs) != n or bad:
            raise SystemExit(f"concurrency: {n - len(runs)} sessions missing, failed: {bad}")
    return (
        f"| power-iteration | {n} | {t_serial:.2f} s ({cpu_serial:.1f} CPU-s) | {t_together:.2f} s "
        f"({cpu_together:.1f} CPU-s) | **{t_together / t_serial:.2f}** | {'yes' if t_together < t_serial else 'no'} |"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--key-bits", type=int, default=2048)
    ap.add_argument("--quick", action="store_true", help="1024-bit keys")
    ap.add_argument("--repeats", type=int, default=3, help="sessions per protocol and configuration (median)")
    ap.add_argument("--protocols", default="power-iteration,dp-aggregate,keyword")
    ap.add_argument(
        "--gap",
        type=float,
        default=3.0,
        help="seconds of idle before each timed session (the parties' offline work for the next one)",
    )
    ap.add_argument(
        "--concurrent",
        type=int,
        default=0,
        help="also time this many power-iteration sessions on one trent, one after the other and all at once",
    )
    args = ap.parse_args()
    bits = 1024 if args.quick else args.key_bits
    insecure = bits < 2048
    todo = args.protocols.split(",")
    rows = []
    together = None
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if "power-iteration" in todo:  # the bundled example data (30 rows; 80 + 120 samples)
            data = REPO / "examples" / "data" / "power_iteration"
            parties = {
                "trent": {},
                "alice": {"power-iteration": {"data": data / "hospital_a.npy"}},
                "bob": {"power-iteration": {"data": data / "hospital_b.npy"}},
            }
            rows.append(
                measure(
                    "power-iteration",
                    parties,
                    {"trent": "trent", "party1": "alice", "party2": "bob"},
                    {"n_parties": 2, "key_bits": bits},
                    "trent",
                    "kill:bob:round=5",
                    args.repeats,
                    tmp / "pi",
                    insecure,
                    lambda r: (r["trent"]["result"]["rounds"], "rounds"),
                    args.gap,
                )
            )
            if args.concurrent:
                together = concurrency(
                    parties,
                    {"trent": "trent", "party1": "alice", "party2": "bob"},
                    {"n_parties": 2, "key_bits": bits},
                    "trent",
                    args.concurrent,
                    tmp / "pi",
                    insecure,
                    args.gap,
                )
        if "dp-aggregate" in todo:  # the bundled three organisations
            data = REPO / "examples" / "data" / "dp_aggregate"
            names = ("alice", "bob", "carol")
            parties = {
                "charlie": {},
                "dave": {},
                **{n: {"dp-aggregate": {"data": data / f"org{i + 1}.npz"}} for i, n in enumerate(names)},
            }
            roles = {"charlie": "charlie", "dave": "dave", **{f"party{i + 1}": n for i, n in enumerate(names)}}
            X = np.load(data / "org1.npz")["X"]
            params = {
                "n_parties": 3,
                "dim": int(X.shape[1]),
                "epsilon": 1.0,
                "lam": 0.01,
                "key_bits": bits,
                "dgk_bits": 2048 if bits >= 2048 else 1024,
                "dgk_t": 224 if bits >= 2048 else 96,
            }
            rows.append(
                measure(
                    "dp-aggregate",
                    parties,
                    roles,
                    params,
                    "charlie",
                    "kill:charlie:round=2",
                    args.repeats,
                    tmp / "dpa",
                    insecure,
                    lambda r: (3, "stages"),
                    args.gap,
                )
            )
        if "keyword" in todo:  # the committed fixture
            kw = REPO / "tests" / "data" / "keyword"
            parties = {
                "alice": {"keyword": {"utterance": kw / "utterance_98.npy"}},
                "bob": {"keyword": {"models": kw / "models.npz"}},
            }
            rows.append(
                measure(
                    "keyword",
                    parties,
                    {"alice": "alice", "bob": "bob"},
                    {"key_bits": bits},
                    "alice",
                    "kill:bob:round=50",
                    args.repeats,
                    tmp / "kw",
                    insecure,
                    lambda r: (98, "frames"),
                    args.gap,
                )
            )
    print(
        f"{bits}-bit keys; median of {args.repeats} session(s) per configuration, alternating, after one untimed "
        f"session per configuration and {args.gap:g} s of idle before each; CPU = all party "
        "processes; the overhead is the median over back-to-back pairs of (with / without - 1); 'per round' "
        "leaves out the set-up (power iteration: Trent's rounds after the first; keyword: the online phase per "
        "frame), whose key generation varies most with the machine's load. 'Without' keeps no checkpoint at all (no journal, no checkpoint.json updates, no input "
        "fingerprint); 'with' is as shipped. 'Killed' is one session with a party SIGKILLed mid-way (power "
        "iteration: bob at round 5; dp-aggregate: charlie at stage 2; keyword: bob at frame 50), restarted 1 s "
        "later from its configuration, replaying its role from its checkpoint."
    )
    print()
    print(
        "| protocol | rounds | without | with | overhead (median of pairs; 90 % interval; range) | per round, without → with | "
        "CPU without | CPU with | CPU overhead | journal (busiest party) | killed + restarted |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(r)
    if together is not None:
        print()
        print("Sessions on one trent (checkpoints on), one after the other and all at once:")
        print()
        print("| protocol | sessions | one after the other | all at once | ratio | at once faster |")
        print("|---|---|---|---|---|---|")
        print(together)
    return 0


if __name__ == "__main__":
    sys.exit(main())
