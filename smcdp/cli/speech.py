"""``smcdp speech train``: keyword HMMs from folders of WAV files (contract: see --help)."""

from __future__ import annotations

import argparse
import json
import sys

from smcdp._files import atomic_write
from smcdp._optional import require
from smcdp.cli import speaker as speaker_cmds
from smcdp.cli.argtypes import nonempty, nonnegative_int, positive_float, seed_int
from smcdp.errors import InvalidMessage


def _cmd_train(args: argparse.Namespace) -> int:
    require("speech-training", "smcdp speech train")  # before any recording is read
    # deferred: the front end and hmmlearn load only when training runs, not for every smcdp command
    from smcdp.speech.training import parse_word_spec, train_from_folders

    if not args.out.endswith(".npz"):
        raise InvalidMessage(f"--out must name a .npz file, got {args.out!r}")
    word_dirs = [parse_word_spec(s) for s in args.word]
    if len(word_dirs) < 2:
        raise InvalidMessage("keyword recognition needs at least two words (--word WORD=DIR twice or more)")
    models, report = train_from_folders(
        word_dirs,
        states=args.states,
        mixtures=args.mixtures,
        covariance=args.covariance,
        cmn=args.cmn,
        n_iter=args.iter,
        min_covar=args.min_covar,
        heldout=args.heldout,
        min_files_heldout=args.min_files_heldout,
        seed=args.seed,
    )
    models.save(args.out)
    for line in report.lines():
        print(line)
    print(
        f"wrote {args.out} ({models.n_words} models, {models.kind}, trained with --cmn {args.cmn}, which the "
        f"file records); recognise with smcdp demo keyword --wav U.wav --models {args.out}"
    )
    if args.report is not None:
        atomic_write(args.report, (json.dumps(report.as_dict(), indent=2) + "\n").encode("utf-8"))
    sys.stdout.flush()
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "speech", help="speech front end, keyword models (train) and speaker models (ubm, enroll)"
    )
    sub = p.add_subparsers(dest="speech_command", metavar="COMMAND")
    sub.required = True
    t = sub.add_parser(
        "train",
        help="train one HMM per word from folders of WAV files",
        description="Trains one left-to-right HMM per word (hmmlearn, Baum-Welch) on the 39-d MFCC frames of "
        "every .wav file in the word's folder (any sample rate, mono or stereo, 8/16/24/32-bit "
        "integer or float), writes the models file that 'smcdp demo keyword --models' and the "
        "keyword party read, and prints each word's training log-likelihood and, when every "
        "folder holds at least --min-files-heldout files (default 5), the held-out accuracy "
        "(a quarter of each folder held out, then the written models are retrained on all files).",
    )
    t.add_argument(
        "--word",
        action="append",
        required=True,
        metavar="WORD=DIR",
        help="a keyword and the folder of its WAV recordings (repeat for every word)",
    )
    t.add_argument("--states", type=int, default=5, help="HMM states per word (default 5)")
    t.add_argument(
        "--mixtures", type=int, default=1, help="Gaussian mixture components per state (default 1; >1 trains GMM-HMMs)"
    )
    t.add_argument("--covariance", choices=("diag", "full"), default="diag", help="covariance type (default diag)")
    t.add_argument(
        "--cmn",
        choices=("utterance", "causal", "none"),
        default="utterance",
        help="cepstral mean normalisation (default utterance, as the bundled models; 'causal' "
        "gives models that a streaming front end can use; recognise with the same --cmn)",
    )
    t.add_argument("--iter", type=nonnegative_int, default=20, help="Baum-Welch iterations (default 20)")
    t.add_argument("--min-covar", type=positive_float, default=1e-3, help="variance floor (default 1e-3)")
    t.add_argument("--heldout", type=float, default=0.25, help="share of each folder held out (default 0.25)")
    t.add_argument(
        "--min-files-heldout",
        type=int,
        default=5,
        help="files every folder needs before a held-out accuracy is computed (default 5)",
    )
    t.add_argument("--seed", type=seed_int, default=0, help="seed of the held-out split and hmmlearn (default 0)")
    t.add_argument("--out", required=True, metavar="models.npz", help="the models file to write")
    t.add_argument("--report", type=nonempty, metavar="report.json", help="also write the report as JSON")
    t.set_defaults(func=_cmd_train)
    speaker_cmds.register(sub)
