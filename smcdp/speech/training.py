"""Keyword HMMs from folders of WAV files (what ``smcdp speech train`` runs).

One folder per word; every ``*.wav`` in it (case-insensitive, not recursive,
sorted by name) is one utterance of the word.  Each file goes through
:func:`smcdp.speech.audio.read_wav` (any rate, mono or multi-channel, 8/16/24/32-bit
integer or float PCM) and the MFCC front end (:func:`smcdp.speech.frontend.features`
with the chosen cepstral mean normalisation), then one left-to-right HMM per word
is trained with hmmlearn (:func:`smcdp.speech.models.train_word_hmm`).  A file
that cannot be read, or is shorter than one frame per state, is an error naming
the file: training silently on a subset is not acceptable.

**Held-out accuracy** is computed when every word has at least
``min_files_heldout`` (default 5) files: per word, a seeded random
``ceil(heldout * n)`` files (at least 1, default a quarter) are held out, the
models are trained on the rest and the held-out files are recognised by the
plaintext forward argmax (:func:`smcdp.speech.forward.recognise`).  The models
that are written are then **retrained on all files**.  With fewer files the
accuracy is reported as not computed (a one- or two-file test set says
nothing), and the reason is given.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from smcdp.errors import InvalidMessage
from smcdp.speech.audio import read_wav
from smcdp.speech.forward import log_likelihood, recognise
from smcdp.speech.frontend import CMN_MODES, features
from smcdp.speech.models import KeywordModels, train_keyword_models

COVARIANCES = ("diag", "full")
MIN_FILES_HELDOUT = 5
HELDOUT_FRACTION = 0.25
_WORD_RE = re.compile(r"^[^\s=]{1,64}\Z")


def parse_word_spec(spec: str) -> tuple[str, Path]:
    """``WORD=DIR`` → (word, folder); a clear error for anything else."""
    if "=" not in spec:
        raise InvalidMessage(f"--word expects WORD=DIR, got {spec!r}")
    word, _, folder = spec.partition("=")
    if not _WORD_RE.match(word):
        raise InvalidMessage(f"--word {spec!r}: the word must be 1-64 characters without spaces or '='")
    if not folder:
        raise InvalidMessage(f"--word {spec!r}: no folder after '='")
    return word, Path(folder)


def wav_files(folder: Path) -> list[Path]:
    """The ``*.wav`` files of ``folder`` (case-insensitive, sorted, not recursive)."""
    if not folder.exists():
        raise InvalidMessage(f"folder not found: {folder}")
    if not folder.is_dir():
        raise InvalidMessage(f"not a folder: {folder}")
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() == ".wav")
    if not files:
        raise InvalidMessage(f"{folder}: no .wav files")
    return files


def file_features(path: Path, cmn: str) -> np.ndarray:
    """The (T, 39) frames of one WAV file with the chosen CMN; errors name the file."""
    a = read_wav(path)
    try:
        return features(a.samples, a.rate, cmn)
    except InvalidMessage as exc:
        raise InvalidMessage(f"{path}: {exc}") from None


@dataclass
class TrainReport:
    words: list[str]
    kind: str
    states: int
    mixtures: int
    cmn: str
    per_word: list[dict] = field(default_factory=list)
    heldout: dict = field(default_factory=dict)
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return {
            "words": self.words,
            "kind": self.kind,
            "states": self.states,
            "mixtures": self.mixtures,
            "cmn": self.cmn,
            "per_word": self.per_word,
            "heldout": self.heldout,
            "seconds": self.seconds,
        }

    def lines(self) -> list[str]:
        out = [
            f"{len(self.words)} words, {self.kind} HMMs with {self.states} states"
            + (f" x {self.mixtures} mixtures" if self.mixtures > 1 else "")
            + f", CMN {self.cmn}"
        ]
        for w in self.per_word:
            out.append(
                f"  {w['word']}: {w['files']} files, {w['frames']} frames, training log-likelihood "
                f"{w['loglik_per_frame']:.3f} per frame (total {w['loglik_total']:.2f})"
            )
        h = self.heldout
        if h.get("computed"):
            out.append(
                f"held-out accuracy: {h['accuracy']:.3f} ({h['correct']}/{h['n']} files; "
                f"{h['n_train']} trained on, models then retrained on all files)"
            )
            for word, row in zip(self.words, h["confusion"]):
                out.append(f"  {word}: recognised as " + ", ".join(f"{v}={c}" for v, c in zip(self.words, row) if c))
        else:
            out.append(f"held-out accuracy: not computed ({h.get('reason', '')})")
        out.append(f"trained in {self.seconds:.1f} s")
        return out


def _split(n: int, fraction: float, rng: np.random.Generator) -> tuple[list[int], list[int]]:
    k = max(1, math.ceil(fraction * n))
    perm = rng.permutation(n)
    test = sorted(int(i) for i in perm[:k])
    train = sorted(int(i) for i in perm[k:])
    return train, test


def train_from_folders(
    word_dirs: Sequence[tuple[str, os.PathLike | str]],
    *,
    states: int = 5,
    mixtures: int = 1,
    covariance: str = "diag",
    cmn: str = "utterance",
    n_iter: int = 20,
    min_covar: float = 1e-3,
    heldout: float = HELDOUT_FRACTION,
    min_files_heldout: int = MIN_FILES_HELDOUT,
    seed: int = 0,
) -> tuple[KeywordModels, TrainReport]:
    """Train one HMM per word from its folder of WAVs; returns the models and a report (module docstring)."""
    t0 = time.monotonic()
    if not word_dirs:
        raise InvalidMessage("no words to train (give --word WORD=DIR at least twice)")
    words = [w for w, _ in word_dirs]
    if len(set(words)) != len(words):
        dup = sorted({w for w in words if words.count(w) > 1})
        raise InvalidMessage(f"each word may be given once; repeated: {dup}")
    if covariance not in COVARIANCES:
        raise InvalidMessage(f"covariance must be one of {COVARIANCES}, got {covariance!r}")
    if cmn not in CMN_MODES:
        raise InvalidMessage(f"cmn must be one of {CMN_MODES}, got {cmn!r}")
    if isinstance(states, bool) or not isinstance(states, int) or states < 1:
        raise InvalidMessage(f"states must be a positive integer, got {states!r}")
    if isinstance(mixtures, bool) or not isinstance(mixtures, int) or mixtures < 1:
        raise InvalidMessage(f"mixtures must be a positive integer, got {mixtures!r}")
    if not 0.0 < heldout < 1.0:
        raise InvalidMessage(f"heldout fraction must be in (0, 1), got {heldout!r}")
    if isinstance(min_files_heldout, bool) or not isinstance(min_files_heldout, int) or min_files_heldout < 2:
        raise InvalidMessage(f"min_files_heldout must be an integer >= 2, got {min_files_heldout!r}")
    kind = covariance if mixtures == 1 else f"gmm-{covariance}"
    kw = dict(kind=kind, n_states=states, n_mix=mixtures, n_iter=n_iter, min_covar=min_covar, random_state=seed)

    data: dict[str, list[np.ndarray]] = {}
    for word, folder in word_dirs:
        seqs = []
        for f in wav_files(Path(folder)):
            X = file_features(f, cmn)
            if X.shape[0] < states:
                raise InvalidMessage(
                    f"{f}: {X.shape[0]} frames, fewer than the {states} states of a word model "
                    "(use a longer recording or fewer --states)"
                )
            seqs.append(X)
        data[word] = seqs

    report = TrainReport(words, kind, states, mixtures, cmn)
    smallest = min(len(s) for s in data.values())
    if smallest >= min_files_heldout:
        rng = np.random.default_rng(seed)
        splits = {w: _split(len(data[w]), heldout, rng) for w in words}
        held = train_keyword_models({w: [data[w][i] for i in splits[w][0]] for w in words}, **kw)
        confusion = np.zeros((len(words), len(words)), dtype=int)
        for i, w in enumerate(words):
            for j in splits[w][1]:
                confusion[i, recognise(held, data[w][j])[0]] += 1
        n = int(confusion.sum())
        correct = int(np.trace(confusion))
        report.heldout = {
            "computed": True,
            "accuracy": correct / n,
            "correct": correct,
            "n": n,
            "n_train": sum(len(splits[w][0]) for w in words),
            "fraction": heldout,
            "confusion": confusion.tolist(),
        }
    else:
        report.heldout = {
            "computed": False,
            "reason": f"need at least {min_files_heldout} files per word, the smallest folder has {smallest}",
        }

    models = train_keyword_models(data, **kw)
    models.cmn = cmn  # recorded in the models file: recognition must use the same front end
    for i, w in enumerate(words):
        hmm = models.hmm(i)
        ll = [log_likelihood(hmm, X) for X in data[w]]
        frames = sum(X.shape[0] for X in data[w])
        report.per_word.append(
            {
                "word": w,
                "files": len(data[w]),
                "frames": frames,
                "loglik_total": float(np.sum(ll)),
                "loglik_per_frame": float(np.sum(ll) / frames),
            }
        )
    report.seconds = time.monotonic() - t0
    return models, report
