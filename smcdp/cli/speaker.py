"""``smcdp speech ubm`` and ``smcdp speech enroll``: bob's background model and the enrolled speakers'
models for ``speaker-verify`` / ``speaker-identify`` (docs/protocols/speaker.md).

Here, above both ``smcdp.speech`` and ``smcdp.dp``, because the DP UBM joins them: DP-EM (seed 004) over
bob's frames, charged to a ledger's dataset when ``--ledger`` names one."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from smcdp._optional import require
from smcdp.cli.argtypes import nonempty, positive_float, positive_int, seed_int
from smcdp.errors import InvalidMessage
from smcdp.speech.speaker import (
    DEFAULT_RELEVANCE,
    MAX_COMPONENTS,
    UBM,
    DiagGMM,
    SpeakerModels,
    check_name,
    load_npy,
    map_adapt_means,
)

#: default public norm bound of a 39-d MFCC frame for the DP UBM (frames are clipped to it)
DEFAULT_DATA_NORM = 60.0


def folder_frames(folders: Sequence[str | Path], cmn: str) -> list[np.ndarray]:
    """The (T, 39) frames of every WAV file in ``folders`` (one array per file)."""
    # deferred: the front end loads python-speech-features only when audio is read
    from smcdp.speech.training import file_features, wav_files

    out = []
    for folder in folders:
        for f in wav_files(Path(folder)):
            out.append(file_features(f, cmn))
    return out


def train_ubm(
    X: np.ndarray,
    n_components: int,
    *,
    epsilon: float | None = None,
    delta: float = 1e-5,
    data_norm: float | None = DEFAULT_DATA_NORM,
    n_iter: int = 20,
    min_covar: float = 1e-3,
    seed: int = 0,
    accountant=None,
    feature_scale: np.ndarray | None = None,
) -> tuple[DiagGMM, dict]:
    """Bob's UBM from his pooled frames ``X`` (N × d).

    Without ``epsilon``: scikit-learn's ``GaussianMixture`` (diagonal covariances, k-means start).
    With ``epsilon``: DP-EM (:class:`smcdp.dp.learners.mixture.GaussianMixture`, seed 004) over the frames
    clipped to the public norm ``data_norm``; one frame is one record, so the guarantee is (ε, δ)-DP per
    frame (docs/protocols/speaker.md); the DP covariances' diagonals, floored at ``min_covar``, are the
    UBM's variances.  ``accountant`` (e.g. a ledger's dataset) is charged the fit's cost.

    ``feature_scale``: a *public* per-dimension scale s (not computed from these frames): the fit runs on
    x / s (``data_norm`` in those units) and the UBM is reported in the original units (μ·s, σ²·s²).  DP-EM's
    covariance noise is isotropic in the clipped ball, so without it the low-variance dimensions (deltas)
    drown; with it every dimension gets noise in proportion to its public scale."""
    X = np.asarray(X, dtype=np.float64)
    s = None
    if feature_scale is not None:
        s = np.asarray(feature_scale, dtype=np.float64)
        if X.ndim != 2 or s.shape != (X.shape[1],) or not np.all(np.isfinite(s)) or np.any(s <= 0):
            raise InvalidMessage("--feature-scale must hold one positive finite scale per feature")
        X = X / s
    if not isinstance(n_components, int) or not 1 <= n_components <= MAX_COMPONENTS:
        raise InvalidMessage(f"--mixtures must be in 1..{MAX_COMPONENTS}")
    if X.ndim != 2 or X.shape[0] < 2 * n_components:
        raise InvalidMessage(
            f"a {n_components}-component UBM needs at least {2 * n_components} frames, "
            f"got {X.shape[0] if X.ndim == 2 else X.shape}"
        )
    if epsilon is None:
        # deferred: scikit-learn loads only when a UBM is trained
        from sklearn.mixture import GaussianMixture

        g = GaussianMixture(
            n_components, covariance_type="diag", reg_covar=min_covar, max_iter=n_iter, random_state=seed
        ).fit(X)
        w = g.weights_ / g.weights_.sum()
        means, cov = g.means_, g.covariances_
        if s is not None:
            means, cov = means * s, cov * s**2
        return DiagGMM(w, means, np.maximum(cov, min_covar)), {"trainer": "em"}
    # deferred: the DP learners (scipy, scikit-learn) load only for a DP UBM
    from smcdp.dp.learners.mixture import GaussianMixture as DPGaussianMixture
    from smcdp.dp.learners.mixture import data_independent_means  # deferred with it

    if data_norm is None or not data_norm > 0:
        raise InvalidMessage("a DP UBM needs a positive public --data-norm (the frames are clipped to it)")
    # the seed makes the start only; the noise comes from the OS's secure source (random_state None): a seeded
    # noise stream -- the default seed was 0 -- let anyone who can rerun the fit test guesses about a frame
    start = data_independent_means(n_components, X.shape[1], np.random.default_rng(seed)) * data_norm
    g = DPGaussianMixture(
        n_components,
        epsilon=epsilon,
        delta=delta,
        n_iter=n_iter,
        data_norm=data_norm,
        means_init=start,
        random_state=None,
        accountant=accountant,
    )
    g.fit(X)
    w = np.clip(g.weights_, 1e-8, None)
    w = w / w.sum()
    means, cov = g.means_, np.diagonal(g.covariances_, axis1=1, axis2=2)
    if s is not None:
        means, cov = means * s, cov * s**2
    cov = np.maximum(cov, min_covar)
    return DiagGMM(w, means, cov), {
        "trainer": "dp-em",
        "epsilon": float(epsilon),
        "delta": float(delta),
        "data_norm": float(data_norm),
        "rho": float(g.rho_spent_),
    }


def parse_enroll_spec(spec: str) -> tuple[str, Path]:
    """``NAME=DIR`` → (name, folder)."""
    name, sep, folder = spec.partition("=")
    if not sep or not folder:
        raise InvalidMessage(f"--enroll expects NAME=DIR, got {spec!r}")
    return check_name(name), Path(folder)


def enroll(
    ubm: UBM, specs: Sequence[tuple[str, Path]], *, relevance: float = DEFAULT_RELEVANCE, threshold: float = 0.0
) -> SpeakerModels:
    """MAP-adapt the UBM's means to each speaker's enrolment frames (where the audio is: this process)."""
    if not specs:
        raise InvalidMessage("enrol at least one speaker (--enroll NAME=DIR)")
    names, means = [], []
    for name, folder in specs:
        X = np.concatenate(folder_frames([folder], ubm.cmn))
        names.append(name)
        means.append(map_adapt_means(ubm.gmm, X, relevance))
    return SpeakerModels(ubm.gmm, names, np.stack(means), threshold=threshold, relevance=relevance, cmn=ubm.cmn)


def _feature_scale(path: str) -> np.ndarray:
    """``--feature-scale``: a .npy vector of positive, finite per-feature scales."""
    scale = load_npy(path, "--feature-scale")
    if not isinstance(scale, np.ndarray) or scale.ndim != 1 or scale.dtype.kind not in "iuf":
        raise InvalidMessage(f"--feature-scale {path}: must hold one number per feature")
    scale = scale.astype(np.float64)
    if not (np.all(np.isfinite(scale)) and np.all(scale > 0)):
        raise InvalidMessage(f"--feature-scale {path}: every scale must be positive and finite")
    return scale


def _cmd_ubm(args: argparse.Namespace) -> int:
    require("speech-training", "smcdp speech ubm")
    if not args.out.endswith(".npz"):
        raise InvalidMessage(f"--out must name a .npz file, got {args.out!r}")
    if args.delta is not None and args.epsilon is None:
        raise InvalidMessage("--delta needs --epsilon")
    accountant = None
    if args.ledger is not None:
        if args.epsilon is None or not args.dataset:
            raise InvalidMessage("--ledger needs --epsilon and --dataset")
        # deferred: the ledger (sqlite) opens only when a budget is charged
        from smcdp.dp.ledger import Ledger, LedgerBudget

        accountant = LedgerBudget(Ledger(args.ledger, create=False), args.dataset)  # an existing budget is charged
    X = np.concatenate(folder_frames(args.dirs, args.cmn))
    gmm, info = train_ubm(
        X,
        args.mixtures,
        epsilon=args.epsilon,
        delta=args.delta if args.delta is not None else 1e-5,
        data_norm=args.data_norm,
        n_iter=args.iter,
        min_covar=args.min_covar,
        seed=args.seed,
        accountant=accountant,
        feature_scale=None if args.feature_scale is None else _feature_scale(args.feature_scale),
    )
    UBM(gmm, args.cmn, info.get("epsilon"), info.get("delta")).save(args.out)
    how = (
        f"DP-EM, epsilon={args.epsilon} delta={info['delta']} per frame, data norm {args.data_norm}"
        if args.epsilon is not None
        else "EM"
    )
    print(
        f"wrote {args.out}: {gmm.n_components}-component diagonal UBM over {X.shape[0]} frames of "
        f"{X.shape[1]} features ({how}; --cmn {args.cmn})"
    )
    sys.stdout.flush()
    return 0


def _cmd_enroll(args: argparse.Namespace) -> int:
    require("speech-features", "smcdp speech enroll")
    if not args.out.endswith(".npz"):
        raise InvalidMessage(f"--out must name a .npz file, got {args.out!r}")
    ubm = UBM.load(args.ubm)
    models = enroll(
        ubm, [parse_enroll_spec(s) for s in args.enroll], relevance=args.relevance, threshold=args.threshold
    )
    models.save(args.out)
    print(
        f"wrote {args.out}: {models.n_speakers} speakers MAP-adapted from {args.ubm} (relevance "
        f"{args.relevance}, threshold {args.threshold} nats/frame)"
    )
    return 0


def register(sub) -> None:
    """Adds ``ubm`` and ``enroll`` to ``smcdp speech``."""
    u = sub.add_parser(
        "ubm",
        help="bob's universal background model (diagonal GMM) from folders of WAV files",
        description="Trains a diagonal-covariance GMM on the 39-d MFCC frames of every .wav file in the "
        "folders (EM; with --epsilon, DP-EM over frames clipped to --data-norm, (epsilon, delta)-DP "
        "per frame) and writes the UBM file that smcdp speech enroll and the speaker demos read.",
    )
    u.add_argument("dirs", nargs="+", metavar="DIR", help="folders of WAV recordings (many speakers)")
    u.add_argument("--out", required=True, metavar="ubm.npz")
    u.add_argument("--mixtures", type=int, default=64, help="mixture components (default 64)")
    u.add_argument("--epsilon", type=positive_float, help="train with DP-EM at this epsilon (default: plain EM)")
    u.add_argument("--delta", type=float, help="DP-EM's delta (default 1e-5)")
    u.add_argument(
        "--data-norm",
        type=float,
        default=DEFAULT_DATA_NORM,
        help=f"DP-EM: public L2 bound of a frame; longer frames are clipped (default {DEFAULT_DATA_NORM})",
    )
    u.add_argument(
        "--feature-scale",
        type=nonempty,
        metavar="S.npy",
        help="a public per-feature scale (d values, not computed from these recordings): train on x / S, "
        "--data-norm in those units (DP-EM's noise then follows each feature's scale)",
    )
    u.add_argument("--ledger", type=nonempty, help="DP-EM: charge the fit to this budget ledger (smcdp budget)")
    u.add_argument("--dataset", help="DP-EM with --ledger: the dataset charged")
    u.add_argument(
        "--cmn",
        choices=("utterance", "causal", "none"),
        default="utterance",
        help="cepstral mean normalisation (default utterance)",
    )
    u.add_argument("--iter", type=positive_int, default=20, help="EM iterations (default 20)")
    u.add_argument("--min-covar", type=positive_float, default=1e-3, help="variance floor (default 1e-3)")
    u.add_argument(
        "--seed",
        type=seed_int,
        default=0,
        help="seed of the initialisation only (the DP noise always comes from the OS's secure source)",
    )
    u.set_defaults(func=_cmd_ubm)
    e = sub.add_parser(
        "enroll",
        help="enrol speakers: MAP adaptation of the UBM's means to each speaker's WAV files",
        description="Runs where the enrolment audio is (the user's device): MAP-adapts the UBM's means "
        "(Reynolds et al. 2000) to each speaker's frames and writes bob's speaker models file "
        "(the UBM, the adapted means, the threshold). Bob receives the adapted means, never the audio.",
    )
    e.add_argument("--ubm", required=True, metavar="ubm.npz")
    e.add_argument(
        "--enroll",
        action="append",
        required=True,
        metavar="NAME=DIR",
        help="a speaker and the folder of their enrolment WAVs (repeat)",
    )
    e.add_argument(
        "--relevance",
        type=float,
        default=DEFAULT_RELEVANCE,
        help=f"MAP relevance factor (default {DEFAULT_RELEVANCE:g})",
    )
    e.add_argument(
        "--threshold",
        type=float,
        default=0.0,
        help="decision threshold on the average frame log-likelihood ratio (default 0)",
    )
    e.add_argument("--out", required=True, metavar="speakers.npz")
    e.set_defaults(func=_cmd_enroll)
