"""One workload's sessions as the demos run them, on whichever smcdp is first on ``PYTHONPATH``.

``bench/session_bench.py`` runs this script once per tree (``PYTHONPATH=<tree>``), so the same driver
measures the current tree and a baseline commit.  It sets the parties up as the demo does (one OS process
per party, fresh certificates, mutual TLS on loopback, every party with the demo's explicit ``[policy]``),
then runs ``--sessions`` sessions on the same party processes:

* session 1 runs on **cold** party processes, started just before: what ``smcdp demo …`` measures as
  ``seconds``;
* sessions 2, 3, … run on **warm** ones: parties that already ran a session of the same kind, ``--gap``
  seconds before (default 5: a user's next session does not come in the same millisecond, and a party
  prepares its next session's offline work while it is idle -- smcdp.runtime.offline; ``--gap 0`` measures
  back-to-back sessions).

For every session: the wall time (start of the session to the last party's record), the CPU seconds each
party process used meanwhile (``/proc/<pid>/stat``) and, for a warm one, what all of them used while idle
before it (the next session's offline work), and what the protocol reports (rounds; keyword's offline and
online phases).  Also the time from nothing to running party processes and to stopped ones.
Prints one JSON object.  Uses only APIs that have been stable since the governance work (``LocalCluster``,
``governed``), so that older baselines run it too.

    PYTHONPATH=/path/to/tree python bench/session_driver.py --workload keyword --sessions 2
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = (
    "pi500",
    "pi30",
    "keyword",
    "keyword2",
    "pidp500",
    "pidp500cov",
    "speaker-verify",
    "speaker-identify",
    "pingpong",
)
#: ``pingpong``: 300 protocol round trips of 25 kB each way between two parties (bench/pingpong_plugin.py): what
#: the transport costs a round, as keyword's induction pays it (its rounds send 22-25 kB of ciphertexts)
PINGPONG = {"rounds": 300, "bytes": 25_000}
#: issue 38: the DP workloads' parameters (k = 500: ``auto`` picks the noisy power method; "cov" forces the
#: one-release covariance mode, 125,250 values per release)
DP_PARAMS = {
    "pidp500": {"epsilon": 1.0, "delta": 1e-6, "max_samples": 100},
    "pidp500cov": {"epsilon": 1.0, "delta": 1e-6, "max_samples": 100, "dp_method": "covariance"},
}


def pi_matrices(k: int, n: int = 100, seed: int = 0) -> list[np.ndarray]:
    """Two parties' blocks of a k × 2n matrix with a clear leading direction (bench/power_iteration_bench.py's)."""
    rng = np.random.default_rng(seed)
    M = rng.normal(size=(k, 2 * n)) + 3 * np.outer(rng.normal(size=k), rng.normal(size=2 * n))
    return [M[:, :n], M[:, n:]]


def setup(workload: str, key_bits: int, tmp: Path, speaker: argparse.Namespace | None = None) -> dict:
    """What the demo of ``workload`` starts: parties with their inputs, roles, params, initiator.  The speaker
    workloads take bob's models and alice's WAV from outside the repository (``--models``, ``--wav``,
    ``--claim``: a corpus made by bench/speaker_corpus.py, the models by ``smcdp speech enroll``)."""
    if workload.startswith("speaker-"):
        assert speaker is not None and speaker.models and speaker.wav, "--models and --wav are needed"
        from smcdp.plugins.keyword import load_utterance
        from smcdp.speech.speaker import SpeakerModels

        models = SpeakerModels.load(speaker.models)
        frames = int(load_utterance(speaker.wav, models.cmn).shape[0])
        params = {
            "key_bits": key_bits,
            "cmn": models.cmn,
            "max_frames": frames,
            "max_mixtures": models.ubm.n_components,
            "max_features": models.ubm.dim,
        }
        if workload == "speaker-verify":
            params["claim"] = speaker.claim or models.names[0]
        return {
            "protocol": workload,
            "parties": {
                "alice": {workload: {"utterance": speaker.wav}},
                "bob": {workload: {"models": speaker.models}},
            },
            "roles": {"alice": "alice", "bob": "bob"},
            "params": params,
            "initiator": "alice",
        }
    if workload == "pingpong":
        return {
            "protocol": "bench-pingpong",
            "parties": {"alice": {}, "bob": {}},
            "roles": {"a": "alice", "b": "bob"},
            "params": dict(PINGPONG),
            "initiator": "alice",
            "plugin": "pingpong_plugin",
        }
    if workload in ("pi500", "pi30", *DP_PARAMS):
        if workload != "pi30":
            paths = []
            for i, block in enumerate(pi_matrices(500)):
                paths.append(tmp / f"party{i}.npy")
                np.save(paths[-1], block)
        else:  # `make demo`'s data
            paths = [ROOT / "examples" / "data" / "power_iteration" / f"hospital_{x}.npy" for x in "ab"]
        k = int(np.load(paths[0], mmap_mode="r").shape[0])
        parties = {
            "trent": {},
            "alice": {"power-iteration": {"data": paths[0]}},
            "bob": {"power-iteration": {"data": paths[1]}},
        }
        roles = {"trent": "trent", "party1": "alice", "party2": "bob"}
        params = {"n_parties": 2, "key_bits": key_bits, "rows": k, **DP_PARAMS.get(workload, {})}
        return {
            "protocol": "power-iteration",
            "parties": parties,
            "roles": roles,
            "params": params,
            "initiator": "trent",
            "budgets": workload in DP_PARAMS,
        }
    data = ROOT / "tests" / "data" / "keyword"
    parties = {
        "alice": {"keyword": {"utterance": data / "utterance_98.npy"}},
        "bob": {"keyword": {"models": data / "models.npz"}},
    }
    return {
        "protocol": "keyword",
        "parties": parties,
        "roles": {"alice": "alice", "bob": "bob"},
        # keyword2: rounds of two frames (issue 42's "no change at m >= 2")
        "params": {
            "key_bits": key_bits,
            "debug_reveal": False,
            **({"frames_per_round": 2} if workload == "keyword2" else {}),
        },
        "initiator": "alice",
    }


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) the process has used so far, all its threads, plus its children that
    ended (a baseline's per-session worker processes end with their session)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def protocol_figures(protocol: str, records: dict) -> dict:
    if protocol == "power-iteration":
        dp = records["alice"]["result"].get("dp") or {}
        return {"rounds": records["trent"]["result"]["rounds"], "dp_method": dp.get("dp_method")}
    if protocol == "bench-pingpong":
        return {"ms_per_round_trip": records["alice"]["result"]["ms_per_round_trip"]}
    if protocol.startswith("speaker-"):
        ta = records["alice"]["result"].get("timings") or {}
        rb = records["bob"]["result"]
        return {
            "offline_seconds": (ta.get("offline") or {}).get("seconds"),
            "online_seconds": (ta.get("online") or {}).get("seconds"),
            "outcome": rb.get("decision", rb.get("speaker")),
        }
    ta = records["alice"]["result"].get("timings") or {}
    off, on = ta.get("offline") or {}, ta.get("online") or {}
    return {
        "offline_seconds": off.get("seconds"),
        "online_seconds": on.get("keyword_at", on.get("seconds")),
        "keyword": records["alice"]["result"]["keyword"],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", choices=WORKLOADS, required=True)
    ap.add_argument("--sessions", type=int, default=2, help="sessions on the same party processes (default 2)")
    ap.add_argument("--key-bits", type=int, default=2048)
    ap.add_argument("--gap", type=float, default=5.0, help="idle seconds before each warm session (default 5)")
    ap.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=JSON",
        help="a session parameter beyond the workload's (e.g. groups=2), its value as JSON; repeatable",
    )
    ap.add_argument("--models", help="speaker workloads: bob's speaker models (smcdp speech enroll)")
    ap.add_argument("--wav", help="speaker workloads: alice's utterance")
    ap.add_argument("--claim", help="speaker-verify: the claimed speaker (default the first)")
    args = ap.parse_args()

    # the tree under test is whichever smcdp PYTHONPATH puts first (imported here, not above, on purpose)
    import smcdp
    from smcdp.cli.demo.common import governed
    from smcdp.runtime.local import LocalCluster

    with tempfile.TemporaryDirectory(prefix="smcdp-session-bench-") as d:
        s = setup(args.workload, args.key_bits, Path(d), args)
        for item in args.param:
            name, sep, value = item.partition("=")
            if not sep:
                raise SystemExit(f"--param {item!r}: NAME=JSON expected")
            s["params"][name] = json.loads(value)
        if "plugin" in s:  # a bench plug-in (no policy describes it): open parties that load it from here
            sys.path.insert(0, str(ROOT / "bench"))
            os.environ["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(ROOT / "bench"), os.environ.get("PYTHONPATH")) if p
            )
            __import__(s["plugin"])
            options, summary = {"plugins": (s["plugin"],), "open_policy": True}, None
        else:
            options, summary = governed(s["protocol"], s["roles"], s["params"], initiator=s["initiator"], seed=None)
        if s.get("budgets"):  # a DP workload: every data party holds a budget for all the sessions
            from smcdp.runtime.governance.charges import BudgetConfig

            options["budgets"] = {
                n: BudgetConfig(
                    dataset=n,
                    epsilon=summary.epsilon * (args.sessions + 1),
                    delta=min(0.5, summary.delta * (args.sessions + 1)),
                )
                for n in ("alice", "bob")
            }
        sessions = []
        t0 = time.perf_counter()
        cluster = LocalCluster(
            s["parties"], allow_insecure_keys=args.key_bits < 2048, workdir=Path(d) / "run", **options
        )
        with cluster:
            up = time.perf_counter() - t0
            pids = {name: p.pid for name, p in cluster.procs.items()}
            end_cpu: dict[str, float] = {}
            for i in range(args.sessions):
                if i:
                    time.sleep(args.gap)
                cpu0 = {name: process_cpu(pid) for name, pid in pids.items()}
                idle = sum(cpu0.values()) - sum(end_cpu.values()) if end_cpu else None
                t1 = time.perf_counter()
                records = cluster.run(s["protocol"], s["roles"], s["params"], initiator=s["initiator"])
                wall = time.perf_counter() - t1
                end_cpu = {name: process_cpu(pid) for name, pid in pids.items()}
                cpu = {name: end_cpu[name] - cpu0[name] for name in pids}
                bad = {
                    p: {**(r.get("error") or {}), **({"start_call": r["start_error"]} if "start_error" in r else {})}
                    for p, r in records.items()
                    if r.get("state") != "succeeded"
                }
                if bad:
                    print(f"session {i + 1} failed: {bad}", file=sys.stderr)
                    return 1
                sessions.append(
                    {
                        "seconds": wall,
                        "cpu_seconds": cpu,
                        "cpu_total": sum(cpu.values()),
                        "cpu_idle_before": idle,
                        **protocol_figures(s["protocol"], records),
                    }
                )
            t2 = time.perf_counter()
        stop = time.perf_counter() - t2
    print(
        json.dumps(
            {
                "workload": args.workload,
                "tree": str(Path(smcdp.__file__).resolve().parents[1]),
                "key_bits": args.key_bits,
                "start_seconds": up,
                "stop_seconds": stop,
                "sessions": sessions,
                "load": os.getloadavg()[0],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
