"""Speaker verification on the espeak-ng corpus (bench/speaker_corpus.py): EER and DET points of the
plaintext GMM-UBM (scikit-learn ``GaussianMixture`` UBM + MAP adaptation), of DP UBMs (DP-EM, seed 004, at
ε ∈ {1, 3, 10} and ε = ∞ for DP-EM without noise), and of the secure protocol (issue 37).

Trials: every test utterance of every enrolled speaker against every enrolled speaker's model (targets:
its own; impostors: the others).  The UBM is trained on the background speakers only.

The secure system reveals a decision, not a score: its EER is measured by running the secure protocol
(``speaker-verify``, both roles in this process over the in-memory network) at the plaintext system's EER
threshold on ``--secure-trials`` trials -- all those nearest the threshold first, where a wrong decision
would show -- and counting the decisions that differ from the plaintext ones.  Equal decisions at the
threshold mean equal error rates there.  ``--time-key-bits`` times ``--time-sessions`` whole sessions of
a 300-frame utterance (the issue's target size) at that key size.

Example: ``python bench/speaker_eer.py --corpus /tmp/spk --json /tmp/spk/eer.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from smcdp.cli.speaker import folder_frames, train_ubm
from smcdp.crypto.paillier import generate_keypair
from smcdp.net.channel import InMemoryNetwork
from smcdp.protocols.speaker import (
    VerifyParams,
    verify_alice,
    verify_bob,
    verify_error_bound,
)
from smcdp.speech.speaker import SpeakerModels, map_adapt_means


def eer(target: np.ndarray, impostor: np.ndarray) -> tuple[float, float]:
    """Equal error rate and its threshold (the point where FRR and FAR cross, interpolated)."""
    u = np.unique(np.concatenate([target, impostor]))
    ths = (u[:-1] + u[1:]) / 2                 # between two scores: no trial lies on the threshold
    frr = np.array([(target < t).mean() for t in ths])
    far = np.array([(impostor >= t).mean() for t in ths])
    i = int(np.argmin(np.abs(frr - far)))
    return float((frr[i] + far[i]) / 2), float(ths[i])


def det_points(target, impostor, fars=(0.01, 0.02, 0.05, 0.1, 0.2)) -> list[dict]:
    imp = np.sort(impostor)[::-1]
    out = []
    for fa in fars:
        k = max(1, int(np.floor(fa * len(imp))))
        th = float(imp[k - 1]) + 1e-12
        out.append({"far": float((impostor >= th).mean()), "frr": float((target < th).mean()), "threshold": th})
    return out


def trials(models: SpeakerModels, tests: dict[str, list[np.ndarray]]):
    tgt, imp, rows = [], [], []
    for true, utts in tests.items():
        for u, X in enumerate(utts):
            s = models.scores(X)
            for k, name in enumerate(models.names):
                (tgt if name == true else imp).append(s[k])
                rows.append((true, u, name, float(s[k])))
    return np.array(tgt), np.array(imp), rows


def secure_decision(X, models, claim, sk, params_kw) -> tuple[bool, float]:
    p = VerifyParams(key_bits=sk.public_key.bits, claim=claim, max_mixtures=models.ubm.n_components,
                     max_features=models.ubm.dim, max_frames=len(X), **params_kw)
    net = InMemoryNetwork({"alice": "alice", "bob": "bob"}, timeout=3600)
    t0 = time.perf_counter()
    res = asyncio.run(net.run({"alice": lambda ch: verify_alice(ch, X, p, private_key=sk, allow_insecure_keys=True),
                               "bob": lambda ch: verify_bob(ch, models, p, allow_insecure_keys=True)}))
    return bool(res["bob"].accept), time.perf_counter() - t0, res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--mixtures", type=int, default=64)
    ap.add_argument("--epsilons", default="1,3,10,inf")
    ap.add_argument("--delta", type=float, default=1e-5)
    ap.add_argument("--data-norm", type=float, default=60.0)
    ap.add_argument("--dp-iter", type=int, default=10)
    ap.add_argument("--dp-frames", type=int, default=10000,
                    help="DP-EM (and its EM reference) on this many frames drawn from the UBM frames: DP-EM's "
                         "full second moments cost N·C·d² per iteration (default 10000)")
    ap.add_argument("--secure-trials", type=int, default=12)
    ap.add_argument("--secure-key-bits", type=int, default=1024)
    ap.add_argument("--time-key-bits", type=int, default=2048)
    ap.add_argument("--time-sessions", type=int, default=1)
    ap.add_argument("--public-scale", action="store_true",
                    help="DP-EM on features divided by a public per-dimension scale: the standard deviations of "
                         "the committed keyword fixture's test utterances (tests/data/keyword/test, public)")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    root = Path(a.corpus)
    bg = sorted((root / "background").iterdir())
    spk = sorted((root / "enrolled").iterdir())
    t0 = time.perf_counter()
    Xbg = np.concatenate(folder_frames(bg, "utterance"))
    enroll = {d.name: np.concatenate(folder_frames([d / "enroll"], "utterance")) for d in spk}
    tests = {d.name: folder_frames([d / "test"], "utterance") for d in spk}
    norms = np.linalg.norm(Xbg, axis=1)
    out = {"speakers": len(spk), "background_speakers": len(bg), "ubm_frames": int(Xbg.shape[0]),
           "test_utterances": sum(len(v) for v in tests.values()), "mixtures": a.mixtures,
           "frame_norm_percentiles": {p: float(np.percentile(norms, p)) for p in (50, 90, 99, 100)},
           "data_norm": a.data_norm, "systems": {}}
    print(f"features in {time.perf_counter() - t0:.0f} s; {Xbg.shape[0]} UBM frames", file=sys.stderr)

    def evaluate(label, gmm, extra):
        means = np.stack([map_adapt_means(gmm, enroll[n]) for n in enroll])
        models = SpeakerModels(gmm, list(enroll), means)
        tg, im, rows = trials(models, tests)
        e, th = eer(tg, im)
        # closed-set identification: the argmax speaker of every test utterance
        right = sum(models.names[int(np.argmax(models.scores(X)))] == true for true, us in tests.items() for X in us)
        out["systems"][label] = {"eer": e, "threshold": th, "targets": len(tg), "impostors": len(im),
                                 "det": det_points(tg, im), "identification_accuracy": right / len(rows) * len(enroll),
                                 **extra}
        print(f"{label}: EER {100 * e:.2f} % at {th:.4f} ({len(tg)} target, {len(im)} impostor trials)",
              file=sys.stderr)
        return models, rows, th

    t0 = time.perf_counter()
    gmm, _ = train_ubm(Xbg, a.mixtures, n_iter=100)
    plain_models, rows, th = evaluate("plaintext (sklearn EM UBM + MAP)", gmm, {"train_seconds": time.perf_counter() - t0})
    scale = None
    if a.public_scale:
        pub = np.concatenate([np.load(f) for f in sorted((ROOT / "tests" / "data" / "keyword" / "test").glob("*.npy"))])
        scale = pub.std(axis=0)
        out["public_scale"] = {"source": "tests/data/keyword/test", "frames": len(pub)}
    sub = Xbg[np.random.default_rng(0).choice(len(Xbg), size=min(a.dp_frames, len(Xbg)), replace=False)]
    out["dp_frames"] = len(sub)
    t0 = time.perf_counter()
    g, _ = train_ubm(sub, a.mixtures, n_iter=100)
    evaluate(f"plaintext, EM on the same {len(sub)} frames", g, {"train_seconds": time.perf_counter() - t0})
    for eps in filter(None, a.epsilons.split(",")):
        e = float(eps)
        t0 = time.perf_counter()
        g, info = train_ubm(sub, a.mixtures, epsilon=e, delta=a.delta, data_norm=a.data_norm, n_iter=a.dp_iter,
                            seed=1, feature_scale=scale)
        evaluate(f"DP-EM UBM, epsilon={eps}", g, {"train_seconds": time.perf_counter() - t0,
                                                   **{k: v for k, v in info.items() if k != "trainer"}})

    # the secure protocol at the plaintext EER threshold, nearest trials first
    if a.secure_trials:
        models = SpeakerModels(plain_models.ubm, plain_models.names, plain_models.means, threshold=th)
        near = sorted(rows, key=lambda r: abs(r[3] - th))[:a.secure_trials]
        _, sk = generate_keypair(a.secure_key_bits, allow_insecure=a.secure_key_bits < 2048)
        agree, times, margins = 0, [], []
        for true, u, claim, score in near:
            X = tests[true][u]
            dec, secs, _ = secure_decision(X, models, claim, sk, {})
            agree += dec == (score >= th)
            times.append(secs)
            bound = verify_error_bound(models, claim, X, VerifyParams(claim=claim, max_mixtures=a.mixtures,
                                                                      max_frames=len(X)))
            margins.append({"margin": abs(score - th), "bound": bound, "agree": dec == (score >= th)})
        out["secure"] = {"key_bits": a.secure_key_bits, "trials": len(near), "agree": agree,
                         "closest_margin_nats": float(min(abs(r[3] - th) for r in near)),
                         "largest_bound_nats": float(max(m["bound"] for m in margins)),
                         "trials_detail": margins, "seconds_per_session": float(np.mean(times))}
        print(f"secure: {agree}/{len(near)} decisions equal at the EER threshold", file=sys.stderr)
    if a.time_sessions:
        _, sk = generate_keypair(a.time_key_bits, allow_insecure=a.time_key_bits < 2048)
        X = np.concatenate([u for v in tests.values() for u in v])[:300]
        models = SpeakerModels(plain_models.ubm, plain_models.names, plain_models.means, threshold=th)
        t0 = time.perf_counter()
        plain = models.score(0, X)
        plain_s = time.perf_counter() - t0
        runs = []
        for _ in range(a.time_sessions):
            dec, secs, res = secure_decision(X, models, models.names[0], sk, {})
            assert dec == (plain >= th)
            runs.append({"seconds": secs, "online_seconds": res["alice"].timings["online"]["seconds"],
                         "offline_seconds": res["alice"].timings["offline"]["seconds"]})
        out["timing"] = {"key_bits": a.time_key_bits, "frames": 300, "mixtures": a.mixtures, "dim": int(X.shape[1]),
                         "plaintext_seconds": plain_s, "sessions": runs}
        print(f"timing: {runs}", file=sys.stderr)
    text = json.dumps(out, indent=1)
    if a.json:
        Path(a.json).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
