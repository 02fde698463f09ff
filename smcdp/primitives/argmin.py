"""Secure argmin of additively shared values: blind, permute and a tournament (seed 003 §4.1.3, Stage 1).

K parties (roles ``party1`` … ``partyK``) each hold a private non-negative
integer v_j; a curator (role ``charlie`` by default) helps.  At the end the
curator knows the *position* of the smallest value in the parties' secret
order π₁ (unknown to him); each party knows only its own position and whose
shares it held.  Nobody learns any v_j, and nobody learns which party holds
the minimum.  ``smcdp.protocols.dp_aggregate`` routes the smallest party's
noise by that position (Stage 2) and then lets every party *verify* the
selection (:func:`check_selection_party`: "the selected value is ≤ mine",
secure against a curator who deviates).

Steps (numbers as in the seed where they exist):

0. party1 generates the parties' Paillier key ξ (Charlie never gets its
   private half) and π₁, sends every party j its own position π₁(j) and the
   party whose shares it will hold, π₁⁻¹(j) -- nothing else of π₁ -- and ξ
   down a binary tree of the parties (party i forwards it to parties 2i and
   2i + 1, so nobody sends more than two copies); Charlie generates his own
   Paillier keys ζ and β and sends the public keys to every party.  β
   encrypts only the shares b of step 2, and Charlie never decrypts anything
   under it for anyone: a protocol built on this one may have him open
   values under ζ to the parties (dp-aggregate's selection check and its
   reveal of the selected key), and the party holding a_j must not be able
   to have b_j opened -- it would read v'_j = a_j + b_j.  (With one key, a
   shift of the forwarded ciphertext by its known a_j -- ζ(b_j)·ζ(a_j − j)
   = ζ(K·v_j) -- fitted any window that holds the selected value.)
1. Each party j forms v'_j = K·v_j + (j − 1) -- all v'_j are distinct, ties of
   v are broken by the lower party index -- and splits it into additive
   shares v'_j = a_j + b_j with b_j uniform in [0, 2^(L'+κ)), L' the bit
   length of v', κ the statistical security parameter (≥ 40).
2. Party j sends a_j and β(b_j) -- encrypted under *Charlie's* key β -- to
   the party at position π₁(j) (party index π₁(j)), which forwards β(b_j) to
   Charlie.  **Deviation from the seed**, which lets P_j send b_j to Charlie
   directly "with the index changed": over authenticated channels Charlie
   knows who sent what, so he would learn π₁.
3. The party at position k sends ξ(a at k) and (re-randomised) β(b at k) to
   Charlie, who decrypts the latter: he holds b_k, the parties hold a_k, and
   a_k + b_k = v' of the party at position k.
4. **Tournament** (replaces the seed's comparison of every pair):
   ⌈log₂ K⌉ rounds over the positions; round r pairs the survivors in order
   (an odd one out advances), and every match of a round runs at once.  The
   t-th match of the bracket (t = 0 … K − 2, round by round, left to right)
   is evaluated by party t + 2 -- a public schedule, so every party but
   party1 evaluates exactly one match.  For the match of positions p, q
   Charlie draws r uniform in [−2^(L'+2κ), 2^(L'+2κ)) and sends that party
   ξ(a_p − a_q + r) (homomorphically, fresh encryption of r); the party
   decrypts x = a_p − a_q + r, Charlie holds y = b_q − b_p + r, and
   v'_p < v'_q ⟺ x < y: a DGK comparison (``smcdp.primitives.comparison``)
   tells Charlie which advances.  **The evaluating party holds the DGK key**
   and Charlie gets the bit: DGK protects the non-holder only against a key
   holder who follows the protocol (a malformed key reads the other side's
   input whole: docs/primitives.md), and Charlie holding it read every
   evaluator's x, hence v'_p − v'_q of every match (a review; until
   2026-12-05).  A deviating evaluator could read Charlie's y likewise: its
   match's v'_p − v'_q, the two parties' key difference and (mod K) their
   indices -- at K = 2 the other party's key (data parties are semi-honest
   in dp-aggregate's guarantee).
   K − 1 comparisons in all instead of K(K−1)/2.

What everybody sees: the evaluating party sees x, statistically hidden by r
(distance < 2^-κ), without knowing which positions p, q it compares.
Charlie sees the b_k (uniform, independent of the values) and the match
results.  The v' are distinct and π₁ is uniform and unknown to him, so the
ranks of the values over the positions form a uniformly random permutation
σ whatever the inputs are; the results are a function of σ -- the winner's
position and the bracket -- and therefore distributed as the bracket of a
uniformly random permutation, independent of the inputs.  (The seed's
all-pairs version revealed σ itself, equally independent of the inputs but
log₂(K!) bits instead of K − 1.)

Bit budget: |x|, |y| < 2^(L'+2κ+1), so ell = L' + 2κ + 3 signed bits is the
DGK comparison length.  docs/protocols/dp-aggregate.md has the full "who
learns what".
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NoReturn, SupportsInt

from smcdp.crypto import dgk
from smcdp.crypto.codec import (
    bigints,
    ciphertext_from_proto,
    ciphertext_to_proto,
    from_bigints,
    keypair_from_proto,
    keypair_to_proto,
    peer_public_key,
    public_key_from_proto,
    public_key_to_proto,
)
from smcdp.crypto.paillier import (
    PrivateKey,
    PublicKey,
    check_key_bits,
    generate_keypair,
)
from smcdp.crypto.zkp import open_ciphertext, verify_opening
from smcdp.errors import CryptoOverflow, InvalidMessage
from smcdp.net.channel import Channel
from smcdp.primitives.comparison import compare_holder_a, compare_holder_b
from smcdp.primitives.owned_key import recv_owned_key, send_owned_key
from smcdp.primitives.rng import SeedLike, protocol_rng
from smcdp.v1 import messages_pb2 as pb

CHARLIE = "charlie"
MAX_PARTIES = 256


# =============================================================================== parameters
@dataclass
class SecureMinParams:
    """Public parameters of the secure argmin, agreed by every participant."""

    n_parties: int = 3
    value_bits: int = 64  # every private value lies in [0, 2^value_bits)
    mask_bits: int = 40  # κ: statistical hiding of every mask (≥ 40)
    key_bits: int = 2048  # the parties' Paillier key ξ and Charlie's ζ
    dgk_bits: int = 2048  # each evaluating party's DGK modulus (and the parties' keys of the selection check)
    dgk_t: int = 224  # DGK subgroup order bits
    curator: str = CHARLIE

    def validate(self) -> SecureMinParams:
        def bad(msg: str) -> NoReturn:
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
        if max(self.ell, self.check_ell) + 3 >= dgk.MAX_U:
            bad("comparison length too large")
        if max(self.masked_bits, self.check_mask_bits + 1) + 8 > self.key_bits - 2:
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
        """|x|, |y| < 2^masked_bits for every compared pair."""
        return self.shared_bits + 2 * self.mask_bits + 1

    @property
    def ell(self) -> int:
        """Signed bit length of the compared values."""
        return self.shared_bits + 2 * self.mask_bits + 3

    @property
    def check_mask_bits(self) -> int:
        """Width of the helper's mask s in the selection check: κ + ⌈log₂ K⌉ bits beyond the value, so
        that the K masked copies of the selected value Charlie decrypts are together within 2^-κ."""
        return self.value_bits + self.mask_bits + self.tiebreak_bits

    @property
    def check_ell(self) -> int:
        """Signed bit length of the selection check's comparison (|v − c|, |s| < 2^(check_mask_bits+1))."""
        return self.check_mask_bits + 2


@dataclass
class PartyArgminResult:
    position: int  # π₁(j): where this party's value sits (0-based)
    source: int  # π₁⁻¹(j): the party (0-based index) whose shares this party held
    xi_key: PrivateKey  # the parties' key ξ (never given to Charlie)
    zeta_pk: PublicKey  # Charlie's public key ζ
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass
class CuratorArgminResult:
    position: int  # the smallest value's position in the parties' (π₁) order
    zeta_key: PrivateKey  # Charlie's key ζ
    xi_pk: PublicKey  # the parties' public key ξ
    comparisons: int = 0
    #: the bracket: per round, (position p, position q, the one that advanced)
    rounds: list[list[tuple[int, int, int]]] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)


# =============================================================================== helpers
def modulus_context(session_id: str, tag: str) -> bytes:
    """What Charlie's proof that ζ's modulus is square-free is bound to: the session and the secure minimum's tag."""
    return f"smcdp/secure-min/zeta-modulus/{session_id}/{tag}".encode()


def random_permutation(rng: random.Random, k: int) -> list[int]:
    perm = list(range(k))
    rng.shuffle(perm)
    return perm


def check_permutation(values: Iterable[SupportsInt], k: int, what: str) -> list[int]:
    perm = [int(v) for v in values]
    if sorted(perm) != list(range(k)):
        raise InvalidMessage(f"{what} is not a permutation of 0..{k - 1}")
    return perm


def tree_parent(i: int) -> int | None:
    """The parent of party index i (0-based) in the parties' binary tree (party1 is the root)."""
    return None if i == 0 else (i - 1) // 2


def tree_children(i: int, k: int) -> list[int]:
    """The children of party index i (0-based) among k parties."""
    return [c for c in (2 * i + 1, 2 * i + 2) if c < k]


def tree_size(i: int, k: int) -> int:
    """How many parties the subtree of party index i holds (itself included)."""
    return 1 + sum(tree_size(c, k) for c in tree_children(i, k))


def match_evaluator(t: int) -> int:
    """The party index (0-based) that evaluates match t of the bracket: every party but party1, once."""
    return t + 1


async def run_tournament(
    k: int, match: Callable[[int, int, int], Awaitable[bool]]
) -> tuple[int, list[list[tuple[int, int, int]]]]:
    """A knockout tournament over positions 0..k−1; ``match(t, p, q)`` is True iff p beats q.

    Round by round the survivors are paired in order ((s0, s1), (s2, s3), …; an odd one out
    advances), the matches of a round run concurrently, and match t (counted over the whole
    bracket) is the t-th call.  Returns (the winner, per round [(p, q, the one that advanced)]).
    k − 1 matches in ⌈log₂ k⌉ rounds.
    """
    survivors = list(range(k))
    rounds: list[list[tuple[int, int, int]]] = []
    t = 0
    while len(survivors) > 1:
        pairs = [(survivors[i], survivors[i + 1]) for i in range(0, len(survivors) - 1, 2)]
        won = await asyncio.gather(*(match(t + i, p, q) for i, (p, q) in enumerate(pairs)))
        t += len(pairs)
        rounds.append([(p, q, p if w else q) for (p, q), w in zip(pairs, won)])
        survivors = [w for _, _, w in rounds[-1]] + survivors[2 * len(pairs) :]
    return survivors[0], rounds


def _decrypt_bounded(sk: PrivateKey, c: int, bound_bits: int, what: str) -> int:
    try:
        v = sk.raw_decrypt_signed(c)
    except CryptoOverflow:  # a plaintext in (n/3, 2n/3): nothing the protocol sends
        raise InvalidMessage(f"{what} decrypts to a value outside ±2^{bound_bits}") from None
    if abs(v) >= 1 << bound_bits:
        raise InvalidMessage(f"{what} decrypts to a value outside ±2^{bound_bits}")
    return v


def _party_index(ch: Channel, params: SecureMinParams) -> int:
    roles = params.party_roles
    if ch.role not in roles:
        raise InvalidMessage(f"role {ch.role!r} is not a party role of this secure minimum")
    return roles.index(ch.role)


def _check_value(ch: Channel, value: object, params: SecureMinParams) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidMessage(f"{ch.role}: the private value must be an integer, got {type(value).__name__}")
    if not 0 <= value < 1 << params.value_bits:
        raise InvalidMessage(f"{ch.role}: the private value must lie in [0, 2^{params.value_bits})")
    return value


# =============================================================================== party side
async def argmin_party(
    ch: Channel,
    value: int,
    params: SecureMinParams,
    *,
    seed: SeedLike = None,
    xi_key: PrivateKey | None = None,
    dgk_key: dgk.DGKPrivateKey | None = None,
    allow_insecure_keys: bool = False,
    tag: str = "s1",
) -> PartyArgminResult:
    """Role ``party<j>``: holds the private value ``value`` in [0, 2^value_bits).  ``dgk_key``: the DGK key pair
    it evaluates its match with (:func:`party_dgk_key`; default a fresh one)."""
    params.validate()
    roles = params.party_roles
    me = _party_index(ch, params)
    K = params.n_parties
    _check_value(ch, value, params)
    check_key_bits(params.key_bits, allow_insecure_keys)
    rng = protocol_rng(seed, "secure-min", ch.role)
    C = params.curator

    # --- Step 0: π₁(j) and π₁⁻¹(j) from party1, ξ down the tree (parties only); ζ's public key from Charlie.
    if me == 0:
        if xi_key is None:
            _, xi_key = generate_keypair(
                params.key_bits,
                allow_insecure=allow_insecure_keys,
                rng=protocol_rng(seed, "secure-min", ch.role, "xi-key"),
            )
        check_key_bits(xi_key.public_key.bits, allow_insecure_keys)
        pi1 = random_permutation(rng, K)
        inv = [0] * K
        for j, p in enumerate(pi1):
            inv[p] = j
        await asyncio.gather(*(ch.send(roles[j], f"{tag}/pi1", pb.Ints(values=[pi1[j], inv[j]])) for j in range(1, K)))
        await ch.send(C, f"{tag}/xi-pk", public_key_to_proto(xi_key.public_key))
        pos, src = pi1[0], inv[0]
    else:
        got = list((await ch.recv(roles[0], f"{tag}/pi1", pb.Ints)).values)
        if len(got) != 2 or not all(0 <= v < K for v in got) or (got[0] == me) != (got[1] == me):
            raise InvalidMessage(f"{tag}/pi1 from party1 is not a position and a source in 0..{K - 1}")
        pos, src = got
        parent = tree_parent(me)
        assert parent is not None  # me > 0: party1, the root, took the branch above
        xi_key = keypair_from_proto(
            await ch.recv(roles[parent], f"{tag}/xi-keypair", pb.PaillierKeyPair), allow_insecure=allow_insecure_keys
        )
        if xi_key.public_key.bits != params.key_bits:
            raise InvalidMessage(f"the parties' key has {xi_key.public_key.bits} bits, not key_bits={params.key_bits}")
    children = tree_children(me, K)
    if children:
        await ch.send_many([roles[c] for c in children], f"{tag}/xi-keypair", keypair_to_proto(xi_key))
    xi_pk = xi_key.public_key
    # ζ is Charlie's own: his openings under it bind only if its modulus is square-free (gcd(n, φ(n)) = 1), which
    # its size does not say -- with n = p^a he opened one ciphertext to m, m + p, ... (a review, 2026-12-06)
    zeta_pk = await recv_owned_key(
        ch,
        C,
        f"{tag}/zeta",
        modulus_context(ch.session_id, tag),
        bits=params.key_bits,
        allow_insecure=allow_insecure_keys,
    )
    if zeta_pk.bits < params.masked_bits + 8:
        raise InvalidMessage("Charlie's key is too small for the masked shares")
    beta_pk = peer_public_key(
        await ch.recv(C, f"{tag}/beta-pk", pb.PaillierPublicKey),
        bits=params.key_bits,
        kind="standard",
        who=C,
        allow_insecure=allow_insecure_keys,
    )
    if beta_pk.bits < params.masked_bits + 8:
        raise InvalidMessage("Charlie's key β is too small for the shares")
    if beta_pk.n == zeta_pk.n:
        raise InvalidMessage("Charlie's keys ζ and β are the same key: refusing (b would be opened under ζ)")

    # --- Step 1: v' = K·v + j (distinct), shares v' = a + b with b uniform in [0, 2^(L'+κ)).
    v_prime = K * value + me
    b = rng.randrange(1 << (params.shared_bits + params.mask_bits))
    a = v_prime - b
    share_bits = params.shared_bits + params.mask_bits + 1

    # --- Step 2: a and β(b) to the party at position π₁(me); the shares of party π₁⁻¹(me) from it.
    zb_mine = ciphertext_to_proto(beta_pk, beta_pk.raw_encrypt_textbook(b))
    if pos != me:
        await ch.send(roles[pos], f"{tag}/a", bigints([a]))
        await ch.send(roles[pos], f"{tag}/zb", zb_mine)
    if src == me:
        held_a, held_zb = a, beta_pk.rerandomize_textbook(ciphertext_from_proto(zb_mine, beta_pk, "own β(b)"))
    else:
        (held_a,) = from_bigints(
            await ch.recv(roles[src], f"{tag}/a", pb.BigInts),
            count=1,
            bound_bits=share_bits,
            what=f"{tag}/a from {roles[src]}",
        )
        held_zb = beta_pk.rerandomize_textbook(
            ciphertext_from_proto(
                await ch.recv(roles[src], f"{tag}/zb", pb.CiphertextVector), beta_pk, f"{tag}/zb from {roles[src]}"
            )
        )

    # --- Step 3: ξ(a at my position) and β(b at my position) to Charlie.
    await ch.send(C, f"{tag}/xa", ciphertext_to_proto(xi_pk, xi_pk.raw_encrypt_textbook(held_a)))
    await ch.send(C, f"{tag}/zb", ciphertext_to_proto(beta_pk, held_zb))

    # --- Step 4: evaluate my match of the bracket (every party but party1 has exactly one).
    if me > 0:
        x = _decrypt_bounded(
            xi_key,
            ciphertext_from_proto(await ch.recv(C, f"{tag}/x", pb.CiphertextVector), xi_pk, f"{tag}/x from {C}"),
            params.masked_bits,
            f"{tag}/x",
        )
        # the evaluator holds the DGK key and Charlie's input is the one a malformed key would expose: a key
        # Charlie made could read x exactly (docs/primitives.md); Charlie gets the bit [y ≤ x] = [v'_q ≤ v'_p]
        if dgk_key is None:
            dgk_key = party_dgk_key(params, seed, ch.role, allow_insecure_keys)
        await compare_holder_b(
            ch,
            C,
            [x],
            ell=params.ell,
            key=dgk_key,
            predicate="le",
            output="a",
            tag_prefix=f"{tag}/cmp",
        )
    return PartyArgminResult(position=pos, source=src, xi_key=xi_key, zeta_pk=zeta_pk, stats=ch.stats.as_dict())


# =============================================================================== curator side
async def argmin_curator(
    ch: Channel,
    params: SecureMinParams,
    *,
    seed: SeedLike = None,
    zeta_key: PrivateKey | None = None,
    dgk_key: dgk.DGKPrivateKey | None = None,
    allow_insecure_keys: bool = False,
    tag: str = "s1",
    beta_key: PrivateKey | None = None,
) -> CuratorArgminResult:
    """Role ``charlie``: ends with the position of the smallest value in the parties' (π₁) order.  ``dgk_key`` is
    not used (kept for callers): since 2026-12-05 each match's evaluator holds the DGK key."""
    del dgk_key
    params.validate()
    if ch.role != params.curator:
        raise InvalidMessage(f"role {ch.role!r} is not the curator {params.curator!r}")
    roles = params.party_roles
    K = params.n_parties
    check_key_bits(params.key_bits, allow_insecure_keys)
    rng = protocol_rng(seed, "secure-min", ch.role)

    # --- Step 0: ζ (Charlie's own key) to the parties; ξ's public key from party1.
    if zeta_key is None:
        _, zeta_key = generate_keypair(
            params.key_bits,
            allow_insecure=allow_insecure_keys,
            rng=protocol_rng(seed, "secure-min", ch.role, "zeta-key"),
        )
    check_key_bits(zeta_key.public_key.bits, allow_insecure_keys)
    zeta_pk = zeta_key.public_key
    if beta_key is None:  # the shares' key: nothing under it is ever opened to anyone (step 0)
        _, beta_key = generate_keypair(
            params.key_bits,
            allow_insecure=allow_insecure_keys,
            rng=protocol_rng(seed, "secure-min", ch.role, "beta-key"),
        )
    check_key_bits(beta_key.public_key.bits, allow_insecure_keys)
    if beta_key.public_key.n == zeta_pk.n:
        raise InvalidMessage("the shares' key β must not be ζ")
    await send_owned_key(ch, roles, f"{tag}/zeta", zeta_key, modulus_context(ch.session_id, tag))
    await ch.send_many(roles, f"{tag}/beta-pk", public_key_to_proto(beta_key.public_key))
    xi_pk = public_key_from_proto(
        await ch.recv(roles[0], f"{tag}/xi-pk", pb.PaillierPublicKey), allow_insecure=allow_insecure_keys
    )
    if xi_pk.bits < params.masked_bits + 8:
        raise InvalidMessage("the parties' key is too small for the masked shares")
    # --- Step 3: ξ(a_k) and β(b_k) from the party at each position k; decrypt b.
    share_bits = params.shared_bits + params.mask_bits + 1
    xa, b = [], []
    for r in roles:
        xa.append(
            ciphertext_from_proto(await ch.recv(r, f"{tag}/xa", pb.CiphertextVector), xi_pk, f"{tag}/xa from {r}")
        )
        zb = ciphertext_from_proto(
            await ch.recv(r, f"{tag}/zb", pb.CiphertextVector), beta_key.public_key, f"{tag}/zb from {r}"
        )
        bk = _decrypt_bounded(beta_key, zb, share_bits, f"{tag}/zb from {r}")
        if bk < 0:
            raise InvalidMessage(f"{tag}/zb from {r} decrypts to a negative share")
        b.append(bk)

    # --- Step 4: the tournament; match t (positions p, q) is evaluated by party match_evaluator(t).
    rbits = params.shared_bits + 2 * params.mask_bits
    blinds = [rng.randrange(-(1 << rbits), 1 << rbits) for _ in range(K - 1)]  # r of match t

    async def match(t: int, p: int, q: int) -> bool:
        r = blinds[t]
        role = roles[match_evaluator(t)]
        x_ct = xi_pk.raw_add(xi_pk.raw_add(xa[p], xi_pk.raw_mul(xa[q], -1)), xi_pk.raw_encrypt_textbook(r))
        await ch.send(role, f"{tag}/x", ciphertext_to_proto(xi_pk, x_ct))  # ξ(a_p − a_q + r), fresh
        zs = await compare_holder_a(  # the evaluator holds the DGK key (party side, step 4)
            ch,
            role,
            [b[q] - b[p] + r],
            ell=params.ell,
            predicate="le",
            output="a",
            tag_prefix=f"{tag}/cmp",
            allow_insecure=allow_insecure_keys,
            min_key_bits=params.dgk_bits,
            max_key_bits=params.dgk_bits,
            max_t=params.dgk_t,
            rng=protocol_rng(seed, "secure-min", ch.role, f"cmp-{t}"),
        )
        assert zs is not None  # output="a" returns the bits
        (z,) = zs
        # [b_q − b_p + r ≤ a_p − a_q + r] = [v'_q ≤ v'_p] = not [v'_p < v'_q] (the v' are distinct)
        return not z

    winner, rounds = await run_tournament(K, match)
    return CuratorArgminResult(
        position=winner, zeta_key=zeta_key, xi_pk=xi_pk, comparisons=K - 1, rounds=rounds, stats=ch.stats.as_dict()
    )


# =============================================================================== verifying a selection
# After the curator has acted on the winner's position (dp-aggregate: an encrypted one-hot indicator
# at that position), the parties hold S = ζ(v_sel) for the value of the party the curator selected.
# Each party j checks v_sel ≤ v_j with the help of the next party in a ring, h = j + 1 (mod K):
#
#   1. h draws s uniform in [0, 2^check_mask_bits) and sends S' = S·ζ(s) (fresh) to Charlie and to j;
#   2. Charlie decrypts c = v_sel + s and sends j the opening (c, ρ) with S' = g^c ρ^n: j verifies it,
#      so a curator cannot decrypt wrongly (the opening binds c);
#   3. v_sel ≤ v_j ⟺ −s ≤ v_j − c: a DGK comparison with j as the key holder (its own key) and h
#      holding −s gives j the bit; j refuses if it is 0.
#
# j learns c (hides v_sel statistically: s has κ + ⌈log₂ K⌉ bits more than v) and the bit, which is
# 1 in an honest run; h learns nothing (ζ-ciphertexts, DGK ciphertexts); Charlie learns the K values
# v_sel + s (jointly within 2^-κ of values independent of v_sel).  The curator takes no part in the
# comparison, so whatever he does, a party whose own value is below the selected one refuses.


def party_dgk_key(params: SecureMinParams, seed: SeedLike, role: str, allow_insecure_keys: bool) -> dgk.DGKPrivateKey:
    """A party's DGK key pair for its match (step 4) and its selection check (both as the key holder): u above
    both comparisons' lengths, from the role's stream for it."""
    return dgk.generate_keypair(
        params.dgk_bits,
        params.dgk_t,
        max_ell=max(params.ell, params.check_ell, dgk.DEFAULT_MAX_ELL),
        allow_insecure=allow_insecure_keys,
        rng=protocol_rng(seed, "secure-min", role, "dgk-key"),
    )


def check_helper_of(me: int, k: int) -> int:
    """The party index that helps party index ``me`` check the selection (the next one in a ring)."""
    return (me + 1) % k


async def check_selection_party(
    ch: Channel,
    value: int,
    params: SecureMinParams,
    *,
    zeta_pk: PublicKey,
    dgk_key: dgk.DGKPrivateKey | None = None,
    seed: SeedLike = None,
    allow_insecure_keys: bool = False,
    tag: str = "chk",
) -> bool:
    """Party j's check that the selected value is ≤ ``value`` (its own); True iff it is."""
    params.validate()
    me = _party_index(ch, params)
    roles = params.party_roles
    _check_value(ch, value, params)
    helper = roles[check_helper_of(me, params.n_parties)]
    masked = ciphertext_from_proto(
        await ch.recv(helper, f"{tag}/c", pb.CiphertextVector), zeta_pk, f"{tag}/c from {helper}"
    )
    c = await _opened(ch, masked, params, zeta_pk, tag)
    if dgk_key is None:
        dgk_key = dgk.generate_keypair(
            params.dgk_bits,
            params.dgk_t,
            max_ell=max(params.check_ell, dgk.DEFAULT_MAX_ELL),
            allow_insecure=allow_insecure_keys,
            rng=protocol_rng(seed, "secure-min", ch.role, "check-dgk-key"),
        )
    zs = await compare_holder_b(
        ch,
        helper,
        [value - c],
        ell=params.check_ell,
        key=dgk_key,
        predicate="le",
        output="b",
        tag_prefix=f"{tag}/{ch.role}",
    )
    assert zs is not None  # output="b" returns the bits
    (z,) = zs
    return bool(z)  # [−s ≤ value − c] = [v_sel ≤ value]


async def check_selection_helper(
    ch: Channel,
    selected: int,
    params: SecureMinParams,
    *,
    zeta_pk: PublicKey,
    seed: SeedLike = None,
    allow_insecure_keys: bool = False,
    tag: str = "chk",
) -> None:
    """Party h's part in the check of party h − 1: masks the selected value ``selected`` = ζ(v_sel)."""
    params.validate()
    me = _party_index(ch, params)
    roles, C, K = params.party_roles, params.curator, params.n_parties
    checkee = roles[(me - 1) % K]
    s = protocol_rng(seed, "secure-min", ch.role, "check-mask").randrange(1 << params.check_mask_bits)
    msg = ciphertext_to_proto(zeta_pk, zeta_pk.raw_add(selected, zeta_pk.raw_encrypt_textbook(s)))
    await ch.send_many([C, checkee], f"{tag}/c", msg)  # the same bytes to both (also in a replay)
    await compare_holder_a(
        ch,
        checkee,
        [-s],
        ell=params.check_ell,
        predicate="le",
        output="b",
        tag_prefix=f"{tag}/{checkee}",
        allow_insecure=allow_insecure_keys,
        min_key_bits=params.dgk_bits,
        max_key_bits=params.dgk_bits,
        max_t=params.dgk_t,
    )


async def reveal_selection_party(
    ch: Channel,
    selected: int,
    params: SecureMinParams,
    *,
    zeta_pk: PublicKey,
    seed: SeedLike = None,
    tag: str = "chk",
) -> int:
    """The selected value v_sel itself, for a protocol whose parties may learn it (dp-aggregate's shared noise
    is calibrated to it): party j masks ``selected`` = ζ(v_sel) with its own s, the curator decrypts v_sel + s
    and proves it by an opening (he cannot lie), and j removes s.  The curator sees v_sel + s, s κ bits longer
    than v_sel: within 2^-κ of a value independent of v_sel (as in the check)."""
    params.validate()
    C = params.curator
    _party_index(ch, params)
    s = protocol_rng(seed, "secure-min", ch.role, "reveal-mask").randrange(1 << params.check_mask_bits)
    sent = await ch.send(
        C, f"{tag}/c", ciphertext_to_proto(zeta_pk, zeta_pk.raw_add(selected, zeta_pk.raw_encrypt_textbook(s)))
    )
    # what went out (a replayed party re-sends its journaled bytes, not a fresh encryption): the opening is of it
    masked = ciphertext_from_proto(pb.CiphertextVector.FromString(sent), zeta_pk, f"{tag}/c")
    value = await _opened(ch, masked, params, zeta_pk, tag) - s
    if not 0 <= value < 1 << params.value_bits:
        raise InvalidMessage(f"the selected value decrypts out of range ({C} or the selection deviated): refusing")
    return value


async def _opened(ch: Channel, masked: int, params: SecureMinParams, zeta_pk: PublicKey, tag: str) -> int:
    """The curator's decryption of ``masked`` (a masked selected value), checked against its opening and range."""
    C = params.curator
    c, rho = from_bigints(
        await ch.recv(C, f"{tag}/open", pb.BigInts),
        count=2,
        bound_bits=zeta_pk.bits,
        what=f"{tag}/open from {C}",
        nonnegative=True,
    )
    if not verify_opening(zeta_pk, masked, c, rho):
        raise InvalidMessage(
            f"{C}'s decryption of the masked selected value does not open the ciphertext: "
            "refusing an unverifiable selection"
        )
    if c >= (1 << params.value_bits) + (1 << params.check_mask_bits):
        raise InvalidMessage(f"the selected value decrypts out of range ({C} or the selection deviated): refusing")
    return c


async def check_selection_curator(
    ch: Channel, params: SecureMinParams, *, zeta_key: PrivateKey, tag: str = "chk", reveal: bool = False
) -> None:
    """Charlie's part: decrypt every helper's masked value and send its opening to the party it helps (with
    ``reveal``: every party's own masked value, opened to itself -- :func:`reveal_selection_party`)."""
    params.validate()
    if ch.role != params.curator:
        raise InvalidMessage(f"role {ch.role!r} is not the curator {params.curator!r}")
    roles, K = params.party_roles, params.n_parties
    zeta_pk = zeta_key.public_key
    limit = (1 << params.value_bits) + (1 << params.check_mask_bits)

    async def one(h: int) -> None:
        masked = ciphertext_from_proto(
            await ch.recv(roles[h], f"{tag}/c", pb.CiphertextVector), zeta_pk, f"{tag}/c from {roles[h]}"
        )
        m, r = open_ciphertext(zeta_key, masked)
        if m >= limit:  # never open anything but a masked selected value
            raise InvalidMessage(f"{tag}/c from {roles[h]} is not a masked selected value")
        await ch.send(roles[h if reveal else (h - 1) % K], f"{tag}/open", bigints([m, r]))

    await asyncio.gather(*(one(h) for h in range(K)))
