"""Secure forward algorithm (seed 003 §4.2.1) between Alice (observations, private key) and Bob (HMMs).

Bob holds Δ HMMs with N states each (one emission kind for all: discrete,
diagonal or full Gaussian, or Gaussian mixtures); Alice holds one observation
sequence x_1..x_T.  At the end Bob holds ``ξ(log P(x | λ_δ))`` for every δ
(fixed point, ``log_frac_bits`` fraction bits) and Alice holds nothing but
masked intermediate values (docs/protocols/keyword.md says exactly what).

Steps (roles below follow them):

1. *Header.*  Bob sends the public shape (kind, Δ, N, mixture size C,
   feature dimension d or alphabet size M); Alice answers with T.
2. *Emissions.*  Alice must end up with ``v_{t,i} = log b_i(x_t) + ρ_{t,i}``
   for every frame t and every (model, state) i = δN + j, where the mask
   ``ρ_{t,i}`` is Bob's secret: a per-state ``U[-K, K]`` plus a per-(model,
   frame) common offset ``U[-ψ, ψ]``.

   * **discrete** (the seed's steps 1–2): for each frame Bob prepares, for
     every symbol v_k, the vector ``log b_i(v_k) + γ_{t,i}``; Alice obtains
     the row of her symbol by a 1-out-of-M oblivious transfer (Naor–Pinkas,
     :mod:`smcdp.primitives.ot`), all frames in one batch.  The seed's steps
     3–4 (Alice encrypts, Bob unmasks) are not needed: the induction below
     consumes the masked values directly, so ``γ`` plays the role of ρ.
   * **Gaussian** (the seed's simplified protocol): Alice encrypts the
     distinct products z_a z_b of z_t = [x_t; 1] (2d + 1 of them for diagonal
     covariances, (d+1)(d+2)/2 for full) with CRT encryption, *packing several
     frames into the slots of one ciphertext per product*; Bob evaluates
     ``ξ(z_tᵀ W_i z_t)`` for all those frames at once by one
     multi-exponentiation per (state, block of frames), because the
     coefficient of a product is the same for every frame.  He adds the
     packed masks, rerandomises and sends; Alice decrypts.
   * **Gaussian mixtures**: Bob evaluates every component's quadratic form
     (log weight included) the same way; a batched *secure LOGSUM* over the
     components of each (state, frame) — one exponent round for all frames
     and states, Alice keeping log u + her offset as the masked v — gives
     the same v as above.  This fuses the reference
     ``smcdp.primitives.logsum.secure_logsum_bob/alice`` (exponent and weighted sum
     kept; its secure logarithm replaced by Alice's masked ``ln u + m``).
3. *Induction* (the seed's steps 5–7), one round trip per frame t, all
   states of all models batched.  Alice keeps ``L_t(j) = log α_t(j) + M_t(j)``
   in the log domain (a float: no underflow, however long the utterance);
   the mask ``M_t(j)`` is Bob's.  Bob sends the packed sums
   ``u_j = Σ_{l∈pred(j)} k_lj ê_{l→j}`` (integer weights
   ``∝ a_lj e^{-M(l) + φ_j}``, fresh row masks φ; at t = 1 the weights carry
   π and the previous values are the public constant 1); Alice computes
   ``L_t(j) = ln u_j + m_j + v_{t,j}`` and returns, for every edge l → j',
   ``ξ(round(exp(L_t(l) - m_{j'}) 2^{F_e}))`` with ``m_{j'}`` the maximum over
   the predecessors of j' — normalised over the terms of one sum, so a state
   that is negligible now but dominant later keeps its precision — each value
   encrypted already shifted into the packed slot of the sum it feeds.  This
   is the seed's secure LOGSUM (exponent, weighted sum, logarithm) with the
   logarithm of frame t fused with the exponent of frame t + 1; the unfused
   reference is ``smcdp.primitives.logsum.secure_logsum_bob/alice``.
4. *Termination* (step 8): the last exponent is normalised over all states of
   a model; Bob's packed sums give Σ_j α_T(j) masked, Alice returns
   ``ξ(ln u + m)`` and Bob removes his constants: ``ξ(log P(x | λ_δ))``.

The zero pattern of every transition matrix is sent to Alice (she needs the
predecessor sets); structural zeros reach her as exact zeros, zero discrete
emission probabilities as ``-inf``; a model under which the sequence is
impossible is scored ``LOG_ZERO``.  docs/protocols/keyword.md lists all leakage.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field

import gmpy2
import numpy as np
from gmpy2 import mpz

from smcdp.crypto.encoding import UNPACKED, Packing, encode_float
from smcdp.crypto.modexp import multi_exp
from smcdp.crypto.obfuscation import ObfuscatorPool
from smcdp.crypto.paillier import PrivateKey, PublicKey
from smcdp.crypto.vector import EncryptedVector
from smcdp.errors import CryptoOverflow, InputRejected, InvalidMessage
from smcdp.net.channel import Channel
from smcdp.primitives.logsum import (
    LN2,
    NEG_INF,
    MaskParams,
    alice_exponentiate,
    decrypt_log_u,
    encrypt_unpacked,
    integer_weights,
    packed_weighted_sums,
    preshifted_packed_sums,
    slot_shift,
    uniform_masks,
)
from smcdp.primitives.ot import ot_choose, ot_send
from smcdp.primitives.rng import protocol_rng
from smcdp.protocols.base import ProtocolParams
from smcdp.speech.forward import (
    product_index_pairs,
    products,
    quadratic_coefficients,
    quadratic_forms,
)
from smcdp.v1 import messages_pb2 as pb

PROTOCOL_VERSION = 1
KIND_CODES = {"discrete": 0, "diag": 1, "full": 2, "gmm-diag": 3, "gmm-full": 4}
KIND_NAMES = {v: k for k, v in KIND_CODES.items()}
MAX_FRAMES = 100_000
#: log P reported for a model under which the observations are impossible (P = 0), in nats
LOG_ZERO = -float(1 << 39)
#: ciphertexts per message when Alice sends her products (the transport streams chunks anyway)
PRODUCT_CHUNK = 2048


@dataclass
class ForwardParams(ProtocolParams):
    """Public parameters of the secure forward algorithm (both parties agree on them)."""

    protocol_name = "secure-forward"

    mask_nats: float = 4.0            # K: per-state log-domain masks U[-K, K]
    offset_nats: float = float(1 << 20)  # per-(model, frame) common offsets U[-ψ, ψ]
    precision_bits: int = 28          # significant bits kept on every dominant term of a sum
    log_frac_bits: int = 40           # fraction bits of ξ(log P)
    range_bits: int = 16              # transition probabilities into one state may span 2^range_bits
    feature_bits: int = 8             # public bound |x_i| < 2^feature_bits (Gaussian)
    coef_bits: int = 20               # public bound |coefficient of z_a z_b| < 2^coef_bits
    prod_frac_bits: int = 32          # fixed point of Alice's encrypted products
    coef_frac_bits: int = 32          # fixed point of Bob's quadratic-form coefficients

    def validate(self) -> ForwardParams:
        self.masks().validate()
        for name, lo, hi in (("feature_bits", 1, 32), ("coef_bits", 1, 64), ("prod_frac_bits", 8, 96),
                             ("coef_frac_bits", 8, 96)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise InvalidMessage(f"forward parameter {name}={v!r} must be an integer in [{lo}, {hi}]")
        return self

    def masks(self) -> MaskParams:
        return MaskParams(float(self.mask_nats), float(self.offset_nats), self.precision_bits, self.log_frac_bits,
                          self.range_bits)


    @property
    def v_frac_bits(self) -> int:
        return self.prod_frac_bits + self.coef_frac_bits


@dataclass
class Shape:
    """What both parties know about the models: kind, Δ, N, C, d (Gaussian) or M (discrete)."""

    kind: str
    n_models: int
    n_states: int
    n_mix: int
    dim: int

    @property
    def n_values(self) -> int:
        return self.n_models * self.n_states

    @property
    def covariance_type(self) -> str:
        return "full" if self.kind in ("full", "gmm-full") else "diag"

    @property
    def mixture(self) -> bool:
        return self.kind.startswith("gmm")

    def to_proto(self) -> pb.Ints:
        return pb.Ints(values=[PROTOCOL_VERSION, KIND_CODES[self.kind], self.n_models, self.n_states,
                               self.n_mix, self.dim])

    @classmethod
    def from_proto(cls, msg: pb.Ints) -> Shape:
        v = list(msg.values)
        if len(v) != 6 or v[0] != PROTOCOL_VERSION:
            raise InvalidMessage(f"secure-forward header must be [version={PROTOCOL_VERSION}, kind, Δ, N, C, dim], got {v}")
        if v[1] not in KIND_NAMES:
            raise InvalidMessage(f"unknown emission kind code {v[1]}")
        kind = KIND_NAMES[v[1]]
        if not (1 <= v[2] <= 10_000 and 1 <= v[3] <= 1_000 and 1 <= v[4] <= 256 and 1 <= v[5] <= 1 << 20):
            raise InvalidMessage(f"secure-forward header has out-of-range sizes {v[2:]}")
        if not kind.startswith("gmm") and v[4] != 1:
            raise InvalidMessage("secure-forward header: a mixture size C > 1 needs a mixture emission kind")
        return cls(kind, v[2], v[3], v[4], v[5])

    @classmethod
    def of_models(cls, models) -> Shape:
        if models.kind == "discrete":
            return cls("discrete", models.n_words, models.n_states, 1, models.n_symbols)
        return cls(models.kind, models.n_words, models.n_states, models.n_mix or 1, models.n_features)


@dataclass
class Layout:
    """Packing of Alice's products (frames in slots) — derived from public values only."""

    n_products: int
    slot_bits: int
    slots: int
    blocks: int

    @classmethod
    def make(cls, pk: PublicKey, params: ForwardParams, shape: Shape, T: int) -> Layout:
        P = len(product_index_pairs(shape.dim, shape.covariance_type)[0])
        q_bits = (2 * params.feature_bits + params.prod_frac_bits + params.coef_bits + params.coef_frac_bits
                  + math.ceil(math.log2(P + 1)))
        mask_bits = math.ceil(math.log2(params.offset_nats + params.mask_nats + 2)) + params.v_frac_bits
        s = max(q_bits, mask_bits) + 3
        packing = Packing.for_key(pk, s)
        slots = packing.slots
        return cls(P, s if slots > 1 else 0, slots, -(-T // slots))

    @property
    def packing(self) -> Packing:
        return Packing(self.slots, self.slot_bits) if self.slots > 1 else UNPACKED

    def product_bound(self, params: ForwardParams) -> int:
        return 1 << (2 * params.feature_bits + params.prod_frac_bits)


@dataclass
class AliceForward:
    """Alice's output of the secure forward algorithm: nothing but statistics."""

    frames: int
    n_models: int
    timings: dict = field(default_factory=dict)


@dataclass
class BobForward:
    """Bob's output: ``ξ(log P(x | λ_δ))`` for every δ (exponent ``-log_frac_bits``)."""

    log_likelihoods: EncryptedVector
    timings: dict = field(default_factory=dict)


# =============================================================================== helpers
def check_observations(shape: Shape, X, params: ForwardParams) -> np.ndarray:
    arr = np.asarray(X)
    if shape.kind == "discrete":
        if arr.ndim == 2 and arr.shape[1] == 1:
            arr = arr[:, 0]
        if arr.ndim != 1 or arr.dtype.kind not in "iu" or arr.size == 0:
            raise InvalidMessage(f"discrete observations must be a non-empty 1-D integer array, got {arr.dtype} {arr.shape}")
        if arr.min() < 0 or arr.max() >= shape.dim:
            raise InvalidMessage(f"observation symbols must lie in 0..{shape.dim - 1}")
        out = arr.astype(np.int64)
    else:
        if arr.ndim != 2 or arr.dtype.kind not in "iuf" or arr.shape[0] == 0:
            raise InvalidMessage(f"observations must be a non-empty T x d real matrix, got {arr.dtype} {arr.shape}")
        if arr.shape[1] != shape.dim:
            raise InvalidMessage(f"observations have {arr.shape[1]} features, Bob's models expect {shape.dim}")
        out = arr.astype(np.float64)
        if not np.all(np.isfinite(out)):
            raise InvalidMessage("observations contain NaN or infinite values")
        lim = 2.0 ** params.feature_bits
        if np.any(np.abs(out) >= lim):
            raise InputRejected(f"a feature reaches the agreed bound 2^{params.feature_bits}; raise feature_bits",
                                f"max |x| = {np.max(np.abs(out)):.3g}")
    if out.shape[0] > MAX_FRAMES:
        raise InvalidMessage(f"{out.shape[0]} frames exceed the limit of {MAX_FRAMES}")
    return out


def _log(a) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(np.asarray(a, dtype=np.float64))


def model_coefficients(models, params: ForwardParams) -> np.ndarray:
    """Bob: integer coefficients of the distinct products, shape (rows, P), rows = (δ, j[, c]) flattened."""

    ct = models.covariance_type
    per = [quadratic_coefficients(quadratic_forms(h, include_log_weight=True), ct) for h in models.hmms()]
    C = np.stack(per)                      # (Δ, N, P) or (Δ, N, C, P)
    C = C.reshape(-1, C.shape[-1])
    lim = 2.0 ** params.coef_bits
    if not np.all(np.isfinite(C)) or np.any(np.abs(C) >= lim):
        rule = f"a quadratic-form coefficient of the models reaches the agreed bound 2^{params.coef_bits}; raise coef_bits"
        exc = CryptoOverflow(f"{rule} (max |c| = {np.max(np.abs(C)):.3g})")
        exc.public_message = rule   # the value describes Bob's models: peers get the rule only
        raise exc
    return C


def exp_layout(topo: np.ndarray) -> tuple[list[tuple[int, int, int]], list[tuple[int, int]]]:
    """The values Alice exponentiates each frame, from the public transition pattern ``topo`` (Δ, N, N).

    One entry per edge ``(δ, j, l)`` with a_lj > 0, in order; the sum for state j runs over its
    predecessors l.  Each output i = δN + j is normalised over its predecessor set; outputs with
    the same set share one normalisation group ``(δ, g)`` (returned per output).  Alice encrypts
    each entry already shifted into the slot of its output (see ``preshifted_packed_sums``).
    """
    D, N, _ = topo.shape
    entries: list[tuple[int, int, int]] = []
    out_group: list[tuple[int, int]] = []
    for d in range(D):
        sets: dict[tuple[int, ...], int] = {}
        for j in range(N):
            pred = tuple(int(l) for l in np.flatnonzero(topo[d, :, j]))
            g = sets.setdefault(pred, len(sets))
            entries.extend((d, j, l) for l in pred)
            out_group.append((d, g))
    return entries, out_group


async def _recv_topology(ch: Channel, bob: str, shape: Shape, tag: str) -> np.ndarray:
    msg = await ch.recv(bob, f"{tag}/topology", pb.Ints)
    vals = list(msg.values)
    D, N = shape.n_models, shape.n_states
    if len(vals) != D * N * N or any(v not in (0, 1) for v in vals):
        raise InvalidMessage(f"{tag}/topology from {bob} must be {D * N * N} flags (0/1)")
    return np.array(vals, dtype=bool).reshape(D, N, N)


def _frame_major(values: np.ndarray, blocks: int, slots: int) -> np.ndarray:
    """(rows, T) -> (rows, blocks*slots) with zero padding."""
    rows, T = values.shape
    out = np.zeros((rows, blocks * slots), dtype=values.dtype)
    out[:, :T] = values
    return out


# =============================================================================== Alice
async def forward_alice(ch: Channel, X, params: ForwardParams, *, private_key: PrivateKey, bob: str = "bob",
                        tag: str = "fw", pool: ObfuscatorPool | None = None,
                        rng: random.Random | None = None) -> AliceForward:
    """Role Alice: holds the observations and the private key; learns only masked values.

    ``rng``: Alice's stream (:mod:`smcdp.primitives.rng`) for her oblivious-transfer secrets.
    """
    params.validate()
    mp = params.masks()
    sk = private_key
    pk = sk.public_key
    own_pool = pool is None
    pool = pool or ObfuscatorPool.for_private_key(sk)
    timings: dict[str, float] = {}
    try:
        # --- Step 1: header.
        shape = Shape.from_proto(await ch.recv(bob, f"{tag}/hdr", pb.Ints))
        obs = check_observations(shape, X, params)
        T = obs.shape[0]
        await ch.send(bob, f"{tag}/T", pb.Ints(values=[T]))
        Dn = shape.n_values

        # --- Step 2: masked log-emissions v (T × ΔN).
        t0 = time.perf_counter()
        if shape.kind == "discrete":
            v = await _alice_discrete(ch, bob, shape, obs, tag, rng)
            timings["emissions"] = time.perf_counter() - t0
        else:
            lay = Layout.make(pk, params, shape, T)
            prods = products(obs, shape.covariance_type).T          # (P, T)
            ints = [[encode_float(float(x), params.prod_frac_bits) for x in row] for row in prods]
            padded = np.zeros((lay.n_products, lay.blocks * lay.slots), dtype=object)
            padded[:, :T] = np.array(ints, dtype=object)
            flat = [int(x) for x in padded.ravel()]
            packing = lay.packing
            plain = packing.pack(flat) if packing.packed else flat
            cts = [pool.encrypt(m) for m in plain]
            timings["encrypt"] = time.perf_counter() - t0
            bound = lay.product_bound(params)
            for k, s in enumerate(range(0, len(cts), PRODUCT_CHUNK)):
                part = cts[s:s + PRODUCT_CHUNK]
                vec = EncryptedVector(pk, part, len(part) * lay.slots if packing.packed else len(part),
                                      -params.prod_frac_bits, packing, bound)
                await ch.send(bob, f"{tag}/prod/{k}", vec.to_proto())
            rows = Dn * (shape.n_mix if shape.mixture else 1)
            qv = EncryptedVector.from_proto(await ch.recv(bob, f"{tag}/q", pb.CiphertextVector), pk,
                                            length=rows * lay.blocks * lay.slots, exponent=-params.v_frac_bits,
                                            packing=packing, what=f"{tag}/q from {bob}")
            t1 = time.perf_counter()
            q = qv.decrypt(sk).reshape(rows, lay.blocks * lay.slots)[:, :T]
            timings["decrypt_emissions"] = time.perf_counter() - t1
            if shape.mixture:
                v = await _alice_mixture(ch, bob, sk, mp, pool, shape, q, T, tag)
            else:
                v = q.T.copy()                                          # (T, ΔN)
            timings["emissions"] = time.perf_counter() - t0

        # --- Step 3: induction, one round trip per frame.
        t0 = time.perf_counter()
        topo = await _recv_topology(ch, bob, shape, tag)
        entries, out_group = exp_layout(topo)
        N = shape.n_states
        fin_entries = [(d, -1, j) for d in range(shape.n_models) for j in range(N)]
        m_prev = np.zeros(Dn)                 # Alice's offset of each output's last exponent
        u_pack = Packing.for_key(pk, mp.sum_slot_bits(N))
        for t in range(T):
            ch.progress(round=t + 1, step="induction")
            u = EncryptedVector.from_proto(await ch.recv(bob, f"{tag}/u/{t}", pb.CiphertextVector), pk,
                                           length=Dn, exponent=0, packing=u_pack, what=f"{tag}/u/{t} from {bob}")
            # masked log α_t: L_j = ln u_j + m_j + v_{t,j}  (float: no underflow, however long the utterance)
            L = decrypt_log_u(u, sk) + m_prev + v[t]
            if not np.any(np.isfinite(L)):
                raise InvalidMessage(f"frame {t}: the observations are impossible under every model")
            if t < T - 1:
                y = np.array([L[d * N + l] for d, _, l in entries])
                grp = [out_group[d * N + j] for d, j, _ in entries]
                shifts = [slot_shift(u_pack, d * N + j) for d, j, _ in entries]
            else:                                   # the last exponent feeds the per-model totals
                y = np.array([L[d * N + j] for d, _, j in fin_entries])
                grp = [(d, -1) for d, _, _ in fin_entries]
                shifts = [slot_shift(u_pack, d) for d, _, _ in fin_entries]
            e_ints, offs = alice_exponentiate(np.zeros(len(y)), y, grp, mp.e_bits)
            if t < T - 1:
                m_prev = np.array([offs.get(out_group[i], 0.0) for i in range(Dn)])
            await ch.send(bob, f"{tag}/e/{t}", encrypt_unpacked(pool, [x << sh for x, sh in zip(e_ints, shifts)],
                                                                 0, int(pk.max_int)).to_proto())
        timings["induction"] = time.perf_counter() - t0

        # --- Step 4: termination — secure log of Σ_j α_T(j); Alice adds her offsets.
        fin = EncryptedVector.from_proto(await ch.recv(bob, f"{tag}/final-u", pb.CiphertextVector), pk,
                                         length=shape.n_models, exponent=0, packing=u_pack,
                                         what=f"{tag}/final-u from {bob}")
        lu = decrypt_log_u(fin, sk)
        F = mp.log_frac_bits
        # a model under which the sequence is impossible (P = 0) gets the public sentinel LOG_ZERO
        ints = [encode_float(float(lu[d] + offs[(d, -1)]) if lu[d] != NEG_INF else LOG_ZERO, F)
                for d in range(shape.n_models)]
        await ch.send(bob, f"{tag}/final-l", encrypt_unpacked(pool, ints, -F, int(pk.max_int) // 4).to_proto())
        return AliceForward(frames=T, n_models=shape.n_models, timings=timings)
    finally:
        if own_pool:
            pool.close()


async def _alice_discrete(ch: Channel, bob: str, shape: Shape, obs: np.ndarray, tag: str,
                          rng: random.Random | None) -> np.ndarray:
    rows = await ot_choose(ch, bob, [int(x) for x in obs], shape.dim, tag_prefix=f"{tag}/ot", rng=rng)
    out = np.empty((len(rows), shape.n_values))
    for t, b in enumerate(rows):
        if len(b) != 8 * shape.n_values:
            raise InvalidMessage(f"OT row {t} from {bob} has {len(b)} bytes, expected {8 * shape.n_values}")
        out[t] = np.frombuffer(b, dtype="<f8")
    if np.any(np.isnan(out)) or np.any(out == np.inf):
        raise InvalidMessage(f"OT rows from {bob} contain NaN or +inf")
    return out


async def _alice_mixture(ch: Channel, bob: str, sk: PrivateKey, mp: MaskParams, pool: ObfuscatorPool,
                         shape: Shape, q: np.ndarray, T: int, tag: str) -> np.ndarray:
    """Batched secure LOGSUM over mixture components; returns v (T × ΔN).

    Fuses the reference ``smcdp.primitives.logsum.secure_logsum_alice`` (seed LOGSUM: exponent kept,
    secure logarithm replaced by keeping the masked ``ln u + m``).
    """
    pk = sk.public_key
    Dn, C = shape.n_values, shape.n_mix
    qc = q.reshape(Dn, C, T)                                      # masked component logs
    # exponent round: groups (state i, frame t), values over c
    flat = np.transpose(qc, (0, 2, 1)).reshape(-1)                # order (i, t, c)
    groups = np.repeat(np.arange(Dn * T), C).tolist()
    e_ints, offs = alice_exponentiate(np.zeros(flat.size), flat, groups, mp.e_bits)
    await ch.send(bob, f"{tag}/mix-e", encrypt_unpacked(pool, e_ints, -mp.e_bits, 1 << mp.e_bits).to_proto())
    u_pack = Packing.for_key(pk, mp.sum_slot_bits(C))
    u = EncryptedVector.from_proto(await ch.recv(bob, f"{tag}/mix-u", pb.CiphertextVector), pk, length=Dn * T,
                                   exponent=0, packing=u_pack, what=f"{tag}/mix-u from {bob}")
    lu = decrypt_log_u(u, sk)                                     # order (i, t)
    m = np.array([offs[g] for g in range(Dn * T)])
    return (lu + m).reshape(Dn, T).T.copy()


# =============================================================================== Bob
async def forward_bob(ch: Channel, models, params: ForwardParams, *, public_key: PublicKey, alice: str = "alice",
                      tag: str = "fw", rng: random.Random | None = None,
                      pool: ObfuscatorPool | None = None) -> BobForward:
    """Role Bob: holds the HMMs; sees only ciphertexts; obtains ξ(log P(x | λ_δ)) for every δ."""
    params.validate()
    mp = params.masks()
    pk = public_key
    rng = rng or protocol_rng(None)
    own_pool = pool is None
    pool = pool or ObfuscatorPool.for_public_key(pk)
    timings: dict[str, float] = {}
    try:
        shape = Shape.of_models(models)
        N, Dn, D = shape.n_states, shape.n_values, shape.n_models
        await ch.send(alice, f"{tag}/hdr", shape.to_proto())
        tmsg = await ch.recv(alice, f"{tag}/T", pb.Ints)
        if len(tmsg.values) != 1 or not 1 <= tmsg.values[0] <= MAX_FRAMES:
            raise InvalidMessage(f"{tag}/T from {alice} must be one frame count in [1, {MAX_FRAMES}]")
        T = int(tmsg.values[0])

        # masks of the emissions: per-state U[-K, K] + per-(model, frame) offset U[-ψ, ψ]
        t0 = time.perf_counter()
        if shape.kind == "discrete":
            vm = _state_masks(rng, mp, T, D, N)
            await _bob_discrete(ch, alice, models, shape, vm, T, tag, rng)
            timings["emissions"] = time.perf_counter() - t0
        else:
            vm = await _bob_gaussian(ch, alice, models, shape, params, mp, pk, pool, rng, T, tag, timings)
            timings["emissions"] = time.perf_counter() - t0

        # --- Step 3: induction.
        t0 = time.perf_counter()
        topo = models.transmat > 0
        await ch.send(alice, f"{tag}/topology", pb.Ints(values=[int(x) for x in topo.ravel()]))
        entries, _ = exp_layout(topo)
        index = {e_: k for k, e_ in enumerate(entries)}
        lnA = _log(models.transmat)                                 # (Δ, N, N)
        lnpi = _log(models.startprob)                               # (Δ, N)
        Fe = mp.e_bits
        u_pack = Packing.for_key(pk, mp.sum_slot_bits(N))
        groups = [i // N for i in range(Dn)]
        # virtual α_0 = 1: ê_0 = 2^{F_e}, one public copy per output slot
        inputs: list[mpz] = [(1 + pk.n * (1 << (Fe + slot_shift(u_pack, i)))) % pk.nsquare for i in range(Dn)]
        M = np.zeros(Dn)              # Alice's L_j = log α_t(j) + M_j  (M known to Bob only)
        for t in range(T):
            ch.progress(round=t + 1, step="induction")
            if t == 0:
                log_w = [[(i, float(lnpi[i // N, i % N]))] for i in range(Dn)]
            else:
                log_w = [[(index[(d, j, l)], float(lnA[d, l, j] - M[d * N + l]))
                          for l in range(N) if np.isfinite(M[d * N + l]) and topo[d, l, j]]
                         for d in range(D) for j in range(N)]
            wr = integer_weights(log_w, groups, mp.weight_bits, uniform_masks(rng, Dn, mp.mask_nats))
            u = preshifted_packed_sums(pk, inputs, 1 << Fe, wr, u_pack, pool)
            await ch.send(alice, f"{tag}/u/{t}", u.to_proto())
            M = np.where(wr.log_scale == NEG_INF, NEG_INF, wr.log_scale + Fe * LN2 + vm[t])
            n_in = len(entries) if t < T - 1 else Dn
            e = EncryptedVector.from_proto(await ch.recv(alice, f"{tag}/e/{t}", pb.CiphertextVector), pk,
                                           length=n_in, exponent=0, packing=UNPACKED,
                                           what=f"{tag}/e/{t} from {alice}")
            inputs = e.ciphertexts
        timings["induction"] = time.perf_counter() - t0

        # --- Step 4: termination: ξ(log Σ_j α_T(j)) per model by a secure logarithm.
        log_w = [[(d * N + j, float(-M[d * N + j])) for j in range(N) if np.isfinite(M[d * N + j])]
                 for d in range(D)]
        wr = integer_weights(log_w, list(range(D)), mp.weight_bits)
        u = preshifted_packed_sums(pk, inputs, 1 << Fe, wr, u_pack, pool)
        await ch.send(alice, f"{tag}/final-u", u.to_proto())
        F = mp.log_frac_bits
        back = EncryptedVector.from_proto(await ch.recv(alice, f"{tag}/final-l", pb.CiphertextVector), pk,
                                          length=D, exponent=-F, packing=UNPACKED, bound=int(pk.max_int) // 4,
                                          what=f"{tag}/final-l from {alice}")
        corr = [encode_float(float(-wr.log_scale[d] - Fe * LN2), F) for d in range(D)]
        result = back + EncryptedVector.trivial(pk, corr, exponent=-F)
        return BobForward(result, timings)
    finally:
        if own_pool:
            pool.close()


def _state_masks(rng: random.Random, mp: MaskParams, T: int, D: int, N: int) -> np.ndarray:
    """(T, ΔN): per-state U[-K, K] plus per-(frame, model) U[-ψ, ψ]."""
    rho = uniform_masks(rng, T * D * N, mp.mask_nats).reshape(T, D, N)
    psi = uniform_masks(rng, T * D, mp.offset_nats).reshape(T, D, 1)
    return (rho + psi).reshape(T, D * N)


async def _bob_discrete(ch: Channel, alice: str, models, shape: Shape, vm: np.ndarray, T: int, tag: str,
                        rng: random.Random) -> None:
    logB = _log(models.emissionprob).reshape(shape.n_values, shape.dim)   # (ΔN, M)
    rows = []
    for t in range(T):
        table = logB + vm[t][:, None]                                      # (ΔN, M)
        rows.append([np.ascontiguousarray(table[:, k], dtype="<f8").tobytes() for k in range(shape.dim)])
    await ot_send(ch, alice, rows, tag_prefix=f"{tag}/ot", rng=rng)


async def _bob_gaussian(ch: Channel, alice: str, models, shape: Shape, params: ForwardParams, mp: MaskParams,
                        pk: PublicKey, pool: ObfuscatorPool, rng: random.Random, T: int, tag: str,
                        timings: dict) -> np.ndarray:
    """Receive Alice's packed products, evaluate every quadratic form for all frames, send masked v."""
    lay = Layout.make(pk, params, shape, T)
    packing = lay.packing
    n_cts = lay.n_products * lay.blocks
    cts: list[mpz] = []
    bound = lay.product_bound(params)
    k = 0
    while len(cts) < n_cts:
        want = min(PRODUCT_CHUNK, n_cts - len(cts))
        vec = EncryptedVector.from_proto(await ch.recv(alice, f"{tag}/prod/{k}", pb.CiphertextVector), pk,
                                         length=want * lay.slots if packing.packed else want,
                                         exponent=-params.prod_frac_bits, packing=packing, bound=bound,
                                         what=f"{tag}/prod/{k} from {alice}")
        cts.extend(vec.ciphertexts)
        k += 1
    t0 = time.perf_counter()
    coefs = model_coefficients(models, params)                  # (rows, P)
    if coefs.shape[1] != lay.n_products:
        raise InvalidMessage("internal: product layout mismatch")
    R = coefs.shape[0]
    cints = [[encode_float(float(c), params.coef_frac_bits) for c in row] for row in coefs]
    worst = max(sum(abs(c) for c in row) for row in cints) * bound
    F_v = params.v_frac_bits
    # masks: per value (row, frame).  Rows are (δ, j) or (δ, j, c); ψ is per (model, frame).
    D, N, C = shape.n_models, shape.n_states, (shape.n_mix if shape.mixture else 1)
    rho = uniform_masks(rng, R * T, mp.mask_nats).reshape(D, N * C, T)
    psi = uniform_masks(rng, D * T, mp.offset_nats).reshape(D, 1, T)
    masks = (rho + psi).reshape(R, T)
    mask_ints = _frame_major(np.array([[encode_float(float(x), F_v) for x in row] for row in masks], dtype=object),
                             lay.blocks, lay.slots)
    worst += max(abs(int(x)) for x in mask_ints.ravel())
    cap = packing.slot_capacity if packing.packed else int(pk.max_int)
    if worst > cap:
        raise CryptoOverflow(f"quadratic forms could reach {worst.bit_length()} bits, above the "
                             f"{cap.bit_length()}-bit slot capacity")
    n2 = pk.nsquare
    inv = [gmpy2.invert(c, n2) for c in cts]                   # once, instead of once per negative term
    out: list[mpz] = []
    for r in range(R):
        for b in range(lay.blocks):
            idx = [p * lay.blocks + b for p in range(lay.n_products)]
            q = multi_exp([cts[i] if c >= 0 else inv[i] for i, c in zip(idx, cints[r])],
                          [abs(c) for c in cints[r]], n2)
            sl = [int(x) for x in mask_ints[r, b * lay.slots:(b + 1) * lay.slots]]
            m = packing.pack(sl)[0] if packing.packed else sl[0]
            out.append(pool.rerandomize(q * ((1 + pk.n * pk.raw_plain(m)) % n2) % n2))
    timings["bob_emissions"] = time.perf_counter() - t0
    await ch.send(alice, f"{tag}/q", EncryptedVector(pk, out, R * lay.blocks * lay.slots if packing.packed else R,
                                                     -F_v, packing, worst).to_proto())
    # Bob's exact masks as reals (the encoded integers, so that Bob's bookkeeping matches Alice's view)
    vmask = np.array([[int(x) / 2.0 ** F_v for x in row[:T]] for row in mask_ints], dtype=np.float64)  # (R, T)
    if not shape.mixture:
        return vmask.T.copy()                                   # (T, ΔN)
    return await _bob_mixture(ch, alice, shape, mp, pk, pool, rng, vmask, T, tag)


async def _bob_mixture(ch: Channel, alice: str, shape: Shape, mp: MaskParams, pk: PublicKey, pool: ObfuscatorPool,
                       rng: random.Random, vmask: np.ndarray, T: int, tag: str) -> np.ndarray:
    """Batched secure LOGSUM over the components: Alice ends with v = log b + vm; returns vm (T × ΔN).

    Fuses the reference ``smcdp.primitives.logsum.secure_logsum_bob`` (seed LOGSUM: exponent and
    weighted sum kept, no secure-logarithm round: ``vm`` is the sums' log scale).
    """
    Dn, C, N = shape.n_values, shape.n_mix, shape.n_states
    n = Dn * T * C
    e = EncryptedVector.from_proto(await ch.recv(alice, f"{tag}/mix-e", pb.CiphertextVector), pk, length=n,
                                   exponent=-mp.e_bits, packing=UNPACKED, bound=1 << mp.e_bits,
                                   what=f"{tag}/mix-e from {alice}")
    vm = vmask.reshape(Dn, C, T)
    # value (i, t, c) = ê · 2^{-F_e} · e^{m_{i,t}} · e^{-vm[i,c,t]} · e^{q}; row (i, t) sums over c
    log_w = [[((i * T + t) * C + c, float(-mp.e_bits * LN2 - vm[i, c, t])) for c in range(C)]
             for i in range(Dn) for t in range(T)]
    groups = [(i // N) * T + t for i in range(Dn) for t in range(T)]        # normalise per (model, frame)
    wr = integer_weights(log_w, groups, mp.weight_bits, uniform_masks(rng, Dn * T, mp.mask_nats))
    u_pack = Packing.for_key(pk, mp.sum_slot_bits(C))
    u = packed_weighted_sums(pk, e.ciphertexts, 1 << mp.e_bits, wr, u_pack, pool)
    await ch.send(alice, f"{tag}/mix-u", u.to_proto())
    # Alice's v = ln u + m = log b + log_scale  →  Bob's mask is log_scale
    return wr.log_scale.reshape(Dn, T).T.copy()
