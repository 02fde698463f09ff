"""Plug-in for keyword recognition: Alice's utterance (WAV audio or a feature file), Bob's model file -> their roles."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

import numpy as np

from smcdp._files import ARRAY_ERRORS, NUMPY_HEADERS, check_array_sizes, npy_rows
from smcdp.crypto.paillier import check_key_bits
from smcdp.errors import InputRejected, InvalidMessage, PermissionDenied, local_failure
from smcdp.net.channel import Channel
from smcdp.plugins.base import FORWARD_HIDING, OutputFlow, ProtocolPlugin, SessionContext, SessionSummary, hiding_of
from smcdp.primitives.rng import Randomness
from smcdp.protocols.base import check_roles
from smcdp.protocols.keyword import (
    ALICE,
    BOB,
    AliceResult,
    AliceSizes,
    KeywordParams,
    frames_from,
    keyword_alice,
    keyword_bob,
    prepare_alice,
)
from smcdp.protocols.secure_forward import MAX_FRAMES
from smcdp.speech.audio import is_wav_header, read_wav
from smcdp.speech.features import wav_features
from smcdp.speech.frontend import stream_wav
from smcdp.speech.models import KeywordModels, load_models

NPY_MAGIC = b"\x93NUMPY"


def utterance_kind(path) -> str:
    """``"wav"`` or ``"npy"`` by the file's first bytes (not its name); a clear error otherwise."""
    try:
        with open(path, "rb") as f:
            head = f.read(12)
    except FileNotFoundError:
        raise InputRejected("the configured utterance file does not exist", str(path)) from None
    except OSError as exc:
        if local_failure(exc):
            raise
        raise InputRejected("the utterance file cannot be read", f"{path}: {exc}") from None
    if head.startswith(NPY_MAGIC):
        return "npy"
    if is_wav_header(head):
        return "wav"
    if not head:
        raise InputRejected("the utterance file is empty", str(path))
    raise InputRejected(
        "the utterance must be a WAV file (audio) or a .npy array (features)",
        f"{path}: neither a RIFF/WAVE nor a NUMPY header",
    )


def load_utterance(path, cmn: str = "utterance") -> np.ndarray:
    """Alice's input: a WAV file (audio, turned into T x 39 MFCC frames here, in her own process, with
    cepstral mean normalisation ``cmn``) or a T x d float feature matrix / 1-D integer symbol sequence
    from ``.npy`` (no pickles).  Which one is decided by the file's header, not its name."""
    if utterance_kind(path) == "wav":
        try:
            X = wav_features(path, cmn=cmn)
        except InvalidMessage as exc:
            raise InputRejected("the utterance WAV file is not usable audio", str(exc)) from None
        if X.shape[0] > MAX_FRAMES:
            raise InputRejected(f"the utterance must have 1..{MAX_FRAMES} frames", f"{path}: {X.shape[0]} frames")
        return X
    try:
        check_array_sizes(path)
        with NUMPY_HEADERS:
            X = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise InputRejected("the configured utterance file does not exist", str(path)) from None
    except ARRAY_ERRORS as exc:
        if local_failure(exc):
            raise
        raise InputRejected("the utterance file is not a valid .npy array", f"{path}: {exc}") from None
    if X.ndim == 2 and X.dtype.kind in "fiu":
        if not np.all(np.isfinite(X)):
            raise InputRejected("the utterance must not contain NaN or infinite values", str(path))
    elif not (X.ndim == 1 and X.dtype.kind in "iu"):
        raise InputRejected(
            "the utterance must be a T x d real matrix (or 1-D integer symbols)", f"{path}: {X.dtype} {X.shape}"
        )
    if X.shape[0] < 1 or X.shape[0] > MAX_FRAMES:
        raise InputRejected(f"the utterance must have 1..{MAX_FRAMES} frames", f"{path}: {X.shape[0]} frames")
    return X


def stream_utterance(path, p: KeywordParams):
    """Alice's frames of a WAV file as they are computed, the audio read in 10 ms hops (at the audio's own
    pace with ``stream_pace = "realtime"``), and the audio's duration.  The file is checked first
    (read_wav's clear errors), so bad audio is refused before the session's first message."""
    if utterance_kind(path) != "wav":
        raise InputRejected("streaming needs a WAV utterance (audio), not a feature file", str(path))
    try:
        audio = read_wav(path)
    except InvalidMessage as exc:
        raise InputRejected("the utterance WAV file is not usable audio", str(exc)) from None
    return frames_from(stream_wav(path, cmn=p.cmn, realtime=p.stream_pace == "realtime")), audio.seconds


def load_keyword_models(path) -> KeywordModels:
    return load_models(path)


class KeywordPlugin(ProtocolPlugin):
    name = "keyword"

    def __init__(self) -> None:
        super().__init__()
        #: the key size and obfuscators per frame of this party's last session as Alice (from her result),
        #: which :meth:`prepare_next` makes the next one's key and obfuscators for; replaced whole, so the
        #: preparing thread reads one session's sizes or the other's, never a mixture
        self.last_alice = AliceSizes()

    def validate_params(self, params: Mapping[str, Any], roles: Mapping[str, str]) -> dict:
        p = KeywordParams.from_mapping(params)
        check_roles(self.name, roles, {ALICE, BOB})
        return asdict(p)

    def summary(self, params: Mapping[str, Any], roles: Mapping[str, str]) -> SessionSummary:
        p = KeywordParams.from_mapping(params)
        outputs = [OutputFlow("keyword", (ALICE,), (ALICE, BOB))]
        if p.debug_reveal:
            outputs.append(OutputFlow("log-likelihoods", (ALICE,), (ALICE, BOB)))
        return SessionSummary(
            protocol=self.name,
            key_bits={"paillier": p.key_bits},
            data_roles=(ALICE, BOB),
            coordinator_roles=(),
            outputs=tuple(outputs),
            frames_per_round={BOB: p.frames_per_round},
            hiding=hiding_of(p, FORWARD_HIDING),
            subgroup_key=(ALICE, BOB) if p.key_kind == "subgroup" else (),
        )

    def traffic_envelope(self, params: Mapping[str, Any], roles: Mapping[str, str], role: str):
        return KeywordParams.from_mapping(params).traffic_envelope(role)

    def prepare_next(self, root: Randomness, inputs: Mapping[str, str], allow_insecure_keys: bool) -> None:
        """A party with an utterance configured is an Alice: her next session's key pair, its tables and
        its obfuscators (for the utterance's frames) are made ahead, for the key size and
        obfuscators per frame of her last session, which this plug-in keeps (docs/protocols/keyword.md,
        :func:`~smcdp.protocols.keyword.prepare_alice`)."""
        path = inputs.get("utterance")
        if not path:
            return
        if utterance_kind(path) == "wav":
            frames = read_wav(path).frames
        else:
            frames = npy_rows(path)
        last = self.last_alice
        prepare_alice(
            root,
            frames,
            key_bits=last.key_bits,
            obfuscators_per_frame=last.obfuscators_per_frame,
            allow_insecure_keys=allow_insecure_keys,
            key_kind=last.key_kind,
        )

    async def run_role(self, role: str, ch: Channel, ctx: SessionContext) -> dict:
        p = KeywordParams.from_mapping(ctx.params)
        check_key_bits(p.key_bits, ctx.allow_insecure_keys)
        if role == ALICE:
            path = self.input_path(ctx, "utterance", ch.me)
            if p.stream:
                X, audio_seconds = stream_utterance(path, p)
                out = self._alice_output(
                    await keyword_alice(ch, X, p, seed=ctx.seed, allow_insecure_keys=ctx.allow_insecure_keys)
                )
                st = out["timings"]["online"].get("stream", {})
                st.update(
                    audio_seconds=audio_seconds,
                    pace=p.stream_pace,
                    real_time_factor=st.get("keyword_at", 0.0) / audio_seconds,
                )
                return out
            X = load_utterance(path, p.cmn)
            return self._alice_output(
                await keyword_alice(ch, X, p, seed=ctx.seed, allow_insecure_keys=ctx.allow_insecure_keys)
            )
        if role == BOB:
            if p.debug_reveal and not ctx.allow_insecure_keys:
                # the initiator chose the parameters: Bob does not hand out every score on request
                raise PermissionDenied(
                    f"{ch.me}: debug_reveal would reveal every model's score to Alice; this party accepts it "
                    "only on a test deployment (party.allow_insecure_keys = true)"
                )
            models = load_keyword_models(self.input_path(ctx, "models", ch.me))
            return asdict(await keyword_bob(ch, models, p, seed=ctx.seed, allow_insecure_keys=ctx.allow_insecure_keys))
        raise InvalidMessage(f"keyword has no role {role!r}")

    def _alice_output(self, res: AliceResult) -> dict:
        """Alice's record; the sizes for her next session are kept here, not recorded."""
        if res.prepare_next is not None:
            self.last_alice = res.prepare_next
        out = asdict(res)
        del out["prepare_next"]
        return out
