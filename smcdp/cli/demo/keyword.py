"""``smcdp demo keyword``: Alice (features) and Bob (HMMs) as two processes (contract JSON: see --help)."""

from __future__ import annotations

import argparse
import time

from smcdp._optional import require
from smcdp.cli.demo.common import (
    Faults,
    add_fault_arguments,
    add_key_kind_argument,
    check_key_bits_arg,
    dump_json,
    governed,
    key_kind_param,
    require_success,
    run_session,
    say,
)
from smcdp.errors import InvalidMessage
from smcdp.plugins.keyword import load_keyword_models, load_utterance, utterance_kind
from smcdp.protocols.keyword import ALICE, BOB, KeywordParams
from smcdp.runtime.local import LocalCluster, bytes_sent


def demo_keyword(
    utterance: str,
    models: str,
    key_bits: int = 2048,
    seed: int | None = None,
    debug_reveal: bool = False,
    keep_dir: str | None = None,
    params: dict | None = None,
    faults: Faults | None = None,
    cmn: str | None = None,
    stream: str | None = None,
    frames_per_round: int = 1,
    key_kind: str = "standard",
) -> dict:
    """Run Alice and Bob as separate processes (gRPC, mutual TLS, loopback); returns the contract JSON.

    ``utterance`` is Alice's input: a WAV file (her process turns it into MFCC frames with cepstral
    mean normalisation ``cmn``) or a ``.npy`` feature matrix, told apart by the file's header.  ``cmn``
    defaults to what the models file records (``smcdp speech train`` writes it), else "utterance"; a
    different one is refused for a WAV: the features would not be the ones the models were trained on.

    ``frames_per_round`` m ≥ 2: one induction round trip per m frames (fewer round trips; shows Alice more
    of Bob's models, docs/protocols/keyword.md: the demo's policies admit it).

    ``key_kind`` ``"subgroup"``: Alice's key is a subgroup key (docs/crypto.md, "Subgroup keys": her
    decryptions about 4x cheaper, another hardness assumption; the demo's policies admit it).

    ``stream`` (``"realtime"`` or ``"fast"``): Alice reads the WAV in 10 ms hops (at the audio's pace, or as
    fast as she can) and feeds each frame into the protocol as soon as the front end has it; the JSON's
    ``stream`` object reports the latency after the last frame."""
    if stream is not None and utterance_kind(utterance) != "wav":
        raise InvalidMessage("--stream needs --wav (audio read in 10 ms hops)")
    M = load_keyword_models(models)
    cmn = resolve_cmn(cmn, M.cmn, models, wav=utterance_kind(utterance) == "wav")
    X = load_utterance(utterance, cmn)  # here only to check it early and count frames; Alice reads it again
    if M.kind != "discrete" and (X.ndim != 2 or X.shape[1] != M.n_features):
        raise InvalidMessage(f"the utterance has shape {X.shape}; the models expect T x {M.n_features} features")
    insecure = check_key_bits_arg(key_bits)
    # the public bounds of this session are what the demo knows of both inputs: its byte envelope is then
    # what these models and this utterance need, no more
    bounds = {
        "max_frames": int(X.shape[0]),
        "max_models": M.n_words,
        "max_states": M.n_states,
        "max_mixtures": M.n_mix or 1,
        "max_features": M.n_symbols if M.kind == "discrete" else M.n_features,
    }
    p = {
        "key_bits": key_bits,
        "debug_reveal": bool(debug_reveal),
        **bounds,
        **({"frames_per_round": frames_per_round} if frames_per_round != 1 else {}),
        **key_kind_param(key_kind),
        **(params or {}),
    }
    if stream is not None:
        p["stream"], p["stream_pace"] = True, stream
    if cmn != "utterance":
        p["cmn"] = cmn
    KeywordParams.from_mapping(p)
    parties = {ALICE: {"keyword": {"utterance": utterance}}, BOB: {"keyword": {"models": models}}}
    roles = {ALICE: ALICE, BOB: BOB}
    say(
        f"alice: {X.shape[0]} frames; bob: {M.n_words} HMMs x {M.n_states} states ({M.kind}); "
        f"{key_bits}-bit Paillier, mutual TLS on loopback"
    )
    # --debug-reveal: Bob hands out every score only on a test deployment (allow_insecure_keys)
    options, _ = governed("keyword", roles, p, initiator=ALICE, seed=seed)
    if faults is not None:
        faults.check(parties)
    with LocalCluster(
        parties,
        allow_insecure_keys=insecure or bool(debug_reveal),
        workdir=keep_dir,
        data_root=keep_dir,
        peer_grace_seconds=faults.peer_grace if faults else None,
        **options,
    ) as cluster:
        say("party processes up; running the session")
        t0 = time.monotonic()
        records, fault_info = run_session(
            cluster, faults, "keyword recognition", "keyword", roles, p, initiator=ALICE, seed=seed
        )
        seconds = time.monotonic() - t0
    require_success(records)
    ra = records[ALICE]["result"]
    out = {
        "keyword": ra["keyword"],
        "index": ra["index"],
        "seconds": seconds,
        "bytes_sent": bytes_sent(records),
        "key_bits": key_bits,
        "key_kind": p.get("key_kind", "standard"),
        "frames": int(X.shape[0]),
        "n_models": M.n_words,
        **phase_seconds(ra.get("timings", {}), records[BOB]["result"].get("timings", {})),
        "timings": {"alice": ra.get("timings", {}), "bob": records[BOB]["result"].get("timings", {})},
        "session_id": records[ALICE]["session_id"],
        **fault_info,
    }
    if stream is not None:
        out["stream"] = ra.get("timings", {}).get("online", {}).get("stream")
    if debug_reveal:
        out["log_likelihoods"] = ra["log_likelihoods"]
    say(
        f"done in {seconds:.1f} s (offline {out.get('offline_seconds') or 0:.1f} s, online "
        f"{out.get('online_seconds') or 0:.1f} s): keyword {out['keyword']!r} (index {out['index']})"
    )
    return out


def resolve_cmn(asked: str | None, recorded: str | None, models: str, wav: bool) -> str:
    """The CMN mode of Alice's front end: ``asked`` (--cmn), else the one the models file records."""
    if asked is None:
        return recorded or "utterance"
    if wav and recorded is not None and asked != recorded:
        raise InvalidMessage(
            f"the models in {models} were trained with --cmn {recorded}; recognising with "
            f"--cmn {asked} would compare other features than they were trained on "
            f"(drop --cmn, or pass --cmn {recorded})"
        )
    return asked


def phase_seconds(ta: dict, tb: dict) -> dict:
    """The offline phase (key pair, tables, obfuscators, Bob's masks: nothing depends on the utterance;
    until both parties are ready) and the online phase (Alice's clock, from her first frame to the keyword),
    with CPU seconds per party (Alice's decryption helper process counted separately)."""
    off, on = ta.get("offline", {}), ta.get("online", {})
    if not off or not on:
        return {}
    return {
        "offline_seconds": off.get("seconds"),
        "online_seconds": on.get("keyword_at", on.get("seconds")),
        "cpu_seconds": {
            "offline": {"alice": off.get("cpu_seconds"), "bob": tb.get("offline", {}).get("cpu_seconds")},
            "online": {"alice": on.get("cpu_seconds"), "bob": tb.get("online", {}).get("cpu_seconds")},
        },
    }


def _cmd(args: argparse.Namespace) -> int:
    if args.wav and utterance_kind(args.wav) != "wav":
        raise InvalidMessage(
            f"--wav {args.wav}: not a WAV file (no RIFF/WAVE header); use --utterance for .npy features"
        )
    if args.wav:
        require("speech-features", "--wav")  # Alice's features, before her process starts
    out = demo_keyword(
        args.wav or args.utterance,
        args.models,
        args.key_bits,
        args.seed,
        args.debug_reveal,
        args.keep_dir,
        faults=Faults.from_args(args),
        cmn=args.cmn,
        stream=args.stream_pace if args.stream else None,
        frames_per_round=args.frames_per_round,
        key_kind=args.key_kind,
    )
    dump_json(out, args.out)
    return 0


def register(sub) -> None:
    """Adds ``smcdp demo keyword`` to the demo subcommands."""
    p = sub.add_parser(
        "keyword",
        help="privacy-preserving keyword recognition (alice: audio or features, bob: HMMs)",
        description="Starts Alice (holding the audio in --wav, or the T x d features in --utterance) and Bob "
        "(holding the HMMs in "
        "--models) as separate processes over gRPC with mutual TLS on loopback, runs secure keyword "
        "recognition and writes JSON with keyword, index, seconds and bytes_sent (and, with "
        "--debug-reveal, log_likelihoods, which leaks every score to Alice).",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--wav",
        metavar="U.wav",
        help="Alice's audio: a WAV file at any sample rate, mono or stereo, 8/16/24/32-bit integer "
        "or float; turned into 39-d MFCC frames inside Alice's process",
    )
    src.add_argument("--utterance", metavar="U.npy", help="Alice's T x d float feature matrix (instead of --wav)")
    p.add_argument(
        "--stream",
        action="store_true",
        help="with --wav: Alice reads the audio in 10 ms hops and sends frames as they are computed; "
        "the JSON's stream object gives the latency after the last frame (needs models trained "
        "with --cmn causal or none)",
    )
    p.add_argument(
        "--stream-pace",
        choices=("realtime", "fast"),
        default="realtime",
        help="--stream: read the audio at its own pace like a microphone (default) or as fast as possible",
    )
    p.add_argument(
        "--cmn",
        choices=("utterance", "causal", "none"),
        default=None,
        help="cepstral mean normalisation of the --wav front end; must be what the models were "
        "trained with (default: what the models file records, as smcdp speech train writes "
        "it, else utterance)",
    )
    p.add_argument("--models", required=True, metavar="M.npz", help="keyword HMMs (Bob), smcdp.speech format")
    p.add_argument(
        "--frames-per-round",
        type=int,
        default=1,
        metavar="M",
        help="frames per induction round trip (default 1, the seed's; 2..4 cut the round trips M-fold "
        "on a slow network and show Alice more of Bob's models: docs/protocols/keyword.md)",
    )
    p.add_argument("--key-bits", type=int, default=2048, help="Paillier key size (default 2048; <2048 warns)")
    add_key_kind_argument(p)
    p.add_argument("--seed", type=int, help="fix Bob's mask randomness for experiments (encryption stays random)")
    p.add_argument(
        "--debug-reveal",
        action="store_true",
        help="also reveal all log-likelihoods to Alice after the protocol (LEAKS; debugging only)",
    )
    p.add_argument("--out", help="write the JSON result here (default stdout)")
    p.add_argument(
        "--keep-dir",
        help="keep certificates, configs and logs in this directory; party P's data directory is KEEP_DIR/P/",
    )
    add_fault_arguments(p)
    p.set_defaults(func=_cmd)
