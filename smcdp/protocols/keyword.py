"""Privacy-preserving keyword recognition (seed 003 §4.2.1) between Alice (client) and Bob (server).

Alice holds a T × d MFCC feature matrix and the Paillier private key; Bob
holds Δ keyword HMMs.  Steps:

1. Alice makes a key pair and sends the public key to Bob.
2. Alice and Bob run the secure forward algorithm
   (:mod:`smcdp.protocols.secure_forward`) for all Δ models at once; Bob
   obtains ``ξ(p_δ) = ξ(log P(x | λ_δ))`` for every δ.
3. Bob applies an order-preserving randomised transform: a secret random
   permutation π of the models and a strictly increasing affine map
   ``p'_i = a · p_{π(i)} + c`` with a secret integer ``a`` of ``scale_bits``
   bits and a secret offset ``c``; he sends ``ξ(p'_1..Δ)`` (rerandomised).
   (The seed's "order-preserving matrix R": ``p' = (p·P_π) (a I) + c 1``.)
4. Alice decrypts, takes ``i* = argmax_i p'_i`` and obtains the label of
   model ``π(i*)`` by a 1-out-of-Δ oblivious transfer (Naor–Pinkas); the
   label carries the word and its index in Bob's list.
5. Only with ``debug_reveal`` (a debugging aid that leaks every score): Bob
   also sends ``ξ(p_δ)`` in model order and Alice decrypts them.

docs/protocols/keyword.md says exactly what each party learns.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import gmpy2
import numpy as np

from smcdp.crypto.codec import public_key_from_proto, public_key_to_proto
from smcdp.crypto.encoding import UNPACKED
from smcdp.crypto.obfuscation import ObfuscatorPool
from smcdp.crypto.paillier import PrivateKey, check_key_bits, generate_keypair
from smcdp.crypto.vector import EncryptedVector
from smcdp.errors import CryptoOverflow, InvalidMessage
from smcdp.net.channel import Channel
from smcdp.protocols.base import ProtocolPlugin, SessionContext, register
from smcdp.protocols.hmm_primitives import protocol_rng
from smcdp.protocols.secure_forward import (
    MAX_FRAMES,
    ForwardParams,
    forward_alice,
    forward_bob,
)
from smcdp.v1 import messages_pb2 as pb

ALICE, BOB = "alice", "bob"
#: public bound on |log P(x | λ)| (nats) used to size the order-preserving transform
LOGLIK_BOUND_BITS = 40


@dataclass
class KeywordParams(ForwardParams):
    """Public parameters of a keyword-recognition session."""

    key_bits: int = 2048
    debug_reveal: bool = False
    scale_bits: int = 32          # the transform's secret factor a has this many bits

    def validate(self) -> KeywordParams:
        super().validate()
        if isinstance(self.key_bits, bool) or not isinstance(self.key_bits, int) or not 256 <= self.key_bits <= 16384:
            raise InvalidMessage(f"keyword parameter key_bits={self.key_bits!r} must be an integer in [256, 16384]")
        if not isinstance(self.debug_reveal, bool):
            raise InvalidMessage("keyword parameter debug_reveal must be a boolean")
        if isinstance(self.scale_bits, bool) or not isinstance(self.scale_bits, int) or not 8 <= self.scale_bits <= 128:
            raise InvalidMessage(f"keyword parameter scale_bits={self.scale_bits!r} must be an integer in [8, 128]")
        return self

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any]) -> KeywordParams:
        known = {f.name for f in fields(cls)}
        unknown = set(m) - known
        if unknown:
            raise InvalidMessage(f"unknown keyword parameters: {sorted(unknown)}")
        return cls(**dict(m)).validate()

    def forward(self) -> ForwardParams:
        names = {f.name for f in fields(ForwardParams)}
        return ForwardParams(**{k: v for k, v in asdict(self).items() if k in names})

    def offset_bits(self) -> int:
        return self.log_frac_bits + LOGLIK_BOUND_BITS + self.scale_bits + 40


@dataclass
class AliceResult:
    keyword: str
    index: int
    log_likelihoods: list[float] | None = None
    timings: dict = field(default_factory=dict)
    stats: dict = field(default_factory=dict)


@dataclass
class BobResult:
    n_models: int
    timings: dict = field(default_factory=dict)
    stats: dict = field(default_factory=dict)


# =============================================================================== Alice
async def keyword_alice(ch: Channel, X, params: KeywordParams, *, private_key: PrivateKey | None = None,
                        bob: str = BOB, allow_insecure_keys: bool = False) -> AliceResult:
    """Role Alice: the utterance's features and the private key; learns the keyword."""
    params.validate()
    t_start = time.perf_counter()
    if private_key is None:
        check_key_bits(params.key_bits, allow_insecure_keys)
        _, private_key = generate_keypair(params.key_bits, allow_insecure=allow_insecure_keys)
    sk = private_key
    check_key_bits(sk.public_key.bits, allow_insecure_keys)
    pk = sk.public_key
    # --- Step 1: the public key.
    await ch.send(bob, "kw/pk", public_key_to_proto(pk))
    pool = ObfuscatorPool.for_private_key(sk, capacity=256)
    try:
        # --- Step 2: secure forward algorithm for every model.
        fw = await forward_alice(ch, X, params.forward(), private_key=sk, bob=bob, tag="kw/fw", pool=pool)
        timings = dict(fw.timings)
        # --- Step 4: argmax of the order-preserved scores, label by 1-of-Δ OT.
        t0 = time.perf_counter()
        ranked = EncryptedVector.from_proto(await ch.recv(bob, "kw/ranked", pb.CiphertextVector), pk,
                                            packing=UNPACKED, what=f"kw/ranked from {bob}")
        n_models = ranked.length
        if n_models != fw.n_models:
            raise InvalidMessage(f"kw/ranked from {bob} holds {n_models} scores for {fw.n_models} models")
        scores = ranked.decrypt_ints(sk)
        best = max(range(n_models), key=lambda i: (scores[i], -i))
        from smcdp.protocols.ot import ot_choose

        (label,) = await ot_choose(ch, bob, [best], max(2, n_models), tag_prefix="kw/label")
        index, word = _parse_label(label, bob)
        timings["argmax_and_ot"] = time.perf_counter() - t0
        lls = None
        if params.debug_reveal:
            dbg = EncryptedVector.from_proto(await ch.recv(bob, "kw/debug", pb.CiphertextVector), pk,
                                             length=n_models, exponent=-params.log_frac_bits, packing=UNPACKED,
                                             what=f"kw/debug from {bob}")
            lls = [float(x) for x in dbg.decrypt(sk)]
        timings["total"] = time.perf_counter() - t_start
        return AliceResult(keyword=word, index=index, log_likelihoods=lls, timings=timings,
                           stats=ch.stats.as_dict())
    finally:
        pool.close()


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
async def keyword_bob(ch: Channel, models, params: KeywordParams, *, alice: str = ALICE, seed: int | None = None,
                      allow_insecure_keys: bool = False) -> BobResult:
    """Role Bob: the keyword HMMs; sees only ciphertexts; learns nothing of the result."""
    params.validate()
    t_start = time.perf_counter()
    rng = protocol_rng(seed)
    pk = public_key_from_proto(await ch.recv(alice, "kw/pk", pb.PaillierPublicKey), allow_insecure=allow_insecure_keys)
    if pk.bits != params.key_bits:
        raise InvalidMessage(f"{alice}'s public key has {pk.bits} bits; the session agreed on {params.key_bits}")
    pool = ObfuscatorPool.for_public_key(pk, capacity=128)
    try:
        fw = await forward_bob(ch, models, params.forward(), public_key=pk, alice=alice, tag="kw/fw", rng=rng,
                               pool=pool)
        timings = dict(fw.timings)
        t0 = time.perf_counter()
        D = models.n_words
        # --- Step 3: order-preserving randomised transform + permutation.
        perm = list(range(D))
        rng.shuffle(perm)
        a = rng.randrange(1 << (params.scale_bits - 1), 1 << params.scale_bits)
        c = rng.randrange(0, 1 << params.offset_bits())
        bound = (1 << (params.log_frac_bits + LOGLIK_BOUND_BITS)) * a + c
        if bound > pk.max_int:
            raise CryptoOverflow("the order-preserving transform does not fit the plaintext space of this key")
        n2 = pk.nsquare
        lp = fw.log_likelihoods.ciphertexts
        shift = (1 + pk.n * c) % n2
        ranked = [pool.rerandomize(gmpy2.powmod(lp[perm[i]], a, n2) * shift % n2) for i in range(D)]
        await ch.send(alice, "kw/ranked", EncryptedVector(pk, ranked, D, 0, UNPACKED, bound).to_proto())
        # --- Step 4: the labels, in the permuted order, by 1-of-Δ OT.
        labels = [json.dumps({"index": perm[i], "word": models.words[perm[i]]}).encode() for i in range(D)]
        if D == 1:
            labels.append(b"{}")
        width = max(len(x) for x in labels)
        from smcdp.protocols.ot import ot_send

        await ot_send(ch, alice, [[x.ljust(width) for x in labels]], tag_prefix="kw/label")
        if params.debug_reveal:
            dbg = [pool.rerandomize(c_) for c_ in lp]
            await ch.send(alice, "kw/debug", EncryptedVector(pk, dbg, D, fw.log_likelihoods.exponent, UNPACKED,
                                                             fw.log_likelihoods.bound).to_proto())
        timings["transform_and_ot"] = time.perf_counter() - t0
        timings["total"] = time.perf_counter() - t_start
        return BobResult(n_models=D, timings=timings, stats=ch.stats.as_dict())
    finally:
        pool.close()


# =============================================================================== inputs
def load_utterance(path) -> np.ndarray:
    """A T × d float feature matrix (or a 1-D integer symbol sequence) from ``.npy`` (no pickles)."""
    try:
        X = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise InvalidMessage(f"utterance file {path} does not exist") from None
    except (ValueError, OSError) as exc:
        raise InvalidMessage(f"utterance file {path} is not a valid .npy array: {exc}") from None
    if X.ndim == 2 and X.dtype.kind in "fiu":
        if not np.all(np.isfinite(X)):
            raise InvalidMessage(f"utterance file {path} contains NaN or infinite values")
    elif not (X.ndim == 1 and X.dtype.kind in "iu"):
        raise InvalidMessage(f"utterance file {path} must hold a T x d real matrix (or 1-D integer symbols), "
                             f"got {X.dtype} {X.shape}")
    if X.shape[0] < 1 or X.shape[0] > MAX_FRAMES:
        raise InvalidMessage(f"utterance file {path} has {X.shape[0]} frames; expected 1..{MAX_FRAMES}")
    return X


def load_keyword_models(path):
    from smcdp.speech.models import load_models

    return load_models(path)


# =============================================================================== plug-in
class KeywordPlugin(ProtocolPlugin):
    name = "keyword"

    def validate_params(self, params: Mapping[str, Any], roles: Mapping[str, str]) -> dict:
        p = KeywordParams.from_mapping(params)
        if set(roles) != {ALICE, BOB}:
            raise InvalidMessage(f"keyword needs exactly the roles ['alice', 'bob'], got {sorted(roles)}")
        if roles[ALICE] == roles[BOB]:
            raise InvalidMessage("alice and bob must be different parties")
        return asdict(p)

    async def run_role(self, role: str, ch: Channel, ctx: SessionContext) -> dict:
        p = KeywordParams.from_mapping(ctx.params)
        check_key_bits(p.key_bits, ctx.allow_insecure_keys)
        if role == ALICE:
            path = ctx.inputs.get("utterance")
            if not path:
                raise InvalidMessage(f"{ch.me} has no [inputs.keyword] utterance file configured")
            X = load_utterance(path)
            return asdict(await keyword_alice(ch, X, p, allow_insecure_keys=ctx.allow_insecure_keys))
        if role == BOB:
            path = ctx.inputs.get("models")
            if not path:
                raise InvalidMessage(f"{ch.me} has no [inputs.keyword] models file configured")
            models = load_keyword_models(path)
            return asdict(await keyword_bob(ch, models, p, seed=ctx.seed,
                                            allow_insecure_keys=ctx.allow_insecure_keys))
        raise InvalidMessage(f"keyword has no role {role!r}")


register(KeywordPlugin())


# =============================================================================== demo
def demo_keyword(utterance: str, models: str, key_bits: int = 2048, seed: int | None = None,
                 debug_reveal: bool = False, keep_dir: str | None = None, params: dict | None = None) -> dict:
    """Run Alice and Bob as separate processes (gRPC, mutual TLS, loopback); returns the contract JSON."""
    from smcdp.demo import _require_success, check_key_bits_arg, say, with_progress
    from smcdp.local import LocalCluster, bytes_sent

    X = load_utterance(utterance)
    M = load_keyword_models(models)
    if M.kind != "discrete" and (X.ndim != 2 or X.shape[1] != M.n_features):
        raise InvalidMessage(f"the utterance has shape {X.shape}; the models expect T x {M.n_features} features")
    insecure = check_key_bits_arg(key_bits)
    p = {"key_bits": key_bits, "debug_reveal": bool(debug_reveal), **(params or {})}
    KeywordParams.from_mapping(p)
    parties = {ALICE: {"keyword": {"utterance": utterance}}, BOB: {"keyword": {"models": models}}}
    roles = {ALICE: ALICE, BOB: BOB}
    say(f"alice: {X.shape[0]} frames; bob: {M.n_words} HMMs x {M.n_states} states ({M.kind}); "
        f"{key_bits}-bit Paillier, mutual TLS on loopback")
    with LocalCluster(parties, allow_insecure_keys=insecure, workdir=keep_dir,
                      plugins=("smcdp.protocols.keyword",)) as cluster:
        say("party processes up; running the session")
        t0 = time.monotonic()
        records = with_progress("keyword recognition",
                                lambda: cluster.run("keyword", roles, p, initiator=ALICE, seed=seed))
        seconds = time.monotonic() - t0
    _require_success(records)
    ra = records[ALICE]["result"]
    out = {
        "keyword": ra["keyword"],
        "index": ra["index"],
        "seconds": seconds,
        "bytes_sent": bytes_sent(records),
        "key_bits": key_bits,
        "frames": int(X.shape[0]),
        "n_models": M.n_words,
        "timings": {"alice": ra.get("timings", {}), "bob": records[BOB]["result"].get("timings", {})},
        "session_id": records[ALICE]["session_id"],
    }
    if debug_reveal:
        out["log_likelihoods"] = ra["log_likelihoods"]
    say(f"done in {seconds:.1f} s: keyword {out['keyword']!r} (index {out['index']})")
    return out


def _cmd_keyword(args: argparse.Namespace) -> int:
    from smcdp.local import dump_json

    out = demo_keyword(args.utterance, args.models, args.key_bits, args.seed, args.debug_reveal, args.keep_dir)
    dump_json(out, args.out)
    return 0


def register_demo(sub) -> None:
    """Adds ``smcdp demo keyword`` to the demo subcommands."""
    p = sub.add_parser(
        "keyword", help="privacy-preserving keyword recognition (alice: utterance, bob: HMMs)",
        description="Starts Alice (holding the T x d features in --utterance) and Bob (holding the HMMs in "
                    "--models) as separate processes over gRPC with mutual TLS on loopback, runs secure keyword "
                    "recognition and writes JSON with keyword, index, seconds and bytes_sent (and, with "
                    "--debug-reveal, log_likelihoods, which leaks every score to Alice).")
    p.add_argument("--utterance", required=True, metavar="U.npy", help="T x d float feature matrix (Alice)")
    p.add_argument("--models", required=True, metavar="M.npz", help="keyword HMMs (Bob), smcdp.speech format")
    p.add_argument("--key-bits", type=int, default=2048, help="Paillier key size (default 2048; <2048 warns)")
    p.add_argument("--seed", type=int, help="fix Bob's mask randomness for experiments (encryption stays random)")
    p.add_argument("--debug-reveal", action="store_true",
                   help="also reveal all log-likelihoods to Alice after the protocol (LEAKS; debugging only)")
    p.add_argument("--out", help="write the JSON result here (default stdout)")
    p.add_argument("--keep-dir", help="keep certificates, configs and logs in this directory")
    p.set_defaults(func=_cmd_keyword)
