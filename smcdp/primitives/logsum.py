"""Secure logarithm, secure exponent and secure LOGSUM (seed 003 §4.2.1), vectorised.

Alice holds the Paillier private key; Bob holds only ciphertexts.  Every call
below moves a whole *batch* of values in one round trip (Bob -> Alice ->
Bob), so a protocol that needs many exp/log operations per step pays one
network round per step, not one per value.

Representation and precision (all public, agreed by both parties)
-----------------------------------------------------------------
Real numbers do not live in Z_n, so every value crosses the wire as a
fixed-point integer and every mask is *real-valued* (as in the seed):

* **log-domain values** ``ξ(ℓ)`` are integers ``round(ℓ · 2^F)`` (``F`` bits
  of fraction, e.g. ``F_log``).
* **secure exponent**: Bob adds a mask ``ρ_i ~ U[-K, K]`` (``K`` =
  ``mask_nats``) to each ``ξ(ℓ_i)`` and a common offset ``ψ_g`` (uniform on
  ``[-offset_nats, offset_nats]``) to every value of a *group* ``g``; Alice
  decrypts ``v_i = ℓ_i + ρ_i + ψ_g``, subtracts the group maximum
  ``m_g = max_{i∈g} v_i`` (per-group rescaling kept by Alice: no underflow
  however small the values are) and returns ``ξ(ê_i)`` with
  ``ê_i = round(exp(v_i - m_g) · 2^{F_e})``.  Bob knows
  ``θ_i = ê_i · 2^{-F_e} · e^{M_g} · e^{-ρ_i-ψ_g}`` where ``M_g`` (the sum of
  Alice's offsets) is known to Alice only; Bob keeps the *log factor*
  ``ℓ̃_i = -F_e ln2 - ρ_i - ψ_g`` in the clear.
* **weighted sums / secure logarithm**: Bob turns real weights ``w_ij`` (in
  the log domain, ``ln w = -inf`` for a zero) into integers
  ``k_ij = round(2^W · w_ij / R_g)`` with one normaliser ``R_g`` per group,
  multiplies by a fresh row mask ``e^{φ_i}`` (``φ ~ U[-K, K]``) before the
  normalisation, computes ``u_i = Σ_j k_ij ê_j`` homomorphically, packs
  several ``u_i`` per ciphertext and rerandomises.  Alice decrypts ``u_i``
  and takes ``ln u_i``.  (No additive noise: it would have to stay below the
  precision floor of the *smallest* sum, which Bob cannot know.)

Bit budgets (``p`` = ``precision_bits``, ``r`` = ``range_bits``): Alice
normalises every exponent over the terms of *one* sum (never over unrelated
values, so a sum that is tiny now but dominant later keeps its precision);
the masks spread the magnitudes of those terms by at most ``e^{4K}`` (two
masks of ±K on each exponent) and the weights by ``e^{6K}``, and the public
weights of one sum (e.g. transition probabilities) may span ``2^r``; so
``F_e = p + ⌈4K/ln2⌉ + r + 2`` and ``W = p + ⌈6K/ln2⌉ + r + 2`` keep at least
``p`` significant bits on every term that can dominate its sum.  Larger ``K`` hides more (see
docs/protocols/keyword.md) and costs bits; every bound is checked and an
overflow raises :class:`~smcdp.errors.CryptoOverflow`.

What each party learns is written down in docs/protocols/keyword.md.

:func:`secure_logsum_bob` / :func:`secure_logsum_alice` are the *reference*
implementation of the seed's LOGSUM; the secure forward algorithm runs fused
forms of it (see :func:`secure_logsum_bob`), tested against this pair.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

import gmpy2
import numpy as np
from gmpy2 import mpz

from smcdp.crypto.encoding import UNPACKED, Packing, encode_float
from smcdp.crypto.modexp import multi_exp
from smcdp.crypto.obfuscation import ObfuscatorPool
from smcdp.crypto.paillier import PrivateKey, PublicKey
from smcdp.crypto.vector import EncryptedVector
from smcdp.errors import CryptoOverflow, InvalidMessage
from smcdp.net.channel import Channel
from smcdp.v1 import messages_pb2 as pb

LN2 = math.log(2.0)
NEG_INF = float("-inf")


# =============================================================================== parameters
@dataclass(frozen=True)
class MaskParams:
    """Public fixed-point and masking parameters of the exp/log primitives."""

    mask_nats: float = 4.0            # K: per-value log-domain masks are U[-K, K]
    offset_nats: float = float(1 << 20)  # ψ: per-group common offsets are U[-ψ, ψ]
    precision_bits: int = 28          # p: significant bits kept on every dominant term
    log_frac_bits: int = 40           # fraction bits of encrypted logarithms
    range_bits: int = 16              # weights of one sum may span 2^range_bits (e.g. transition probabilities)

    def validate(self) -> MaskParams:
        if not (0.0 <= float(self.mask_nats) <= 64.0):
            raise InvalidMessage(f"mask_nats={self.mask_nats!r} must lie in [0, 64]")
        if not (0.0 <= float(self.offset_nats) <= 2.0 ** 40):
            raise InvalidMessage(f"offset_nats={self.offset_nats!r} must lie in [0, 2^40]")
        if not isinstance(self.precision_bits, int) or not 12 <= self.precision_bits <= 60:
            raise InvalidMessage(f"precision_bits={self.precision_bits!r} must be an integer in [12, 60]")
        if not isinstance(self.log_frac_bits, int) or not 16 <= self.log_frac_bits <= 96:
            raise InvalidMessage(f"log_frac_bits={self.log_frac_bits!r} must be an integer in [16, 96]")
        if not isinstance(self.range_bits, int) or not 0 <= self.range_bits <= 128:
            raise InvalidMessage(f"range_bits={self.range_bits!r} must be an integer in [0, 128]")
        return self

    @property
    def e_bits(self) -> int:
        """F_e: fraction bits of the values Alice returns from a secure exponent."""
        return self.precision_bits + math.ceil(4 * self.mask_nats / LN2) + self.range_bits + 2

    @property
    def weight_bits(self) -> int:
        """W: bits of Bob's integer weights (the largest weight of a group is 2^W)."""
        return self.precision_bits + math.ceil(6 * self.mask_nats / LN2) + self.range_bits + 2

    def sum_slot_bits(self, max_terms: int) -> int:
        """Slot width for packed weighted sums of at most ``max_terms`` terms."""
        return self.e_bits + self.weight_bits + math.ceil(math.log2(max_terms + 1)) + 3


def uniform_masks(rng: random.Random, count: int, half_width: float) -> np.ndarray:
    """``count`` reals uniform on [-half_width, half_width) with 53 random bits each (one read of the RNG)."""
    if half_width == 0.0 or count == 0:
        return np.zeros(count)
    raw = np.frombuffer(rng.randbytes(8 * count), dtype="<u8") >> np.uint64(11)
    return (raw.astype(np.float64) * 2.0 ** -53 * 2.0 - 1.0) * half_width


def ln_int(u: int) -> float:
    """Natural log of a positive (possibly huge) integer, to double precision."""
    u = int(u)
    if u <= 0:
        return NEG_INF
    bl = u.bit_length()
    if bl <= 1000:
        return math.log(u)
    shift = bl - 64
    return math.log(u >> shift) + shift * LN2


# =============================================================================== Bob: weighted sums, packing
@dataclass
class WeightedRows:
    """Integer weights of a batch of weighted sums and the log factor Bob keeps for each row.

    ``rows[i]`` lists ``(input index, k)`` with ``k >= 1``; an empty row is a
    structural zero.  ``log_scale[i]`` is ``ln(k_ij / w_ij)`` (the same for
    every j of row i): the row's sum is ``u_i ≈ e^{log_scale[i]} · Σ_j w_ij θ_j``.
    """

    rows: list[list[tuple[int, int]]]
    log_scale: np.ndarray


def integer_weights(log_w: Sequence[Sequence[tuple[int, float]]], groups: Sequence[int], weight_bits: int,
                    row_masks: np.ndarray | None = None) -> WeightedRows:
    """Real weights in the log domain -> integers with one normaliser per group.

    ``log_w[i]`` lists ``(input index, ln w_ij)`` (``-inf`` entries are
    dropped); ``groups[i]`` is row i's group; ``row_masks[i]`` (φ_i) is added
    to every weight of row i before normalisation.
    """
    n = len(log_w)
    phi = np.zeros(n) if row_masks is None else np.asarray(row_masks, dtype=np.float64)
    lnR: dict[int, float] = {}
    for i, row in enumerate(log_w):
        for _, lw in row:
            if lw != NEG_INF:
                v = lw + phi[i]
                g = groups[i]
                if g not in lnR or v > lnR[g]:
                    lnR[g] = v
    rows: list[list[tuple[int, int]]] = []
    log_scale = np.full(n, NEG_INF)
    top = 2.0 ** weight_bits
    for i, row in enumerate(log_w):
        out = []
        g = groups[i]
        for j, lw in row:
            if lw == NEG_INF:
                continue
            k = round(math.exp(lw + phi[i] - lnR[g]) * top)
            if k > 0:
                out.append((j, k))
        rows.append(out)
        if out:
            log_scale[i] = phi[i] - lnR[g] + weight_bits * LN2
    return WeightedRows(rows, log_scale)


def pack_ciphertexts(pk: PublicKey, values: Sequence[mpz | None], packing: Packing) -> list[mpz]:
    """Homomorphically pack single-value ciphertexts into slots (Horner: c ← c^(2^s) · c_k).

    ``None`` stands for a zero.  Each value must fit its slot (the caller checks bounds).
    """
    n2 = pk.nsquare
    s = packing.slot_bits
    shift = mpz(1) << s
    out = []
    for start in range(0, len(values), packing.slots):
        chunk = values[start:start + packing.slots]
        acc: mpz | None = None
        for c in reversed(chunk):
            if acc is not None:
                acc = gmpy2.powmod(acc, shift, n2)
            if c is not None:
                acc = c if acc is None else acc * c % n2
        out.append(mpz(1) if acc is None else acc)
    return out


def packed_weighted_sums(pk: PublicKey, inputs: Sequence[mpz], input_bound: int, wr: WeightedRows,
                         packing: Packing, pool: ObfuscatorPool) -> EncryptedVector:
    """Bob: ``u_i = Σ_j k_ij · x_j`` for every row, packed and rerandomised.

    Raises :class:`CryptoOverflow` if a slot could exceed its capacity.
    """
    n2 = pk.nsquare
    sums: list[mpz | None] = []
    worst = 0
    for row in wr.rows:
        if not row:
            sums.append(None)
            continue
        worst = max(worst, sum(k for _, k in row) * input_bound)
        sums.append(multi_exp([inputs[j] for j, _ in row], [k for _, k in row], n2))
    cap = packing.slot_capacity if packing.packed else int(pk.max_int)
    if worst > cap:
        raise CryptoOverflow(f"a packed weighted sum could reach {worst.bit_length()} bits, above the "
                             f"{cap.bit_length()}-bit slot capacity; lower precision_bits/mask_nats or use a larger key")
    if packing.packed:
        cts = pack_ciphertexts(pk, sums, packing)
    else:
        cts = [mpz(1) if c is None else c for c in sums]
    cts = [pool.rerandomize(c) for c in cts]
    return EncryptedVector(pk, cts, len(wr.rows), 0, packing, worst)


def preshifted_packed_sums(pk: PublicKey, inputs: Sequence[mpz], input_bound: int, wr: WeightedRows,
                           packing: Packing, pool: ObfuscatorPool) -> EncryptedVector:
    """Bob: packed ``u_i = Σ_j k_ij x_j`` when every input of row i already sits in row i's slot.

    Alice encrypts each value she returns as ``ê · 2^{s·slot(i)}`` for the row i that will use
    it (the layout is public), so Bob needs no shifting: ciphertext c of the result is one
    multi-exponentiation over all terms of the rows it holds.  ``input_bound`` bounds the
    unshifted inputs; :class:`CryptoOverflow` if a slot could exceed its capacity.
    """
    n2 = pk.nsquare
    S = packing.slots if packing.packed else 1
    worst = max((sum(k for _, k in row) * input_bound for row in wr.rows if row), default=0)
    cap = packing.slot_capacity if packing.packed else int(pk.max_int)
    if worst > cap:
        raise CryptoOverflow(f"a packed weighted sum could reach {worst.bit_length()} bits, above the "
                             f"{cap.bit_length()}-bit slot capacity; lower precision_bits/mask_nats or use a larger key")
    cts = []
    for start in range(0, len(wr.rows), S):
        terms = [t for row in wr.rows[start:start + S] for t in row]
        c = multi_exp([inputs[j] for j, _ in terms], [k for _, k in terms], n2) if terms else mpz(1)
        cts.append(pool.rerandomize(c))
    return EncryptedVector(pk, cts, len(wr.rows), 0, packing, worst)


def slot_shift(packing: Packing, index: int) -> int:
    """Bit offset of logical value ``index`` in a packed vector."""
    return packing.slot_bits * (index % packing.slots) if packing.packed else 0


# =============================================================================== Alice: rescaled exponent
def alice_exponentiate(u_log: np.ndarray, v: np.ndarray, groups: Sequence[int], e_bits: int
                       ) -> tuple[list[int], dict[int, float]]:
    """Alice: ``ê_i = round(exp(y_i - m_g) 2^{F_e})`` with ``y_i = u_log_i + v_i`` and
    ``m_g = max_{i∈g} y_i``; returns the integers and the offsets ``m_g``.

    ``-inf`` entries (structural zeros) give ``ê_i = 0``.
    """
    y = np.asarray(u_log, dtype=np.float64) + np.asarray(v, dtype=np.float64)
    if np.any(np.isnan(y)) or np.any(y == np.inf):
        raise InvalidMessage("secure exponent: a masked value is NaN or +inf")
    offsets: dict[int, float] = {}
    for i, g in enumerate(groups):
        if y[i] != NEG_INF and (g not in offsets or y[i] > offsets[g]):
            offsets[g] = float(y[i])
    top = float(1 << e_bits) if e_bits < 1000 else math.inf
    out = []
    for i, g in enumerate(groups):
        if y[i] == NEG_INF:
            out.append(0)
        else:
            out.append(round(math.exp(y[i] - offsets[g]) * top))
    return out, offsets


def encrypt_unpacked(pool: ObfuscatorPool, ints: Sequence[int], exponent: int, bound: int) -> EncryptedVector:
    return EncryptedVector(pool.pk, [pool.encrypt(m) for m in ints], len(ints), exponent, UNPACKED, bound)


def decrypt_log_u(vec: EncryptedVector, sk: PrivateKey) -> np.ndarray:
    """Alice: ``ln u_i`` of a (packed) vector of non-negative sums (``-inf`` for 0)."""
    ints = vec.decrypt_ints(sk)
    if any(u < 0 for u in ints):
        raise InvalidMessage("a masked sum decrypted to a negative value: Bob's message is malformed")
    return np.array([ln_int(u) for u in ints], dtype=np.float64)


# =============================================================================== the three primitives
# Each primitive is a pair of coroutines.  ``tag`` must be unique per call within a session.

@dataclass
class ExpResult:
    """Bob's side of a secure exponent: ``θ_i = ê_i · e^{log_factor_i} · e^{M_g}``.

    ``ciphertexts[i] = ξ(ê_i)``; ``log_factor`` is public to Bob only;
    ``M_g`` (the offsets Alice subtracted) is known to Alice only.
    """

    ciphertexts: list[mpz]
    log_factor: np.ndarray
    groups: list[int]


async def secure_exp_bob(ch: Channel, alice: str, logs: EncryptedVector, groups: Sequence[int],
                         params: MaskParams, pool: ObfuscatorPool, rng: random.Random, tag: str) -> ExpResult:
    """Bob has ``ξ(ℓ_i)`` (unpacked, fixed point); obtains ``ξ(θ_i e^{-M_g})`` with θ_i = e^{ℓ_i}.

    One round trip for the whole batch.  The seed's secure exponent with
    Alice's per-group rescaling: Alice removes ``m_g`` so that nothing
    underflows, and adds ``M_g`` back in a later secure logarithm.
    """
    params.validate()
    pk = logs.public_key
    n = logs.length
    if len(groups) != n:
        raise InvalidMessage("secure exponent: one group per value is needed")
    frac = -logs.exponent
    rho = uniform_masks(rng, n, params.mask_nats)
    gids = sorted(set(groups))
    psi_g = dict(zip(gids, uniform_masks(rng, len(gids), params.offset_nats)))
    total = np.array([rho[i] + psi_g[g] for i, g in enumerate(groups)])
    masks = [encode_float(float(t), frac) for t in total]
    cap = int(pk.max_int)
    bound = logs.bound + max(abs(m) for m in masks)
    if bound > cap:
        raise CryptoOverflow("secure exponent: masked logarithms would overflow the plaintext space")
    n2 = pk.nsquare
    cts = [pool.rerandomize(c * ((1 + pk.n * pk.raw_plain(m)) % n2) % n2) for c, m in zip(logs.ciphertexts, masks)]
    await ch.send(alice, f"{tag}/exp-v", EncryptedVector(pk, cts, n, logs.exponent, UNPACKED, bound).to_proto())
    await ch.send(alice, f"{tag}/exp-groups", pb.Ints(values=list(groups)))
    e_bits = params.e_bits
    back = EncryptedVector.from_proto(await ch.recv(alice, f"{tag}/exp-e", pb.CiphertextVector), pk,
                                      length=n, exponent=-e_bits, packing=UNPACKED, bound=1 << e_bits,
                                      what=f"{tag}/exp-e from {alice}")
    # θ_i = ê_i 2^{-F_e} e^{M_g} e^{-(ρ_i + ψ_g)}  (exact masks: Bob uses the encoded integers)
    log_factor = np.array([-e_bits * LN2 - m / 2.0 ** frac for m in masks])
    return ExpResult(back.ciphertexts, log_factor, list(groups))


async def secure_exp_alice(ch: Channel, bob: str, sk: PrivateKey, params: MaskParams, pool: ObfuscatorPool,
                           tag: str, *, length: int, exponent: int) -> dict[int, float]:
    """Alice's side of :func:`secure_exp_bob`; returns her offsets ``m_g`` per group."""
    pk = sk.public_key
    v = EncryptedVector.from_proto(await ch.recv(bob, f"{tag}/exp-v", pb.CiphertextVector), pk, length=length,
                                   exponent=exponent, packing=UNPACKED, what=f"{tag}/exp-v from {bob}")
    groups = list((await ch.recv(bob, f"{tag}/exp-groups", pb.Ints)).values)
    if len(groups) != length:
        raise InvalidMessage(f"{tag}/exp-groups from {bob} has {len(groups)} entries, expected {length}")
    vals = v.decrypt(sk)
    ints, offsets = alice_exponentiate(np.zeros(length), vals, groups, params.e_bits)
    e_bits = params.e_bits
    await ch.send(bob, f"{tag}/exp-e", encrypt_unpacked(pool, ints, -e_bits, 1 << e_bits).to_proto())
    return offsets


async def secure_log_bob(ch: Channel, alice: str, values: Sequence[mpz], value_bound: int,
                         log_factor: np.ndarray, groups: Sequence[int], params: MaskParams, pool: ObfuscatorPool,
                         rng: random.Random, tag: str, *, pk: PublicKey) -> EncryptedVector:
    """Bob has ``ξ(x_i)`` (integers ``0 < x_i <= value_bound``) with ``θ_i = x_i · e^{log_factor_i} · e^{M_g}``
    (``M_g``: Alice's offsets of group g, 0 if none); obtains ``ξ(ln θ_i)`` (exponent ``-log_frac_bits``).
    One round trip.

    Multiplicative mask: Bob sends ``ξ(β_i x_i)`` packed, with a real ``β_i = e^{φ_i}``,
    ``φ_i ~ U[-K, K]``, encoded as the integer ``k_i = round(2^p e^{φ_i + K})``; Alice returns
    ``ξ(ln(k_i x_i) + M_g)``; Bob subtracts ``ln k_i``.
    """
    n = len(values)
    phi = uniform_masks(rng, n, params.mask_nats)
    ks = [max(1, round(math.exp(phi[i] + params.mask_nats) * 2.0 ** params.precision_bits)) for i in range(n)]
    wr = WeightedRows([[(i, ks[i])] for i in range(n)], np.array([math.log(k) for k in ks]))
    slot_bits = value_bound.bit_length() + max(ks).bit_length() + 3
    packing = Packing.for_key(pk, slot_bits)
    vec = packed_weighted_sums(pk, values, value_bound, wr, packing, pool)
    await ch.send(alice, f"{tag}/log-u", vec.to_proto())
    await ch.send(alice, f"{tag}/log-groups", pb.Ints(values=list(groups)))
    F = params.log_frac_bits
    back = EncryptedVector.from_proto(await ch.recv(alice, f"{tag}/log-l", pb.CiphertextVector), pk, length=n,
                                      exponent=-F, packing=UNPACKED, bound=int(pk.max_int) // 4,
                                      what=f"{tag}/log-l from {alice}")
    corr = [encode_float(float(log_factor[i] - wr.log_scale[i]), F) for i in range(n)]
    return back + EncryptedVector.trivial(pk, corr, exponent=-F)


async def secure_log_alice(ch: Channel, bob: str, sk: PrivateKey, params: MaskParams, pool: ObfuscatorPool,
                           tag: str, *, length: int, offsets: dict[int, float] | None = None) -> None:
    """Alice's side of :func:`secure_log_bob`; ``offsets`` are her accumulated ``M_g``."""
    pk = sk.public_key
    u = EncryptedVector.from_proto(await ch.recv(bob, f"{tag}/log-u", pb.CiphertextVector), pk, length=length,
                                   what=f"{tag}/log-u from {bob}")
    groups = list((await ch.recv(bob, f"{tag}/log-groups", pb.Ints)).values)
    if len(groups) != length:
        raise InvalidMessage(f"{tag}/log-groups from {bob} has {len(groups)} entries, expected {length}")
    lu = decrypt_log_u(u, sk)
    if np.any(lu == NEG_INF):
        raise InvalidMessage("secure logarithm of zero: the value has no logarithm")
    offsets = offsets or {}
    F = params.log_frac_bits
    ints = [encode_float(float(lu[i] + offsets.get(g, 0.0)), F) for i, g in enumerate(groups)]
    bound = int(pk.max_int) // 4
    if max(abs(x) for x in ints) > bound:
        raise CryptoOverflow("secure logarithm: a result does not fit the plaintext space")
    await ch.send(bob, f"{tag}/log-l", encrypt_unpacked(pool, ints, -F, bound).to_proto())


async def secure_logsum_bob(ch: Channel, alice: str, logs: EncryptedVector, weights: np.ndarray,
                            params: MaskParams, pool: ObfuscatorPool, rng: random.Random, tag: str,
                            groups: Sequence[int] | None = None) -> EncryptedVector:
    """Bob has ``ξ(ln θ_1..n)`` and plaintext weights ``A`` (rows × n, ``a_ri >= 0``);
    obtains ``ξ(ln Σ_i a_ri θ_i)`` for every row r.  Two round trips for the whole batch
    (secure exponent, then secure logarithm), as in the seed.

    ``groups[i]`` says which independent LOGSUM value i belongs to (default: all one): Alice
    rescales each group by its own maximum, so every row must draw on one group only — put
    unrelated sums in different groups, or a sum far below another one loses precision.
    Every row needs at least one positive weight.

    **Reference implementation** of the seed's LOGSUM (003 §4.2.1: secure exponent, weighted
    sum, secure logarithm), kept standalone and tested against the fused forms the protocol
    runs instead: :mod:`smcdp.protocols.secure_forward` ``_alice_mixture``/``_bob_mixture``
    (mixture emissions: exponent + weighted sum, and Alice keeps the masked ``ln u + m`` in
    the clear instead of the secure logarithm's re-encryption) and its induction (seed steps
    5–7: the secure logarithm of frame t fused with the secure exponent of frame t + 1).
    tests/unit/protocols/test_secure_forward_logsum.py checks that both agree.
    """
    A = np.asarray(weights, dtype=np.float64)
    n = logs.length
    groups = [0] * n if groups is None else [int(g) for g in groups]
    if len(groups) != n:
        raise InvalidMessage("LOGSUM: one group per value is needed")
    if A.ndim != 2 or A.shape[1] != n or np.any(A < 0) or not np.all(np.isfinite(A)):
        raise InvalidMessage(f"LOGSUM weights must be a finite non-negative matrix with {n} columns")
    if np.any(A.sum(axis=1) <= 0):
        raise InvalidMessage("every LOGSUM row needs a positive weight")
    row_group = []
    for r in range(A.shape[0]):
        gs = {groups[i] for i in np.flatnonzero(A[r] > 0)}
        if len(gs) != 1:
            raise InvalidMessage(f"LOGSUM row {r} draws on several groups {sorted(gs)}")
        row_group.append(gs.pop())
    pk = logs.public_key
    ex = await secure_exp_bob(ch, alice, logs, groups, params, pool, rng, f"{tag}/exp")
    with np.errstate(divide="ignore"):
        lnA = np.log(A)
    log_w = [[(i, float(lnA[r, i] + ex.log_factor[i])) for i in range(n) if A[r, i] > 0] for r in range(A.shape[0])]
    wr = integer_weights(log_w, list(range(A.shape[0])), params.weight_bits)
    packing = Packing.for_key(pk, params.sum_slot_bits(n))
    u = packed_weighted_sums(pk, ex.ciphertexts, 1 << params.e_bits, wr, packing, pool)
    await ch.send(alice, f"{tag}/sum-u", u.to_proto())
    await ch.send(alice, f"{tag}/sum-groups", pb.Ints(values=row_group))
    F = params.log_frac_bits
    back = EncryptedVector.from_proto(await ch.recv(alice, f"{tag}/sum-l", pb.CiphertextVector), pk,
                                      length=A.shape[0], exponent=-F, packing=UNPACKED,
                                      bound=int(pk.max_int) // 4, what=f"{tag}/sum-l from {alice}")
    corr = [encode_float(float(-wr.log_scale[r]), F) for r in range(A.shape[0])]
    return back + EncryptedVector.trivial(pk, corr, exponent=-F)


async def secure_logsum_alice(ch: Channel, bob: str, sk: PrivateKey, params: MaskParams, pool: ObfuscatorPool,
                              tag: str, *, length: int, exponent: int, rows: int) -> None:
    """Alice's side of :func:`secure_logsum_bob` (the reference LOGSUM; see there for the fused forms)."""
    offsets = await secure_exp_alice(ch, bob, sk, params, pool, f"{tag}/exp", length=length, exponent=exponent)
    pk = sk.public_key
    u = EncryptedVector.from_proto(await ch.recv(bob, f"{tag}/sum-u", pb.CiphertextVector), pk, length=rows,
                                   what=f"{tag}/sum-u from {bob}")
    row_group = list((await ch.recv(bob, f"{tag}/sum-groups", pb.Ints)).values)
    if len(row_group) != rows or any(g not in offsets for g in row_group):
        raise InvalidMessage(f"{tag}/sum-groups from {bob} does not name one known group per row")
    lu = decrypt_log_u(u, sk)
    if np.any(lu == NEG_INF):
        raise InvalidMessage("LOGSUM: a weighted sum decrypted to zero")
    F = params.log_frac_bits
    ints = [encode_float(float(x + offsets[g]), F) for x, g in zip(lu, row_group)]
    await ch.send(bob, f"{tag}/sum-l", encrypt_unpacked(pool, ints, -F, int(pk.max_int) // 4).to_proto())
