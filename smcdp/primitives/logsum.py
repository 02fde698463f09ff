"""Secure LOGSUM (seed 003 §4.2.1) in the log domain: exact for any weights, vectorised.

Alice holds the Paillier private key; Bob holds weights and masks.  For sums
``S_r = Σ_l w_rl e^{ℓ_l}`` whose terms are known to Alice only up to Bob's
masks, the three steps of the seed's LOGSUM become:

**(E) secure exponent** -- :func:`term_offsets` (Bob), :func:`exponentiate_terms` (Alice).
    Bob moves each weight into the *logarithm*: for every term he publishes the
    offset ``c_rl = fx(ln w_rl) − M_l + ω_r + σ_rl``, where ``M_l`` is the mask
    Alice's value ``L_l = ℓ_l + M_l`` carries, ``ω_r`` a fresh per-sum offset
    (uniform on ±ψ) and ``σ_rl`` a fresh per-term mask (uniform on ±K).  Alice
    forms ``y_rl = L_l + c_rl = ln w_rl + ℓ_l + ω_r + σ_rl`` (exactly: all of it
    lives on the integer grid 2^−F), subtracts the largest term *of that sum*,
    ``m_r``, and returns ``ê_rl = round(2^{F_e} e^{y_rl − m_r})`` encrypted,
    pre-shifted into the packed slot of sum r.  A weight of any size -- 5e-324
    beside 1 -- is just another offset: no term is lost to the range of
    fixed point, and exact zeros are left out (public pattern).
**(W) homomorphic weighted sum** -- :func:`term_weights`, :func:`smudging`, :func:`weighted_sums` (Bob).
    Bob's integer weights ``k_rl = round(2^W e^{−σ_rl − K})`` only undo his
    per-term masks, so they span at most ``e^{2K}``; he computes
    ``u_r = Σ_l k_rl ê_rl + ν_r`` under encryption, one multi-exponentiation per
    ciphertext, with smudging noise ``ν_r`` uniform on ``[0, 2^{B_ν})`` in every
    slot, and re-randomises.
**(L) secure logarithm** -- :func:`logarithm` (Alice).
    ``L'_r = fx(ln(u_r / 2^{W+F_e})) + m_r = ln S_r + ω_r − K`` (up to the
    proven error): Alice keeps it (a fused protocol continues from it) or
    returns it encrypted (:func:`secure_logsum_alice`) and Bob removes ``ω_r − K``.

Bit budget for sums of at most n terms (``p`` = ``precision_bits``, ``λ`` =
``smudge_bits``, :class:`LogsumLayout`)::

    F_e = p + ⌈4K/ln2⌉ + ⌈log₂n⌉ + 1        W = p + λ + ⌈log₂n⌉ + ⌈4K/ln2⌉ + 1
    B_ν = F_e + ⌈log₂n⌉ + λ                  slot = F_e + W + ⌈log₂(n+1)⌉ + 2

so that every sum keeps relative precision 2^−p (the largest term after
masking is at least e^{−4K} of the largest unmasked one, and the weights'
rounding, the exponents' rounding and ν together stay below 2^−p of it), ν
hides the integer structure of Bob's weights to statistical distance 2^−λ−1,
and no slot can overflow.  docs/protocols/keyword.md proves the bound and says
what each party learns.

The standalone pair :func:`secure_logsum_bob` / :func:`secure_logsum_alice`
(encrypted logarithms in, encrypted log-sums out, two round trips) is these
steps end to end; :mod:`smcdp.protocols.secure_forward` fuses the same steps
into its induction (Alice keeps the logarithm of frame t and exponentiates
from it for frame t + 1).
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from gmpy2 import mpz
from numpy.typing import ArrayLike

from smcdp._numbers import real
from smcdp.crypto.codec import bigints, from_bigints
from smcdp.crypto.encoding import UNPACKED, Packing, encode_float
from smcdp.crypto.modexp import multi_exp, multi_exp_rows
from smcdp.crypto.obfuscation import ObfuscatorPool
from smcdp.crypto.paillier import PrivateKey, PublicKey
from smcdp.crypto.threads import CryptoThreads
from smcdp.crypto.vector import EncryptedVector
from smcdp.errors import CryptoOverflow, InvalidMessage
from smcdp.net.channel import Channel
from smcdp.v1 import messages_pb2 as pb

LN2 = math.log(2.0)
#: |fx(ln w)| for every positive double w (ln 5e-324 = −744.44) fits below 2^10 nats
LOG_WEIGHT_BOUND_NATS = 1 << 10


# =============================================================================== parameters
@dataclass(frozen=True)
class MaskParams:
    """Public fixed-point and masking parameters of LOGSUM (both parties agree on them)."""

    mask_nats: float = 4.0  # K: per-term masks σ are uniform on [−K, K)
    offset_nats: float = float(1 << 40)  # ψ: per-sum offsets ω are uniform on [−ψ, ψ)
    precision_bits: int = 30  # p: relative precision 2^−p of every sum
    smudge_bits: int = 30  # λ: ν hides Bob's integer weights to 2^−λ−1
    log_frac_bits: int = 40  # F: every log-domain value is an integer on the grid 2^−F

    def validate(self) -> MaskParams:
        real(self.mask_nats, "mask_nats", 0.0, 64.0)
        real(self.offset_nats, "offset_nats", 1.0, 2.0**48)
        for name, lo, hi in (("precision_bits", 12, 60), ("smudge_bits", 0, 80), ("log_frac_bits", 24, 64)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise InvalidMessage(f"{name}={v!r} must be an integer in [{lo}, {hi}]")
        return self

    @property
    def mask_int(self) -> int:
        """K on the grid."""
        return encode_float(float(self.mask_nats), self.log_frac_bits)

    @property
    def offset_int(self) -> int:
        """ψ on the grid."""
        return encode_float(float(self.offset_nats), self.log_frac_bits)


def uniform_ints(rng: random.Random, count: int, half_width: int) -> list[int]:
    """``count`` integers uniform on [−half_width, half_width) (empty range: zeros)."""
    if half_width <= 0:
        return [0] * count
    return uniform_below(rng, count, 2 * half_width, offset=-half_width)


def uniform_below(rng: random.Random, count: int, bound: int, offset: int = 0) -> list[int]:
    """``count`` integers uniform on [0, bound), plus ``offset``: exactly uniform, from bulk reads of
    ``rng.randbytes`` -- k = bits(bound − 1) bits a value, values ≥ bound rejected and drawn again (none when
    bound is a power of two).  The masks of a forward session are some 10^5 draws; ``randrange`` a value
    (three Python calls, and k = bits(bound) bits, so half its draws rejected at a power of two) took a
    third of a second of the masking party's event loop."""
    if bound < 1:
        raise ValueError("the bound of a uniform draw is at least 1")
    k = (bound - 1).bit_length()
    if k == 0:
        return [offset] * count
    nbytes = (k + 7) // 8
    shift = 8 * nbytes - k
    out: list[int] = []
    while len(out) < count:
        need = count - len(out)
        data = rng.randbytes(need * nbytes)
        if nbytes <= 7:  # numpy's uint64 holds the value; the offset is added to Python ints
            raw = np.zeros((need, 8), dtype=np.uint8)
            raw[:, :nbytes] = np.frombuffer(data, dtype=np.uint8).reshape(need, nbytes)
            v = raw.view("<u8")[:, 0] >> np.uint64(shift)
            kept = v[v < np.uint64(bound)].tolist()
            out.extend([x + offset for x in kept] if offset else kept)
        else:
            for i in range(0, len(data), nbytes):
                x = int.from_bytes(data[i : i + nbytes], "little") >> shift
                if x < bound:
                    out.append(x + offset)
    return out


def offset_bound_bits(params: MaskParams) -> int:
    """Public offsets c = fx(ln w) − M + ω + σ lie below 2^this (M and ω within ±ψ, |ln w| < 2^10 nats)."""
    return (2 * params.offset_int + (LOG_WEIGHT_BOUND_NATS << params.log_frac_bits) + params.mask_int).bit_length() + 1


def fx(x: float, frac_bits: int) -> int:
    """round(x · 2^F) exactly (half away from zero); ``−inf`` is not representable (the caller's zero pattern)."""
    return encode_float(x, frac_bits)


# =============================================================================== layout
@dataclass(frozen=True)
class LogsumLayout:
    """The public bit budget of sums of at most ``n_terms`` terms under one key (module docstring)."""

    n_terms: int
    exp_bits: int  # F_e: Alice's exponents ê lie in [0, 2^F_e]
    weight_bits: int  # W: Bob's weights k lie in [2^W e^{−2K}, 2^W]
    smudge_bits: int  # B_ν: ν lies in [0, 2^B_ν)
    slot_bits: int
    packing: Packing
    mask_int: int  # K on the grid (Bob's weights undo σ + K)
    frac_bits: int  # F
    #: λ_g > 0: the spread layout (:func:`spread_terms`): every slot also holds, in the sums that are not its
    #: own, another sum's weights applied to its terms, hidden by Bob's noise of λ_g bits more than them
    garbage_bits: int = 0

    @classmethod
    def make(cls, params: MaskParams, n_terms: int, pk: PublicKey, garbage_bits: int = 0) -> LogsumLayout:
        """The layout of sums of at most ``n_terms`` terms; ``garbage_bits`` λ_g > 0: the spread layout, whose
        slots are wide enough for a hidden cross term, max_sum + 2^{bits(max_sum) + λ_g} < 2^{slot−1}."""
        if n_terms < 1:
            raise ValueError("a sum has at least one term")
        p, lam, K = params.precision_bits, params.smudge_bits, float(params.mask_nats)
        k4 = math.ceil(4 * K / LN2)
        ln = math.ceil(math.log2(n_terms)) if n_terms > 1 else 0
        Fe = p + k4 + ln + 1
        W = p + lam + ln + k4 + 1
        Bnu = Fe + ln + lam
        slot = Fe + W + math.ceil(math.log2(n_terms + 1)) + 2
        if garbage_bits:
            slot = (n_terms * (1 << (W + Fe)) + (1 << Bnu) - 1).bit_length() + garbage_bits + 2
        if slot > pk.max_int.bit_length() - 1:
            need = 2 * (slot + 4)
            raise CryptoOverflow(
                f"a sum of {n_terms} terms needs {slot}-bit values (precision_bits={p}, "
                f"smudge_bits={lam}, mask_nats={K:g}); a {pk.bits}-bit key holds "
                f"{pk.max_int.bit_length() - 1}: use a key of at least {need} bits"
            )
        packing = Packing.for_key(pk, slot)
        lay = cls(n_terms, Fe, W, Bnu, slot, packing, params.mask_int, params.log_frac_bits, garbage_bits)
        assert lay.max_sum < 1 << (slot - 1), "layout arithmetic"
        assert not garbage_bits or lay.max_sum + (1 << lay.garbage_mask_bits) < 1 << (slot - 1), "layout arithmetic"
        return lay

    @property
    def garbage_mask_bits(self) -> int:
        """Spread layout: Bob's noise on a slot that is not the sum's own is uniform on [0, 2^this)."""
        return self.max_sum.bit_length() + self.garbage_bits

    @property
    def slots(self) -> int:
        return self.packing.slots

    @property
    def max_sum(self) -> int:
        """The largest value a slot can hold: n·2^{W+F_e} + 2^{B_ν} − 1 (< 2^{slot−1} by construction)."""
        return self.n_terms * (1 << (self.weight_bits + self.exp_bits)) + (1 << self.smudge_bits) - 1

    @property
    def min_sum(self) -> int:
        """No honest sum with a finite term is below 2^{W+F_e}·e^{−4K−1} (docs/protocols/keyword.md §bound)."""
        return int(
            math.ldexp(math.exp(-4 * self.mask_int / 2.0**self.frac_bits - 1.0), self.weight_bits + self.exp_bits)
        )

    def shift(self, index: int) -> int:
        """Bit offset of sum ``index`` inside its ciphertext."""
        return self.slot_bits * (index % self.slots) if self.packing.packed else 0

    def n_ciphertexts(self, n_sums: int) -> int:
        return self.packing.n_ciphertexts(n_sums)


# =============================================================================== (E) secure exponent
def term_offsets(log_w: Sequence[int], prev_mask: Sequence[int], omega: int, sigma: Sequence[int]) -> list[int]:
    """Bob, step (E): the public offsets ``c_l = fx(ln w_l) − M_l + ω + σ_l`` of one sum's terms."""
    return [a - m + omega + s for a, m, s in zip(log_w, prev_mask, sigma)]


def exponentiate_terms(y: Sequence[int | None], layout: LogsumLayout) -> tuple[list[int], int | None]:
    """Alice, step (E), one sum: ``ê_l = round(2^{F_e} e^{(y_l − m)/2^F})`` with ``m = max_l y_l``.

    ``None`` is an exact zero (ê = 0).  Terms more than (F_e + 2) ln 2 below the
    largest round to 0 (error ≤ ¼).  Returns (ê, m); m is None when every term is
    zero -- then the sum is exactly 0 and Alice ignores whatever u comes back.
    """
    finite = [v for v in y if v is not None]
    if not finite:
        return [0] * len(y), None
    m = max(finite)
    F, Fe = layout.frac_bits, layout.exp_bits
    cut = -math.ldexp((Fe + 2) * LN2, F)
    out = []
    for v in y:
        if v is None or v - m < cut:
            out.append(0)
        else:  # |v − m| < 2^53: the division by 2^F is exact
            out.append(round(math.ldexp(math.exp((v - m) / (1 << F)), Fe)))
    return out, m


# =============================================================================== (W) weighted sum
def term_weights(sigma: Sequence[int], layout: LogsumLayout) -> list[int]:
    """Bob, step (W): ``k_l = round(2^W e^{−(σ_l + K)})`` -- they undo his per-term masks, nothing else."""
    F, W, K = layout.frac_bits, layout.weight_bits, layout.mask_int
    return [round(math.ldexp(math.exp(-(s + K) / (1 << F)), W)) for s in sigma]


def smudging(rng: random.Random, layout: LogsumLayout, count: int) -> list[int]:
    """Bob: one ν per sum, uniform on [0, 2^{B_ν})."""
    return uniform_below(rng, count, 1 << layout.smudge_bits)


def weighted_sums(
    pk: PublicKey,
    terms: Sequence[Sequence[tuple[mpz, int]]],
    nu: Sequence[int],
    layout: LogsumLayout,
    pool: ObfuscatorPool,
) -> list[mpz]:
    """Bob, step (W): ``u_r = Σ_l k_rl ê_rl + ν_r`` for every sum r, packed and re-randomised.

    ``terms[r]`` lists (ciphertext of ê pre-shifted into sum r's slot, k) -- the
    pre-shift is Alice's, so each output ciphertext is *one* multi-exponentiation
    over the terms of the sums it holds.  Every slot is checked against its
    capacity (``layout.max_sum``) from the public bounds, never from the data.
    """
    jobs = _weighted_sum_jobs(pk, terms, nu, layout)
    return _finish_sums(pk, [_job_product(pk.nsquare, j) for j in jobs], jobs, pool)


async def aweighted_sums(
    pk: PublicKey,
    terms: Sequence[Sequence[tuple[mpz, int]]],
    nu: Sequence[int],
    layout: LogsumLayout,
    pool: ObfuscatorPool,
    threads: CryptoThreads,
) -> list[mpz]:
    """:func:`weighted_sums` with one multi-exponentiation per output ciphertext on ``threads``."""
    jobs = _weighted_sum_jobs(pk, terms, nu, layout)
    return _finish_sums(pk, await threads.amap(functools.partial(_job_product, pk.nsquare), jobs), jobs, pool)


def _weighted_sum_jobs(
    pk: PublicKey, terms: Sequence[Sequence[tuple[mpz, int]]], nu: Sequence[int], layout: LogsumLayout
) -> list[tuple[list[mpz], list[int], int]]:
    """(bases, weights, packed noise) per output ciphertext, every bound checked."""
    S = layout.slots
    cap = layout.packing.slot_capacity if layout.packing.packed else int(pk.max_int)
    if layout.max_sum > cap:
        raise CryptoOverflow(
            f"a {layout.n_terms}-term sum could reach {layout.max_sum.bit_length()} bits, above "
            f"the {cap.bit_length()}-bit slot"
        )
    Wmax = 1 << layout.weight_bits
    jobs: list[tuple[list[mpz], list[int], int]] = []
    for start in range(0, len(terms), S):
        bases: list[mpz] = []
        exps: list[int] = []
        noise = 0
        for r in range(start, min(start + S, len(terms))):
            if len(terms[r]) > layout.n_terms:
                raise CryptoOverflow(f"sum {r} has {len(terms[r])} terms; the layout holds {layout.n_terms}")
            for c, k in terms[r]:
                if not 0 < k <= Wmax:
                    raise CryptoOverflow(f"weight of {int(k).bit_length()} bits outside (0, 2^{layout.weight_bits}]")
                bases.append(c)
                exps.append(k)
            if not 0 <= nu[r] < 1 << layout.smudge_bits:
                raise CryptoOverflow("smudging noise outside [0, 2^B_ν)")
            noise += int(nu[r]) << layout.shift(r)
        jobs.append((bases, exps, noise))
    return jobs


def _job_product(n2: mpz, job: tuple[list[mpz], list[int], int]) -> mpz:
    bases, exps, _ = job
    return multi_exp(bases, exps, n2) if bases else mpz(1)


def _finish_sums(
    pk: PublicKey, prods: Sequence[mpz], jobs: list[tuple[list[mpz], list[int], int]], pool: ObfuscatorPool
) -> list[mpz]:
    """Add each ciphertext's smudging noise, then re-randomise it."""
    n2 = pk.nsquare
    return [pool.rerandomize(c * ((1 + pk.n * noise) % n2) % n2) for c, (_, _, noise) in zip(prods, jobs)]


# =============================================================================== the spread layout
# Many sums of many terms (a GMM's components): in the packed layout above Alice encrypts every term alone
# (Bob's weight undoes a mask of that term only, and a ciphertext is scaled by one weight), one ciphertext
# per term.  In the spread layout the sums fill chunks of S = ``layout.slots`` (sum i in slot i mod S of chunk
# i // S) and Alice's ciphertext ℓ of a chunk packs the ℓ-th term of each of its sums into that sum's slot:
# S terms per ciphertext.  Bob makes one output per sum, Π_ℓ E_ℓ^{k_iℓ}: its own slot holds u_i exactly as
# in the packed layout (+ ν_i); every other slot j of the chunk holds the cross term Σ_ℓ k_iℓ ê_jℓ, which
# Bob hides under noise uniform on [0, 2^{bits(max_sum)+λ_g}) (statistical distance 2^{−λ_g} per slot).
# Alice encrypts S times fewer terms and decrypts one ciphertext per sum instead of one per S sums.


def spread_chunks(term_counts: Sequence[int], layout: LogsumLayout) -> list[int]:
    """Spread layout: per chunk of S sums (``term_counts``: each sum's terms, in order), the number of Alice's
    ciphertexts -- the most terms of its sums."""
    S = layout.slots
    return [max(term_counts[c : c + S]) for c in range(0, len(term_counts), S)]


def spread_terms(es: Sequence[Sequence[int]], layout: LogsumLayout) -> list[int]:
    """Alice, step (E) in the spread layout: per chunk of S sums, plaintext ℓ packs the ℓ-th exponentiated term
    of each of the chunk's sums into that sum's slot (nothing where a sum has fewer terms)."""
    S = layout.slots
    out: list[int] = []
    for c in range(0, len(es), S):
        chunk = es[c : c + S]
        for term in range(max(len(e) for e in chunk)):
            out.append(sum(e[term] << layout.shift(i) for i, e in enumerate(chunk) if term < len(e)))
    return out


def spread_noise(
    rng: random.Random, weights: Sequence[Sequence[int]], nu: Sequence[int], layout: LogsumLayout
) -> list[int]:
    """Bob, step (W) in the spread layout: the packed noise of each sum's output -- ν_i in its own slot, and in
    every other slot of its chunk a fresh uniform value on [0, 2^{bits(max_sum)+λ_g}) (the cross term's
    cover).  Drawn in order from ``rng`` (replayable)."""
    S = layout.slots
    if layout.garbage_bits <= 0 or not layout.packing.packed:
        raise ValueError("the spread layout needs garbage bits and at least two slots")
    gb = layout.garbage_mask_bits
    out = []
    for i in range(len(weights)):
        first = i - i % S
        if not 0 <= nu[i] < 1 << layout.smudge_bits:
            raise CryptoOverflow("smudging noise outside [0, 2^B_ν)")
        noise = int(nu[i]) << layout.shift(i)
        for j in range(first, min(first + S, len(weights))):
            if j != i:
                noise += rng.getrandbits(gb) << layout.shift(j)
        out.append(noise)
    return out


async def aspread_weighted_sums(
    pk: PublicKey,
    inputs: Sequence[mpz],
    weights: Sequence[Sequence[int]],
    noise: Sequence[int],
    layout: LogsumLayout,
    pool: ObfuscatorPool,
    threads: CryptoThreads,
) -> list[mpz]:
    """Bob, step (W) in the spread layout: one ciphertext per sum i, ``Π_ℓ E_ℓ^{k_iℓ} · ξ(noise_i)`` over its
    chunk's ciphertexts E (:func:`spread_terms`), re-randomised; ``noise`` from :func:`spread_noise`.  The
    rows of a chunk share the multi-exponentiation's tables (:func:`~smcdp.crypto.modexp.multi_exp_rows`),
    one chunk per job on ``threads``.  Every bound is checked from the layout, never from the data."""
    S, Wmax, n2 = layout.slots, 1 << layout.weight_bits, pk.nsquare
    counts = spread_chunks([len(w) for w in weights], layout)
    if len(inputs) != sum(counts) or len(noise) != len(weights):
        raise ValueError("the spread inputs do not match the sums")
    for w in weights:
        if len(w) > layout.n_terms:
            raise CryptoOverflow(f"a sum has {len(w)} terms; the layout holds {layout.n_terms}")
        if any(not 0 < k <= Wmax for k in w):
            raise CryptoOverflow(f"a weight outside (0, 2^{layout.weight_bits}]")
    jobs = []
    pos = 0
    for c, L in enumerate(counts):
        rows = [list(w) + [0] * (L - len(w)) for w in weights[c * S : (c + 1) * S]]
        jobs.append((list(inputs[pos : pos + L]), rows, noise[c * S : (c + 1) * S]))
        pos += L

    def chunk(job: tuple[list[mpz], list[list[int]], Sequence[int]]) -> list[mpz]:
        bases, rows, noises = job
        prods = multi_exp_rows(bases, rows, n2)
        return [pool.rerandomize(p * ((1 + pk.n * z) % n2) % n2) for p, z in zip(prods, noises)]

    parts = await threads.amap(chunk, jobs)
    return [c for part in parts for c in part]


def unspread_sums(vals: Sequence[int], layout: LogsumLayout) -> list[int]:
    """Alice, the spread layout: sum i from slot i mod S of the i-th decrypted output (the chunk's other
    slots hold Bob's noise, which she ignores)."""
    mask = (1 << layout.slot_bits) - 1
    if any(v < 0 for v in vals):
        raise InvalidMessage("a spread weighted sum decrypted to a negative value")
    return [(int(v) >> layout.shift(i)) & mask for i, v in enumerate(vals)]


# =============================================================================== (L) secure logarithm
def logarithm(u: int, m: int, layout: LogsumLayout) -> int:
    """Alice, step (L): ``fx(ln(u / 2^{W+F_e})) + m`` on the grid -- never through a float at the
    magnitude of m.  ``u`` outside what an honest Bob can produce is refused."""
    if not layout.min_sum <= u <= layout.max_sum:
        raise InvalidMessage(
            f"a masked sum of {int(u).bit_length()} bits lies outside what an honest weighted "
            f"sum can be ([2^{layout.min_sum.bit_length() - 1}, 2^{layout.max_sum.bit_length()}))"
        )
    z = math.ldexp(float(u), -(layout.weight_bits + layout.exp_bits))
    return encode_float(math.log(z), layout.frac_bits) + m


def unpack_sums(vals: Sequence[int], count: int, layout: LogsumLayout) -> list[int]:
    """Alice: the packed sums (non-negative slots) from the decrypted ciphertexts ``vals``."""
    if layout.packing.packed:
        vals = layout.packing.unpack(vals, count)
    if len(vals) != count:
        raise InvalidMessage(f"{len(vals)} sums decrypted, {count} expected")
    return list(vals)


# =============================================================================== the standalone pair
# Bob holds ξ(ℓ_1..n) (Alice's key, exponent −F) and non-negative weights A (rows × n, at least one
# positive weight per row, any magnitudes down to the smallest double); he obtains ξ(ln Σ_l A_rl e^{ℓ_l})
# for every row.  Two round trips.  ``tag`` must be unique per call within a session.


def _logsum_pattern(A: np.ndarray, n: int) -> list[list[int]]:
    if A.ndim != 2 or A.shape[1] != n or not np.all(np.isfinite(A)) or np.any(A < 0):
        raise InvalidMessage(f"LOGSUM weights must be a finite non-negative matrix with {n} columns")
    rows = [[int(i) for i in np.flatnonzero(A[r] > 0)] for r in range(A.shape[0])]
    if any(not r for r in rows):
        raise InvalidMessage("every LOGSUM row needs a positive weight")
    return rows


async def secure_logsum_bob(
    ch: Channel,
    alice: str,
    logs: EncryptedVector,
    weights: ArrayLike,
    params: MaskParams,
    pool: ObfuscatorPool,
    rng: random.Random,
    tag: str,
) -> EncryptedVector:
    """Bob: ``ξ(ln Σ_l A_rl e^{ℓ_l})`` for every row r of ``weights`` (exponent −F, unpacked)."""
    params.validate()
    F = params.log_frac_bits
    pk = logs.public_key
    n = logs.length
    if logs.packing.packed or logs.exponent < -F:
        raise InvalidMessage(f"LOGSUM needs unpacked logarithms with at most {F} fraction bits")
    logs = logs.scale_exponent(-F)
    A = np.asarray(weights, dtype=np.float64)
    rows = _logsum_pattern(A, n)
    R = len(rows)
    layout = LogsumLayout.make(params, max(len(r) for r in rows), pk)
    psi = params.offset_int
    # (E), Bob: the logarithms leave masked by ρ (per value); the weights go into the public offsets
    rho = uniform_ints(rng, n, psi)
    n2 = pk.nsquare
    masked = [pool.rerandomize(c * ((1 + pk.n * pk.raw_plain(r)) % n2) % n2) for c, r in zip(logs.ciphertexts, rho)]
    bound = logs.bound + psi
    if bound > pk.max_int:
        raise CryptoOverflow("LOGSUM: masked logarithms would overflow the plaintext space")
    omega = uniform_ints(rng, R, psi)
    sigma = [uniform_ints(rng, len(r), layout.mask_int) for r in rows]
    offsets = [
        c
        for r in range(R)
        for c in term_offsets(
            [fx(math.log(A[r, i]), F) for i in rows[r]], [rho[i] for i in rows[r]], omega[r], sigma[r]
        )
    ]
    await ch.send(alice, f"{tag}/v", EncryptedVector(pk, masked, n, -F, UNPACKED, bound).to_proto())
    await ch.send(alice, f"{tag}/pattern", pb.Ints(values=[R] + [int(A[r, i] > 0) for r in range(R) for i in range(n)]))
    await ch.send(alice, f"{tag}/c", bigints(offsets))
    # (W), Bob
    n_terms = sum(len(r) for r in rows)
    e = EncryptedVector.from_proto(
        await ch.recv(alice, f"{tag}/e", pb.CiphertextVector),
        pk,
        length=n_terms,
        exponent=0,
        packing=UNPACKED,
        what=f"{tag}/e from {alice}",
    )
    it = iter(e.ciphertexts)
    terms = [[(next(it), k) for k in term_weights(sigma[r], layout)] for r in range(R)]
    u = weighted_sums(pk, terms, smudging(rng, layout, R), layout, pool)
    await ch.send(alice, f"{tag}/u", EncryptedVector(pk, u, R, 0, layout.packing, layout.max_sum).to_proto())
    # (L), Bob: remove ω − K
    back = EncryptedVector.from_proto(
        await ch.recv(alice, f"{tag}/l", pb.CiphertextVector),
        pk,
        length=R,
        exponent=-F,
        packing=UNPACKED,
        bound=psi + (LOG_WEIGHT_BOUND_NATS << F) + bound,
        what=f"{tag}/l from {alice}",
    )
    return back + EncryptedVector.trivial(pk, [layout.mask_int - w for w in omega], exponent=-F)


async def secure_logsum_alice(
    ch: Channel, bob: str, sk: PrivateKey, params: MaskParams, pool: ObfuscatorPool, tag: str, *, length: int
) -> None:
    """Alice's side of :func:`secure_logsum_bob` (``length``: the number of logarithms)."""
    params.validate()
    F = params.log_frac_bits
    pk = sk.public_key
    v = EncryptedVector.from_proto(
        await ch.recv(bob, f"{tag}/v", pb.CiphertextVector),
        pk,
        length=length,
        exponent=-F,
        packing=UNPACKED,
        what=f"{tag}/v from {bob}",
    )
    pat = list((await ch.recv(bob, f"{tag}/pattern", pb.Ints)).values)
    R = pat[0] if pat else 0
    if R < 1 or len(pat) != 1 + R * length or any(x not in (0, 1) for x in pat[1:]):
        raise InvalidMessage(f"{tag}/pattern from {bob} is not a 0/1 pattern of rows x {length}")
    rows = [[i for i in range(length) if pat[1 + r * length + i]] for r in range(R)]
    if any(not r for r in rows):
        raise InvalidMessage(f"{tag}/pattern from {bob} has a row without terms")
    layout = LogsumLayout.make(params, max(len(r) for r in rows), pk)
    n_terms = sum(len(r) for r in rows)
    offsets = from_bigints(
        await ch.recv(bob, f"{tag}/c", pb.BigInts),
        count=n_terms,
        bound_bits=offset_bound_bits(params),
        what=f"{tag}/c from {bob}",
    )
    vals = v.decrypt_ints(sk)
    # (E), Alice
    it = iter(offsets)
    e_ints: list[int] = []
    m: list[int] = []
    for r, row in enumerate(rows):
        ys = [vals[i] + next(it) for i in row]
        es, mr = exponentiate_terms(ys, layout)
        assert mr is not None  # None only for a row of exact zeros; every row has a term (_logsum_pattern)
        m.append(mr)
        e_ints.extend(x << layout.shift(r) for x in es)
    await ch.send(
        bob,
        f"{tag}/e",
        EncryptedVector(pk, pool.encrypt_many(e_ints), n_terms, 0, UNPACKED, int(pk.max_int)).to_proto(),
    )
    # (L), Alice
    u = EncryptedVector.from_proto(
        await ch.recv(bob, f"{tag}/u", pb.CiphertextVector),
        pk,
        length=R,
        exponent=0,
        packing=layout.packing,
        what=f"{tag}/u from {bob}",
    )
    sums = unpack_sums([sk.raw_decrypt_signed(c) for c in u.ciphertexts], R, layout)
    out = [logarithm(s, mr, layout) for s, mr in zip(sums, m)]
    await ch.send(
        bob,
        f"{tag}/l",
        EncryptedVector(pk, pool.encrypt_many(out), R, -F, UNPACKED, int(pk.max_int)).to_proto(),
    )
