"""Secure argmin of additively shared values by blind and permute (seed 003 §4.1.3, Stage 1).

K parties (roles ``party1`` … ``partyK``) each hold a private non-negative
integer v_j; a curator (role ``charlie`` by default) helps.  At the end the
curator knows the index j̃ of the smallest value *in a doubly permuted order*
(the parties' permutation π₁, unknown to him, followed by his own π₂, unknown
to the parties); the parties know π₁.  Nobody learns any v_j, and nobody
learns which party holds the minimum.  ``smcdp.protocols.dp_aggregate`` uses
the two permutations to route the smallest party's noise obliviously (Stage 2).

Steps (numbers as in the seed):

0. party1 generates the parties' Paillier key ξ (Charlie never gets its
   private half) and π₁, and sends both to the other parties over their
   mutually authenticated channels; Charlie generates his own Paillier key ζ
   and sends the public key to every party.
1. Each party j forms v'_j = K·v_j + (j − 1) -- all v'_j are distinct, ties of
   v are broken by the lower party index -- and splits it into additive
   shares v'_j = a_j + b_j with b_j uniform in [0, 2^(L'+κ)), L' the bit
   length of v', κ the statistical security parameter (≥ 40).
2. Party j sends a_j to the party at position π₁(j) and ζ(b_j) -- encrypted
   under *Charlie's* key -- to the same party, which forwards it to Charlie.
   **Deviation from the seed**, which lets P_j send b_j to Charlie directly
   "with the index changed": over authenticated channels Charlie knows who
   sent what, so he would learn π₁.  Routed through position π₁(j) and
   re-randomised, the share reaches Charlie from the party at that position.
3. The party at position k sends ξ(a at k) and (re-randomised) ζ(b at k) to
   Charlie, who decrypts the latter: he holds π₁(b), the parties π₁(a).
4. Charlie draws r_k uniform in [−2^(L'+2κ), 2^(L'+2κ)) (equally likely
   positive or negative), computes ξ(a_k + r_k) (fresh encryption of r_k, so
   the result is re-randomised) and b_k − r_k, draws π₂ and sends the i-th
   element of ξ(π₂(π₁(a) + r)) to party i.
5. Party i decrypts ã_i.  ã = π₂(π₁(a) + r), b̃ = π₂(π₁(b) − r) and
   ã + b̃ = π₂(π₁(v')).
6. v'_i < v'_j  ⟺  ã_i − ã_j < b̃_j − b̃_i: for every pair i < j, party i
   holds x = ã_i − ã_j (party j sends it ã_j; ã_j is masked by Charlie's r_j,
   statistically hiding a_j, and a_j itself hides v' behind b_j) and Charlie
   holds y = b̃_j − b̃_i.  A DGK comparison (``smcdp.primitives.comparison``,
   Charlie holds the DGK key and gets the bit) gives Charlie [v'_i < v'_j].
   Party i learns only DGK ciphertexts.  Charlie learns the complete order of
   the doubly permuted values; because the v'_j are distinct and π₁ is
   uniform and unknown to him, that order is a uniformly random permutation
   whatever the inputs are, so it tells him nothing (ties, which would show in
   the comparison bits, cannot occur).

Bit budget: |ã|, |b̃| < 2^(L'+2κ+1), so differences fit ell = L' + 2κ + 3
signed bits, the DGK comparison length.  docs/protocols/dp-aggregate.md has
the full "who learns what".
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from smcdp.crypto import dgk
from smcdp.crypto.codec import (
    bigints,
    ciphertext_from_proto,
    ciphertext_to_proto,
    from_bigints,
    keypair_from_proto,
    keypair_to_proto,
    public_key_from_proto,
    public_key_to_proto,
)
from smcdp.crypto.paillier import (
    PrivateKey,
    PublicKey,
    check_key_bits,
    generate_keypair,
)
from smcdp.errors import InvalidMessage
from smcdp.net.channel import Channel
from smcdp.primitives.comparison import compare_holder_a, compare_holder_b
from smcdp.primitives.rng import SeedLike, protocol_rng
from smcdp.v1 import messages_pb2 as pb

CHARLIE = "charlie"
MAX_PARTIES = 64


# =============================================================================== parameters
@dataclass
class SecureMinParams:
    """Public parameters of the secure argmin, agreed by every participant."""

    n_parties: int = 3
    value_bits: int = 64          # every private value lies in [0, 2^value_bits)
    mask_bits: int = 40           # κ: statistical hiding of every mask (≥ 40)
    key_bits: int = 2048          # the parties' Paillier key ξ and Charlie's ζ
    dgk_bits: int = 2048          # Charlie's DGK modulus
    dgk_t: int = 224              # DGK subgroup order bits
    curator: str = CHARLIE

    def validate(self) -> SecureMinParams:
        def bad(msg):
            raise InvalidMessage(f"secure-min parameter {msg}")

        for name in ("n_parties", "value_bits", "mask_bits", "key_bits", "dgk_bits", "dgk_t"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                bad(f"{name}={v!r} must be an integer")
        if not 2 <= self.n_parties <= MAX_PARTIES:
            bad(f"n_parties={self.n_parties} must lie in [2, {MAX_PARTIES}]")
        if not 1 <= self.value_bits <= 128:
            bad(f"value_bits={self.value_bits} must lie in [1, 128]")
        if not 40 <= self.mask_bits <= 128:
            bad(f"mask_bits={self.mask_bits} must lie in [40, 128] (statistical hiding needs at least 40 bits)")
        if not 256 <= self.key_bits <= 16384:
            bad(f"key_bits={self.key_bits} must lie in [256, 16384]")
        if not dgk.ABSOLUTE_MIN_MODULUS_BITS <= self.dgk_bits <= 16384 or self.dgk_bits % 2:
            bad(f"dgk_bits={self.dgk_bits} must be even and in [{dgk.ABSOLUTE_MIN_MODULUS_BITS}, 16384]")
        if not dgk.ABSOLUTE_MIN_T_BITS <= self.dgk_t <= 512:
            bad(f"dgk_t={self.dgk_t} must lie in [{dgk.ABSOLUTE_MIN_T_BITS}, 512]")
        if not isinstance(self.curator, str) or not self.curator or self.curator.startswith("party"):
            bad(f"curator={self.curator!r} must be a role name that does not start with 'party'")
        if self.ell + 3 >= dgk.MAX_U:
            bad("comparison length too large")
        if self.masked_bits + 8 > self.key_bits - 2:
            bad(f"key_bits={self.key_bits} too small for masked values of {self.masked_bits} bits")
        return self

    @property
    def party_roles(self) -> list[str]:
        return [f"party{i}" for i in range(1, self.n_parties + 1)]

    @property
    def tiebreak_bits(self) -> int:
        return max(1, (self.n_parties - 1).bit_length())

    @property
    def shared_bits(self) -> int:
        """L': bits of the tie-broken value v' = K·v + index."""
        return self.value_bits + self.tiebreak_bits

    @property
    def masked_bits(self) -> int:
        """|ã|, |b̃| < 2^masked_bits."""
        return self.shared_bits + 2 * self.mask_bits + 1

    @property
    def ell(self) -> int:
        """Signed bit length of the compared differences."""
        return self.shared_bits + 2 * self.mask_bits + 3


@dataclass
class PartyArgminResult:
    position: int                 # where this party's share sits after π₁ (0-based)
    pi1: list[int]                # π₁: party index -> position
    xi_key: PrivateKey            # the parties' key ξ (never given to Charlie)
    zeta_pk: PublicKey            # Charlie's public key ζ
    stats: dict = field(default_factory=dict)


@dataclass
class CuratorArgminResult:
    index: int                    # j̃: the smallest value's index in the doubly permuted order
    position: int                 # π₂⁻¹(j̃): its position in the parties' (π₁) order
    pi2: list[int]                # doubly permuted index i holds position pi2[i]
    zeta_key: PrivateKey          # Charlie's key ζ
    xi_pk: PublicKey              # the parties' public key ξ
    comparisons: int = 0
    stats: dict = field(default_factory=dict)


# =============================================================================== helpers
def random_permutation(rng: random.Random, k: int) -> list[int]:
    perm = list(range(k))
    rng.shuffle(perm)
    return perm


def check_permutation(values: Sequence[int], k: int, what: str) -> list[int]:
    perm = [int(v) for v in values]
    if sorted(perm) != list(range(k)):
        raise InvalidMessage(f"{what} is not a permutation of 0..{k - 1}")
    return perm


def _decrypt_bounded(sk: PrivateKey, c, bound_bits: int, what: str) -> int:
    v = sk.raw_decrypt_signed(c)
    if abs(v) >= 1 << bound_bits:
        raise InvalidMessage(f"{what} decrypts to a value outside ±2^{bound_bits}")
    return v


def argmin_from_bits(bits: Mapping[tuple[int, int], int], k: int) -> int:
    """The index that beats every other, from z[(i, j)] = [v_i < v_j] for all i < j.

    Refuses a set of bits that is not a strict total order (a faulty peer or
    corrupted comparison): the number of wins must be a permutation of 0..k−1.
    """
    if set(bits) != {(i, j) for i in range(k) for j in range(i + 1, k)}:
        raise InvalidMessage("comparison results do not cover every pair exactly once")
    wins = [0] * k
    for (i, j), z in bits.items():
        if z not in (0, 1):
            raise InvalidMessage("a comparison bit is not 0 or 1")
        wins[i if z else j] += 1
    if sorted(wins) != list(range(k)):
        raise InvalidMessage("comparison results are not a total order (inconsistent comparisons)")
    # a strict total order: the winner of every comparison it takes part in has k−1 wins
    return wins.index(k - 1)


# =============================================================================== party side
async def argmin_party(ch: Channel, value: int, params: SecureMinParams, *, seed: SeedLike = None,
                       xi_key: PrivateKey | None = None, allow_insecure_keys: bool = False,
                       tag: str = "s1") -> PartyArgminResult:
    """Role ``party<j>``: holds the private value ``value`` in [0, 2^value_bits)."""
    params.validate()
    roles = params.party_roles
    if ch.role not in roles:
        raise InvalidMessage(f"role {ch.role!r} is not a party role of this secure minimum")
    K = params.n_parties
    me = roles.index(ch.role)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidMessage(f"{ch.role}: the private value must be an integer, got {type(value).__name__}")
    if not 0 <= value < 1 << params.value_bits:
        raise InvalidMessage(f"{ch.role}: the private value must lie in [0, 2^{params.value_bits})")
    check_key_bits(params.key_bits, allow_insecure_keys)
    rng = protocol_rng(seed, "secure-min", ch.role)
    C = params.curator

    # --- Step 0: ξ and π₁ from party1 (parties only); ζ's public key from Charlie.
    if me == 0:
        if xi_key is None:
            _, xi_key = generate_keypair(params.key_bits, allow_insecure=allow_insecure_keys,
                                         rng=protocol_rng(seed, "secure-min", ch.role, "xi-key"))
        check_key_bits(xi_key.public_key.bits, allow_insecure_keys)
        pi1 = random_permutation(rng, K)
        await ch.send_many(roles[1:], f"{tag}/xi-keypair", keypair_to_proto(xi_key))
        await ch.send_many(roles[1:], f"{tag}/pi1", pb.Ints(values=pi1))
        await ch.send(C, f"{tag}/xi-pk", public_key_to_proto(xi_key.public_key))
    else:
        xi_key = keypair_from_proto(await ch.recv(roles[0], f"{tag}/xi-keypair", pb.PaillierKeyPair),
                                    allow_insecure=allow_insecure_keys)
        pi1 = check_permutation((await ch.recv(roles[0], f"{tag}/pi1", pb.Ints)).values, K, "π₁ from party1")
    xi_pk = xi_key.public_key
    zeta_pk = public_key_from_proto(await ch.recv(C, f"{tag}/zeta-pk", pb.PaillierPublicKey),
                                    allow_insecure=allow_insecure_keys)
    if zeta_pk.bits < params.masked_bits + 8:
        raise InvalidMessage("Charlie's key is too small for the masked shares")

    # --- Step 1: v' = K·v + j (distinct), shares v' = a + b with b uniform in [0, 2^(L'+κ)).
    v_prime = K * value + me
    b = rng.randrange(1 << (params.shared_bits + params.mask_bits))
    a = v_prime - b
    share_bits = params.shared_bits + params.mask_bits + 1

    # --- Step 2: a and ζ(b) to the party at position π₁(me).
    pos = pi1[me]
    inv = [0] * K
    for j, p in enumerate(pi1):
        inv[p] = j
    src = inv[me]                                   # the party whose shares I hold
    zb_mine = ciphertext_to_proto(zeta_pk, zeta_pk.raw_encrypt_textbook(b))
    if pos != me:
        await ch.send(roles[pos], f"{tag}/a", bigints([a]))
        await ch.send(roles[pos], f"{tag}/zb", zb_mine)
    if src == me:
        held_a, held_zb = a, zeta_pk.rerandomize_textbook(ciphertext_from_proto(zb_mine, zeta_pk, "own ζ(b)"))
    else:
        (held_a,) = from_bigints(await ch.recv(roles[src], f"{tag}/a", pb.BigInts), count=1,
                                 bound_bits=share_bits, what=f"{tag}/a from {roles[src]}")
        held_zb = zeta_pk.rerandomize_textbook(ciphertext_from_proto(await ch.recv(roles[src], f"{tag}/zb", pb.CiphertextVector),
                                                 zeta_pk, f"{tag}/zb from {roles[src]}"))

    # --- Step 3: ξ(a at my position) and ζ(b at my position) to Charlie.
    await ch.send(C, f"{tag}/xa", ciphertext_to_proto(xi_pk, xi_pk.raw_encrypt_textbook(held_a)))
    await ch.send(C, f"{tag}/zb", ciphertext_to_proto(zeta_pk, held_zb))

    # --- Step 5: decrypt ã_me.
    at_me = _decrypt_bounded(xi_key, ciphertext_from_proto(await ch.recv(C, f"{tag}/xat", pb.CiphertextVector), xi_pk,
                                               f"{tag}/xat from {C}"), params.masked_bits, f"{tag}/xat")

    # --- Step 6: ã_me to every lower index; DGK comparisons of pairs (me, j > me) against Charlie.
    if me > 0:
        await ch.send_many(roles[:me], f"{tag}/at", bigints([at_me]))
    if me < K - 1:
        later = {}
        for j in range(me + 1, K):
            (later[j],) = from_bigints(await ch.recv(roles[j], f"{tag}/at", pb.BigInts), count=1,
                                       bound_bits=params.masked_bits, what=f"{tag}/at from {roles[j]}")
        xs = [at_me - later[j] for j in range(me + 1, K)]
        await compare_holder_a(ch, C, xs, ell=params.ell, predicate="lt", output="b",
                               tag_prefix=f"{tag}/cmp{me}", allow_insecure=allow_insecure_keys,
                               min_key_bits=params.dgk_bits, rng=protocol_rng(seed, "secure-min", ch.role, "cmp"))
    return PartyArgminResult(position=pos, pi1=pi1, xi_key=xi_key, zeta_pk=zeta_pk, stats=ch.stats.as_dict())


# =============================================================================== curator side
async def argmin_curator(ch: Channel, params: SecureMinParams, *, seed: SeedLike = None,
                         zeta_key: PrivateKey | None = None, dgk_key: dgk.DGKPrivateKey | None = None,
                         allow_insecure_keys: bool = False, tag: str = "s1") -> CuratorArgminResult:
    """Role ``charlie``: ends with the index of the smallest value in the doubly permuted order."""
    params.validate()
    if ch.role != params.curator:
        raise InvalidMessage(f"role {ch.role!r} is not the curator {params.curator!r}")
    roles = params.party_roles
    K = params.n_parties
    check_key_bits(params.key_bits, allow_insecure_keys)
    rng = protocol_rng(seed, "secure-min", ch.role)

    # --- Step 0: ζ (Charlie's own key) to the parties; ξ's public key from party1.
    if zeta_key is None:
        _, zeta_key = generate_keypair(params.key_bits, allow_insecure=allow_insecure_keys,
                                       rng=protocol_rng(seed, "secure-min", ch.role, "zeta-key"))
    check_key_bits(zeta_key.public_key.bits, allow_insecure_keys)
    zeta_pk = zeta_key.public_key
    await ch.send_many(roles, f"{tag}/zeta-pk", public_key_to_proto(zeta_pk))
    xi_pk = public_key_from_proto(await ch.recv(roles[0], f"{tag}/xi-pk", pb.PaillierPublicKey),
                                  allow_insecure=allow_insecure_keys)
    if xi_pk.bits < params.masked_bits + 8:
        raise InvalidMessage("the parties' key is too small for the masked shares")
    if dgk_key is None:
        dgk_key = dgk.generate_keypair(params.dgk_bits, params.dgk_t, max_ell=max(params.ell, dgk.DEFAULT_MAX_ELL),
                                       allow_insecure=allow_insecure_keys,
                                       rng=protocol_rng(seed, "secure-min", ch.role, "dgk-key"))
    if dgk_key.public.u <= params.ell + 2:
        raise InvalidMessage(f"the DGK key supports comparisons of at most {dgk_key.public.u - 3} bits, "
                             f"{params.ell} needed")

    # --- Step 3: ξ(a_k) and ζ(b_k) from the party at each position k; decrypt b.
    share_bits = params.shared_bits + params.mask_bits + 1
    xa, b = [], []
    for k, r in enumerate(roles):
        xa.append(ciphertext_from_proto(await ch.recv(r, f"{tag}/xa", pb.CiphertextVector), xi_pk, f"{tag}/xa from {r}"))
        zb = ciphertext_from_proto(await ch.recv(r, f"{tag}/zb", pb.CiphertextVector), zeta_pk, f"{tag}/zb from {r}")
        bk = _decrypt_bounded(zeta_key, zb, share_bits, f"{tag}/zb from {r}")
        if bk < 0:
            raise InvalidMessage(f"{tag}/zb from {r} decrypts to a negative share")
        b.append(bk)

    # --- Step 4: blind with r, permute with π₂, send element i to party i.
    rbits = params.shared_bits + 2 * params.mask_bits
    r = [rng.randrange(-(1 << rbits), 1 << rbits) for _ in range(K)]
    xa_r = [xi_pk.raw_add(c, xi_pk.raw_encrypt_textbook(rk)) for c, rk in zip(xa, r)]      # ξ(a_k + r_k), re-randomised
    b_r = [bk - rk for bk, rk in zip(b, r)]
    pi2 = random_permutation(rng, K)                    # doubly permuted index i holds position pi2[i]
    b_t = [b_r[pi2[i]] for i in range(K)]
    for i, role in enumerate(roles):
        await ch.send(role, f"{tag}/xat", ciphertext_to_proto(xi_pk, xa_r[pi2[i]]))

    # --- Step 6: [ñ_i < ñ_j] for every pair i < j by DGK; party i holds the party side of (i, j > i).
    async def batch(i: int) -> list[int]:
        ys = [b_t[j] - b_t[i] for j in range(i + 1, K)]
        return await compare_holder_b(ch, roles[i], ys, ell=params.ell, key=dgk_key, predicate="lt",
                                      output="b", tag_prefix=f"{tag}/cmp{i}")

    results = await asyncio.gather(*(batch(i) for i in range(K - 1)))
    bits = {(i, j): int(z) for i, zs in enumerate(results) for j, z in zip(range(i + 1, K), zs)}
    index = argmin_from_bits(bits, K)
    return CuratorArgminResult(index=index, position=pi2[index], pi2=pi2, zeta_key=zeta_key, xi_pk=xi_pk,
                               comparisons=len(bits), stats=ch.stats.as_dict())
