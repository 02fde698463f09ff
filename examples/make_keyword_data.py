"""Synthesise spoken digits "one" … "ten" with espeak-ng, train keyword HMMs, report accuracy.

Pipeline (all deterministic given ``--seed``):

1. For every word, ``--per-word`` utterances are synthesised with Debian's
   ``espeak-ng`` (``apt-get install espeak-ng``).  Each utterance draws an
   English voice, a voice variant, a speed (words per minute) and a pitch;
   the 22.05 kHz output is resampled to 16 kHz (``scipy.signal.resample_poly``),
   given random leading/trailing silence and gain, and white Gaussian noise at
   a random SNR.
2. Utterances are split per word into train and test (``--test-fraction``).
3. 39-d MFCC features (``smcdp.speech.features.mfcc39``, mean-normalised).
4. One left-to-right ``--states``-state HMM per word (``smcdp.speech.models``;
   diagonal covariances by default).
5. Plaintext recognition accuracy on the test split (argmax of the forward
   log-likelihoods) is printed and written to ``summary.json``.

Output in ``--out``:

* ``models.npz`` — the keyword models (format in ``smcdp.speech.models``);
* ``test/utt_NNN.npy`` — test utterances as T × 39 float64 feature matrices
  (all of them, or ``--save-test-per-word`` per word);
* ``labels.json`` — one record per saved test utterance: file, word, word
  index and the synthesis parameters;
* ``summary.json`` — arguments, versions, sizes, accuracies.

With ``--extras`` also (for tests of the other emission types and the benchmark):
``models_full.npz`` (full covariances), ``models_gmm.npz`` (2-component
diagonal Gaussian mixtures), both for the first ``--extras-words`` words;
``models_discrete.npz`` (all words, discrete emissions over a ``--codebook``
-symbol k-means vector quantiser of the features) with ``discrete_test.npz``
(``codebook``, concatenated ``symbols``, ``lengths``, ``labels`` of the saved
test utterances); ``utterance_98.npy`` — a test utterance cut/padded to exactly
98 frames (the 0.98 s benchmark utterance of seed 003 §4.2.1) with its word in
``summary.json``.

Example: ``python examples/make_keyword_data.py --out /tmp/kw --seed 1``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

if importlib.util.find_spec("smcdp") is None:  # running from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from smcdp.errors import InvalidMessage
from smcdp.speech import features as F
from smcdp.speech.forward import score_models
from smcdp.speech.models import KeywordModels, train_keyword_models

WORDS = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")

# espeak-ng's own English voices (not the MBROLA ones, which need extra packages).
VOICES = ("en-us", "en-gb", "en-gb-scotland", "en-gb-x-gbclan", "en-gb-x-rp", "en-gb-x-gbcwmd", "en-029", "en-us-nyc")
# Voice variants shipped in espeak-ng-data/voices/!v ("" = the voice's default).
VARIANTS = (
    "",
    "m1",
    "m2",
    "m3",
    "m4",
    "m5",
    "m6",
    "m7",
    "f1",
    "f2",
    "f3",
    "f4",
    "f5",
    "klatt",
    "klatt2",
    "klatt3",
    "Andy",
    "Annie",
    "belinda",
    "benjamin",
    "david",
    "edward",
    "linda",
    "max",
    "paul",
    "steph",
    "john",
    "quincy",
    "Alicia",
    "Michael",
)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="output directory (created)")
    p.add_argument("--seed", type=int, default=0, help="seed for every random choice (default 0)")
    p.add_argument("--per-word", type=int, default=40, help="utterances per word (default 40)")
    p.add_argument("--test-fraction", type=float, default=0.25, help="test share per word (default 0.25)")
    p.add_argument("--states", type=int, default=5, help="HMM states per word (default 5)")
    p.add_argument("--n-iter", type=int, default=20, help="Baum-Welch iterations (default 20)")
    p.add_argument("--snr-min", type=float, default=15.0, help="lowest SNR in dB (default 15)")
    p.add_argument("--snr-max", type=float, default=40.0, help="highest SNR in dB (default 40)")
    p.add_argument("--speed-min", type=int, default=120, help="slowest speed, words/min (default 120)")
    p.add_argument("--speed-max", type=int, default=220, help="fastest speed, words/min (default 220)")
    p.add_argument("--pitch-min", type=int, default=20, help="lowest pitch 0-99 (default 20)")
    p.add_argument("--pitch-max", type=int, default=80, help="highest pitch 0-99 (default 80)")
    p.add_argument("--words", default=",".join(WORDS), help="comma-separated words (default one..ten)")
    p.add_argument(
        "--save-test-per-word",
        type=int,
        default=None,
        help="save only this many test utterances per word (default: all)",
    )
    p.add_argument(
        "--extras",
        action="store_true",
        help="also write full-covariance, mixture and discrete models and a 98-frame utterance",
    )
    p.add_argument("--extras-words", type=int, default=3, help="words in the full/mixture extras (default 3)")
    p.add_argument("--codebook", type=int, default=32, help="VQ codebook size for discrete models (default 32)")
    p.add_argument("--espeak", default="espeak-ng", help="espeak-ng executable (default: from PATH)")
    a = p.parse_args(argv)
    words = [w.strip() for w in a.words.split(",") if w.strip()]
    if len(words) < 2 or len(set(words)) != len(words):
        p.error("--words needs at least two distinct words")
    a.words = words
    if a.per_word < 2:
        p.error("--per-word must be at least 2")
    if not 0.0 < a.test_fraction < 1.0:
        p.error("--test-fraction must be in (0, 1)")
    n_test = max(1, int(round(a.per_word * a.test_fraction)))
    if a.per_word - n_test < 1:
        p.error("no training utterances left; raise --per-word or lower --test-fraction")
    if a.states < 1 or a.n_iter < 0:
        p.error("--states must be >= 1 and --n-iter >= 0")
    if a.snr_min > a.snr_max or a.speed_min > a.speed_max or a.pitch_min > a.pitch_max:
        p.error("a --*-min option exceeds its --*-max")
    if not (a.speed_min >= 80 and a.speed_max <= 450):
        p.error("speeds must lie in 80..450 words/min")
    if not (a.pitch_min >= 0 and a.pitch_max <= 99):
        p.error("pitch must lie in 0..99")
    if a.save_test_per_word is not None and a.save_test_per_word < 1:
        p.error("--save-test-per-word must be >= 1")
    if a.extras and not 1 <= a.extras_words <= len(words):
        p.error("--extras-words must be between 1 and the number of words")
    if a.codebook < 2:
        p.error("--codebook must be >= 2")
    return a


def espeak_version(exe: str) -> str:
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True, timeout=30)
    return out.stdout.strip()


def synthesise(exe: str, word: str, voice: str, variant: str, speed: int, pitch: int, tmpdir: str) -> np.ndarray:
    """One espeak-ng utterance as float64 samples at 16 kHz."""
    from math import gcd

    from scipy.signal import resample_poly

    wav = os.path.join(tmpdir, "u.wav")
    v = voice + (f"+{variant}" if variant else "")
    cmd = [exe, "-v", v, "-s", str(speed), "-p", str(pitch), "-w", wav, "--", word]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"espeak-ng failed ({' '.join(cmd)}): {res.stderr.strip()}")
    x, rate = F.load_wav(wav)
    if rate != F.SAMPLE_RATE:
        g = gcd(F.SAMPLE_RATE, rate)
        x = resample_poly(x, F.SAMPLE_RATE // g, rate // g)
    return x


def degrade(x: np.ndarray, rng: np.random.Generator, snr_db: float) -> tuple[np.ndarray, float]:
    """Random silence padding (0-150 ms each side), gain and white noise at ``snr_db``.

    Returns the noisy signal and the noise standard deviation.
    """
    pre = np.zeros(int(rng.integers(0, int(0.15 * F.SAMPLE_RATE) + 1)))
    post = np.zeros(int(rng.integers(0, int(0.15 * F.SAMPLE_RATE) + 1)))
    gain = float(rng.uniform(0.3, 1.0))
    speech = x * gain
    power = float(np.mean(speech[np.abs(speech) > 1e-4] ** 2)) if np.any(np.abs(speech) > 1e-4) else 1e-8
    y = np.concatenate([pre, speech, post])
    noise_sd = math.sqrt(power / (10.0 ** (snr_db / 10.0)))
    return y + rng.normal(0.0, noise_sd, size=y.shape), noise_sd


def cut_to_frames(x: np.ndarray, n_frames: int, rng: np.random.Generator, noise_sd: float) -> np.ndarray:
    """Centre-crop ``x``, or pad it with noise of the utterance's level, to exactly ``n_frames`` frames."""
    n = F.samples_for_frames(n_frames)
    if x.size >= n:
        start = (x.size - n) // 2
        return x[start : start + n]
    pad = n - x.size
    return np.concatenate([rng.normal(0.0, noise_sd, pad // 2), x, rng.normal(0.0, noise_sd, pad - pad // 2)])


def accuracy(models: KeywordModels, feats, labels) -> tuple[float, list[int]]:
    preds = [int(np.argmax(score_models(models, f))) for f in feats]
    correct = sum(int(p == y) for p, y in zip(preds, labels))
    return correct / len(labels), preds


def main(argv=None) -> int:
    a = parse_args(argv)
    t0 = time.time()
    exe = shutil.which(a.espeak) if os.sep not in a.espeak else a.espeak
    if not exe or not os.path.exists(exe):
        print(f"error: espeak-ng not found ({a.espeak}); install it with 'apt-get install espeak-ng'", file=sys.stderr)
        return 2
    version = espeak_version(exe)
    rng = np.random.default_rng(a.seed)
    out = Path(a.out)
    (out / "test").mkdir(parents=True, exist_ok=True)
    for old in (out / "test").glob("utt_*.npy"):
        old.unlink()

    n_test = max(1, int(round(a.per_word * a.test_fraction)))
    train: dict[str, list[np.ndarray]] = {w: [] for w in a.words}
    test: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="kwsynth-") as tmp:
        for wi, word in enumerate(a.words):
            order = rng.permutation(a.per_word)
            is_test = np.zeros(a.per_word, bool)
            is_test[order[:n_test]] = True
            for k in range(a.per_word):
                params = dict(
                    voice=str(VOICES[int(rng.integers(len(VOICES)))]),
                    variant=str(VARIANTS[int(rng.integers(len(VARIANTS)))]),
                    speed=int(rng.integers(a.speed_min, a.speed_max + 1)),
                    pitch=int(rng.integers(a.pitch_min, a.pitch_max + 1)),
                    snr_db=round(float(rng.uniform(a.snr_min, a.snr_max)), 2),
                )
                clean = synthesise(exe, word, params["voice"], params["variant"], params["speed"], params["pitch"], tmp)
                sig, noise_sd = degrade(clean, rng, params["snr_db"])
                feats = F.mfcc39(sig, F.SAMPLE_RATE)
                if feats.shape[0] < a.states:
                    raise InvalidMessage(f"utterance of {word!r} too short ({feats.shape[0]} frames)")
                if is_test[k]:
                    test.append(dict(word=word, index=wi, features=feats, signal=sig, noise_sd=noise_sd, params=params))
                else:
                    train[word].append(feats)
    t_synth = time.time() - t0
    print(f"synthesised {a.per_word * len(a.words)} utterances in {t_synth:.1f} s ({version})")

    t1 = time.time()
    models = train_keyword_models(train, kind="diag", n_states=a.states, n_iter=a.n_iter, random_state=a.seed)
    models.save(out / "models.npz")
    t_train = time.time() - t1
    test_feats = [t["features"] for t in test]
    test_labels = [t["index"] for t in test]
    acc, preds = accuracy(models, test_feats, test_labels)
    print(f"trained {len(a.words)} x {a.states}-state diagonal HMMs in {t_train:.1f} s")
    print(f"plaintext test accuracy: {acc:.4f} ({sum(p == y for p, y in zip(preds, test_labels))}/{len(test_labels)})")

    # Which test utterances to save.
    saved = []
    per_word_count = {w: 0 for w in a.words}
    for t, p in zip(test, preds):
        if a.save_test_per_word is None or per_word_count[t["word"]] < a.save_test_per_word:
            per_word_count[t["word"]] += 1
            t["pred"] = p
            saved.append(t)
    labels = []
    for i, t in enumerate(saved):
        name = f"test/utt_{i:03d}.npy"
        np.save(out / name, t["features"])
        labels.append(
            dict(
                file=name,
                word=t["word"],
                index=t["index"],
                frames=int(t["features"].shape[0]),
                plaintext_prediction=a.words[t["pred"]],
                **t["params"],
            )
        )
    (out / "labels.json").write_text(json.dumps({"words": a.words, "utterances": labels}, indent=1) + "\n")
    saved_acc = sum(a.words[t["pred"]] == t["word"] for t in saved) / len(saved)

    summary = dict(
        args={k: v for k, v in vars(a).items() if k not in ("espeak",)},
        espeak=version,
        python=platform.python_version(),
        versions=_versions(),
        n_train=sum(len(v) for v in train.values()),
        n_test=len(test),
        test_accuracy=acc,
        saved_test_utterances=len(saved),
        saved_test_accuracy=saved_acc,
        seconds=dict(synthesis=round(t_synth, 2), training=round(t_train, 2)),
    )

    if a.extras:
        t2 = time.time()
        summary["extras"] = _extras(a, train, test, saved, rng, out)
        summary["seconds"]["extras"] = round(time.time() - t2, 2)
    summary["seconds"]["total"] = round(time.time() - t0, 2)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"wrote {out} in {summary['seconds']['total']:.1f} s")
    return 0


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("numpy", "scipy", "python_speech_features", "hmmlearn", "scikit-learn"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def _extras(a, train, test, saved, rng, out: Path) -> dict:
    from sklearn.cluster import KMeans

    info = {}
    sub_words = a.words[: a.extras_words]
    sub_train = {w: train[w] for w in sub_words}
    sub_test = [t for t in test if t["word"] in sub_words]
    for kind, fname in (("full", "models_full.npz"), ("gmm-diag", "models_gmm.npz")):
        m = train_keyword_models(sub_train, kind=kind, n_states=a.states, n_mix=2, n_iter=a.n_iter, random_state=a.seed)
        m.save(out / fname)
        acc, _ = accuracy(m, [t["features"] for t in sub_test], [t["index"] for t in sub_test])
        info[kind] = dict(file=fname, words=sub_words, test_accuracy=acc)
        print(f"{kind}: {len(sub_words)} words, test accuracy {acc:.4f}")

    # Discrete emissions over a k-means vector quantiser of the training frames.
    frames = np.concatenate([f for fs in train.values() for f in fs])
    take = rng.choice(frames.shape[0], size=min(20000, frames.shape[0]), replace=False)
    km = KMeans(n_clusters=a.codebook, n_init=4, random_state=a.seed).fit(frames[np.sort(take)])
    codebook = km.cluster_centers_

    def quantise(f):
        return F.vector_quantise(f, codebook)

    dtrain = {w: [quantise(f) for f in fs] for w, fs in train.items()}
    dm = train_keyword_models(
        dtrain, kind="discrete", n_states=a.states, n_symbols=a.codebook, n_iter=a.n_iter, random_state=a.seed
    )
    dm.save(out / "models_discrete.npz")
    dacc, _ = accuracy(dm, [quantise(t["features"]) for t in test], [t["index"] for t in test])
    seqs = [quantise(t["features"]) for t in saved]
    np.savez_compressed(
        out / "discrete_test.npz",
        codebook=codebook,
        symbols=np.concatenate(seqs),
        lengths=np.array([len(s) for s in seqs], np.int64),
        labels=np.array([t["index"] for t in saved], np.int64),
    )
    info["discrete"] = dict(file="models_discrete.npz", codebook=a.codebook, test_accuracy=dacc)
    print(f"discrete ({a.codebook} symbols): test accuracy {dacc:.4f}")

    # The 98-frame benchmark utterance: the first saved test utterance, cut/padded.
    t = saved[0]
    f98 = F.mfcc39(cut_to_frames(t["signal"], 98, rng, t["noise_sd"]), F.SAMPLE_RATE)
    assert f98.shape == (98, F.N_FEATURES)
    np.save(out / "utterance_98.npy", f98)
    main_models = KeywordModels.load(out / "models.npz")
    pred = a.words[int(np.argmax(score_models(main_models, f98)))]
    info["utterance_98"] = dict(file="utterance_98.npy", word=t["word"], frames=98, plaintext_prediction=pred)
    print(f"utterance_98.npy: word {t['word']!r}, plaintext prediction {pred!r}")
    return info


if __name__ == "__main__":
    sys.exit(main())
