"""``smcdp demo speaker-verify`` and ``smcdp demo speaker-identify``: the user's device (alice, the audio)
and the service (bob, the UBM and the enrolled speakers) as two processes (contract JSON: see --help).

The demo process plays the enrolling device too: it MAP-adapts the UBM's means to each ``--enroll``
folder (the enrolment audio never reaches bob's process, only the adapted means do) and writes bob's
speaker models file; then one session between the party processes.  ``plaintext_decision`` /
``plaintext_speaker`` are the same computation in the clear (numpy), as the other demos compare."""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

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
from smcdp.cli.speaker import enroll, parse_enroll_spec
from smcdp.errors import InvalidMessage
from smcdp.plugins.keyword import load_utterance, utterance_kind
from smcdp.protocols.secure_forward import clip_frames
from smcdp.protocols.speaker import (
    ALICE,
    BOB,
    IdentifyParams,
    VerifyParams,
    verify_error_bound,
)
from smcdp.runtime.local import LocalCluster, bytes_sent
from smcdp.speech.speaker import UBM, SpeakerModels


def _prepare(ubm_path: str, enrolls: list[str], wav: str, threshold: float, workdir: Path):
    ubm = UBM.load(ubm_path)
    models = enroll(ubm, [parse_enroll_spec(s) for s in enrolls], threshold=threshold)
    workdir.mkdir(parents=True, exist_ok=True, mode=0o700)  # a --keep-dir that does not exist yet
    path = workdir / "speakers.npz"
    models.save(path)
    X = load_utterance(wav, ubm.cmn)
    if X.ndim != 2 or X.shape[1] != ubm.gmm.dim:
        raise InvalidMessage(f"the utterance has shape {X.shape}; the UBM expects T x {ubm.gmm.dim} features")
    say(
        f"enrolled {models.n_speakers} speakers by MAP adaptation of a {ubm.gmm.n_components}-component UBM "
        f"(on this device: bob receives the adapted means only); alice: {X.shape[0]} frames"
    )
    return models, path, X


def _run(protocol: str, p: dict, models_path: Path, wav: str, key_bits: int, seed, keep_dir, faults, label: str):
    insecure = check_key_bits_arg(key_bits)
    parties = {ALICE: {protocol: {"utterance": wav}}, BOB: {protocol: {"models": str(models_path)}}}
    roles = {ALICE: ALICE, BOB: BOB}
    options, _ = governed(protocol, roles, p, initiator=ALICE, seed=seed)
    if faults is not None:
        faults.check(parties)
    with LocalCluster(
        parties,
        allow_insecure_keys=insecure,
        workdir=keep_dir,
        data_root=keep_dir,
        peer_grace_seconds=faults.peer_grace if faults else None,
        **options,
    ) as cluster:
        say("party processes up; running the session")
        t0 = time.monotonic()
        records, fault_info = run_session(cluster, faults, label, protocol, roles, p, initiator=ALICE, seed=seed)
        seconds = time.monotonic() - t0
    require_success(records)
    ra, rb = records[ALICE]["result"], records[BOB]["result"]
    sent = bytes_sent(records)
    ta, tb = ra.get("timings", {}), rb.get("timings", {})
    common = {
        "seconds": seconds,
        "offline_seconds": ta.get("offline", {}).get("seconds"),
        "online_seconds": ta.get("online", {}).get("seconds"),
        "bytes": sum(sent.values()),
        "bytes_sent": sent,
        "key_bits": key_bits,
        "key_kind": p.get("key_kind", "standard"),
        "frames": ta.get("frames"),
        "timings": {"alice": ta, "bob": tb},
        "session_id": records[ALICE]["session_id"],
        **fault_info,
    }
    return ra, rb, common


def _bounds(models: SpeakerModels, X) -> dict:
    return {"max_frames": int(X.shape[0]), "max_mixtures": models.ubm.n_components, "max_features": models.ubm.dim}


def demo_speaker_verify(
    ubm: str,
    enrolls: list[str],
    claim: str,
    wav: str,
    *,
    threshold: float = 0.0,
    output: str = BOB,
    key_bits: int = 2048,
    seed: int | None = None,
    keep_dir: str | None = None,
    faults: Faults | None = None,
    params: dict | None = None,
) -> dict:
    """Enrol, then verify ``wav`` against ``claim`` between two party processes; the contract JSON."""
    with tempfile.TemporaryDirectory(prefix="smcdp-speaker-") as tmp:
        models, path, X = _prepare(ubm, enrolls, wav, threshold, Path(keep_dir or tmp))
        p = {
            "key_bits": key_bits,
            "claim": claim,
            "output": output,
            "cmn": models.cmn,
            **_bounds(models, X),
            **(params or {}),
        }
        vp = VerifyParams.from_mapping(p)
        X, _ = clip_frames(X, vp.feature_bits)  # the frames the protocol computes on: the same computation
        plain_score = models.score(models.index(claim), X)
        bound = verify_error_bound(models, claim, X, vp)
        ra, rb, common = _run("speaker-verify", p, path, wav, key_bits, seed, keep_dir, faults, "speaker verification")
    decision = (rb if output == BOB else ra)["decision"]
    plain = "accept" if plain_score >= models.threshold else "reject"
    out = {
        "decision": decision,
        "plaintext_decision": plain,
        "claim": claim,
        "output": output,
        "plaintext_score": plain_score,
        "threshold": models.threshold,
        # the fixed-point bound (nats per frame): beyond it from θ, the decisions must agree
        "error_bound": bound,
        "beyond_bound": abs(plain_score - models.threshold) > bound,
        "ubm": p.get("ubm", "private"),
        **common,
    }
    say(
        f"done in {out['seconds']:.1f} s (online {out['online_seconds'] or 0:.1f} s): {claim!r} -> {decision} "
        f"(plaintext {plain}, score {plain_score:.4f} vs threshold {models.threshold:g})"
    )
    return out


def demo_speaker_identify(
    ubm: str,
    enrolls: list[str],
    wav: str,
    *,
    threshold: float = 0.0,
    output: str = BOB,
    max_speakers: int = 16,
    key_bits: int = 2048,
    seed: int | None = None,
    keep_dir: str | None = None,
    faults: Faults | None = None,
    params: dict | None = None,
) -> dict:
    """Enrol, then identify the speaker of ``wav`` between two party processes; the contract JSON."""
    with tempfile.TemporaryDirectory(prefix="smcdp-speaker-") as tmp:
        models, path, X = _prepare(ubm, enrolls, wav, threshold, Path(keep_dir or tmp))
        if models.n_speakers > max_speakers:
            raise InvalidMessage(f"{models.n_speakers} enrolled speakers; raise --max-speakers (now {max_speakers})")
        p = {
            "key_bits": key_bits,
            "max_speakers": max_speakers,
            "output": output,
            "cmn": models.cmn,
            **_bounds(models, X),
            **(params or {}),
        }
        X, _ = clip_frames(X, IdentifyParams.from_mapping(p).feature_bits)  # the frames the protocol computes on
        scores = models.scores(X)
        ra, rb, common = _run(
            "speaker-identify", p, path, wav, key_bits, seed, keep_dir, faults, "speaker identification"
        )
    res = rb if output == BOB else ra
    if not res.get("learned"):
        raise InvalidMessage(f"the designated party ({output}) reports no outcome")
    plain = models.identify(X)
    out = {
        "speaker": res["speaker"],
        "plaintext_speaker": plain,
        "output": output,
        "plaintext_scores": dict(zip(models.names, map(float, scores))),
        "threshold": models.threshold,
        "max_speakers": max_speakers,
        **common,
    }
    say(
        f"done in {out['seconds']:.1f} s (online {out['online_seconds'] or 0:.1f} s): speaker {out['speaker']!r} "
        f"(plaintext {plain!r})"
    )
    return out


def _check_wav(args) -> None:
    if utterance_kind(args.wav) != "wav":
        raise InvalidMessage(f"--wav {args.wav}: not a WAV file (no RIFF/WAVE header)")
    require("speech-features", "--wav")


def _cmd_verify(args: argparse.Namespace) -> int:
    _check_wav(args)
    out = demo_speaker_verify(
        args.ubm,
        args.enroll,
        args.claim,
        args.wav,
        threshold=args.threshold,
        output=args.output,
        key_bits=args.key_bits,
        seed=args.seed,
        keep_dir=args.keep_dir,
        faults=Faults.from_args(args),
        params={**key_kind_param(args.key_kind), **({"ubm": "shared"} if args.share_ubm else {})},
    )
    dump_json(out, args.out)
    return 0


def _cmd_identify(args: argparse.Namespace) -> int:
    _check_wav(args)
    out = demo_speaker_identify(
        args.ubm,
        args.enroll,
        args.wav,
        threshold=args.threshold,
        output=args.output,
        max_speakers=args.max_speakers,
        key_bits=args.key_bits,
        seed=args.seed,
        keep_dir=args.keep_dir,
        faults=Faults.from_args(args),
        params=key_kind_param(args.key_kind),
    )
    dump_json(out, args.out)
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ubm", required=True, metavar="ubm.npz", help="bob's UBM (smcdp speech ubm)")
    p.add_argument(
        "--enroll",
        action="append",
        required=True,
        metavar="NAME=DIR",
        help="enrol a speaker from a folder of WAVs (repeat)",
    )
    p.add_argument("--wav", required=True, metavar="U.wav", help="alice's utterance (WAV)")
    p.add_argument(
        "--threshold",
        type=float,
        default=0.0,
        help="bob's threshold on the average frame log-likelihood ratio (default 0)",
    )
    p.add_argument(
        "--output", choices=(BOB, ALICE), default=BOB, help="who learns the result (default bob, the service)"
    )
    p.add_argument("--key-bits", type=int, default=2048, help="Paillier key size (default 2048; <2048 warns)")
    add_key_kind_argument(p)
    p.add_argument("--seed", type=int, help="fix the parties' randomness for experiments")
    p.add_argument("--out", help="write the JSON result here (default stdout)")
    p.add_argument("--keep-dir", help="keep certificates, configs, logs and the speaker models here")
    add_fault_arguments(p)


def register(sub) -> None:
    """Adds ``smcdp demo speaker-verify`` and ``smcdp demo speaker-identify``."""
    v = sub.add_parser(
        "speaker-verify",
        help="privacy-preserving speaker verification (alice: audio, bob: GMM-UBM)",
        description="Enrols each --enroll speaker by MAP adaptation of the UBM (in this process), starts alice "
        "(the audio in --wav) and bob (UBM, speaker models, threshold) as separate processes over "
        "gRPC with mutual TLS, verifies the utterance against --claim under encryption and writes "
        "JSON with decision (accept/reject, revealed only to --output), plaintext_decision, seconds, "
        "online_seconds and bytes.",
    )
    _common(v)
    v.add_argument("--claim", required=True, metavar="NAME", help="the claimed speaker")
    v.add_argument(
        "--share-ubm",
        action="store_true",
        help='bob shows alice his UBM (ubm = "shared", which bob\'s policy must allow: allow_reveal = '
        '["ubm"]); she scores it in the clear and the encrypted part runs on the speaker model alone, '
        "about half the work (docs/protocols/speaker.md)",
    )
    v.set_defaults(func=_cmd_verify)
    i = sub.add_parser(
        "speaker-identify",
        help="privacy-preserving speaker identification (alice: audio, bob: GMM-UBM)",
        description="As speaker-verify, but finds the enrolled speaker with the highest score, or none when it "
        "is below the threshold; JSON with speaker (a name or null), plaintext_speaker, seconds, "
        "online_seconds and bytes.",
    )
    _common(i)
    i.add_argument(
        "--max-speakers",
        type=int,
        default=16,
        help="public bound on the enrolled speakers: bob pads to it (default 16)",
    )
    i.set_defaults(func=_cmd_identify)
