"""Time whole ``speaker-verify`` (or ``speaker-identify``) sessions, both roles in one process.

Bob's speaker models file (``smcdp speech enroll``) and alice's utterance (WAV or ``.npy`` features,
cut to ``--frames``); Alice's Paillier key is made once before the sessions (a warm party prepares it
while idle), every other cost -- her obfuscators, her DGK key, both parties' tables -- is inside each
session.  Prints one JSON object: per session the wall-clock seconds, the CPU seconds of both roles
(one process: on a loaded host the comparable figure), alice's offline and online seconds, the bytes
both parties sent, the decision and the plaintext one.

Example::

    python bench/speaker_time.py --models /tmp/spk/speakers.npz --wav /tmp/spk/enrolled/spk00/test/u08.wav \\
        --claim spk00 --sessions 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

import numpy as np

from smcdp.crypto.paillier import generate_keypair
from smcdp.net.channel import InMemoryNetwork
from smcdp.plugins.keyword import load_utterance
from smcdp.protocols.speaker import (
    IdentifyParams,
    VerifyParams,
    identify_alice,
    identify_bob,
    verify_alice,
    verify_bob,
    verify_error_bound,
)
from smcdp.speech.speaker import SpeakerModels


def _frames(paths: list[str], frames: int, cmn: str) -> np.ndarray:
    X = np.concatenate([load_utterance(p, cmn) for p in paths])
    return X[:frames]


def session(X, models: SpeakerModels, sk, a) -> dict:
    common = dict(
        key_bits=sk.public_key.bits,
        max_mixtures=models.ubm.n_components,
        max_features=models.ubm.dim,
        max_frames=len(X),
        key_kind=sk.public_key.kind,
    )
    if a.identify:
        p = IdentifyParams(max_speakers=a.max_speakers, **common, **a.extra)
        alice, bob = identify_alice, identify_bob
    else:
        p = VerifyParams(claim=a.claim, ubm=a.ubm, **common, **a.extra)
        alice, bob = verify_alice, verify_bob
    net = InMemoryNetwork({"alice": "alice", "bob": "bob"}, timeout=3600)
    t0, c0 = time.perf_counter(), time.process_time()
    res = asyncio.run(
        net.run(
            {
                "alice": lambda ch: alice(ch, X, p, private_key=sk, allow_insecure_keys=True),
                "bob": lambda ch: bob(ch, models, p, allow_insecure_keys=True),
            }
        )
    )
    secs, cpu = time.perf_counter() - t0, time.process_time() - c0
    ra, rb = res["alice"], res["bob"]
    out = {
        "seconds": round(secs, 3),
        "cpu_seconds": round(cpu, 3),  # both roles' CPU (one process): the measure that host load leaves alone
        "alice_offline_seconds": round(ra.timings["offline"]["seconds"], 3),
        "alice_online_seconds": round(ra.timings["online"]["seconds"], 3),
        "bob_online_seconds": round(rb.timings["online"]["seconds"], 3),
        "bytes": int(ra.stats.get("bytes_sent", 0)) + int(rb.stats.get("bytes_sent", 0)),
        "alice_forward_online": {
            k: round(v, 3) for k, v in ra.timings["online"]["forward"].items() if isinstance(v, float)
        },
        "bob_forward_online": {
            k: round(v, 3) for k, v in rb.timings["online"]["forward"].items() if isinstance(v, float)
        },
    }
    if a.identify:
        out["speaker"], out["plaintext_speaker"] = rb.speaker, models.identify(X)
    else:
        out["decision"], out["plaintext_decision"] = rb.decision, ("accept" if models.verify(a.claim, X) else "reject")
        out["score"] = float(models.score(models.index(a.claim), X))
        out["error_bound"] = verify_error_bound(models, a.claim, X, p)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", required=True, help="bob's speaker models (smcdp speech enroll)")
    ap.add_argument("--wav", required=True, nargs="+", help="alice's utterance(s): WAV or .npy, concatenated")
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--claim", default="")
    ap.add_argument("--identify", action="store_true")
    ap.add_argument("--max-speakers", type=int, default=16)
    ap.add_argument(
        "--ubm", choices=("private", "shared"), default="private", help="speaker-verify: who scores the UBM (docs)"
    )
    ap.add_argument("--key-bits", type=int, default=2048)
    ap.add_argument("--sessions", type=int, default=1)
    ap.add_argument(
        "--key-kind", choices=("standard", "subgroup"), default="standard", help="alice's key (docs/crypto.md)"
    )
    ap.add_argument("--param", action="append", default=[], metavar="NAME=JSON", help="another session parameter")
    a = ap.parse_args(argv)
    try:
        a.extra = {k: json.loads(v) for k, v in (x.split("=", 1) for x in a.param)}
    except ValueError as exc:  # no "=", or a value that is not JSON
        ap.error(f"--param takes NAME=JSON ({exc})")
    models = SpeakerModels.load(a.models)
    if not a.identify and not a.claim:
        a.claim = models.names[0]
    X = _frames(a.wav, a.frames, models.cmn)
    _, sk = generate_keypair(a.key_bits, allow_insecure=a.key_bits < 2048, subgroup=a.key_kind == "subgroup")
    runs = [session(X, models, sk, a) for _ in range(a.sessions)]
    out = {
        "protocol": "speaker-identify" if a.identify else "speaker-verify",
        "key_bits": a.key_bits,
        "key_kind": a.key_kind,
        **({} if a.identify else {"ubm": a.ubm}),
        "frames": len(X),
        "mixtures": models.ubm.n_components,
        "dim": models.ubm.dim,
        "load_average": os.getloadavg(),
        "sessions": runs,
    }
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
