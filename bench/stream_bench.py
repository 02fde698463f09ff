"""Issue 24: what one small message costs on a ``Mailbox.Stream`` call at a party process -- this tree
against a baseline tree in the same run, alternating so both see the same host load.

A party process of each tree (its own ``.venv`` if it has one, with that tree first on PYTHONPATH) receives
``--messages`` one-value messages on one Stream call, ``--reps`` times; every round reports the wall time
of the call and the CPU seconds the party process spent on it (from /proc).  Prints median [min–max] per
tree and the ratio of medians (issue 24 added call quotas around every handler and a liveness watchdog per
message call; this shows what they cost per message).

    .venv/bin/python bench/stream_bench.py --baseline /work/main [--messages 3000 --reps 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from smcdp.runtime import client  # noqa: E402
from smcdp.runtime.config import load_config  # noqa: E402
from smcdp.runtime.local import stop_party  # noqa: E402
from smcdp.v1 import transport_pb2 as tpb  # noqa: E402
from tests.support.boundary import MAILBOX, call_unary  # noqa: E402
from tests.support.deployment import ECHO_PLUGIN, raw_channel  # noqa: E402


def _cpu(pid: int) -> float:
    f = Path(f"/proc/{pid}/stat").read_text().split()
    return (int(f[13]) + int(f[14])) / os.sysconf("SC_CLK_TCK")


def one_tree(tree: Path, messages: int) -> tuple[float, float]:
    """(wall seconds, party CPU seconds) of ``messages`` messages on one Stream call to a party of ``tree``."""
    tmp = Path(tempfile.mkdtemp())
    python = tree / ".venv" / "bin" / "python"
    python = str(python if python.exists() else sys.executable)
    env = dict(os.environ, PYTHONPATH=str(tree))
    # the configurations as the tree writes them (each tree knows its own [limits] keys)
    made = subprocess.run(
        [
            python,
            "-c",
            "import json, sys; from smcdp.runtime.local import write_local_deployment; "
            f"print(json.dumps({{k: str(v) for k, v in write_local_deployment(sys.argv[1], "
            f"['alice', 'bob'], plugins=({ECHO_PLUGIN!r},), allow_insecure_keys=True).items()}}))",
            str(tmp),
        ],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    cfgs = {k: Path(v) for k, v in json.loads(made.stdout.strip().splitlines()[-1]).items()}
    with open(tmp / "bob.log", "wb") as log:
        proc = subprocess.Popen(
            [python, "-m", "smcdp", "party", "--config", str(cfgs["bob"])],
            cwd=tree,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            client.wait_healthy(cfgs["bob"], timeout=60)
            with raw_channel(tmp / "certs", "alice", load_config(cfgs["bob"]).address_of("bob"), "bob") as ch:
                spec = tpb.SessionSpec(
                    session_id="alice.bench", protocol="net-echo", params_json="{}", timeout_seconds=600
                )
                spec.roles["a"], spec.roles["b"] = "alice", "bob"
                code, details = call_unary(ch, MAILBOX + "Propose", spec.SerializeToString())
                assert code == grpc.StatusCode.OK, (code, details)
                envs = [
                    tpb.Envelope(
                        session_id="alice.bench",
                        tag=f"t{i}",
                        type_name="smcdp.v1.Flag",
                        chunk_index=0,
                        chunk_count=1,
                        total_size=2,
                        data=b"\x08\x01",
                    ).SerializeToString()
                    for i in range(messages)
                ]
                stream = ch.stream_stream(MAILBOX + "Stream", request_serializer=None, response_deserializer=None)
                c0, t0 = _cpu(proc.pid), time.perf_counter()
                acks = sum(1 for _ in stream(iter(envs), timeout=600))
                wall, cpu = time.perf_counter() - t0, _cpu(proc.pid) - c0
                assert acks == messages, acks
        finally:
            stop_party(proc)
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, help="a baseline source tree (e.g. /work/main)")
    ap.add_argument("--messages", type=int, default=3000)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    trees = [ROOT] + ([args.baseline.resolve()] if args.baseline else [])
    runs: dict[Path, list[tuple[float, float]]] = {t: [] for t in trees}
    for _ in range(args.reps):
        for t in trees:
            runs[t].append(one_tree(t, args.messages))
    out = {}
    for t, rs in runs.items():
        walls, cpus = [r[0] for r in rs], [r[1] for r in rs]
        out[str(t)] = {
            "wall_s": statistics.median(walls),
            "party_cpu_s": statistics.median(cpus),
            "wall_range": [min(walls), max(walls)],
            "cpu_range": [min(cpus), max(cpus)],
            "us_per_message_cpu": 1e6 * statistics.median(cpus) / args.messages,
        }
    if args.baseline:
        a, b = out[str(ROOT)], out[str(trees[1])]
        out["ratio_this_over_baseline"] = {
            "wall": a["wall_s"] / b["wall_s"],
            "party_cpu": a["party_cpu_s"] / b["party_cpu_s"],
        }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
