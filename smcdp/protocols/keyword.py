"""Privacy-preserving keyword recognition (seed 003 §4.2.1) between Alice (client) and Bob (server).

Alice holds a T × d MFCC feature matrix and the Paillier private key; Bob
holds Δ keyword HMMs.  Steps:

1. Alice makes a key pair and sends the public key to Bob.
2. Alice and Bob run the secure forward algorithm
   (:mod:`smcdp.protocols.secure_forward`) for all Δ models at once; Bob
   obtains ``ξ(p_δ) = ξ(log P(x | λ_δ))`` for every δ.
3. Bob applies an order-preserving randomised transform: a secret random
   permutation π of the models and a strictly increasing affine map
   ``p'_i = a · p_{π(i)} + c + r_i`` with a secret integer ``a`` of ``scale_bits``
   bits, a secret offset ``c`` and a jitter ``r_i`` uniform in [0, a) per score
   (distinct grid values keep their order; without it ``a`` was the gcd of the
   differences); he sends ``ξ(p'_1..Δ)`` (rerandomised).
   (The seed's "order-preserving matrix R": ``p' = (p·P_π) (a I) + c 1``.)
4. Alice decrypts, takes ``i* = argmax_i p'_i`` and obtains the label of
   model ``π(i*)`` by a 1-out-of-Δ oblivious transfer (Naor–Pinkas); the
   label carries the word and its index in Bob's list.
5. Only with ``debug_reveal`` (a debugging aid that leaks every score): Bob
   also sends ``ξ(p_δ)`` in model order and Alice decrypts them.

docs/protocols/keyword.md says exactly what each party learns.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np

from smcdp.crypto.codec import peer_public_key, public_key_to_proto
from smcdp.crypto.encoding import UNPACKED
from smcdp.crypto.modexp import powmod
from smcdp.crypto.naor_pinkas import MODP2048
from smcdp.crypto.obfuscation import ObfuscatorPool
from smcdp.crypto.paillier import PrivateKey, check_key_kind
from smcdp.crypto.vector import EncryptedVector
from smcdp.errors import CryptoOverflow, InputRejected, InvalidMessage
from smcdp.net.channel import Channel
from smcdp.net.limits import TrafficEnvelope, ciphertext_vector_bytes, public_key_bytes
from smcdp.primitives.ot import ot_choose, ot_send, sender_setup
from smcdp.primitives.rng import Randomness, SeedLike, owned_session_key, prepare_session_keypair, protocol_rng
from smcdp.protocols.secure_forward import (
    KIND_CODES,
    MAX_FRAMES,
    ForwardAlice,
    ForwardBob,
    ForwardParams,
    Frames,
    forward_traffic,
)
from smcdp.speech.frontend import CMN_MODES
from smcdp.speech.models import KeywordModels
from smcdp.v1 import messages_pb2 as pb

ALICE, BOB = "alice", "bob"
#: public bound on |log P(x | λ)| (nats) used to size the order-preserving transform: real scores lie
#: below 2^40 nats, an impossible model's LOG_ZERO = −2^42 ± 2^40 (secure_forward) below 2^43
LOGLIK_BOUND_BITS = 43
#: a revealed score below this (nats) is an impossible model's LOG_ZERO: reported as −∞
IMPOSSIBLE_BELOW = -float(1 << 41)
#: frames the offline phase prepares for when the utterance streams in (2 s of audio)
STREAM_EXPECTED_FRAMES = 200
STREAM_PACES = ("realtime", "fast")
#: the longest label (``{"index": i, "word": w}`` in JSON) Bob transfers: the session's envelope counts on it
MAX_LABEL_BYTES = 512


async def frames_from(source: Iterable[Any]) -> AsyncIterator[np.ndarray]:
    """Alice's streaming frame source: frames (1-D feature vectors, or symbols) from a *blocking* iterator
    -- a front end reading audio in 10 ms hops, a microphone -- pulled in a worker thread so the event loop
    keeps serving the protocol while the next frame is computed; yielded as 1-frame chunks.

    Anything that is an async iterable of frame chunks can be given to :func:`keyword_alice` directly;
    this adapts the synchronous ones."""
    it = iter(source)
    end = object()
    while True:
        frame: Any = await asyncio.to_thread(next, it, end)  # one of the source's frames, or ``end``
        if frame is end:
            return
        yield np.asarray(frame)[None, ...] if np.ndim(frame) <= 1 else np.asarray(frame)


@dataclass
class KeywordParams(ForwardParams):
    """Public parameters of a keyword-recognition session."""

    protocol_name = "keyword"

    key_bits: int = 2048
    #: Alice's key: "standard", or "subgroup" (decryption about 4x cheaper; another hardness assumption and
    #: Bob re-randomises under her base: both parties' policies must allow it, docs/crypto.md "Subgroup keys")
    key_kind: str = "standard"
    debug_reveal: bool = False
    scale_bits: int = 32  # the transform's secret factor a has this many bits
    #: cepstral mean normalisation of Alice's front end when her input is a WAV file (public: it must
    #: match what Bob's models were trained with; smcdp.speech.frontend.CMN_MODES)
    cmn: str = "utterance"
    #: Alice feeds frames into the protocol as they are computed (docs/protocols/keyword.md, streaming);
    #: public: Bob sees blocks arrive over time anyway
    stream: bool = False
    #: with ``stream``: ``realtime`` reads the audio at its own pace (a microphone), ``fast`` as fast as it can
    stream_pace: str = "realtime"

    def validate(self) -> KeywordParams:
        super().validate()
        if isinstance(self.key_bits, bool) or not isinstance(self.key_bits, int) or not 256 <= self.key_bits <= 16384:
            raise InvalidMessage(f"keyword parameter key_bits={self.key_bits!r} must be an integer in [256, 16384]")
        check_key_kind(self.key_kind, "keyword parameter")
        if not isinstance(self.debug_reveal, bool):
            raise InvalidMessage("keyword parameter debug_reveal must be a boolean")
        if isinstance(self.scale_bits, bool) or not isinstance(self.scale_bits, int) or not 8 <= self.scale_bits <= 128:
            raise InvalidMessage(f"keyword parameter scale_bits={self.scale_bits!r} must be an integer in [8, 128]")
        if not isinstance(self.stream, bool):
            raise InvalidMessage("keyword parameter stream must be a boolean")
        if self.stream_pace not in STREAM_PACES:
            raise InvalidMessage(
                f"keyword parameter stream_pace={self.stream_pace!r} must be one of {list(STREAM_PACES)}"
            )
        if self.stream and self.cmn == "utterance":
            raise InvalidMessage(
                "stream with cmn='utterance': per-utterance mean normalisation needs the whole "
                "utterance before any frame is final; use models trained with cmn='causal' "
                "(smcdp speech train --cmn causal) or run without streaming"
            )
        if self.cmn not in CMN_MODES:
            raise InvalidMessage(f"keyword parameter cmn={self.cmn!r} must be one of {list(CMN_MODES)}")
        return self

    def forward(self) -> ForwardParams:
        names = {f.name for f in fields(ForwardParams)}
        return ForwardParams(**{k: v for k, v in asdict(self).items() if k in names})

    def offset_bits(self) -> int:
        return self.log_frac_bits + LOGLIK_BOUND_BITS + self.scale_bits + 40

    def traffic_envelope(self, role: str) -> TrafficEnvelope:
        """What ``role`` receives at most (smcdp.net.limits), from the public bounds on Alice's frames and
        Bob's models (max_frames, max_models, max_states, max_mixtures, max_features), the key size and the
        masking parameters: the secure forward algorithm's messages (:func:`forward_traffic`) for the
        emission kind that needs the most, and the keyword steps' (key, ranked scores, the label OT)."""
        B, D = self.key_bits, self.max_models
        source = (
            f"keyword parameters ({self.max_frames} frames, {D} models of {self.max_states} states, "
            f"{self.max_mixtures} components, {self.max_features} features, {B}-bit key)"
        )
        env = None
        for kind in KIND_CODES:
            to_alice, to_bob = forward_traffic(self.forward(), B, kind)
            group = MODP2048.byte_length + 32  # one Naor–Pinkas group element, framed
            if role == ALICE:
                msgs = to_alice + [
                    (1, ciphertext_vector_bytes(D, B)),  # kw/ranked
                    (1, group),
                    (1, max(2, D) * (MAX_LABEL_BYTES + 6) + 16),
                ]  # label OT
                if self.debug_reveal:
                    msgs.append((1, ciphertext_vector_bytes(D, B)))  # kw/debug
            else:
                msgs = to_bob + [(1, public_key_bytes(B)), (1, 64), (1, group)]  # kw/pk, label OT
            one = TrafficEnvelope.from_messages(msgs, source)
            env = one if env is None else env.widest(one)
        assert env is not None  # KIND_CODES names at least one kind
        return env


@dataclass
class AliceResult:
    keyword: str
    index: int
    log_likelihoods: list[float] | None = None
    timings: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, object] = field(default_factory=dict)
    #: what this session used, for the next one's offline phase (:func:`prepare_alice`): the caller keeps it
    prepare_next: AliceSizes | None = None


@dataclass
class BobResult:
    n_models: int
    timings: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, object] = field(default_factory=dict)


# =============================================================================== Alice
async def keyword_alice(
    ch: Channel,
    X: Frames,
    params: KeywordParams,
    *,
    private_key: PrivateKey | None = None,
    bob: str = BOB,
    seed: SeedLike = None,
    allow_insecure_keys: bool = False,
    expected_frames: int | None = None,
) -> AliceResult:
    """Role Alice: the utterance's features and the private key; learns the keyword.

    ``X``: a T × d feature matrix (or T symbols), or an async iterable of frame chunks (streaming:
    frames enter the protocol as they are computed; ``expected_frames`` then sizes the offline phase).
    Timings are split into ``offline`` (key pair, tables, obfuscators: nothing depends on ``X``) and
    ``online`` (from the first frame to the keyword).
    """
    params.validate()
    t_start = time.perf_counter()
    c_start = time.process_time()
    # ------------------------------------------------------------------ offline phase
    sk, obfuscators, keygen = _alice_key(ch, params, private_key, seed, allow_insecure_keys)
    pk = sk.public_key
    # --- Step 1: the public key.
    await ch.send(bob, "kw/pk", public_key_to_proto(pk))
    role = ForwardAlice(
        ch,
        params.forward(),
        private_key=sk,
        bob=bob,
        tag="kw/fw",
        seed=seed,
        labels=("keyword", "forward"),
        obfuscators=obfuscators,
    )
    try:
        if expected_frames is None:
            expected_frames = len(X) if not isinstance(X, AsyncIterable) else STREAM_EXPECTED_FRAMES
        await role.prepare(expected_frames)
        sizes = AliceSizes(
            key_bits=pk.bits,
            obfuscators_per_frame=max(1.0, role.offline["obfuscator_count"] / expected_frames),
            key_kind=pk.kind,
        )
        offline = {
            "keygen": keygen,
            "prepared": obfuscators is not None,
            **role.offline,
            "seconds": time.perf_counter() - t_start,
            "cpu_seconds": time.process_time() - c_start,
        }
        # ------------------------------------------------------------------ online phase
        w_on, c_on = time.perf_counter(), time.process_time()
        # --- Step 2: secure forward algorithm for every model.
        fw = await role.run(X)
        online = dict(role.online)
        # --- Step 4: argmax of the order-preserved scores, label by 1-of-Δ OT.
        t0 = time.perf_counter()
        index, word = await _alice_keyword(ch, bob, sk, fw.n_models, seed)
        online["argmax_and_ot"] = time.perf_counter() - t0
        _online_done(online, w_on, c_on, fw.frames if isinstance(X, AsyncIterable) else None)
        # --- Step 5 (debug_reveal only): every score
        lls = await _alice_debug_scores(ch, bob, sk, fw.n_models, params) if params.debug_reveal else None
        timings = {"offline": offline, "online": online, "frames": fw.frames, "total": time.perf_counter() - t_start}
        return AliceResult(
            keyword=word,
            index=index,
            log_likelihoods=lls,
            timings=timings,
            stats=ch.stats.as_dict(),
            prepare_next=sizes,
        )
    finally:
        role.close()


def _online_done(online: dict[str, Any], w_on: float, c_on: float, streamed_frames: int | None) -> None:
    """Alice's online clock stops at the keyword; a streamed utterance also reports the latency after its
    last frame (which left the front end at ``audio_done``: forward's clock starts with ours)."""
    online["seconds"] = online["keyword_at"] = time.perf_counter() - w_on
    online["cpu_seconds"] = time.process_time() - c_on
    if streamed_frames is not None:
        online["stream"] = {
            "frames": streamed_frames,
            "last_frame_at": online.get("audio_done"),
            "keyword_at": online["keyword_at"],
            "latency_after_last_frame": online["keyword_at"] - online.get("audio_done", 0.0),
        }


def _alice_key(
    ch: Channel, params: KeywordParams, private_key: PrivateKey | None, seed: SeedLike, allow_insecure_keys: bool
) -> tuple[PrivateKey, ObfuscatorPool | None, float]:
    """Offline: the session's key pair (the caller's, or derived from the role's root -- made while the party
    was idle, with its obfuscators, if it was: smcdp.runtime.offline), its obfuscators if prepared, and the
    seconds it took."""
    t0 = time.perf_counter()
    private_key, obfuscators = owned_session_key(
        seed,
        "keyword",
        ch.role,
        params.key_bits,
        params.key_kind,
        private_key=private_key,
        allow_insecure=allow_insecure_keys,
    )
    return private_key, obfuscators, time.perf_counter() - t0


async def _alice_keyword(ch: Channel, bob: str, sk: PrivateKey, n_models: int, seed: SeedLike) -> tuple[int, str]:
    """Step 4: decrypt Bob's order-preserved scores, take their argmax i*, obtain label π(i*) by 1-of-Δ OT."""
    pk = sk.public_key
    ranked = EncryptedVector.from_proto(
        await ch.recv(bob, "kw/ranked", pb.CiphertextVector), pk, packing=UNPACKED, what=f"kw/ranked from {bob}"
    )
    if ranked.length != n_models:
        raise InvalidMessage(f"kw/ranked from {bob} holds {ranked.length} scores for {n_models} models")
    scores = ranked.decrypt_ints(sk)
    best = max(range(n_models), key=lambda i: (scores[i], -i))
    (label,) = await ot_choose(
        ch,
        bob,
        [best],
        max(2, n_models),
        tag_prefix="kw/label",
        rng=protocol_rng(seed, "keyword", ch.role, "label-ot"),
    )
    return _parse_label(label, bob)


async def _alice_debug_scores(
    ch: Channel, bob: str, sk: PrivateKey, n_models: int, params: KeywordParams
) -> list[float]:
    """Step 5 (``debug_reveal``): ξ(log P(x | λ_δ)) in model order, decrypted."""
    dbg = EncryptedVector.from_proto(
        await ch.recv(bob, "kw/debug", pb.CiphertextVector),
        sk.public_key,
        length=n_models,
        exponent=-params.log_frac_bits,
        packing=UNPACKED,
        what=f"kw/debug from {bob}",
    )
    # an impossible model (P = 0) arrives as LOG_ZERO = −2^42 ± 2^40, below every real score (|ℓ| < 2^40)
    return [float("-inf") if x < IMPOSSIBLE_BELOW else float(x) for x in dbg.decrypt(sk)]


# =============================================================================== Alice's next session, ahead
#: obfuscators per frame a prepared key gets before any session has shown the real number (the fixture's
#: 10 left-to-right 5-state models need 84); afterwards the last session's number
DEFAULT_OBFUSCATORS_PER_FRAME = 64


@dataclass(frozen=True)
class AliceSizes:
    """What Alice's next session is prepared for (:func:`prepare_alice`): the key size and obfuscators per
    frame of her last session (:attr:`AliceResult.prepare_next`), or these defaults before any."""

    key_bits: int = KeywordParams.key_bits
    obfuscators_per_frame: float = float(DEFAULT_OBFUSCATORS_PER_FRAME)
    key_kind: str = KeywordParams.key_kind


def prepare_alice(
    root: Randomness,
    frames: int,
    *,
    key_bits: int = AliceSizes.key_bits,
    obfuscators_per_frame: float = AliceSizes.obfuscators_per_frame,
    role: str = ALICE,
    allow_insecure_keys: bool = False,
    key_kind: str = AliceSizes.key_kind,
) -> None:
    """Alice's offline phase for a session that will have randomness root ``root``, started now in the
    background (:func:`~smcdp.primitives.rng.prepare_session_keypair`): the key that session derives, its
    CRT tables, and obfuscators for ``frames`` frames -- for a key of ``key_bits`` and
    ``obfuscators_per_frame`` (the caller passes its last session's :class:`AliceSizes`).  A session with
    another root, key size or role finds nothing and does it all itself."""
    count = int(max(1.0, float(obfuscators_per_frame)) * max(1, min(int(frames), MAX_FRAMES))) + 8
    prepare_session_keypair(
        root,
        "keyword",
        role,
        int(key_bits),
        uses=count,
        obfuscators=count,
        allow_insecure=allow_insecure_keys,
        subgroup=key_kind == "subgroup",
    )


def _parse_label(label: bytes, bob: str) -> tuple[int, str]:
    try:
        obj = json.loads(label.decode("utf-8"))
        index, word = obj["index"], obj["word"]
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError):
        raise InvalidMessage(f"the keyword label obtained from {bob} is not valid JSON with index and word") from None
    if isinstance(index, bool) or not isinstance(index, int) or index < 0 or not isinstance(word, str) or not word:
        raise InvalidMessage(f"the keyword label from {bob} has an invalid index or word")
    return index, word


# =============================================================================== Bob
async def keyword_bob(
    ch: Channel,
    models: KeywordModels,
    params: KeywordParams,
    *,
    alice: str = ALICE,
    seed: SeedLike = None,
    allow_insecure_keys: bool = False,
) -> BobResult:
    """Role Bob: the keyword HMMs; sees only ciphertexts; learns nothing of the result."""
    params.validate()
    t_start = time.perf_counter()
    c_start = time.process_time()
    rng = protocol_rng(seed, "keyword", ch.role)
    pk = peer_public_key(
        await ch.recv(alice, "kw/pk", pb.PaillierPublicKey),
        bits=params.key_bits,
        kind=params.key_kind,
        who=alice,
        allow_insecure=allow_insecure_keys,
    )
    role = ForwardBob(
        ch, models, params.forward(), public_key=pk, alice=alice, tag="kw/fw", seed=seed, labels=("keyword", "forward")
    )
    D = models.n_words
    # step 4's OT: r and its powers need nothing of Alice's, so they are made in the offline phase
    ot_setup = asyncio.ensure_future(
        asyncio.to_thread(
            sender_setup,
            ch.session_id,
            max(D, 2),
            tag_prefix="kw/label",
            rng=protocol_rng(seed, "keyword", ch.role, "label-ot"),
        )
    )
    try:
        await role.prepare()
        offline = {
            **role.offline,
            "seconds": time.perf_counter() - t_start,
            "cpu_seconds": time.process_time() - c_start,
        }
        w_on, c_on = time.perf_counter(), time.process_time()
        fw = await role.run()
        online = dict(role.online)
        pool = role.pool
        assert pool is not None  # made by role.prepare()
        t0 = time.perf_counter()
        # --- Step 3: order-preserving randomised transform + permutation.
        perm = list(range(D))
        rng.shuffle(perm)
        a = rng.randrange(1 << (params.scale_bits - 1), 1 << params.scale_bits)
        c = rng.randrange(0, 1 << params.offset_bits())
        # a score's own r_i in [0, a): a·p + c + r keeps the order of distinct grid values p (a gap of one grid step
        # is a ≥ r_i − r_j + 1), and the gcd of the differences no longer gives a -- with r = 0 it did (a review
        # recovered a in 198 of 200 sessions, and with it the exact score gaps)
        r = [rng.randrange(0, a) for _ in range(D)]
        bound = (1 << (params.log_frac_bits + LOGLIK_BOUND_BITS)) * a + c + a
        if bound > pk.max_int:
            raise CryptoOverflow("the order-preserving transform does not fit the plaintext space of this key")
        n2 = pk.nsquare
        lp = fw.log_likelihoods.ciphertexts
        ranked = [pool.rerandomize(powmod(lp[perm[i]], a, n2) * ((1 + pk.n * (c + r[i])) % n2) % n2) for i in range(D)]
        await ch.send(alice, "kw/ranked", EncryptedVector(pk, ranked, D, 0, UNPACKED, bound).to_proto())
        # --- Step 4: the labels, in the permuted order, by 1-of-Δ OT.
        labels = [json.dumps({"index": perm[i], "word": models.words[perm[i]]}).encode() for i in range(D)]
        if D == 1:
            labels.append(b"{}")
        width = max(len(x) for x in labels)
        if width > MAX_LABEL_BYTES:  # the session's byte envelope (traffic_envelope) counts on it
            raise InputRejected(f"a keyword's label is longer than {MAX_LABEL_BYTES} bytes", f"{width} bytes")

        await ot_send(ch, alice, [[x.ljust(width) for x in labels]], tag_prefix="kw/label", setup=await ot_setup)
        online["transform_and_ot"] = time.perf_counter() - t0
        # Bob's online clock starts when he is ready, i.e. it includes waiting for Alice's offline phase
        # and her first block (``first_block``); Alice's clock is the session's online time
        online["seconds"] = time.perf_counter() - w_on
        online["seconds_from_first_block"] = online["seconds"] - online.get("first_block", 0.0)
        online["cpu_seconds"] = time.process_time() - c_on
        if params.debug_reveal:
            dbg = [pool.rerandomize(c_) for c_ in lp]
            await ch.send(
                alice,
                "kw/debug",
                EncryptedVector(pk, dbg, D, fw.log_likelihoods.exponent, UNPACKED, fw.log_likelihoods.bound).to_proto(),
            )
        timings = {"offline": offline, "online": online, "frames": fw.frames, "total": time.perf_counter() - t_start}
        return BobResult(n_models=D, timings=timings, stats=ch.stats.as_dict())
    finally:
        if not ot_setup.cancel() and not ot_setup.cancelled():
            ot_setup.exception()  # retrieved: a failed set-up is not worth a warning after the session's own error
        role.close()
