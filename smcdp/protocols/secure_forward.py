"""Secure forward algorithm (seed 003 §4.2.1) between Alice (observations, private key) and Bob (HMMs).

Bob holds Δ HMMs with N states each (one emission kind for all: discrete,
diagonal or full Gaussian, or Gaussian mixtures); Alice holds one observation
sequence x_0..x_{T−1}.  At the end Bob holds ``ξ(log P(x | λ_δ))`` for every δ
(fixed point, ``log_frac_bits`` fraction bits) and Alice holds nothing but
masked intermediate values (docs/protocols/keyword.md says exactly what, and
proves the error bound: the result is exact to the fixed point for every valid
model -- transitions, start and mixture weights of any magnitude down to the
smallest double, exact zeros included).

Everything log-domain lives on the integer grid 2^−F (F = ``log_frac_bits``):
Alice's masked values, Bob's masks and the public offsets are Python integers,
so masking and unmasking are exact.  The sums of the recursion are the
per-term log-domain LOGSUM of :mod:`smcdp.primitives.logsum`, whose named steps
-- (E) secure exponent, (W) homomorphic weighted sum, (L) secure logarithm --
this module fuses frame by frame.  Steps (seed 003 §4.2.1 numbering):

0. *Header and offline phase.*  Bob sends the public shape -- kind, Δ, N, C,
   d or M, the coefficient size -- and the zero patterns of π, A and the
   mixture weights.  Alice announces how many frames to prepare for; both
   build their key tables and obfuscators and Bob draws his masks (all
   independent of the observations).  Bob says ``ready``.
1. *Emissions, seed steps 1–4, per block of frames* (Alice sends a block as
   soon as its frames exist, so the protocol streams).  Alice ends with
   ``v_{t,i} = log b_i(x_t) + V_{t,i}`` for every (model, state) i, on the grid;
   ``V_{t,i}`` is Bob's, uniform on ±ψ_V per state and frame.

   * discrete (steps 1–2): Alice obtains, by 1-out-of-M oblivious transfer,
     the row of her symbol: ``fx(log b_i(x_t)) + V_{t,i}`` as 16-byte signed
     integers (−∞ as a sentinel).
   * Gaussian (the seed's simplified protocol): Alice encrypts the distinct
     products z_a z_b of z = [x; 1], the block's frames packed into the slots
     of one ciphertext per product; Bob evaluates every quadratic form
     zᵀW_i z for the whole block by one multi-exponentiation per state, adds
     ``V`` on the product grid (so Alice's rounding to the grid is exact in V),
     re-randomises; Alice decrypts.
   * mixtures: the same per component (``V`` per component), then one LOGSUM
     over the components of each (state, frame), the log weights entering as
     public offsets (steps E, W, L).

2. *Start* (step 5).  Bob's offsets ``c⁰_j = fx(log π_j) + ω⁰_j`` give Alice
   ``L_0(j) = c⁰_j + v_{0,j} = log α_0(j) + M_0(j)``, ``M_0(j) = ω⁰_j + V_{0,j}``
   Bob's.  States with π_j = 0 (public pattern) start at −∞.
3. *Induction* (steps 6–7), one round trip per round (one frame, or m) and model group.  For
   step t → t+1 Bob has sent, with the block of frame t+1, the offsets
   ``c_lj = fx(log a_lj) − M_t(l) + ω_{t,j} + σ_lj`` of every edge (σ = 0 for a
   state with one predecessor).  A sum with one predecessor Alice completes
   alone: ``L_{t+1}(j) = L_t(l) + c_lj + v_{t+1,j}``.  The others are LOGSUMs: (E)
   Alice exponentiates each sum's terms relative to its largest term and
   returns them encrypted, pre-shifted into the sum's slot; (W) Bob's packed,
   smudged weighted sums; (L) Alice's ``L_{t+1}(j) = fx(ln u_j) + m_j +
   v_{t+1,j}``.  Bob's mask becomes ``M_{t+1}(j) = ω_{t,j} − K + V_{t+1,j}``.
   *Rounds of m frames* (``frames_per_round`` m ≥ 2; 1 is the seed's): a round t → t+ℓ (ℓ = m, the
   last one possibly shorter) sums into every state j over the paths (i_0, …, i_{ℓ−1}) → j of non-zero
   transitions, Alice's term ``L_t(i_0) + v_{t+1,i_1} + … + v_{t+ℓ−1,i_{ℓ−1}} + c_p`` with Bob's offset
   ``c_p = Σ fx(log a) − M_t(i_0) − Σ V_{t+r,i_r} + ω_{t,j} + σ_p``, sent with the block of frame t+ℓ:
   one round trip per m frames (docs: what it shows Alice of Bob's models).
   The models are split into ``groups`` whose rounds interleave: while Alice
   works on one group Bob works on the other.  Each party runs its big-integer
   work on threads (:mod:`smcdp.crypto.threads`): the round's decryptions and
   multi-exponentiations on one thread per core, the emission blocks on
   background threads that take only the cores the rounds leave idle.
4. *Termination* (step 8): one LOGSUM per model over all states with weight 1;
   Alice returns ``ξ(fx(ln u) + m) = ξ(ℓ + ω_fin − K)`` and Bob subtracts his
   constant: ``ξ(log P(x | λ_δ))``.  A model under which the sequence is
   impossible (every final term is an exact zero; Alice sees it) is sent as
   ``ξ(LOG_ZERO)``, which after Bob's subtraction lies below every real score.

Every random draw of Bob's comes from labelled streams of his randomness root
(:mod:`smcdp.primitives.rng`), one per frame and purpose, so a replayed role
draws the same masks whatever the order its threads ran in; Alice's only draws
are her OT secrets.  Obfuscators come from the OS.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import random
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Self, TypeAlias

import numpy as np
from gmpy2 import mpz

from smcdp._aio import all_or_first_failure
from smcdp._numbers import real
from smcdp.crypto import native
from smcdp.crypto.codec import bigints, from_bigints
from smcdp.crypto.encoding import UNPACKED, Packing, encode_float
from smcdp.crypto.modexp import multi_exp_rows
from smcdp.crypto.naor_pinkas import MODP2048
from smcdp.crypto.obfuscation import ObfuscatorPool
from smcdp.crypto.paillier import PrivateKey, PublicKey
from smcdp.crypto.threads import CryptoThreads
from smcdp.crypto.vector import EncryptedVector
from smcdp.errors import CryptoOverflow, InputRejected, InvalidMessage
from smcdp.net.channel import Channel
from smcdp.net.limits import ciphertext_vector_bytes
from smcdp.primitives import logsum as ls
from smcdp.primitives.ot import ot_choose, ot_send
from smcdp.primitives.rng import Randomness, SeedLike, as_randomness, protocol_rng
from smcdp.protocols.base import ProtocolParams
from smcdp.speech.forward import product_index_pairs, products, quadratic_coefficients, quadratic_forms
from smcdp.speech.models import KeywordModels
from smcdp.v1 import messages_pb2 as pb

log = logging.getLogger(__name__)
PROTOCOL_VERSION = 2
#: the header's emission kinds; "lin" and "gmm-lin": Bob's rows have no second-degree terms (a known part's
#: differences when his models keep its variances: the speaker models against the shared UBM), so Alice
#: sends only the features' products with 1 (d + 1 of them instead of 2d + 1)
KIND_CODES = MappingProxyType(
    {"discrete": 0, "diag": 1, "full": 2, "gmm-diag": 3, "gmm-full": 4, "lin": 5, "gmm-lin": 6}
)  # read-only
KIND_NAMES = MappingProxyType({v: k for k, v in KIND_CODES.items()})
MAX_FRAMES = 100_000
#: a chunk of Alice's observations: a T × d feature matrix, or T symbols (discrete models)
FrameChunk: TypeAlias = np.ndarray | Sequence[Sequence[float]] | Sequence[int]
#: all of them at once, or an async iterable of chunks (streaming)
Frames: TypeAlias = FrameChunk | AsyncIterable[FrameChunk]
#: the checked frames of one block (an empty list for a last block that holds none)
_BlockFrames: TypeAlias = np.ndarray | list[np.ndarray]
#: the largest shape the header format admits (the session's max_* parameters bound it further)
MAX_MODELS, MAX_STATES, MAX_MIXTURES, MAX_FEATURES = 10_000, 1_000, 256, 1 << 16
#: largest header (zero patterns included) a party accepts
MAX_HEADER_VALUES = 10_000_000
#: log P reported for a model under which the observations are impossible (P = 0), in nats.  With
#: offsets up to ±2^40 Bob's result for such a model lies in −2^42 ± 2^40, below every real score
#: (Alice refuses a masked final score of magnitude 2^41 or more: |log P| < 2^40 nats).
LOG_ZERO = -float(1 << 42)
SCORE_BOUND_NATS = 1 << 41
#: the most frames one induction round may cover (its sums run over paths of that many steps: up to
#: max_states ** frames_per_round terms each, counted in the byte envelope)
MAX_FRAMES_PER_ROUND = 4
#: a round of ℓ steps may have at most PATH_FACTOR · ℓ times the terms of one single step (Shape.paths_beyond)
PATH_FACTOR = 2
#: frames per block for discrete emissions (one OT batch per block)
DISCRETE_BLOCK = 32
#: bytes per value of a discrete OT row (signed, little-endian); the smallest value is −∞
OT_VALUE_BYTES = 16
OT_ZERO = -(1 << (8 * OT_VALUE_BYTES - 1))
#: threads for the induction's big-integer work: more than the cores, so that a round of 3 multi-
#: exponentiations (or 6 decryption halves) on 2 cores ends together instead of in 2 + 1 turns
URGENT_THREADS = max(4, os.cpu_count() or 1)


# =============================================================================== parameters
@dataclass
class ForwardParams(ProtocolParams):
    """Public parameters of the secure forward algorithm (both parties agree on them)."""

    protocol_name = "secure-forward"

    mask_nats: float = 4.0  # K: per-term masks σ ~ U[−K, K)
    offset_nats: float = float(1 << 40)  # ψ: per-sum offsets ω ~ U[−ψ, ψ) (log α, log P)
    emission_offset_nats: float = float(1 << 30)  # ψ_V: per-(state, frame) emission offsets V
    precision_bits: int = 30  # p: relative precision of every sum
    smudge_bits: int = 30  # λ: smudging of the packed sums
    log_frac_bits: int = 40  # F: the grid of every log-domain value
    feature_bits: int = 8  # public bound |x_i| < 2^feature_bits (Gaussian)
    coef_bits: int | str = "auto"  # |quadratic-form coefficient| < 2^coef_bits ("auto": Bob's)
    prod_frac_bits: int | str = "auto"  # fixed point of Alice's products ("auto": max(32, coef_bits + 20))
    coef_frac_bits: int = 32  # fixed point of Bob's coefficients
    block_frames: int = 0  # frames per emission block (0: a product ciphertext's slots)
    groups: int = 1  # model groups whose induction rounds interleave (docs)
    #: frames of the induction per round trip (docs: 1 is the seed's; m ≥ 2 sums over paths of m steps, one
    #: round trip per m frames, and shows Alice more of Bob's models -- the leakage section says what)
    frames_per_round: int = 1
    # public bounds that size every message (:func:`forward_traffic`, the byte envelope): Alice's frames T, Bob's
    # models Δ, their states N, mixture components C and features d (symbols M of discrete models).
    # Bob refuses to run models beyond them, Alice a header beyond them, both more frames.
    max_frames: int = 300  # 3 s of speech in 10 ms frames
    max_models: int = 16
    max_states: int = 8
    max_mixtures: int = 2
    max_features: int = 40  # 39 MFCCs with deltas; or 40 symbols

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any]) -> Self:
        if "range_bits" in m:
            raise InvalidMessage(
                "range_bits was removed: transitions are exact now, whatever "
                "their range; drop it from the session parameters"
            )
        return super().from_mapping(m)

    def validate(self) -> ForwardParams:
        self.masks().validate()
        real(self.emission_offset_nats, "emission_offset_nats", 1.0, 2.0**48)
        for name, lo, hi in (
            ("feature_bits", 1, 32),
            ("coef_frac_bits", 8, 96),
            ("block_frames", 0, 4096),
            ("groups", 1, 16),
            ("frames_per_round", 1, MAX_FRAMES_PER_ROUND),
            ("max_frames", 1, MAX_FRAMES),
            ("max_models", 1, MAX_MODELS),
            ("max_states", 1, MAX_STATES),
            ("max_mixtures", 1, MAX_MIXTURES),
            ("max_features", 1, MAX_FEATURES),
        ):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise InvalidMessage(f"forward parameter {name}={v!r} must be an integer in [{lo}, {hi}]")
        c = self.coef_bits
        if c != "auto" and (isinstance(c, bool) or not isinstance(c, int) or not 1 <= c <= 64):
            raise InvalidMessage(f"forward parameter coef_bits={c!r} must be 'auto' or an integer in [1, 64]")
        f = self.prod_frac_bits
        if f != "auto" and (isinstance(f, bool) or not isinstance(f, int) or not 8 <= f <= 96):
            raise InvalidMessage(f"forward parameter prod_frac_bits={f!r} must be 'auto' or an integer in [8, 96]")
        if isinstance(f, int) and f + self.coef_frac_bits < self.log_frac_bits:  # not "auto": an int (above)
            raise InvalidMessage("prod_frac_bits + coef_frac_bits must be at least log_frac_bits")
        return self

    def masks(self) -> ls.MaskParams:
        # not float()-ed here: MaskParams.validate refuses a string, a list or an infinity by name
        return ls.MaskParams(
            self.mask_nats, self.offset_nats, self.precision_bits, self.smudge_bits, self.log_frac_bits
        )

    @property
    def emission_offset_int(self) -> int:
        return encode_float(float(self.emission_offset_nats), self.log_frac_bits)

    def product_frac_bits(self, coef_bits: int) -> int:
        """Fraction bits of Alice's products for coefficients below 2^coef_bits.  "auto" scales them with
        the coefficients, so the products' rounding error (≤ 2^{−f_p−1}·‖c‖₁ per frame and state) stays
        ≤ P·2^{−21} nats however large the coefficients are (tiny variances), at 2 slot bits per bit."""
        if self.prod_frac_bits == "auto":
            return max(32, int(coef_bits) + 20, self.log_frac_bits - self.coef_frac_bits)
        return int(self.prod_frac_bits)


# =============================================================================== public shape
@dataclass
class Shape:
    """What both parties know about the models: sizes, coefficient bound and zero patterns."""

    kind: str
    n_models: int
    n_states: int
    n_mix: int
    dim: int
    coef_bits: int
    start: np.ndarray  # (Δ, N) bool: π > 0
    trans: np.ndarray  # (Δ, N, N) bool: a_lj > 0
    weights: np.ndarray | None  # (Δ, N, C) bool: w > 0 (mixtures)

    @property
    def n_values(self) -> int:
        return self.n_models * self.n_states

    @property
    def covariance_type(self) -> str:
        """The products Alice encrypts (:func:`~smcdp.speech.forward.product_index_pairs`)."""
        if self.kind in ("full", "gmm-full"):
            return "full"
        return "linear" if self.kind in ("lin", "gmm-lin") else "diag"

    @property
    def mixture(self) -> bool:
        return self.kind.startswith("gmm")

    @property
    def rows(self) -> int:
        """Emission rows: (model, state[, component])."""
        return self.n_values * (self.n_mix if self.mixture else 1)

    def to_proto(self) -> pb.Ints:
        flags = [int(x) for x in self.start.ravel()] + [int(x) for x in self.trans.ravel()]
        if self.mixture:
            assert self.weights is not None  # a mixture kind's shape has its weights pattern
            flags += [int(x) for x in self.weights.ravel()]
        return pb.Ints(
            values=[
                PROTOCOL_VERSION,
                KIND_CODES[self.kind],
                self.n_models,
                self.n_states,
                self.n_mix,
                self.dim,
                self.coef_bits,
                *flags,
            ]
        )

    @classmethod
    def from_proto(cls, msg: pb.Ints) -> Shape:
        v = msg.values
        if len(v) < 7 or v[0] != PROTOCOL_VERSION:
            got = v[0] if len(v) else None
            raise InvalidMessage(
                f"secure-forward header version {got}, expected {PROTOCOL_VERSION} "
                "(both parties need the same smcdp protocol version)"
            )
        if v[1] not in KIND_NAMES:
            raise InvalidMessage(f"unknown emission kind code {v[1]}")
        kind = KIND_NAMES[v[1]]
        D, N, C, d, cb = (int(x) for x in v[2:7])
        if not (1 <= D <= MAX_MODELS and 1 <= N <= MAX_STATES and 1 <= C <= MAX_MIXTURES and 1 <= d <= MAX_FEATURES):
            raise InvalidMessage(f"secure-forward header has out-of-range sizes {[D, N, C, d]}")
        if not kind.startswith("gmm") and C != 1:
            raise InvalidMessage("secure-forward header: a mixture size C > 1 needs a mixture emission kind")
        if not (kind == "discrete" and cb == 0) and not 1 <= cb <= 64:
            raise InvalidMessage(f"secure-forward header: coefficient bits {cb} outside [1, 64]")
        want = 7 + D * N + D * N * N + (D * N * C if kind.startswith("gmm") else 0)
        if want > MAX_HEADER_VALUES or len(v) != want:
            raise InvalidMessage(
                f"secure-forward header has {len(v)} values; {want} expected (at most {MAX_HEADER_VALUES})"
            )
        flags = np.asarray(v[7:], dtype=np.int64)
        if np.any((flags != 0) & (flags != 1)):
            raise InvalidMessage("secure-forward header: zero patterns must be 0/1 flags")
        flags = flags.astype(bool)
        start = flags[: D * N].reshape(D, N)
        trans = flags[D * N : D * N + D * N * N].reshape(D, N, N)
        weights = flags[D * N + D * N * N :].reshape(D, N, C) if kind.startswith("gmm") else None
        if not np.all(start.any(axis=1)) or not np.all(trans.any(axis=2)):
            raise InvalidMessage("secure-forward header: every model needs a start state and every state a successor")
        if weights is not None and not np.all(weights.any(axis=2)):
            raise InvalidMessage("secure-forward header: every mixture needs a component")
        return cls(kind, D, N, C, d, cb, start, trans, weights)

    def beyond(self, params: ForwardParams) -> str | None:
        """Which of the session's public bounds this shape exceeds (None: within all of them)."""
        for what, value, bound in (
            ("models", self.n_models, params.max_models),
            ("states", self.n_states, params.max_states),
            ("mixtures", self.n_mix, params.max_mixtures),
            ("features", self.dim, params.max_features),
        ):
            if value > bound:
                return f"{value} {what}, more than the session's max_{what} = {bound}"
        return None

    def paths_beyond(self, params: ForwardParams) -> str | None:
        """Rounds of m frames sum over paths: for dense topologies N^m per state against N per frame.  Refused
        (None: fine) when a round of ℓ ≤ m steps would have more than 2ℓ times the terms of one single step,
        where several frames per round cost more than they save -- and the envelope counts on it."""
        m = params.frames_per_round
        if m == 1:
            return None
        trans = self.trans.astype(np.float64)  # counts as floats: no overflow
        single = counts = trans.sum(axis=1)  # (D, N): predecessors of every state
        for ell in range(2, m + 1):
            counts = np.einsum("dij,di->dj", trans, counts)  # paths of ℓ steps into every state
            if int(counts.sum()) > PATH_FACTOR * ell * int(single.sum()):
                return (
                    f"rounds of {ell} frames would sum over {int(counts.sum())} paths, more than "
                    f"{PATH_FACTOR * ell} × the {int(single.sum())} terms of one single step (frames_per_round "
                    f"= {m} pays only for sparse, e.g. left-to-right, topologies; use 1)"
                )
        return None

    @classmethod
    def of_models(cls, models: KeywordModels, coef_bits: int, linear: bool = False) -> Shape:
        """``linear``: Bob's rows of these diagonal models have no second-degree terms (kind "lin" or
        "gmm-lin")."""
        # KeywordModels validated its arrays against its kind: discrete models carry emission
        # probabilities, the others means (and mixtures their weights)
        if models.kind == "discrete":
            assert models.n_symbols is not None
            return cls(
                "discrete",
                models.n_words,
                models.n_states,
                1,
                models.n_symbols,
                0,
                models.startprob > 0,
                models.transmat > 0,
                None,
            )
        assert models.n_features is not None
        weights = None
        if models.kind.startswith("gmm"):
            assert models.weights is not None
            weights = models.weights > 0
        kind = models.kind
        if linear:
            assert kind in ("diag", "gmm-diag"), "only diagonal models' rows can lose their squares"
            kind = "gmm-lin" if kind == "gmm-diag" else "lin"
        return cls(
            kind,
            models.n_words,
            models.n_states,
            models.n_mix or 1,
            models.n_features,
            coef_bits,
            models.startprob > 0,
            models.transmat > 0,
            weights,
        )


@dataclass(frozen=True)
class ProductLayout:
    """Packing of Alice's products: the frames of a block in the slots of one ciphertext per product."""

    n_products: int
    slot_bits: int
    packing: Packing
    shift: int  # f_p + coef_frac_bits − F: Alice rounds by this many bits
    prod_frac_bits: int  # f_p: the fixed point of Alice's products
    v_frac_bits: int  # f_p + coef_frac_bits: the fixed point of Bob's quadratic forms

    @classmethod
    def make(cls, pk: PublicKey, params: ForwardParams, shape: Shape) -> ProductLayout:
        P = len(product_index_pairs(shape.dim, shape.covariance_type)[0])
        fp = params.product_frac_bits(shape.coef_bits)
        s = product_slot_bits(params, shape.coef_bits, P)
        shift = fp + params.coef_frac_bits - params.log_frac_bits
        if s > pk.max_int.bit_length() - 1:
            raise CryptoOverflow(
                f"a quadratic form needs {s}-bit values; a {pk.bits}-bit key holds "
                f"{pk.max_int.bit_length() - 1}: use a key of at least {2 * (s + 4)} bits"
            )
        return cls(P, s, Packing.for_key(pk, s), shift, fp, fp + params.coef_frac_bits)

    @property
    def frames_per_ciphertext(self) -> int:
        return self.packing.slots

    def product_bound(self, params: ForwardParams) -> int:
        return 1 << (2 * params.feature_bits + self.prod_frac_bits)


def product_slot_bits(params: ForwardParams, coef_bits: int, n_products: int) -> int:
    """Bits of one slot of Alice's products and Bob's quadratic forms (:class:`ProductLayout`)."""
    fp = params.product_frac_bits(coef_bits)
    q_bits = 2 * params.feature_bits + fp + coef_bits + params.coef_frac_bits + math.ceil(math.log2(n_products + 1))
    shift = fp + params.coef_frac_bits - params.log_frac_bits
    mask_bits = (params.emission_offset_int << shift).bit_length()
    return max(q_bits, mask_bits) + 2  # |q| + |V| < 2^{max+1} ≤ 2^{s−1}


#: the spread layout's cover of the cross terms: λ_g = smudge_bits + this, so that the S − 1 covered slots of
#: one output are together within 2^{−λ−1} of independent noise for S ≤ 129 (as ν hides each sum)
SPREAD_EXTRA_BITS = 8
#: what one decryption costs Alice in encryptions (each with its obfuscator), and one re-randomisation Bob in
#: the same unit, measured at 2048 bits (3.3 ms, 0.32 ms and 0.5 ms of CPU; docs/benchmarks.md, speaker)
DECRYPT_COST, RERANDOMIZE_COST = 10.0, 1.5


def mixture_layout(mp: ls.MaskParams, terms: int, pk: PublicKey) -> tuple[ls.LogsumLayout, bool]:
    """The layout of the component sums of at most ``terms`` terms and whether it is spread: the one with the
    smaller cost per sum, in encryptions -- packed ``terms + (d + r)/S``, spread ``terms/S' + d + r``.  Spread
    pays from about 12 components on (a 64-component GMM: 4× less); the keyword HMMs' 1-2 stay packed.
    Public: both parties derive it from the shape, the parameters and the key."""
    packed = ls.LogsumLayout.make(mp, terms, pk)
    try:
        spread = ls.LogsumLayout.make(mp, terms, pk, garbage_bits=mp.smudge_bits + SPREAD_EXTRA_BITS)
    except CryptoOverflow:
        return packed, False
    per_output = DECRYPT_COST + RERANDOMIZE_COST
    if spread.packing.packed and terms / spread.slots + per_output < terms + per_output / packed.slots:
        return spread, True
    return packed, False


def offset_bits(params: ForwardParams) -> int:
    """Bound (bits) on the public offsets Bob sends (start, paths, mixture terms, termination).  A path of
    m steps adds m log weights and, besides M_t (ψ + ψ_V + K) and ω + σ, the masks of its m − 1 inner
    frames (each ≤ ψ_V + K): m = 1 is the single step's bound."""
    mp = params.masks()
    F, psi, psi_v = params.log_frac_bits, mp.offset_int, params.emission_offset_int
    m = params.frames_per_round
    return ((m * ls.LOG_WEIGHT_BOUND_NATS << F) + 2 * psi + (m + 1) * psi_v + (m + 3) * mp.mask_int).bit_length() + 1


def split_groups(he_sums: Sequence[int], slots: int, groups: int) -> list[list[int]]:
    """Contiguous groups of models whose induction rounds interleave, filling whole ciphertexts.

    ``he_sums[δ]`` is model δ's number of sums that need homomorphic work.  Each
    group gets at most ⌈total ciphertexts / groups⌉ ciphertexts' worth of sums,
    so splitting adds as few ciphertexts per frame as possible (10 left-to-right
    5-state models at 14 slots: 7 + 3 models, 3 ciphertexts as with one group).
    """
    D = len(he_sums)
    groups = max(1, min(groups, D))
    total = sum(he_sums)
    if groups == 1 or total == 0:
        return [list(range(D))]
    used_slots = -(-total // slots)  # ceil(total / slots)
    per = -(-used_slots // groups) * slots  # ceil(used_slots / groups) slots per group
    out: list[list[int]] = [[]]
    fill = 0
    for d in range(D):
        if out[-1] and fill + he_sums[d] > per and len(out) < groups:
            out.append([])
            fill = 0
        out[-1].append(d)
        fill += he_sums[d]
    return out


class Plan:
    """Everything both parties derive from the public shape, the parameters and the key."""

    def __init__(self, shape: Shape, params: ForwardParams, pk: PublicKey) -> None:
        self.shape, self.params, self.pk = shape, params, pk
        mp = params.masks()
        self.mp = mp
        self.F = params.log_frac_bits
        self.K = mp.mask_int
        D, N = shape.n_models, shape.n_states
        self.D, self.N = D, N
        self.starts = [[int(j) for j in np.flatnonzero(shape.start[d])] for d in range(D)]
        self.preds = [[[int(x) for x in np.flatnonzero(shape.trans[d, :, j])] for j in range(N)] for d in range(D)]
        self.m = params.frames_per_round
        self._induction_paths()  # steps 6-7
        self._offset_indices()  # steps 5-6: where each offset sits in a frame
        self._mixtures()  # step 1, mixtures
        if shape.kind == "discrete":  # step 1: emission blocks
            self.prod = None
            self.block = params.block_frames or DISCRETE_BLOCK
        else:
            self.prod = ProductLayout.make(pk, params, shape)
            per_ct = self.prod.frames_per_ciphertext
            self.block = min(params.block_frames, per_ct) if params.block_frames else per_ct
        self.offset_bits = offset_bits(params)
        #: bound on |v| (Alice's masked emissions, discrete rows)
        self.emission_bits = ((ls.LOG_WEIGHT_BOUND_NATS << self.F) + params.emission_offset_int).bit_length() + 1

    def _induction_paths(self) -> None:
        """Steps 6–7: the paths, LOGSUM layouts (induction and termination) and model groups.

        Induction rounds of m = frames_per_round steps (the last one may be shorter).  A round of ℓ steps
        sums, into every state j, over the paths (i_0, …, i_{ℓ−1}) → j of non-zero transitions: i_0 at the
        round's first frame, i_1.. at the frames inside it.  ℓ = 1: the paths are the predecessors."""
        D, N, m, mp, pk = self.D, self.N, self.m, self.mp, self.pk
        self.paths: dict[int, list[list[list[tuple[int, ...]]]]] = {
            1: [[[(l,) for l in self.preds[d][j]] for j in range(N)] for d in range(D)]
        }
        for ell in range(2, m + 1):
            prev = self.paths[ell - 1]
            self.paths[ell] = [
                [[q + (i,) for i in self.preds[d][j] for q in prev[d][i]] for j in range(N)] for d in range(D)
            ]
        he_in = [
            len(self.paths[ell][d][j])
            for ell in self.paths
            for d in range(D)
            for j in range(N)
            if len(self.paths[ell][d][j]) >= 2
        ]
        self.ind = ls.LogsumLayout.make(mp, max(he_in), pk) if he_in else None
        self.fin = ls.LogsumLayout.make(mp, N, pk) if N >= 2 else None
        he_counts = [sum(1 for j in range(N) if len(self.paths[m][d][j]) >= 2) for d in range(D)]
        self.groups = split_groups(he_counts, self.ind.slots if self.ind else 1, self.params.groups)
        #: per round length ℓ: each group's sums that need a LOGSUM, and their terms
        self.group_sums = {
            ell: [[(d, j) for d in g for j in range(N) if self.he_state(d, j, ell)] for g in self.groups]
            for ell in self.paths
        }
        self.group_terms = {
            ell: [sum(len(self.paths[ell][d][j]) for d, j in sums) for sums in gs]
            for ell, gs in self.group_sums.items()
        }

    def _offset_indices(self) -> None:
        """Offsets of one frame: start (t = 0) or induction (a round's last frame) edges, then mixture terms."""
        D, N = self.D, self.N
        self.start_index = {}
        k = 0
        for d in range(D):
            for j in self.starts[d]:
                self.start_index[(d, j)] = k
                k += 1
        self.n_start = k
        #: per round length ℓ: where each state's path offsets start in a round's last frame, and their count
        self.path_index: dict[int, dict[tuple[int, int], int]] = {}
        self.n_paths: dict[int, int] = {}
        for ell, paths in self.paths.items():
            k, index = 0, {}
            for d in range(D):
                for j in range(N):
                    index[(d, j)] = k
                    k += len(paths[d][j])
            self.path_index[ell], self.n_paths[ell] = index, k

    def _mixtures(self) -> None:
        """Step 1 with mixtures: every (state, frame)'s components and their LOGSUM layout."""
        D, N, shape = self.D, self.N, self.shape
        self.mixture = shape.mixture
        self.comps: list[list[list[int]]] = []
        self.mix: ls.LogsumLayout | None = None
        self.mix_spread = False  # the component sums' layout: spread (ls.spread_terms) or packed
        self.mix_sums: list[tuple[int, int]] = []
        self.n_mix = 0
        if self.mixture:
            assert shape.weights is not None  # a mixture kind's shape has its weights pattern
            self.comps = [[[int(c) for c in np.flatnonzero(shape.weights[d, j])] for j in range(N)] for d in range(D)]
            self.mix_sums = [(d, j) for d in range(D) for j in range(N) if len(self.comps[d][j]) >= 2]
            mix_in = [len(self.comps[d][j]) for d, j in self.mix_sums]
            self.mix, self.mix_spread = mixture_layout(self.mp, max(mix_in), self.pk) if mix_in else (None, False)
            self.n_mix = sum(len(self.comps[d][j]) for d in range(D) for j in range(N))

    def mix_inputs(self, frames: int) -> int:
        """Alice's ciphertexts of exponentiated component terms for ``frames`` frames, block by block: one per
        term, or in the spread layout one per chunk of sums and term."""
        if self.mix is None:
            return 0
        per = [len(self.comps[d][j]) for d, j in self.mix_sums]
        if not self.mix_spread:
            return sum(per) * frames
        return sum(
            sum(ls.spread_chunks(per * min(self.block, frames - first), self.mix))
            for first in range(0, frames, self.block)
        )

    def mix_outputs(self, frames: int) -> int:
        """Bob's weighted-sum ciphertexts for a block of ``frames`` frames: one per sum (spread), or packed."""
        if self.mix is None:
            return 0
        sums = len(self.mix_sums) * frames
        return sums if self.mix_spread else self.mix.n_ciphertexts(sums)

    def round_length(self, e: int) -> int:
        """Steps of the round that ends at frame e ≥ 1 (it starts at frame e − ℓ): rounds end at the
        multiples of m and at the last frame, so a round's length follows from where it ends."""
        return (e - 1) % self.m + 1

    def round_end(self, t: int, total: int | None) -> bool:
        """Does a round end at frame t (``total``: the frame count once known)?"""
        return t >= 1 and (t % self.m == 0 or (total is not None and t == total - 1))

    def induction_offsets(self, t: int, total: int | None) -> int:
        """Frame t's start (t = 0) or path offsets (a round's last frame); none inside a round."""
        if t == 0:
            return self.n_start
        return self.n_paths[self.round_length(t)] if self.round_end(t, total) else 0

    def offsets_in_frame(self, t: int, total: int | None) -> int:
        return self.induction_offsets(t, total) + self.n_mix

    def rounds(self, frames: int) -> list[int]:
        """The lengths of the induction rounds of ``frames`` frames."""
        steps = max(0, frames - 1)
        return [self.m] * (steps // self.m) + ([steps % self.m] if steps % self.m else [])

    def n_blocks(self, frames: int) -> int:
        return -(-frames // self.block)

    def he_state(self, d: int, j: int, ell: int) -> bool:
        """Does state j of model d need a LOGSUM (≥ 2 paths) in a round of ℓ steps?"""
        return len(self.paths[ell][d][j]) >= 2


# =============================================================================== traffic bounds
def _ints_bytes(n: int) -> int:
    return 10 * n + 16  # an Ints message: a varint of at most 10 bytes per value


def _bigints_bytes(n: int, bits: int) -> int:
    return n * ((bits + 7) // 8 + 8) + 16  # magnitude (tag, length) and sign per value


def _blobs_bytes(n: int, width: int) -> int:
    return n * (width + 6) + 16  # tag and length per value


def forward_traffic(
    params: ForwardParams, key_bits: int, kind: str
) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """What Alice and Bob receive at most in one run with Bob's emission ``kind``: ``(count, largest,
    total bytes)`` per kind of message, for Alice and for Bob: the session's byte envelope (docs/transport.md).

    From the public parameters only: the bounds max_frames, max_models, max_states, max_mixtures and
    max_features taken with every start, transition and component present (the most terms and the
    widest slots), the key size, the masking and fixed-point parameters, and the coefficient bits Bob
    may use (every value of "auto").  Slots are counted for the smallest modulus of ``key_bits`` bits,
    which holds the fewest."""
    pk = PublicKey((1 << (key_bits - 1)) + 1)
    T, D, N, d = params.max_frames, params.max_models, params.max_states, params.max_features
    C = params.max_mixtures if kind.startswith("gmm") else 1
    G, DN, n_mix = min(params.groups, D), D * N, (D * N * C if kind.startswith("gmm") else 0)
    ctb = (2 * key_bits + 7) // 8 + 4

    def ct(n: int) -> int:
        return ciphertext_vector_bytes(n, key_bits)

    def cts(messages: int, ciphertexts: int) -> int:  # total of ``messages`` vectors
        return ciphertexts * ctb + 64 * messages

    def slots(n_terms: int) -> int:
        try:
            return ls.LogsumLayout.make(params.masks(), n_terms, pk).slots
        except CryptoOverflow:  # the run cannot happen with this key: count one slot (the most bytes)
            return 1

    if kind == "discrete":
        b_min = b_max = params.block_frames or DISCRETE_BLOCK
    else:
        if kind in ("full", "gmm-full"):
            sizes = [(d + 1) * (d + 2) // 2]
        elif kind in ("lin", "gmm-lin"):
            sizes = [d + 1]
        else:  # a diagonal kind's rows lose their squares with a known part (Shape "lin"): either layout
            sizes = [2 * d + 1, d + 1]
        P = max(sizes)  # the most product ciphertexts a block
        coef = (4, 64) if params.coef_bits == "auto" else (int(params.coef_bits), int(params.coef_bits))
        per_ct = [Packing.for_key(pk, product_slot_bits(params, cb, n)).slots for cb in coef for n in sizes]
        b_max, b_min = ((min(params.block_frames, S) if params.block_frames else S) for S in (max(per_ct), min(per_ct)))
    nb = -(-T // b_min)  # blocks
    bT = min(b_max, T)  # frames of the largest block
    ob = offset_bits(params)
    m = params.frames_per_round
    # paths into a state in a round of m steps: N^m at most, and on average at most 2m·N (Shape.paths_beyond)
    paths = min(N**m, PATH_FACTOR * m * N)
    rounds = -(-max(0, T - 1) // m)
    ends = bT if m == 1 else min(bT, -(-bT // m) + 1)  # round ends among a block's frames (≥ frame 0's starts)
    block_offsets = ends * DN * paths + bT * n_mix
    alice: list[tuple[int, ...]] = [
        (1, _ints_bytes(7 + DN + DN * N + n_mix), _ints_bytes(7 + DN + DN * N + n_mix)),  # hdr
        (1, _ints_bytes(1)),  # ready
        (nb, _bigints_bytes(block_offsets, ob), _bigints_bytes(DN + rounds * DN * paths + T * n_mix, ob) + 16 * nb),
        (1, _bigints_bytes(DN, ob)),  # fin-c
    ]
    bob: list[tuple[int, ...]] = [(1, _ints_bytes(1)), (nb, _ints_bytes(2))]  # plan, blk
    if kind == "discrete":  # one OT batch per block (Naor–Pinkas)
        M, row = max(2, d), OT_VALUE_BYTES * DN
        alice += [
            (nb, _blobs_bytes(1, MODP2048.byte_length)),
            (nb, _blobs_bytes(bT * M, row), _blobs_bytes(T * M, row) + 16 * nb),
        ]
        bob += [
            (nb, _ints_bytes(3)),
            (nb, _blobs_bytes(bT, MODP2048.byte_length), _blobs_bytes(T, MODP2048.byte_length) + 16 * nb),
        ]
    else:  # products in, quadratic forms out: one vector per block
        R = DN * C
        alice.append((nb, ct(R), nb * ct(R)))
        bob.append((nb, ct(P), nb * ct(P)))
        if C >= 2:  # the component LOGSUMs of every (state, frame): the larger of the two layouts' messages
            sm = slots(
                C
            )  # packed: one ciphertext per term in, S sums per ciphertext out; spread: fewer in, one out per sum
            alice.append((nb, ct(max(bT * DN, -(-bT * DN // sm))), cts(nb, T * DN + nb)))
            bob.append((nb, ct(bT * DN * C), cts(nb, T * DN * C)))
    if N >= 2:  # induction (one round trip per round and group), termination
        si, sf = slots(N**m), slots(N)  # the layout is made for the state with the most paths
        alice += [(rounds * G, ct(-(-DN // si)), cts(rounds * G, rounds * (-(-DN // si) + G))), (1, ct(-(-D // sf)))]
        bob += [(rounds * G, ct(DN * paths), cts(rounds * G, rounds * DN * paths)), (1, ct(DN))]
    bob.append((1, ct(D)))  # fin-l
    return alice, bob


# =============================================================================== Bob's coefficients
def model_coefficients(
    models: KeywordModels, params: ForwardParams, known: KeywordModels | None = None
) -> tuple[np.ndarray, int]:
    """Bob: the coefficients of the distinct products, rows (δ, j[, c]) flattened, and the coefficient bits.

    With ``coef_bits="auto"`` the bits are ⌈log₂ max|c|⌉ rounded up to a multiple of 4 (public: Bob's
    coefficient magnitude class); up to 64.  A model whose coefficients do not fit is refused here,
    before anything is sent, with the model, state and value named.  ``known``: models of the same shape
    whose quadratic forms Alice holds and adds herself (:class:`ForwardAlice`'s ``known``): the rows are
    then the differences, ``models`` minus ``known``.
    """
    ct, dim = models.covariance_type, models.n_features
    assert ct is not None and dim is not None  # Gaussian emissions: no caller passes discrete models
    C = _coefficient_rows(models)  # (Δ, N, P) or (Δ, N, C, P)
    if known is not None:
        K = _coefficient_rows(known) if known.kind == models.kind else None
        if K is None or K.shape != C.shape:
            raise ValueError(
                f"the known part ({known.kind}, {None if K is None else K.shape[:-1]}) must have the models' kind "
                f"and shape ({models.kind}, {C.shape[:-1]})"
            )
        C = C - K
    flat = C.reshape(-1, C.shape[-1])
    biggest = float(np.max(np.abs(flat))) if flat.size else 0.0
    if params.coef_bits == "auto":
        need = max(4, math.ceil(math.log2(biggest + 1.0)) + 1)
        bits = min(64, -(-need // 4) * 4)
    else:
        bits = int(params.coef_bits)
    lim = 2.0**bits
    if not np.all(np.isfinite(flat)) or np.any(np.abs(flat) >= lim):
        idx = np.unravel_index(int(np.argmax(np.where(np.isfinite(flat), np.abs(flat), np.inf))), flat.shape)
        row, p = int(idx[0]), int(idx[1])
        inner = C.shape[1:-1]
        pos = np.unravel_index(row, (C.shape[0],) + inner)
        d, j = int(pos[0]), int(pos[1])
        comp = f", component {int(pos[2])}" if len(pos) > 2 else ""
        value = float(flat[row, p])
        I, J = product_index_pairs(dim, ct)
        what = ""
        if I[p] == J[p] and I[p] < dim:
            what = f" (the x_{int(I[p])}² term: variance ≈ {1 / (2 * abs(value)):.2g})"
        advice = (
            "floor the variances (smcdp speech train --min-covar)"
            if params.coef_bits == "auto"
            else "raise coef_bits or use coef_bits='auto'"
        )
        rule = (
            f"a quadratic-form coefficient of the models does not fit the protocol's {bits}-bit coefficients; {advice}"
        )
        exc = CryptoOverflow(
            f"model {models.words[d]!r}, state {j}{comp}: quadratic-form coefficient {value:.3g}"
            f"{what} does not fit the protocol's {bits}-bit coefficients; {advice}"
        )
        # the value describes Bob's models: peers get the rule only (smcdp.errors.public_message reads it)
        exc.public_message = rule  # type: ignore[attr-defined]  # SmcdpError declares no public_message (errors.py)
        raise exc
    return flat, bits


def _without_squares(coefs: np.ndarray, models: KeywordModels, known: KeywordModels | None) -> tuple[np.ndarray, bool]:
    """Bob's rows with a known part, when every squared feature's coefficient is 0 in all of them (diagonal
    models that keep the known part's variances: MAP-adapted speakers against their UBM): only the linear
    and constant columns, and True -- Alice then encrypts d + 1 products a frame instead of 2d + 1.
    Otherwise the rows as they are, and False.  Only with a known part: that the squares cancel is then a
    consequence of public facts (the adaptation keeps variances), not something the header would tell of
    Bob's models alone."""
    if known is None or models.covariance_type != "diag":
        return coefs, False
    assert models.n_features is not None
    _, J = product_index_pairs(models.n_features, "diag")
    square = models.n_features != J
    if np.any(coefs[:, square] != 0):
        return coefs, False
    return np.ascontiguousarray(coefs[:, ~square]), True


def _coefficient_rows(models: KeywordModels) -> np.ndarray:
    ct = models.covariance_type
    assert ct is not None  # Gaussian emissions
    return np.stack([quadratic_coefficients(quadratic_forms(h, include_log_weight=False), ct) for h in models.hmms()])


def known_coefficients(models: KeywordModels) -> np.ndarray:
    """The coefficients of ``models``' quadratic forms, rows (δ, j[, c]) flattened, (rows, P), in float64 --
    what a known part adds, without :func:`model_coefficients`' fixed-point limit."""
    if models.covariance_type is None:
        raise ValueError("a known part is made of Gaussian models (discrete ones have no quadratic forms)")
    W = _coefficient_rows(models)
    return W.reshape(-1, W.shape[-1])


def score_range(models: KeywordModels, params: ForwardParams) -> tuple[float, float]:
    """(B, b) for Gaussian models: B ≥ |q(z)| for every row's form and every frame inside the box |x_i| <
    2^feature_bits (:func:`known_bounds`), and b ≥ |log P(x | λ)| for every finite log P of ``max_frames`` such
    frames: P ≤ Π_t max_j b_j(x_t) (the paths' π·Πa sum to 1), and P ≥ one path's π·Πa·Πb, whose logs of positive
    probabilities are each ≥ −max|log p| -- so b = |log π|max + T·(B + |log w|max + log C + |log a|max), over
    the positive start, transition and mixture probabilities."""

    def largest_log(p: np.ndarray | None) -> float:
        if p is None:
            return 0.0
        pos = np.asarray(p, dtype=np.float64)
        pos = pos[pos > 0]
        return float(np.max(-np.log(pos))) if pos.size else 0.0

    B = float(np.max(known_bounds(models, params.feature_bits)))
    C = models.weights.shape[-1] if models.weights is not None else 1
    per_frame = B + largest_log(models.weights) + math.log(C) + largest_log(models.transmat)
    return B, largest_log(models.startprob) + params.max_frames * per_frame


def check_score_range(models: KeywordModels, params: ForwardParams) -> None:
    """Bob, before anything is sent: refuse (InputRejected) Gaussian models whose log-likelihood could reach 2^40
    nats (or a form 2^41) for *some* utterance of ``max_frames`` frames inside the agreed box.  Alice refuses a
    score beyond ±2^40 nats, but she sees it masked (log P + ω, |ω| < 2^40): whether her check fired depended on
    where her features lay and on Bob's offset, a bit of her utterance for Bob (a review, 2026-12-05).  With
    this no utterance inside the box reaches her check unless Bob deviates.  Public values only."""
    form, total = score_range(models, params)
    if not (form < SCORE_BOUND_NATS and total * (1 + 2.0**-20) < float(1 << 40)):
        raise InputRejected(
            "the models' log-likelihood could reach 2^40 nats for an utterance of max_frames frames inside the "
            "agreed feature bound (floor their variances, or propose a smaller max_frames or feature_bits)",
            f"a form up to {form:.3g} nats; {params.max_frames} frames: {total:.3g}",
        )


def known_rows(models: KeywordModels) -> Callable[[np.ndarray], np.ndarray]:
    """Alice's side of a known part (:class:`ForwardAlice`'s ``known``): for a block's frames (n × d) the
    quadratic forms zᵀW z of ``models``' rows (δ, j[, c]) in nats, (n, rows) -- what Bob's rows leave out
    when he runs with ``known=models``."""
    ct = models.covariance_type
    W = known_coefficients(models)  # (rows, P)
    assert ct is not None  # known_coefficients checked

    def evaluate(frames: np.ndarray) -> np.ndarray:
        return products(frames, ct) @ W.T

    return evaluate


def known_bounds(models: KeywordModels, feature_bits: int) -> np.ndarray:
    """For each row of a known part, the largest |zᵀWz| any frame inside the agreed box |x_i| < 2^feature_bits
    can give (Σ_p |c_p|·max|z_p|: every product z_p is a monomial of degree ≤ 2, largest at the box's
    corner), (rows,).  A party that is shown a known part checks it against this before it sees any frame, so
    no later refusal of the forms' size depends on its features."""
    ct = models.covariance_type
    W = known_coefficients(models)
    assert ct is not None and models.n_features is not None  # known_coefficients checked
    corner = products(np.full((1, models.n_features), 2.0**feature_bits), ct)[0]
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.abs(W) @ np.abs(corner)
    return np.where(np.isfinite(out), out, np.inf)


# =============================================================================== frames in
def _check_frames(shape: Shape, X: FrameChunk, params: ForwardParams, first: int) -> np.ndarray:
    arr = np.asarray(X)
    if shape.kind == "discrete":
        if arr.ndim == 2 and arr.shape[1] == 1:
            arr = arr[:, 0]
        if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
            raise InvalidMessage(f"discrete observations must be a 1-D integer array, got {arr.dtype} {arr.shape}")
        if arr.size and (arr.min() < 0 or arr.max() >= shape.dim):
            raise InvalidMessage(f"observation symbols must lie in 0..{shape.dim - 1}")
        return arr.astype(np.int64)
    if arr.ndim == 1 and arr.size == 0:
        return np.zeros((0, shape.dim))
    if arr.ndim != 2 or arr.dtype.kind not in "iuf":
        raise InvalidMessage(f"observations must be a T x d real matrix, got {arr.dtype} {arr.shape}")
    if arr.shape[1] != shape.dim:
        raise InvalidMessage(f"observations have {arr.shape[1]} features, Bob's models expect {shape.dim}")
    out = arr.astype(np.float64)
    if not np.all(np.isfinite(out)):
        raise InvalidMessage("observations contain NaN or infinite values")
    # a feature at or beyond the agreed bound is clipped inside it (a projection), not refused: a refusal answered a
    # proposer who moved feature_bits over sessions whether Alice's largest |feature| reached it, a bit a session.
    # Only she is told (her log); the session's error bounds hold for the clipped frames
    return clip_frames(out, params.feature_bits, warn_from=first)[0]


def clip_frames(X: np.ndarray, feature_bits: int, warn_from: int | None = None) -> tuple[np.ndarray, int]:
    """The frames the forward algorithm computes on: every real feature projected into the agreed box
    |x| < 2^feature_bits (clipped to the largest float64 inside it), and how many values moved (logged, as of
    the frames from ``warn_from``, when given: only the frames' holder is told).  Whatever Alice computes beside
    the forward algorithm on the same frames (the speaker protocols' UBM in the clear, the error bounds, a
    plaintext reference) must use these frames, not the raw ones."""
    inside = np.nextafter(2.0**feature_bits, 0.0)
    clipped = int(np.count_nonzero(np.abs(X) > inside))
    if clipped and warn_from is not None:
        log.warning(
            "%d feature value(s) of frames from %d reached the agreed bound 2^%d and were clipped inside it "
            "(propose a larger feature_bits for such frames)",
            clipped,
            warn_from,
            feature_bits,
        )
    return (np.clip(X, -inside, inside) if clipped else X), clipped


async def _as_chunks(X: Frames) -> AsyncIterator[FrameChunk]:
    """An array is one chunk; an async iterable yields its chunks."""
    if isinstance(X, AsyncIterable):
        async for chunk in X:
            yield chunk
    else:
        yield X


def _path_term(
    L: Mapping[int, int | None], vs: Sequence[Sequence[int | None]], base: int, path: tuple[int, ...], offset: int
) -> int | None:
    """Alice's term of one path (i_0, …, i_{ℓ−1}) → j of a round: L(i_0) + the masked emissions v of the states
    it passes inside the round + Bob's offset (−∞, None, if any of them is)."""
    y = L[base + path[0]]
    for r in range(1, len(path)):
        if y is None:
            return None
        w = vs[r - 1][base + path[r]]
        y = None if w is None else y + w
    return None if y is None else y + offset


class _Timeline:
    """Which frames exist, and per-frame values that arrive asynchronously (one party's view)."""

    def __init__(self) -> None:
        self.count = 0
        self.total: int | None = None
        self._exists: dict[int, asyncio.Future[bool]] = {}
        # per-frame values of several kinds (offsets, shares, ciphertext rows), told apart by their name
        self._values: dict[tuple[str, int], asyncio.Future[Any]] = {}
        self._error: BaseException | None = None

    def announce(self, n: int, final: bool) -> None:
        self.count += n
        if final:
            self.total = self.count
        for t, f in list(self._exists.items()):
            if not f.done() and (t < self.count or self.total is not None):
                f.set_result(t < self.count)
                del self._exists[t]

    async def exists(self, t: int) -> bool:
        if self._error is not None:
            raise self._error
        if t < self.count:
            return True
        if self.total is not None:
            return False
        f = self._exists.get(t)
        if f is None:
            f = self._exists[t] = asyncio.get_running_loop().create_future()
        return await f

    async def round_end_after(self, s: int, m: int) -> int | None:
        """The frame where the induction round starting at frame s ends: s + m, or the last frame if the
        sequence ends sooner (as :meth:`Plan.round_end` says); None when frame s is the last one."""
        if not await self.exists(s + 1):
            return None
        if await self.exists(s + m):
            return s + m
        assert self.total is not None  # exists() says a frame is missing only once the count is final
        return self.total - 1

    def _future(self, name: str, t: int) -> asyncio.Future[Any]:
        key = (name, t)
        f = self._values.get(key)
        if f is None:
            f = self._values[key] = asyncio.get_running_loop().create_future()
        return f

    def put(self, name: str, t: int, value: object) -> None:
        self._future(name, t).set_result(value)

    def forget(self, name: str, t: int) -> None:
        """Drop frame t's value ``name`` (arrived or awaited): no one will ask for it again."""
        self._values.pop((name, t), None)

    async def get(self, name: str, t: int, keep: bool = False) -> Any:
        if self._error is not None:
            raise self._error
        f = self._future(name, t)
        value = await f
        if not keep:
            self._values.pop((name, t), None)
        return value

    def fail(self, exc: BaseException) -> None:
        self._error = exc
        for f in list(self._exists.values()) + list(self._values.values()):
            if not f.done():
                f.set_exception(exc)
                f.exception()  # retrieved: the task that raised reports it


def _keyed(seed: SeedLike) -> Randomness:
    """The role's randomness root, keyed: the per-frame streams are drawn again on demand (offline, then
    online; and on a replay), so each must give the same values every time -- without a root (OS
    randomness) the role keys one fresh root from the OS for itself."""
    root = as_randomness(seed)
    return root if root.replayable else Randomness.fresh()


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


# =============================================================================== results
@dataclass
class AliceForward:
    """Alice's output of the secure forward algorithm: nothing but statistics."""

    frames: int
    n_models: int
    timings: dict[str, Any] = field(default_factory=dict)


@dataclass
class BobForward:
    """Bob's output: ``ξ(log P(x | λ_δ))`` for every δ (exponent ``-log_frac_bits``)."""

    log_likelihoods: EncryptedVector
    frames: int = 0
    timings: dict[str, Any] = field(default_factory=dict)


# =============================================================================== Alice
class ForwardAlice:
    """Role Alice, in two phases: :meth:`prepare` (offline: needs no observations) and :meth:`run`."""

    def __init__(
        self,
        ch: Channel,
        params: ForwardParams,
        *,
        private_key: PrivateKey,
        bob: str = "bob",
        tag: str = "fw",
        seed: SeedLike = None,
        labels: Sequence[str] = ("secure-forward",),
        obfuscators: ObfuscatorPool | None = None,
        known: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> None:
        """``obfuscators``: a pool of this key's obfuscators made before the session, while the party
        was idle (:mod:`smcdp.crypto.prepared`, docs/protocols/keyword.md); :meth:`prepare` tops it up to
        what the session needs.  ``known``: Alice's own part of every emission row, in nats, for a block's
        frames (n × d → n × rows, :func:`known_rows`), which she adds to Bob's masked rows before anything
        else uses them; Bob runs with the matching ``known`` models and leaves that part out of his rows."""
        self.ch, self.params, self.sk, self.bob, self.tag = ch, params.validate(), private_key, bob, tag
        self.known = known
        self.pk = private_key.public_key
        self.seed, self.labels = _keyed(seed), tuple(labels)
        self.urgent: CryptoThreads | None = None
        self.background: CryptoThreads | None = None
        if obfuscators is not None and obfuscators.pk != self.pk:
            raise ValueError("the obfuscators belong to another key")
        self.pool: ObfuscatorPool | None = obfuscators
        self.plan: Plan | None = None
        self.shape: Shape | None = None  # Bob's models' shape, from his header (prepare)
        self.offline: dict[str, float] = {}
        self.online: dict[str, Any] = {}  # seconds, and the obfuscator pool's counts (run)
        self.tl = _Timeline()
        self.expected = 0
        self._t0 = 0.0  # when run() began: the online phase's clock
        #: first frame s of an induction round -> how many groups have passed it (the last drops its frames)
        self._passed: dict[int, int] = {}

    def _rng(self, *purpose: str) -> random.Random:
        return protocol_rng(self.seed, *self.labels, self.ch.role, *purpose)

    def _prepared(self) -> tuple[Plan, Shape, ObfuscatorPool]:
        """The plan, Bob's shape and the obfuscators: :meth:`prepare` makes them before anything uses them."""
        assert self.plan is not None and self.shape is not None and self.pool is not None, "prepare() first"
        return self.plan, self.shape, self.pool

    # ----------------------------------------------------------------------------- offline
    async def prepare(self, expected_frames: int) -> Plan:
        """Header, tables, obfuscators for ``expected_frames`` frames, the crypto threads; then Bob's ``ready``."""
        w0, c0 = _clock()
        ch, tag, bob = self.ch, self.tag, self.bob
        self.shape = Shape.from_proto(await ch.recv(bob, f"{tag}/hdr", pb.Ints))
        beyond = self.shape.beyond(self.params)
        if beyond is not None:
            raise InvalidMessage(f"{tag}/hdr from {bob} describes models beyond the session's bounds: {beyond}")
        paths = self.shape.paths_beyond(self.params)
        if paths is not None:
            raise InvalidMessage(f"{tag}/hdr from {bob} describes models whose {paths}")
        if self.known is not None and self.shape.kind == "discrete":
            raise InvalidMessage(
                f"{tag}/hdr from {bob} describes discrete models; Alice's known part is of Gaussian ones"
            )
        if self.known is None and self.shape.covariance_type == "linear":
            raise InvalidMessage(
                f"{tag}/hdr from {bob} describes rows without squares ({self.shape.kind}), which only a known "
                "part's differences have; Alice holds none"
            )
        plan = self.plan = Plan(self.shape, self.params, self.pk)
        self.expected = expected = max(1, min(int(expected_frames), self.params.max_frames))
        await ch.send(bob, f"{tag}/plan", pb.Ints(values=[expected]))
        uses = self._obfuscators_needed(expected)
        w1 = time.perf_counter()
        await asyncio.to_thread(self.sk.prepare, uses)
        self.offline["tables"] = time.perf_counter() - w1
        w1 = time.perf_counter()
        made = 0
        if self.pool is None:
            self.pool = ObfuscatorPool.for_private_key(self.sk, capacity=uses, background=False)
        else:  # made before the session: only the rest now
            made = self.pool.stats()["stock"]
        # Every obfuscator of the session before `ready`: an online encryption is then one
        # multiplication.  Made behind the session instead, they took about a third of Alice's
        # online CPU from the frames' decryptions on the two cores (docs/benchmarks.md, the online profile);
        # a party that had the time made them while idle (the pool it was given).  An empty stock still
        # makes one where it is needed: slower, never wrong.
        rest = max(0, uses - made)
        await asyncio.to_thread(self.pool.precompute, rest, 2)
        self.offline["obfuscators"] = time.perf_counter() - w1
        self.offline["obfuscator_count"] = uses
        self.offline["obfuscators_made_before"] = min(made, uses)
        self.offline["obfuscators_before_ready"] = min(uses, made + rest)
        _open_threads(self)
        w1 = time.perf_counter()
        ready = await ch.recv(bob, f"{tag}/ready", pb.Ints)
        if list(ready.values) != [expected]:
            raise InvalidMessage(f"{tag}/ready from {bob} must confirm {expected} frames")
        self.offline["wait_for_peer"] = time.perf_counter() - w1
        self.offline["seconds"] = time.perf_counter() - w0
        self.offline["cpu_seconds"] = time.process_time() - c0
        return plan

    def _obfuscators_needed(self, frames: int) -> int:
        plan, shape = self.plan, self.shape
        assert plan is not None and shape is not None  # prepare() made them, then asks
        blocks = plan.n_blocks(frames)
        n = sum(sum(plan.group_terms[ell]) for ell in plan.rounds(frames)) + shape.n_models * (1 + shape.n_states)
        if plan.prod is not None:
            n += plan.prod.n_products * blocks
        n += plan.mix_inputs(frames)
        return n + 8

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
        _close_threads(self)

    # ----------------------------------------------------------------------------- online
    async def run(self, X: Frames) -> AliceForward:
        """The observations: an array (T × d features, or T symbols), or an async iterable of chunks of
        frames (streaming: blocks leave as soon as they are complete)."""
        if self.plan is None:
            raise RuntimeError("prepare() first")
        w0, c0 = _clock()
        self._t0 = w0
        try:
            results = await all_or_first_failure(
                self._emissions(X), *(self._induction(g) for g in range(len(self.plan.groups)))
            )
        except BaseException as exc:
            self.tl.fail(exc if isinstance(exc, Exception) else InvalidMessage("cancelled"))
            raise
        self.online["induction_done"] = time.perf_counter() - w0
        finals = {}
        for part in results[1:]:
            finals.update(part)
        await self._termination(finals)
        self.online["seconds"] = time.perf_counter() - w0
        self.online["cpu_seconds"] = time.process_time() - c0
        _, shape, pool = self._prepared()
        assert self.tl.total is not None  # the emissions sent the final block
        self.online["obfuscators"] = pool.stats()
        return AliceForward(
            frames=self.tl.total,
            n_models=shape.n_models,
            timings={"offline": dict(self.offline), "online": dict(self.online)},
        )

    def _mark(self, name: str) -> None:
        self.online.setdefault(name, time.perf_counter() - self._t0)

    # ------------------------------------------------------------------ step 1: emissions, block by block
    async def _emissions(self, X: Frames) -> None:
        plan, shape, _ = self._prepared()
        B = plan.block
        buf: list[np.ndarray] = []
        held = 0
        b = 0
        consumers = []
        # each block is made once the one before it has left: a whole utterance's blocks would otherwise be
        # encrypted one after the other before the event loop sends the first one, which the first round needs
        sent: asyncio.Event | None = None
        try:
            async for chunk in _as_chunks(X):
                frames = _check_frames(shape, chunk, self.params, self.tl.count + held)
                if len(frames):
                    buf.append(frames)
                    held += len(frames)
                # a full block leaves once a later frame shows it is not the last one
                while held > B:
                    allf = np.concatenate(buf)
                    after, sent = sent, asyncio.Event()
                    consumers.append(asyncio.ensure_future(self._block(b, allf[:B], False, after, sent)))
                    buf, held, b = [allf[B:]], held - B, b + 1
            if held == 0 and self.tl.count == 0:
                raise InvalidMessage("the observation sequence is empty")
            self._check_frame_count(self.tl.count + held)
            consumers.append(
                asyncio.ensure_future(self._block(b, np.concatenate(buf) if buf else buf, True, sent, asyncio.Event()))
            )
            self.online["audio_done"] = time.perf_counter() - self._t0
            await all_or_first_failure(*consumers)
        except BaseException:
            for c in consumers:
                c.cancel()
            raise
        self._mark("emissions_done")

    async def _block(
        self, b: int, frames: _BlockFrames, final: bool, after: asyncio.Event | None, sent: asyncio.Event
    ) -> None:
        """Send block b (its frames' count, then the products or the OT choices) and take its emissions.
        It begins once the block before it has set ``after`` (its messages are sent; block 0's also
        acknowledged), and sets ``sent`` when its own are sent."""
        if after is not None:
            await after.wait()
            if b == 1:
                # the first block's messages reach Bob before the later blocks' encryptions take the event loop
                # (it writes them to the stream): those are needed rounds later, the first one now
                await self.ch.flush()
        ch, tag, bob = self.ch, self.tag, self.bob
        plan, shape, pool = self._prepared()
        n = len(frames)
        first = self.tl.count
        self._check_frame_count(first + n)
        self.tl.announce(n, final)
        await ch.send(bob, f"{tag}/blk/{b}", pb.Ints(values=[n, int(final)]))
        if final:
            self.online["last_block_sent"] = time.perf_counter() - self._t0
        if plan.prod is not None:
            lay = plan.prod
            S = lay.frames_per_ciphertext
            Z = products(frames, shape.covariance_type)  # (n, P)
            ints = [[encode_float(float(x), lay.prod_frac_bits) for x in row] for row in Z.T]
            flat = [x for row in ints for x in (row + [0] * (S - n))]
            plain = lay.packing.pack(flat) if lay.packing.packed else flat
            cts = pool.encrypt_many(plain)
            await ch.send(
                bob,
                f"{tag}/prod/{b}",
                EncryptedVector(
                    self.pk, cts, lay.n_products * S, -lay.prod_frac_bits, lay.packing, lay.product_bound(self.params)
                ).to_proto(),
            )
        sent.set()
        offsets = await self._recv_offsets(b, first, n)
        for k in range(n):
            self.tl.put("c", first + k, offsets[k])
        v: Sequence[Sequence[int | None]]
        if plan.prod is None:
            v = await self._discrete_block(b, frames)
        else:
            q = await self._gaussian_block(b, n)
            if self.known is not None:
                q = self._add_known(frames, q)
            v = await self._mixture_block(b, first, q, offsets) if plan.mixture else q
        for k in range(n):
            self.tl.put("v", first + k, v[k])
        if final:
            self._mark("last_emission")

    def _add_known(self, frames: _BlockFrames, q: list[list[int]]) -> list[list[int]]:
        """Alice's own part of block b's rows (``known``), on the grid 2^−F, added to Bob's masked rows."""
        _, shape, _ = self._prepared()
        assert self.known is not None  # the caller checked
        K = np.asarray(self.known(np.asarray(frames, dtype=np.float64)), dtype=np.float64)
        if K.shape != (len(q), shape.rows):
            raise InvalidMessage(
                f"{self.tag}/hdr from {self.bob} describes {shape.rows} emission rows; Alice's known part of "
                f"the models has {K.shape[-1] if K.ndim == 2 else K.shape} (the session's models differ)"
            )
        if not np.all(np.isfinite(K)) or np.any(np.abs(K) >= float(SCORE_BOUND_NATS)):
            raise InputRejected("Alice's known part of the emissions must be finite and below 2^41 nats", "")
        grid = np.rint(K * float(1 << self.params.log_frac_bits)).tolist()  # exact: a power-of-two scaling
        return [[a + int(k) for a, k in zip(row, krow)] for row, krow in zip(q, grid)]

    def _check_frame_count(self, frames: int) -> None:
        if frames > self.params.max_frames:
            raise InputRejected(
                f"the observations have more frames than the session's max_frames ({self.params.max_frames})",
                f"{frames} frames or more",
            )

    async def _recv_offsets(self, b: int, first: int, n: int) -> list[list[int]]:
        plan, _, _ = self._prepared()
        counts = [plan.offsets_in_frame(first + k, self.tl.total) for k in range(n)]
        vals = from_bigints(
            await self.ch.recv(self.bob, f"{self.tag}/c/{b}", pb.BigInts),
            count=sum(counts),
            bound_bits=plan.offset_bits,
            what=f"{self.tag}/c/{b} from {self.bob}",
        )
        out, pos = [], 0
        for c in counts:
            out.append(vals[pos : pos + c])
            pos += c
        return out

    async def _gaussian_block(self, b: int, n: int) -> list[list[int]]:
        """Decrypt Bob's masked quadratic forms of block b; round to the grid (exact in Bob's masks)."""
        plan, shape, _ = self._prepared()
        lay = plan.prod
        assert lay is not None  # Gaussian emissions: the plan has the products' layout
        S, R = lay.frames_per_ciphertext, shape.rows
        msg = await self.ch.recv(self.bob, f"{self.tag}/q/{b}", pb.CiphertextVector)
        vec = EncryptedVector.from_proto(
            msg,
            self.pk,
            length=R * S,
            exponent=-lay.v_frac_bits,
            packing=lay.packing,
            what=f"{self.tag}/q/{b} from {self.bob}",
        )
        plain = await _threads_for(self, b).adecrypt_signed(self.sk, vec.ciphertexts)
        vals = lay.packing.unpack(plain, R * S) if lay.packing.packed else plain
        sh = lay.shift
        half = (1 << sh) >> 1
        return [[(vals[r * S + k] + half) >> sh for r in range(R)] for k in range(n)]

    async def _discrete_block(self, b: int, symbols: _BlockFrames) -> list[list[int | None]]:
        plan, shape, _ = self._prepared()
        rows = await ot_choose(
            self.ch,
            self.bob,
            [int(x) for x in symbols],
            max(2, shape.dim),
            tag_prefix=f"{self.tag}/ot/{b}",
            rng=self._rng("ot", str(b)),
        )
        width = OT_VALUE_BYTES * shape.n_values
        lim = 1 << plan.emission_bits
        out: list[list[int | None]] = []
        for t, row in enumerate(rows):
            if len(row) != width:
                raise InvalidMessage(f"OT row {t} of block {b} from {self.bob} has {len(row)} bytes, expected {width}")
            vals: list[int | None] = []
            for i in range(shape.n_values):
                x = int.from_bytes(row[i * OT_VALUE_BYTES : (i + 1) * OT_VALUE_BYTES], "little", signed=True)
                if x == OT_ZERO:
                    vals.append(None)
                elif abs(x) >= lim:
                    raise InvalidMessage(
                        f"OT row {t} of block {b} from {self.bob} holds a value beyond 2^{plan.emission_bits}"
                    )
                else:
                    vals.append(x)
            out.append(vals)
        return out

    async def _mixture_block(self, b: int, first: int, q: list[list[int]], offsets: list[list[int]]) -> list[list[int]]:
        """LOGSUM over the components of every (state, frame) of block b (steps E, W, L); v per state."""
        plan, shape, _ = self._prepared()
        N, C = shape.n_states, shape.n_mix
        lay = plan.mix
        n = len(q)
        v = [[0] * shape.n_values for _ in range(n)]
        es_all: list[list[int]] = []
        ms: list[int] = []
        for k in range(n):
            pos = plan.induction_offsets(first + k, self.tl.total)
            for d in range(shape.n_models):
                for j in range(N):
                    comps = plan.comps[d][j]
                    ys = [q[k][(d * N + j) * C + c] + offsets[k][pos + i] for i, c in enumerate(comps)]
                    pos += len(comps)
                    if len(comps) == 1:
                        v[k][d * N + j] = ys[0]
                        continue
                    assert lay is not None  # a sum of >= 2 components: the plan made its layout (Plan.mix)
                    es, m = ls.exponentiate_terms(ys, lay)  # (E)
                    assert m is not None  # the components' terms are finite: their largest is m
                    ms.append(m)
                    es_all.append(es)
        if es_all:
            assert lay is not None  # sums above
            sums = await self._mixture_sums(b, es_all, lay)
            it = iter(zip(sums, ms))
            for k in range(n):
                for d, j in plan.mix_sums:
                    u_s, m = next(it)
                    v[k][d * N + j] = ls.logarithm(u_s, m, lay)  # (L)
        return v

    async def _mixture_sums(self, b: int, es: list[list[int]], lay: ls.LogsumLayout) -> list[int]:
        """(E) and (W) of block b's component sums: Alice's exponentiated terms ``es`` (per sum) out, encrypted
        one per term pre-shifted into its sum's slot (packed layout) or S per ciphertext (spread); Bob's
        weighted sums back, decrypted: u per sum."""
        plan = self._prepared()[0]
        s = len(es)
        if plan.mix_spread:
            plain = ls.spread_terms(es, lay)
        else:
            plain = [x << lay.shift(i) for i, e in enumerate(es) for x in e]
        packing = UNPACKED if plan.mix_spread else lay.packing
        vals = await self._weighted_sums(f"mix-e/{b}", f"mix-u/{b}", plain, s, packing, _threads_for(self, b))
        return ls.unspread_sums(vals, lay) if plan.mix_spread else ls.unpack_sums(vals, s, lay)

    async def _weighted_sums(
        self, out: str, back: str, terms: list[int], count: int, packing: Packing, threads: CryptoThreads
    ) -> list[int]:
        """One LOGSUM exchange, steps (E) and (W): Alice's exponentiated ``terms`` to Bob, one to a ciphertext,
        under ``{tag}/{out}``; his ``count`` weighted sums (in ``packing``) back under ``{tag}/{back}``,
        decrypted on ``threads``."""
        _, _, pool = self._prepared()
        await self.ch.send(
            self.bob,
            f"{self.tag}/{out}",
            EncryptedVector(
                self.pk, pool.encrypt_many(terms), len(terms), 0, UNPACKED, int(self.pk.max_int)
            ).to_proto(),
        )
        u = EncryptedVector.from_proto(
            await self.ch.recv(self.bob, f"{self.tag}/{back}", pb.CiphertextVector),
            self.pk,
            length=count,
            exponent=0,
            packing=packing,
            what=f"{self.tag}/{back} from {self.bob}",
        )
        return await threads.adecrypt_signed(self.sk, u.ciphertexts)

    # ------------------------------------------------------------------ steps 2–3: start and induction
    async def _induction(self, g: int) -> dict[int, int | None]:
        ch = self.ch
        plan = self._prepared()[0]
        N = plan.N
        models = plan.groups[g]
        lay = plan.ind
        c0 = await self.tl.get("c", 0, keep=True)
        v0 = await self.tl.get("v", 0, keep=True)
        if g == 0:
            self._mark("first_frame")
        L: dict[int, int | None] = {}
        for d in models:
            for j in range(N):
                i = d * N + j
                L[i] = None
                if j in plan.starts[d] and v0[i] is not None:  # step 5: L_0 = c⁰ + v_0
                    L[i] = c0[plan.start_index[(d, j)]] + v0[i]
        s = 0
        while (e := await self.tl.round_end_after(s, plan.m)) is not None:  # a round s → e of ℓ steps
            ell = e - s
            ch.progress(round=e, step="induction")
            c = await self.tl.get("c", e, keep=True)
            vs = [await self.tl.get("v", s + r, keep=True) for r in range(1, ell + 1)]
            sums = plan.group_sums[ell][g]
            new: dict[int, int | None] = {}
            e_ints: list[int] = []
            ms: list[int | None] = []
            for d in models:
                for j in range(N):
                    pos = plan.path_index[ell][(d, j)]
                    paths = plan.paths[ell][d][j]
                    ys = [_path_term(L, vs, d * N, p, c[pos + k]) for k, p in enumerate(paths)]
                    if len(paths) <= 1:  # no path (−∞) or one: no LOGSUM
                        new[d * N + j] = ys[0] if paths else None
                        continue
                    assert lay is not None  # a sum of >= 2 paths: the plan made its layout (Plan.ind)
                    es, m = ls.exponentiate_terms(ys, lay)  # (E), seed step 6
                    k = len(ms)
                    ms.append(m)
                    e_ints.extend(x << lay.shift(k) for x in es)
            if sums:
                assert lay is not None and self.urgent is not None  # sums above; threads opened by prepare()
                vals = await self._weighted_sums(
                    f"e/{s}/{g}", f"u/{s}/{g}", e_ints, len(sums), lay.packing, self.urgent
                )
                totals = ls.unpack_sums(vals, len(sums), lay)
                for (d, j), u_s, m in zip(sums, totals, ms):  # (L), seed step 7
                    new[d * N + j] = None if m is None else ls.logarithm(u_s, m, lay)
            v = vs[-1]
            for i, x in new.items():
                L[i] = None if (x is None or v[i] is None) else x + v[i]
            self._release(s, e)
            s = e
        if s == 0:  # one frame: no round
            self._release(0, 0)
        return L

    def _release(self, s: int, e: int) -> None:
        """Frames s..e's values are no longer needed by one more group (the last group to pass drops them)."""
        done = self._passed
        done[s] = done.get(s, 0) + 1
        if done[s] == len(self._prepared()[0].groups):
            del done[s]
            for t in range(s, e + 1):
                self.tl.forget("c", t)
                self.tl.forget("v", t)

    # ------------------------------------------------------------------ step 4: termination
    async def _termination(self, L: dict[int, int | None]) -> None:
        ch, tag, bob = self.ch, self.tag, self.bob
        plan, _, pool = self._prepared()
        D, N, F = plan.D, plan.N, plan.F
        c = from_bigints(
            await ch.recv(bob, f"{tag}/fin-c", pb.BigInts),
            count=D * N,
            bound_bits=plan.offset_bits,
            what=f"{tag}/fin-c from {bob}",
        )
        ys = [[None if (l_dj := L[d * N + j]) is None else l_dj + c[d * N + j] for j in range(N)] for d in range(D)]
        lay = plan.fin
        if lay is None:
            scores = [y[0] for y in ys]
        else:
            e_ints: list[int] = []
            ms: list[int | None] = []
            for d in range(D):
                es, m = ls.exponentiate_terms(ys[d], lay)  # (E)
                ms.append(m)
                e_ints.extend(x << lay.shift(d) for x in es)
            assert self.urgent is not None  # opened by prepare()
            totals = ls.unpack_sums(
                await self._weighted_sums("fin-e", "fin-u", e_ints, D, lay.packing, self.urgent), D, lay
            )
            scores = [None if m is None else ls.logarithm(u_d, m, lay) for u_d, m in zip(totals, ms)]  # (L)
        if all(s is None for s in scores):
            raise InvalidMessage("the observations are impossible under every model")
        lim = SCORE_BOUND_NATS << F
        if any(s is not None and abs(s) >= lim for s in scores):
            raise InvalidMessage("a log-likelihood lies beyond ±2^40 nats: the observations are out of range")
        zero = encode_float(LOG_ZERO, F)
        ints = [zero if s is None else s for s in scores]
        await ch.send(
            bob,
            f"{tag}/fin-l",
            EncryptedVector(self.pk, pool.encrypt_many(ints), D, -F, UNPACKED, final_bound(plan)).to_proto(),
        )
        self._mark("termination_done")


def final_bound(plan: Plan) -> int:
    """|ξ| Alice's final values can reach: LOG_ZERO − 2^41 … (on the grid)."""
    return (1 << 43) << plan.F


# =============================================================================== Bob
def _layout(layout: ls.LogsumLayout | None) -> ls.LogsumLayout:
    """The plan's layout of one kind of LOGSUM (:attr:`Plan.ind`, ``fin``, ``mix``), asked for where such a sum
    exists: the plan makes it whenever one does (None only when there is none)."""
    assert layout is not None, "a LOGSUM without its layout"
    return layout


class _BobMasks:
    """Bob's masks, one labelled stream per frame and purpose (replayable, thread-order independent)."""

    def __init__(self, plan: Plan, rng_of: Callable[..., random.Random]) -> None:
        self.plan = plan
        self.rng_of = rng_of
        self._emission: dict[int, list[int]] = {}
        self._mix: dict[int, tuple[list[int], list[list[int]], list[int], list[list[int]]]] = {}
        self._step: dict[
            tuple[int, int], tuple[list[int], list[list[int]], list[list[int]], list[list[list[int]]]]
        ] = {}
        self._start: list[int] | None = None

    def emission_low(self, t: int, shift: int) -> list[int]:
        """Per emission row, the sub-grid part u of frame t's mask, uniform on [−2^(shift−1), 2^(shift−1)): Alice
        decrypts q + V·2^shift + u before she rounds by ``shift`` bits, so without u she read every quadratic
        form mod 2^shift exactly -- Bob's coefficients' low bits, from a few frames (a review: 48 of 48 recovered;
        the dummies of identification showed as exact copies).  Rounding q + u costs her at most one grid step
        instead of half of one."""
        return ls.uniform_ints(self.rng_of("emission-low", str(t)), self.plan.shape.rows, (1 << shift) >> 1)

    def emission(self, t: int) -> list[int]:
        """V_t per emission row (model, state[, component]), uniform on ±ψ_V."""
        if t not in self._emission:
            rows = self.plan.shape.rows
            self._emission[t] = ls.uniform_ints(
                self.rng_of("emission", str(t)), rows, self.plan.params.emission_offset_int
            )
        return self._emission[t]

    def mixture(self, t: int) -> tuple[list[int], list[list[int]], list[int], list[list[int]]]:
        """(ω per state, σ per state's components, ν per LOGSUM, k per LOGSUM) of frame t's mixtures."""
        if t not in self._mix:
            plan = self.plan
            rng = self.rng_of("mixture", str(t))
            omega = ls.uniform_ints(rng, plan.shape.n_values, plan.params.emission_offset_int)
            sigma = [
                ls.uniform_ints(rng, len(plan.comps[d][j]), plan.K) if len(plan.comps[d][j]) >= 2 else [0]
                for d in range(plan.D)
                for j in range(plan.N)
            ]
            nu = ls.smudging(rng, plan.mix, len(plan.mix_sums)) if plan.mix else []
            k = [ls.term_weights(sigma[d * plan.N + j], _layout(plan.mix)) for d, j in plan.mix_sums]
            self._mix[t] = (omega, sigma, nu, k)
        return self._mix[t]

    def state_mask(self, t: int) -> list[int]:
        """V_t per state: the mask of Alice's v_{t,·}."""
        plan = self.plan
        if not plan.mixture:
            return self.emission(t)
        omega = self.mixture(t)[0]
        return [
            omega[d * plan.N + j] - (plan.K if len(plan.comps[d][j]) >= 2 else 0)
            for d in range(plan.D)
            for j in range(plan.N)
        ]

    def start(self) -> list[int]:
        if self._start is None:
            self._start = ls.uniform_ints(self.rng_of("start"), self.plan.shape.n_values, self.plan.mp.offset_int)
        return self._start

    def step(self, t: int, ell: int) -> tuple[list[int], list[list[int]], list[list[int]], list[list[list[int]]]]:
        """The round t → t+ℓ: (ω per state, σ per state's paths, ν per group's sums, k per group's sums).
        A full round's stream is labelled by its first frame (with m = 1, each step's as before); a shorter
        last round's by its length too."""
        if (t, ell) not in self._step:
            plan = self.plan
            rng = self.rng_of("induction", str(t), *(() if ell == plan.m else (f"steps-{ell}",)))
            omega = ls.uniform_ints(rng, plan.shape.n_values, plan.mp.offset_int)
            sigma = [
                ls.uniform_ints(rng, len(plan.paths[ell][d][j]), plan.K) if plan.he_state(d, j, ell) else [0]
                for d in range(plan.D)
                for j in range(plan.N)
            ]
            nu = [ls.smudging(rng, _layout(plan.ind), len(s)) if s else [] for s in plan.group_sums[ell]]
            k = [
                [ls.term_weights(sigma[d * plan.N + j], _layout(plan.ind)) for d, j in s] for s in plan.group_sums[ell]
            ]
            self._step[(t, ell)] = (omega, sigma, nu, k)
        return self._step[(t, ell)]

    def M(self, t: int) -> list[int]:
        """Bob's mask of Alice's L_t at a round's end (or t = 0): M_0 = ω⁰ + V_0, M_t = ω_s − K·[LOGSUM] + V_t
        for the round s → t."""
        plan = self.plan
        V = self.state_mask(t)
        if t == 0:
            return [w + v for w, v in zip(self.start(), V)]
        ell = plan.round_length(t)
        omega = self.step(t - ell, ell)[0]
        return [
            omega[d * plan.N + j] - (plan.K if plan.he_state(d, j, ell) else 0) + V[d * plan.N + j]
            for d in range(plan.D)
            for j in range(plan.N)
        ]

    def final(self) -> tuple[list[int], list[list[int]], list[int], list[list[int]]]:
        plan = self.plan
        rng = self.rng_of("final")
        omega = ls.uniform_ints(rng, plan.D, plan.mp.offset_int)
        if plan.fin is None:
            return omega, [[0] for _ in range(plan.D)], [], []
        sigma = [ls.uniform_ints(rng, plan.N, plan.K) for _ in range(plan.D)]
        return omega, sigma, ls.smudging(rng, plan.fin, plan.D), [ls.term_weights(s, plan.fin) for s in sigma]

    def forget(self, t: int) -> None:
        """Frame t's emission masks and step t−1 are no longer needed."""
        self._emission.pop(t, None)
        self._mix.pop(t, None)

    def forget_steps_before(self, s: int) -> None:
        """The masks of every induction round that starts before frame s are no longer needed."""
        for key in [k for k in self._step if k[0] < s]:
            del self._step[key]


class ForwardBob:
    """Role Bob, in two phases: :meth:`prepare` (offline) and :meth:`run`."""

    def __init__(
        self,
        ch: Channel,
        models: KeywordModels,
        params: ForwardParams,
        *,
        public_key: PublicKey,
        alice: str = "alice",
        tag: str = "fw",
        seed: SeedLike = None,
        labels: Sequence[str] = ("secure-forward",),
        known: KeywordModels | None = None,
    ) -> None:
        """``known``: models of the same shape whose emission rows Alice holds and adds herself
        (:class:`ForwardAlice`'s ``known``, :func:`known_rows`): Bob's rows are then ``models`` minus
        ``known``, and what Bob obtains is still ξ(log P(x | λ_δ)) of ``models``.  The mixture and
        transition weights stay Bob's (``models``')."""
        self.ch, self.models, self.params, self.pk = ch, models, params.validate(), public_key
        self.alice, self.tag = alice, tag
        self.seed, self.labels = _keyed(seed), tuple(labels)
        # refused up front: nothing is sent for a model the protocol cannot represent
        if models.kind == "discrete":
            if known is not None:
                raise ValueError("a known part needs Gaussian emissions")
            self.coefs, bits = None, 0
            linear = False
        else:
            self.coefs, bits = model_coefficients(models, self.params, known)
            self.coefs, linear = _without_squares(self.coefs, models, known)
            check_score_range(models, self.params)
        self.shape = Shape.of_models(models, bits, linear)
        beyond = self.shape.beyond(self.params)
        if beyond is not None:  # the session's byte envelope follows from the bounds
            raise InputRejected("the models are larger than the session's public bounds allow", beyond)
        paths = self.shape.paths_beyond(self.params)
        if paths is not None:
            raise InputRejected("the models' transitions have too many paths for the session's frames_per_round", paths)
        self.plan = Plan(self.shape, self.params, public_key)
        self.masks = _BobMasks(self.plan, self._rng)
        self._path_log_cache: dict[int, list[list[int]]] = {}
        #: (frame, whether a round ends there) -> its offsets, made by prepare() for the frames Alice announced
        self._offsets_ahead: dict[tuple[int, bool], list[int]] = {}
        self.pool: ObfuscatorPool | None = None
        self.offline: dict[str, float] = {}
        self.online: dict[str, Any] = {}  # seconds, and the obfuscator pool's counts (run)
        self.tl = _Timeline()
        self._steps_done: dict[int, int] = {}
        self.urgent: CryptoThreads | None = None
        self.background: CryptoThreads | None = None
        self._t0 = 0.0  # when run() began: the online phase's clock
        # one emission block's rows at a time, in the order the blocks came (each takes every core): the
        # induction needs block b before block b + 1, so two blocks sharing the cores would both come late
        self._rows_turn = asyncio.Lock()
        # made once, on first use: the continuous models' coefficients on the fixed-point grid (coef_frac_bits)
        self._cints: list[list[int]] | None = None
        self._row_plan: RowPlan | None = None
        # fx(log p) of every positive start (d, j), transition (d, l, j) and mixture weight (d, j, c)
        # probability (their pattern is public), made with the first offsets
        self._log_pi: dict[tuple[int, int], int] | None = None
        self._log_a: dict[tuple[int, int, int], int] | None = None
        self._log_w: dict[tuple[int, int, int], int] | None = None
        # discrete models: fx(log b) per (model, state) row and symbol, None where b = 0
        self._log_b: list[list[int | None]] | None = None

    def _rng(self, *purpose: str) -> random.Random:
        return protocol_rng(self.seed, *self.labels, self.ch.role, *purpose)

    async def prepare(self) -> None:
        """Header, Alice's key's table, masks, the session's obfuscators, the crypto threads; ``ready``.

        The table is built on a thread while the masks are drawn here (the native table loop releases the
        GIL); then exactly the obfuscators the session needs, on two threads, while Alice makes hers (she
        takes longer: Bob waits for her ``plan`` and ``ready`` anyway), so that every re-randomisation
        online is one multiplication (an empty stock makes one where it is needed)."""
        w0, c0 = _clock()
        ch, tag, alice, plan = self.ch, self.tag, self.alice, self.plan
        await ch.send(alice, f"{tag}/hdr", self.shape.to_proto())
        msg = await ch.recv(alice, f"{tag}/plan", pb.Ints)
        if len(msg.values) != 1 or not 1 <= msg.values[0] <= self.params.max_frames:
            raise InvalidMessage(
                f"{tag}/plan from {alice} must be one frame count in [1, {self.params.max_frames}] (max_frames)"
            )
        expected = int(msg.values[0])
        uses = self._obfuscators_needed(expected)
        self.pool = ObfuscatorPool.for_public_key(self.pk, capacity=uses, background=False)
        table = asyncio.ensure_future(asyncio.to_thread(self.pk.prepare, uses))  # while the masks are drawn
        w1 = time.perf_counter()
        for t in range(expected):  # masks, offsets' ingredients and weights: no observation needed
            self.masks.state_mask(t)  # (and the mixtures' masks): every frame's, inner frames' too
            if plan.round_end(t, expected) or t == 0:
                self.masks.M(t)  # and the round's step
        self.masks.final()
        self.offline["masks"] = time.perf_counter() - w1
        # the offsets too (Bob's models and masks only): online, a block's leave at once instead of taking the
        # event loop -- and the cores -- from the first block's rows, which the first round waits for
        w1 = time.perf_counter()
        for t in range(expected):
            ends = plan.round_end(t, expected)
            self._offsets_ahead[(t, ends)] = self._frame_offsets(t, ends)
            if t % 16 == 15:
                await asyncio.sleep(0)  # the channel's own work (heartbeats) meanwhile
        self.offline["offsets"] = time.perf_counter() - w1
        self._coef_ints()
        w1 = time.perf_counter()
        await table
        await asyncio.to_thread(self.pool.precompute, uses, 2)
        self.offline["tables_and_obfuscators"] = time.perf_counter() - w1
        self.offline["obfuscator_count"] = uses
        self.offline["obfuscators_before_ready"] = uses
        _open_threads(self)
        await ch.send(alice, f"{tag}/ready", pb.Ints(values=[expected]))
        self.offline["seconds"] = time.perf_counter() - w0
        self.offline["cpu_seconds"] = time.process_time() - c0

    def _obfuscators_needed(self, frames: int) -> int:
        plan = self.plan
        blocks = plan.n_blocks(frames)
        n = (
            sum(plan.ind.n_ciphertexts(len(s)) for ell in plan.rounds(frames) for s in plan.group_sums[ell])
            if plan.ind
            else 0
        )
        n += plan.fin.n_ciphertexts(plan.D) if plan.fin else 0
        if plan.prod is not None:
            n += self.shape.rows * blocks
        n += plan.mix_outputs(plan.block) * blocks
        return n + 2 * plan.D + 8  # + the keyword step's ranked and debug vectors

    def _coef_ints(self) -> None:
        if self.coefs is not None and self._cints is None:
            fc = self.params.coef_frac_bits
            self._cints = [[encode_float(float(c), fc) for c in row] for row in self.coefs]
            self._row_plan = RowPlan.for_rows(self._cints)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
        _close_threads(self)

    async def run(self) -> BobForward:
        w0, c0 = _clock()
        self._t0 = w0
        self._coef_ints()
        try:
            await all_or_first_failure(self._blocks(), *(self._induction(g) for g in range(len(self.plan.groups))))
        except BaseException as exc:
            self.tl.fail(exc if isinstance(exc, Exception) else InvalidMessage("cancelled"))
            raise
        self.online["induction_done"] = time.perf_counter() - w0
        result = await self._termination()
        self.online["seconds"] = time.perf_counter() - w0
        self.online["cpu_seconds"] = time.process_time() - c0
        assert self.pool is not None and self.tl.total is not None  # made by prepare(); the final block came
        self.online["obfuscators"] = self.pool.stats()
        return BobForward(result, self.tl.total, {"offline": dict(self.offline), "online": dict(self.online)})

    # ------------------------------------------------------------------ step 1: emissions
    async def _blocks(self) -> None:
        ch, tag, alice, plan = self.ch, self.tag, self.alice, self.plan
        tasks = []
        b = 0
        try:
            while True:
                msg = await ch.recv(alice, f"{tag}/blk/{b}", pb.Ints)
                if len(msg.values) != 2 or msg.values[1] not in (0, 1):
                    raise InvalidMessage(f"{tag}/blk/{b} from {alice} must be [frames, final]")
                n, final = int(msg.values[0]), bool(msg.values[1])
                if not 1 <= n <= plan.block or (not final and n != plan.block):
                    raise InvalidMessage(
                        f"{tag}/blk/{b} from {alice}: {n} frames; blocks hold {plan.block} (the last one 1 or more)"
                    )
                first = self.tl.count
                if first + n > self.params.max_frames:
                    raise InvalidMessage(
                        f"{alice} sent more than the session's max_frames = {self.params.max_frames} frames"
                    )
                # the offsets of these frames depend on Bob's masks only: they leave at once
                await ch.send(alice, f"{tag}/c/{b}", bigints(self._offsets(first, n, first + n if final else None)))
                self.tl.announce(n, final)
                if b == 0:
                    self.online["first_block"] = time.perf_counter() - self._t0
                tasks.append(asyncio.ensure_future(self._block(b, first, n)))
                if final:
                    break
                b += 1
            await all_or_first_failure(*tasks)
        except BaseException:
            for t in tasks:
                t.cancel()
            raise
        self.online["emissions_done"] = time.perf_counter() - self._t0

    def _path_logs(self, ell: int) -> list[list[int]]:
        """Per state, Σ fx(log a) along each of its paths of ℓ steps (the same in every round)."""
        cache = self._path_log_cache
        if ell not in cache:
            plan, N = self.plan, self.plan.N
            log_a = self._log_a
            assert log_a is not None  # made by _offsets (the caller) before it asks
            cache[ell] = [
                [sum(log_a[(d, a, b)] for a, b in zip(p, p[1:] + (j,))) for p in plan.paths[ell][d][j]]
                for d in range(plan.D)
                for j in range(N)
            ]
        return cache[ell]

    def _offsets(self, first: int, n: int, total: int | None) -> list[int]:
        """Public offsets of frames first..first+n−1 (start, or the paths of a round ending there; then mixture
        terms); ``total``: the frame count, when these are the last frames.  Frames whose offsets
        :meth:`prepare` made ahead are taken from there."""
        out: list[int] = []
        for t in range(first, first + n):
            ends = self.plan.round_end(t, total)
            made = self._offsets_ahead.pop((t, ends), None)
            out.extend(made if made is not None else self._frame_offsets(t, ends))
        return out

    def _frame_offsets(self, t: int, ends: bool) -> list[int]:
        """Frame t's public offsets: the start's (t = 0) or the paths' of the round that ends at t (``ends``),
        then its mixture terms'.  They depend on Bob's models and masks only."""
        plan, masks = self.plan, self.masks
        D, N, F = plan.D, plan.N, plan.F
        models = self.models
        if self._log_pi is None:  # fx(log p) of every positive probability (pattern: public)
            self._log_pi = {
                (d, j): ls.fx(math.log(models.startprob[d, j]), F) for d in range(D) for j in plan.starts[d]
            }
            self._log_a = {
                (d, l, j): ls.fx(math.log(models.transmat[d, l, j]), F)
                for d in range(D)
                for j in range(N)
                for l in plan.preds[d][j]
            }
            if plan.mixture:
                assert models.weights is not None  # mixture models carry their weights (KeywordModels)
                self._log_w = {
                    (d, j, c): ls.fx(math.log(models.weights[d, j, c]), F)
                    for d in range(D)
                    for j in range(N)
                    for c in plan.comps[d][j]
                }
        out: list[int] = []
        if t == 0:  # step 5
            w0 = masks.start()
            out.extend(self._log_pi[(d, j)] + w0[d * N + j] for d in range(D) for j in plan.starts[d])
        elif ends:  # step 6, (E): paths into frame t
            ell = plan.round_length(t)
            Ms = masks.M(t - ell)
            Vs = [masks.state_mask(t - ell + r) for r in range(1, ell)]  # the frames inside the round
            omega, sigma, _, _ = masks.step(t - ell, ell)
            logs = self._path_logs(ell)
            for d in range(D):
                for j in range(N):
                    paths = plan.paths[ell][d][j]
                    mask = [Ms[d * N + p[0]] + sum(V[d * N + i] for V, i in zip(Vs, p[1:])) for p in paths]
                    out.extend(
                        ls.term_offsets(
                            logs[d * N + j], mask, omega[d * N + j], sigma[d * N + j] if len(paths) >= 2 else [0]
                        )
                    )
        if plan.mixture:  # (E) of the component LOGSUMs
            V = masks.emission(t)
            omega, sigma, _, _ = masks.mixture(t)
            C = plan.shape.n_mix
            log_w = self._log_w
            assert log_w is not None  # made above with the first offsets, for mixtures
            for d in range(D):
                for j in range(N):
                    comps = plan.comps[d][j]
                    out.extend(
                        ls.term_offsets(
                            [log_w[(d, j, c)] for c in comps],
                            [V[(d * N + j) * C + c] for c in comps],
                            omega[d * N + j],
                            sigma[d * N + j] if len(comps) >= 2 else [0],
                        )
                    )
        return out

    async def _block(self, b: int, first: int, n: int) -> None:
        ch, tag, alice, plan = self.ch, self.tag, self.alice, self.plan
        if plan.prod is None:
            await self._discrete_block(b, first, n)
            return
        lay = plan.prod
        S = lay.frames_per_ciphertext
        msg = await ch.recv(alice, f"{tag}/prod/{b}", pb.CiphertextVector)
        vec = EncryptedVector.from_proto(
            msg,
            self.pk,
            length=lay.n_products * S,
            exponent=-lay.prod_frac_bits,
            packing=lay.packing,
            bound=lay.product_bound(self.params),
            what=f"{tag}/prod/{b} from {alice}",
        )
        R = self.shape.rows
        masks = [self.masks.emission(first + k) for k in range(n)]
        lows = [self.masks.emission_low(first + k, lay.shift) for k in range(n)]
        masks_packed = []
        for r in range(R):
            slots = [(masks[k][r] << lay.shift) + lows[k][r] for k in range(n)] + [0] * (S - n)
            masks_packed.append(lay.packing.pack(slots)[0] if lay.packing.packed else slots[0])
        # the continuous models' coefficients (run() made them) and the pool (prepare())
        assert self._cints is not None and self.pool is not None
        async with self._rows_turn:
            out = await _quadratic_forms_block(
                _threads_for(self, b), self.pk, vec.ciphertexts, self._cints, masks_packed, self.pool, self._row_plan
            )
        bound = lay.packing.slot_capacity if lay.packing.packed else int(self.pk.max_int)
        await ch.send(
            alice, f"{tag}/q/{b}", EncryptedVector(self.pk, out, R * S, -lay.v_frac_bits, lay.packing, bound).to_proto()
        )
        if plan.mixture:
            await self._mixture_block(b, first, n)
        for k in range(n):
            self.masks.forget(first + k)

    async def _mixture_block(self, b: int, first: int, n: int) -> None:
        """(W) of the component LOGSUMs of block b."""
        ch, tag, alice, plan = self.ch, self.tag, self.alice, self.plan
        lay = plan.mix
        if lay is None:
            return
        e = EncryptedVector.from_proto(
            await ch.recv(alice, f"{tag}/mix-e/{b}", pb.CiphertextVector),
            self.pk,
            length=plan.mix_inputs(n),
            exponent=0,
            packing=UNPACKED,
            what=f"{tag}/mix-e/{b} from {alice}",
        )
        weights, nus = [], []
        for k in range(n):
            _, _, nu, kw = self.masks.mixture(first + k)
            weights.extend(kw)
            nus.extend(nu)
        assert self.pool is not None  # made by prepare()
        if plan.mix_spread:  # one output per sum; the cross terms covered by noise of a labelled stream
            noise = ls.spread_noise(self._rng("mixture-cover", str(b)), weights, nus, lay)
            u = await ls.aspread_weighted_sums(
                self.pk, e.ciphertexts, weights, noise, lay, self.pool, _threads_for(self, b)
            )
            out = EncryptedVector(self.pk, u, len(weights), 0, UNPACKED, int(self.pk.max_int))
        else:
            it = iter(e.ciphertexts)
            terms = [[(next(it), w) for w in kw] for kw in weights]
            u = await ls.aweighted_sums(self.pk, terms, nus, lay, self.pool, _threads_for(self, b))
            out = EncryptedVector(self.pk, u, len(terms), 0, lay.packing, lay.max_sum)
        await ch.send(alice, f"{tag}/mix-u/{b}", out.to_proto())

    async def _discrete_block(self, b: int, first: int, n: int) -> None:
        plan, shape = self.plan, self.shape
        if self._log_b is None:
            with np.errstate(divide="ignore"):
                lb = np.log(np.asarray(self.models.emissionprob, dtype=np.float64)).reshape(shape.n_values, shape.dim)
            self._log_b = [[None if not np.isfinite(x) else ls.fx(float(x), plan.F) for x in row] for row in lb]
        rows = []
        for t in range(first, first + n):
            V = self.masks.emission(t)
            table = []
            for sym in range(max(2, shape.dim)):
                vals = bytearray()
                for i in range(shape.n_values):
                    x = self._log_b[i][sym] if sym < shape.dim else None
                    vals += (OT_ZERO if x is None else x + V[i]).to_bytes(OT_VALUE_BYTES, "little", signed=True)
                table.append(bytes(vals))
            rows.append(table)
            self.masks.forget(t)
        await ot_send(self.ch, self.alice, rows, tag_prefix=f"{self.tag}/ot/{b}", rng=self._rng("ot", str(b)))

    # ------------------------------------------------------------------ step 3: induction
    async def _induction(self, g: int) -> None:
        ch, tag, alice, plan = self.ch, self.tag, self.alice, self.plan
        lay = plan.ind
        s = 0
        while (e := await self.tl.round_end_after(s, plan.m)) is not None:  # a round s → e of ℓ steps
            ell = e - s
            ch.progress(round=e, step="induction")
            sums = plan.group_sums[ell][g]
            if sums:
                # sums: the plan made their layout (Plan.ind); prepare() the pool and the threads
                assert lay is not None and self.pool is not None and self.urgent is not None
                msg = await ch.recv(alice, f"{tag}/e/{s}/{g}", pb.CiphertextVector)
                x = EncryptedVector.from_proto(
                    msg,
                    self.pk,
                    length=plan.group_terms[ell][g],
                    exponent=0,
                    packing=UNPACKED,
                    what=f"{tag}/e/{s}/{g} from {alice}",
                )
                _, _, nu, kw = self.masks.step(s, ell)
                it = iter(x.ciphertexts)
                terms = [[(next(it), w) for w in kw[g][k]] for k in range(len(sums))]
                u = await ls.aweighted_sums(self.pk, terms, nu[g], lay, self.pool, self.urgent)  # (W), seed step 6
                await ch.send(
                    alice,
                    f"{tag}/u/{s}/{g}",
                    EncryptedVector(self.pk, u, len(sums), 0, lay.packing, lay.max_sum).to_proto(),
                )
            self._step_done(s)
            s = e

    def _step_done(self, s: int) -> None:
        self._steps_done[s] = self._steps_done.get(s, 0) + 1
        if self._steps_done[s] == len(self.plan.groups):
            del self._steps_done[s]
            # the round s → e stays until the next round is done (its offsets need M_e, and so does the
            # termination after the last round): the rounds before it go
            self.masks.forget_steps_before(s)

    # ------------------------------------------------------------------ step 4: termination
    async def _termination(self) -> EncryptedVector:
        ch, tag, alice, plan = self.ch, self.tag, self.alice, self.plan
        D, N, F, T = plan.D, plan.N, plan.F, self.tl.total
        assert T is not None  # the final block came: the emissions are done
        omega, sigma, nu, kw = self.masks.final()
        M = self.masks.M(T - 1)
        c = [
            x
            for d in range(D)
            for x in ls.term_offsets([0] * N, M[d * N : (d + 1) * N], omega[d], sigma[d] if plan.fin else [0])
        ]
        await ch.send(alice, f"{tag}/fin-c", bigints(c))
        if plan.fin is not None:
            lay = plan.fin
            e = EncryptedVector.from_proto(
                await ch.recv(alice, f"{tag}/fin-e", pb.CiphertextVector),
                self.pk,
                length=D * N,
                exponent=0,
                packing=UNPACKED,
                what=f"{tag}/fin-e from {alice}",
            )
            terms = [[(e.ciphertexts[d * N + j], kw[d][j]) for j in range(N)] for d in range(D)]
            assert self.pool is not None and self.urgent is not None  # made by prepare()
            u = await ls.aweighted_sums(self.pk, terms, nu, lay, self.pool, self.urgent)  # (W), seed step 8
            await ch.send(alice, f"{tag}/fin-u", EncryptedVector(self.pk, u, D, 0, lay.packing, lay.max_sum).to_proto())
        back = EncryptedVector.from_proto(
            await ch.recv(alice, f"{tag}/fin-l", pb.CiphertextVector),
            self.pk,
            length=D,
            exponent=-F,
            packing=UNPACKED,
            bound=final_bound(plan) // 2,
            what=f"{tag}/fin-l from {alice}",
        )
        K = plan.K if plan.fin is not None else 0
        return back + EncryptedVector.trivial(self.pk, [K - w for w in omega], exponent=-F)


def _open_threads(role: ForwardAlice | ForwardBob) -> None:
    """The role's urgent threads (induction rounds, block 0) and background threads (later blocks)."""
    role.urgent = CryptoThreads(URGENT_THREADS, priority="urgent", name="smcdp-fw")
    role.background = CryptoThreads(priority="background", name="smcdp-fw")


def _close_threads(role: ForwardAlice | ForwardBob) -> None:
    for threads in (role.urgent, role.background):
        if threads is not None:
            threads.close()
    role.urgent = role.background = None


def _threads_for(role: ForwardAlice | ForwardBob, block: int) -> CryptoThreads:
    """Block 0's emissions gate the first induction round: both parties compute them at full priority.
    Later blocks only have to be ready when the induction reaches them: background threads."""
    threads = role.urgent if block == 0 else role.background
    assert threads is not None  # opened by prepare() (_open_threads) until close()
    return threads


@dataclass(frozen=True)
class RowPlan:
    """How Bob computes an emission block's rows (quadratic forms) over the product ciphertexts.

    Rows that differ from an earlier row in few coefficients -- a MAP-adapted speaker model and its UBM
    share every variance, hence the d squared features' and most of the constant's coefficients, and
    differ in the d + 1 others (docs/protocols/speaker.md) -- are computed as that row's product times a
    multi-exponentiation over the differing columns only: Π b^r = Π b^p · Π_{c ∈ cols} b_c^(r_c − p_c).
    Exact (the same integers); about 25 % of a verification's row work and 45 % of an identification's.
    ``base`` rows are computed in full; ``derived[i]`` is row ``derived[i]`` = base row ``parent[i]`` (its
    position in ``base``) plus ``deltas[i]`` on ``cols``."""

    base: tuple[int, ...]
    derived: tuple[int, ...] = ()
    parent: tuple[int, ...] = ()
    cols: tuple[int, ...] = ()
    deltas: tuple[tuple[int, ...], ...] = ()

    @classmethod
    def for_rows(cls, rows: Sequence[Sequence[int]]) -> RowPlan:
        """The plan for ``rows``: each row derived from the earlier full row it shares most coefficients
        with, where that is at least a third of them, and only if the whole plan costs below 90 % of
        computing every row in full (multiplications ~ rows × columns)."""
        R = len(rows)
        if R < 2 or not rows[0]:
            return cls(tuple(range(R)))
        P = len(rows[0])
        if any(abs(e) >= 1 << 62 for row in rows for e in row):
            return cls(tuple(range(R)))
        A = np.array(rows, dtype=np.int64)
        base: list[int] = []
        derived: list[int] = []
        parent: list[int] = []
        for r in range(R):
            if base:
                same = (A[base] == A[r]).sum(1)
                j = int(np.argmax(same))
                if int(same[j]) * 3 >= P:
                    derived.append(r)
                    parent.append(j)
                    continue
            base.append(r)
        if not derived:
            return cls(tuple(base))
        diff = np.zeros(P, dtype=bool)
        for r, j in zip(derived, parent):
            diff |= A[r] != A[base[j]]
        cols = tuple(int(c) for c in np.flatnonzero(diff))
        if len(base) * P + len(derived) * len(cols) >= 0.9 * R * P:
            return cls(tuple(range(R)))
        deltas = tuple(tuple(int(rows[r][c]) - int(rows[base[j]][c]) for c in cols) for r, j in zip(derived, parent))
        return cls(tuple(base), tuple(derived), tuple(parent), cols, deltas)

    def products(self, bases: Sequence[mpz], rows: Sequence[Sequence[int]], modulus: mpz, threads: int) -> list[mpz]:
        """``multi_exp_rows(bases, rows, modulus)`` by this plan (the rows must be the ones it was made for)."""
        full = multi_exp_rows(bases, [rows[r] for r in self.base], modulus, threads)
        out: list[mpz] = [mpz(0)] * len(rows)
        for i, r in enumerate(self.base):
            out[r] = full[i]
        if self.derived:
            extra = multi_exp_rows([bases[c] for c in self.cols], self.deltas, modulus, threads)
            for r, j, d in zip(self.derived, self.parent, extra):
                out[r] = full[j] * d % modulus
        return out


async def _quadratic_forms_block(
    threads: CryptoThreads,
    pk: PublicKey,
    cts: list[mpz],
    cints: list[list[int]],
    masks_packed: list[int],
    pool: ObfuscatorPool,
    plan: RowPlan | None = None,
) -> list[mpz]:
    """Bob, one emission block: ξ(zᵀW_r z + V_r) for every row r, all frames of the block, re-randomised
    from ``pool``.

    The rows are multi-exponentiations over the same product ciphertexts: they share the subset tables of
    :func:`~smcdp.crypto.modexp.multi_exp_rows` (half the multiplications of one Bos–Coster
    per row), one share of them per core.  With the native engine one call on one of ``threads`` shares
    the work among the engine's threads, which read one set of tables (they start at that thread's
    priority), and rows close to an earlier one are computed from it (``plan``, :class:`RowPlan`);
    otherwise (or with an engine built before it took threads) the rows are cut into one share per core,
    each share on one of ``threads``.
    Each job also takes its obfuscators there (made on that thread if the stock has run out, not on the
    event loop).
    """
    n2 = pk.nsquare
    shares = max(1, min(threads.workers, os.cpu_count() or 1, len(cints)))

    def finish(qs: list[mpz], masks: list[int]) -> list[mpz]:
        return [pool.rerandomize(q * ((1 + pk.n * pk.raw_plain(m)) % n2) % n2) for q, m in zip(qs, masks)]

    if native.AVAILABLE and native.MAX_ROW_THREADS > 1 and n2 % 2 == 1:
        rows = plan if plan is not None else RowPlan(tuple(range(len(cints))))
        return list(await threads.arun(lambda: finish(rows.products(cts, cints, n2, shares), masks_packed)))
    size = -(-len(cints) // shares)

    def share(i: int) -> list[mpz]:
        return finish(multi_exp_rows(cts, cints[i : i + size], n2), masks_packed[i : i + size])

    parts = await threads.amap(share, range(0, len(cints), size))
    return [c for part in parts for c in part]


# =============================================================================== one call per role
async def forward_alice(
    ch: Channel,
    X: Frames,
    params: ForwardParams,
    *,
    private_key: PrivateKey,
    bob: str = "bob",
    tag: str = "fw",
    seed: SeedLike = None,
    expected_frames: int | None = None,
    labels: Sequence[str] = ("secure-forward",),
) -> AliceForward:
    """Role Alice (offline and online phases in one call): observations and private key; learns only masked
    values.  ``X``: an array, or an async iterable of frame chunks (then ``expected_frames`` sizes the
    offline phase)."""
    role = ForwardAlice(ch, params, private_key=private_key, bob=bob, tag=tag, seed=seed, labels=labels)
    try:
        if expected_frames is None:
            expected_frames = len(X) if not isinstance(X, AsyncIterable) else 200
        await role.prepare(expected_frames)
        return await role.run(X)
    finally:
        role.close()


async def forward_bob(
    ch: Channel,
    models: KeywordModels,
    params: ForwardParams,
    *,
    public_key: PublicKey,
    alice: str = "alice",
    tag: str = "fw",
    seed: SeedLike = None,
    labels: Sequence[str] = ("secure-forward",),
) -> BobForward:
    """Role Bob (both phases in one call): holds the HMMs; sees only ciphertexts; obtains ξ(log P(x | λ_δ))."""
    role = ForwardBob(ch, models, params, public_key=public_key, alice=alice, tag=tag, seed=seed, labels=labels)
    try:
        await role.prepare()
        return await role.run()
    finally:
        role.close()
