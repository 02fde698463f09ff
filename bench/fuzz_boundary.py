"""Fuzz a party's boundary (issue 19): the long run behind docs/security.md's table.

A real party process (bob, mutual TLS on loopback) receives

A. ``--inputs`` requests to every Mailbox method from a peer's certificate: structured random
   ``Envelope`` / ``SessionSpec`` / ``AbortRequest`` / ``SessionRef`` messages, mutations of valid
   ones (truncated, bit-flipped, extended) and raw garbage (hypothesis, generate phase only);
C. ``--live-sessions`` live protocol sessions in which it plays a role (power-iteration Trent and
   data party, keyword Bob) and receives fuzzed payloads under the tags the role waits for;

and, in this process, B. ``--payload-inputs`` random payloads of every protocol message type go
through the validators the protocols apply to them (EncryptedVector.from_proto, the key and
integer codecs, protobuf parsing).

Pass criteria: no server failure status (INTERNAL / UNKNOWN) in A, no session that ends with one
in C, no exception other than smcdp's own refusals in B, and afterwards the party is alive, SERVING,
and runs an honest session.  Prints (and with ``--json`` writes) the counts.

    python bench/fuzz_boundary.py [--inputs 100000] [--payload-inputs 100000] [--live-sessions 300]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import grpc  # noqa: E402
import numpy as np  # noqa: E402
from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from smcdp.crypto.codec import ciphertext_from_proto, from_bigints, keypair_from_proto, public_key_from_proto  # noqa: E402
from smcdp.crypto.paillier import generate_keypair  # noqa: E402
from smcdp.crypto.vector import EncryptedVector  # noqa: E402
from smcdp.errors import SmcdpError  # noqa: E402
from smcdp.net.limits import Limits  # noqa: E402
from smcdp.runtime import client  # noqa: E402
from smcdp.runtime.config import load_config  # noqa: E402
from smcdp.v1 import messages_pb2 as mpb  # noqa: E402
from smcdp.v1 import transport_pb2 as tpb  # noqa: E402
from tests.support.boundary import (  # noqa: E402
    MAILBOX,
    PAYLOADS,
    SERVER_FAILURES,
    call_deliver,
    call_unary,
    mailbox_requests,
    mutated,
    send,
)
from tests.support.deployment import PartyProcess, make_deployment, raw_channel  # noqa: E402
from tests.support.paths import KEYWORD_DATA  # noqa: E402

FUZZ = dict(deadline=None, database=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck))


def phase_a(peer, n: int) -> dict:
    codes: Counter = Counter()
    failures = []
    # a prepared session the generated envelopes name ("alice.fuzz-live"), so deliveries get past the
    # session lookup into the header, budget and chunk checks
    spec = tpb.SessionSpec(session_id="alice.fuzz-live", protocol="net-echo", params_json="{}", timeout_seconds=3000)
    spec.roles["a"], spec.roles["b"] = "alice", "bob"
    assert call_unary(peer, MAILBOX + "Propose", spec.SerializeToString())[0] == grpc.StatusCode.OK

    @settings(max_examples=n, **FUZZ)
    @given(request=mailbox_requests())
    def one(request):
        code, details = send(peer, request)
        codes[code.name] += 1
        if code in SERVER_FAILURES and len(failures) < 20:
            failures.append({"request": repr(request)[:300], "code": code.name, "details": details[:300]})

    one()
    return {"inputs": sum(codes.values()), "statuses": dict(codes), "server_failures": failures}


def phase_b(n: int) -> dict:
    """Every payload type through the validators protocols apply to it."""
    pk, _ = generate_keypair(512, allow_insecure=True)
    outcomes: Counter = Counter()
    unexpected = []

    def check(type_name, data: bytes):
        cls = getattr(mpb, type_name.rsplit(".", 1)[1])
        try:
            msg = cls()
            try:
                msg.ParseFromString(data)
            except Exception as exc:  # noqa: BLE001 - what Channel.recv turns into InvalidMessage
                from google.protobuf.message import DecodeError

                if isinstance(exc, DecodeError):
                    outcomes["undecodable"] += 1
                    return
                raise
            if type_name == "smcdp.v1.CiphertextVector":
                for kw in ({}, {"length": 3}, {"bound": 1 << 40}, {"exponent": -40}):
                    try:
                        EncryptedVector.from_proto(msg, pk, **kw)
                    except SmcdpError as exc:
                        assert exc.code != "INTERNAL", exc
                ciphertext_from_proto(msg, pk, "fuzz")
            elif type_name == "smcdp.v1.PaillierPublicKey":
                public_key_from_proto(msg, allow_insecure=True)
            elif type_name == "smcdp.v1.PaillierKeyPair":
                keypair_from_proto(msg, allow_insecure=True)
            elif type_name == "smcdp.v1.BigInts":
                from_bigints(msg, count=len(msg.magnitude), bound_bits=256, what="fuzz")
            outcomes["accepted"] += 1
        except SmcdpError as exc:
            outcomes["refused:" + exc.code] += 1
            if exc.code == "INTERNAL" and len(unexpected) < 20:
                unexpected.append({"type": type_name, "error": repr(exc)[:300]})
        except Exception as exc:  # noqa: BLE001 - a finding
            outcomes["unexpected"] += 1
            if len(unexpected) < 20:
                unexpected.append({"type": type_name, "error": repr(exc)[:300], "data": data[:80].hex()})

    per_type = max(1, n // len(PAYLOADS))
    for type_name, strategy in PAYLOADS.items():
        payloads = st.one_of(
            strategy.map(lambda m: m.SerializeToString()),
            st.binary(max_size=200),
            strategy.flatmap(lambda m: mutated(m.SerializeToString())),
        )

        @settings(max_examples=per_type, **FUZZ)
        @given(data=payloads)
        def one(data):
            check(type_name, data)  # noqa: B023 - one() runs within this iteration

        one()
    bad = sum(v for k, v in outcomes.items() if k in ("unexpected", "refused:INTERNAL"))
    return {"inputs": sum(outcomes.values()), "outcomes": dict(outcomes), "findings": bad, "samples": unexpected}


def phase_c(channels, cfgs, sessions: int) -> dict:
    """Live sessions at bob, each fed fuzzed payloads under the tags its role waits for."""
    alice, charlie = channels["alice"], channels["charlie"]
    plans = [
        # (protocol, roles, params, [(sender channel, tag, payload type)])
        (
            "power-iteration",
            {"trent": "bob", "party1": "alice", "party2": "charlie"},
            {"key_bits": 512, "rows": 3},
            [
                (alice, "public_key", "smcdp.v1.PaillierPublicKey"),
                (alice, "dims", "smcdp.v1.Ints"),
                (charlie, "dims", "smcdp.v1.Ints"),
                (alice, "contrib/0", "smcdp.v1.CiphertextVector"),
                (charlie, "contrib/0", "smcdp.v1.CiphertextVector"),
            ],
        ),
        (
            "power-iteration",
            {"trent": "charlie", "party1": "alice", "party2": "bob"},
            {"key_bits": 512, "rows": 3},
            [(alice, "keypair", "smcdp.v1.PaillierKeyPair")],
        ),
        (
            "keyword",
            {"alice": "alice", "bob": "bob"},
            {"key_bits": 512},
            [(alice, "kw/pk", "smcdp.v1.PaillierPublicKey"), (alice, "kw/fw/T", "smcdp.v1.Ints")],
        ),
    ]
    codes: Counter = Counter()
    bad = []
    samples = {
        t: _draw(st.one_of(s.map(lambda m: m.SerializeToString()), st.binary(max_size=120)), 64)
        for t, s in PAYLOADS.items()
    }
    for i in range(sessions):
        protocol, roles, params, feeds = plans[i % len(plans)]
        sid = f"alice.live-{i}"  # in the proposer's namespace (issue 24)
        spec = tpb.SessionSpec(session_id=sid, protocol=protocol, params_json=json.dumps(params), timeout_seconds=20)
        for r, p in roles.items():
            spec.roles[r] = p
        code, _details = call_unary(alice, MAILBOX + "Propose", spec.SerializeToString())
        if code != grpc.StatusCode.OK:
            codes["propose:" + code.name] += 1
            continue
        call_unary(alice, MAILBOX + "Begin", tpb.SessionRef(session_id=sid).SerializeToString())
        for ch, tag, type_name in feeds:
            pool = samples[type_name]
            data = pool[(i * 7 + len(tag)) % len(pool)]
            env = tpb.Envelope(
                session_id=sid,
                tag=tag,
                type_name=type_name,
                chunk_index=0,
                chunk_count=1,
                total_size=len(data),
                data=data,
            ).SerializeToString()
            call_deliver(ch, [env])
        end = time.monotonic() + 30
        while True:
            rec = client.get_result(cfgs["bob"], sid)
            if rec["state"] in ("succeeded", "failed") or time.monotonic() > end:
                break
            time.sleep(0.02)
        err = (rec.get("error") or {}).get("code", rec["state"])
        # a failure that started at bob itself must not be a server failure; one that a peer's
        # refusal caused (the driver is not a real peer) carries that peer's code
        codes[err] += 1
        if err in ("INTERNAL", "UNKNOWN") and (rec.get("error") or {}).get("origin") == "bob" and len(bad) < 20:
            bad.append({"session": sid, "protocol": protocol, "error": rec["error"]})
        call_unary(
            alice,
            MAILBOX + "Abort",
            tpb.AbortRequest(session_id=sid, code="CANCELLED", message="fuzz done").SerializeToString(),
        )
    return {"sessions": sessions, "end_states": dict(codes), "server_failures": bad}


def _draw(strategy, n: int) -> list:
    out = []

    @settings(max_examples=n, **FUZZ)
    @given(x=strategy)
    def collect(x):
        out.append(x)

    collect()
    return out or [b""]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inputs", type=int, default=100_000)
    ap.add_argument("--payload-inputs", type=int, default=100_000)
    ap.add_argument("--live-sessions", type=int, default=300)
    ap.add_argument("--json", help="write the summary here")
    args = ap.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="smcdp-fuzz-"))
    np.save(tmp / "B.npy", np.arange(6, dtype=float).reshape(3, 2))
    cfgs = make_deployment(
        tmp,
        ["alice", "bob", "charlie"],
        limits=Limits(max_session_seconds=3600.0, proposal_grace_seconds=3600.0),
        inputs={
            "bob": {"power-iteration": {"data": tmp / "B.npy"}, "keyword": {"models": KEYWORD_DATA / "models.npz"}}
        },
    )
    procs = {n: PartyProcess(n, cfgs[n], tmp, use_launcher=False) for n in ("bob", "charlie")}
    for n in procs:
        client.wait_healthy(cfgs[n], timeout=60)
    address = load_config(cfgs["bob"]).address_of("bob")
    summary: dict = {"target": "bob (separate process, mutual TLS on loopback)"}
    t0 = time.monotonic()
    try:
        with (
            raw_channel(tmp / "certs", "alice", address, "bob") as alice,
            raw_channel(tmp / "certs", "charlie", address, "bob") as charlie,
            raw_channel(tmp / "certs", "bob", address, "bob") as own,
        ):
            rss0 = _rss(procs["bob"].proc.pid)
            t = time.monotonic()
            summary["mailbox"] = phase_a(alice, args.inputs)
            summary["mailbox"]["seconds"] = round(time.monotonic() - t, 1)
            t = time.monotonic()
            summary["payloads"] = phase_b(args.payload_inputs)
            summary["payloads"]["seconds"] = round(time.monotonic() - t, 1)
            t = time.monotonic()
            summary["live"] = phase_c({"alice": alice, "charlie": charlie}, cfgs, args.live_sessions)
            summary["live"]["seconds"] = round(time.monotonic() - t, 1)
            alive = procs["bob"].proc.poll() is None
            health = health_pb2_grpc.HealthStub(own).Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
            rec = client.start_session(cfgs["charlie"], "net-echo", {"a": "charlie", "b": "bob"}, {"n": 4}, timeout=30)
            summary["after"] = {
                "alive": alive,
                "health": health_pb2.HealthCheckResponse.ServingStatus.Name(health.status),
                "honest_session": rec["state"],
                "rss_mb_before": round(rss0, 1),
                "rss_mb_after": round(_rss(procs["bob"].proc.pid), 1),
            }
    finally:
        for p in procs.values():
            p.terminate()
    summary["seconds"] = round(time.monotonic() - t0, 1)
    ok = (
        not summary["mailbox"]["server_failures"]
        and summary["payloads"]["findings"] == 0
        and not summary["live"]["server_failures"]
        and summary["after"]["alive"]
        and summary["after"]["health"] == "SERVING"
        and summary["after"]["honest_session"] == "succeeded"
    )
    summary["passed"] = ok
    text = json.dumps(summary, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0 if ok else 1


def _rss(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


if __name__ == "__main__":
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    sys.exit(main())
