"""dp-aggregate under a group (threshold) key (docs/protocols/dp-aggregate.md, "Under a group key").

The data parties hold shares of a (t, K) threshold Paillier key G made by the key ceremony
(:mod:`smcdp.protocols.keygen`); nobody holds its private key, and no t of them decrypt anything.  Charlie
relays and publishes his share; he holds no key.  With party1's key ξ (the other modes) Charlie with any data
party learns every party's size, and with one party's noise Charlie with party1 or with the selected party
removes the noise; here a coalition of Charlie and at most t data parties learns the released model (a DP
output) and the smallest data set's size level (an output every data party receives), and nothing else.

The shared-noise calibration only (``calibration = "gaussian"``): every party adds a share of the noise.
Steps (numbered as in the docs; each G-step's commitments go through power iteration's group-key release
flow, :mod:`smcdp.protocols.power_iteration_threshold`: a digest to Charlie, who relays every party's to every
data party, an echo round, the release to Charlie, his relay to every data party, every digest and proof checked before anything
is combined or decrypted, and a party decrypts only what it recomputed itself):

G0. party1 sends Charlie the group's public key and share map, every other data party a hash of its own (Charlie
    refuses if they differ); every data party checks the group is the session's.
G1. *Levels.*  Party j rounds its sensitivity key k_j down to the public level ℓ_j = max{ℓ : K(ℓ) <= k_j}
    (``DPAggregateParams.level_keys``: L levels, s = ``levels_per_octave`` per doubling, from the key of the
    largest admissible sensitivity up).  For the tested levels θ_0 < … < θ_(T−1) of a zero test it releases the
    thermometer b_j[i] = [ℓ_j <= θ_i], encrypted under G with a proof that every entry encrypts 0 or 1
    (:data:`BITS`).  Every party recomputes C[i] = Π_j G(b_j[i]) = G(c[i]), c[i] = the number of parties at or
    below θ_i.
G2. *Zero test.*  Party j raises every C[i] to a secret exponent r_j[i] (|N| + 64 bits) and re-randomises it,
    D_j[i] = C[i]^{r_j[i]}·s_j[i]^N (without s, a party holding z, its r and the others' D could search their
    exponents' excess over N and read the counts), with a proof that each D_j[i] encrypts a multiple of what C[i]
    encrypts
    (:func:`~smcdp.crypto.zkp.prove_scaling`: no other ciphertext mixed in), and commits and releases them
    as in G1.  Every party checks every proof against the C it recomputed, recomputes
    Z[i] = Π_j D_j[i] = G(c[i]·Σ_j r_j[i]) and decrypts it with the others (threshold decryption with proofs).
    Σ_j r_j[i] is uniform mod N as long as one party's r is, so z[i] is 0 where c[i] = 0 and of N's size
    elsewhere: the parties learn only the first tested level at or above the smallest party's, not how many
    parties are at any level.  A pattern that is not zeros-then-nonzeros, or a zero at the party's own first 1,
    means someone deviated: the party refuses.
    G1–G2 run twice (:data:`COARSE`, :data:`FINE`): the last levels of the groups of s find the smallest party's
    group, then that group's levels find ℓ* = min_j ℓ_j -- ⌈L/s⌉ − 1 + s − 1 tested levels, not L − 1.
G3. *Release.*  k̂ = K(ℓ*) <= k_j for every party, so Δ̂ = 2^48/k̂ covers every party's sensitivity.  Party j
    draws its noise share N_j ~ N_Z(0, σ²/h)^d for Δ̂ (as the shared-noise mode), its published share t_j
    uniform mod M, and releases Y_j = (W_j + N_j − t_j) mod M under G (committed, with its proof of plaintext
    knowledge).  Every party checks what Charlie relays, recomputes Π_j G(Y_j) and sends **Charlie** its
    partial decryption of it; Charlie combines t + 1 verified ones: X = Σ_j Y_j, his share X mod M.  The
    K + 1 shares add up to T = Σ_j W_j + Σ_j N_j (mod M); Dave reassembles as in every mode.

Randomness: encryption randomness and every proof's nonces derive from the party's root (a replayed party
sends the same bytes; its commitments hold), the nonces also from the witness; so, as in power iteration, a
seeded session is refused (its root would be public).
"""

from __future__ import annotations

import asyncio
import bisect
import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gmpy2 import mpz
from numpy.typing import ArrayLike

from smcdp.crypto.encoding import Packing
from smcdp.crypto.modexp import powmod
from smcdp.crypto.paillier import PublicKey
from smcdp.crypto.threshold import ThresholdPublicKey, replayable_obfuscator
from smcdp.crypto.vector import EncryptedVector
from smcdp.crypto.zkp import (
    prove_bits,
    prove_scaling,
    verify_bits,
    verify_bits_many,
    verify_scaling,
    verify_scalings,
)
from smcdp.errors import InvalidMessage
from smcdp.net.channel import Channel
from smcdp.primitives.rng import Drbg, DrbgRandom, SeedLike, noise_source, protocol_rng, stream_key
from smcdp.protocols.dp_aggregate import (
    CHARLIE,
    PROTOCOL,
    CharlieResult,
    DPAggregateParams,
    PartyResult,
    checked_model,
    publish_share,
    refuse_selection,
    sensitivity_key,
    shared_noise,
    to_fixed,
)
from smcdp.protocols.power_iteration_threshold import (
    BadContributionProof,
    GroupKey,
    ProofKind,
    Tags,
    check_group_key,
    checked_sum,
    combine_partials,
    commit_and_release,
    first_failing,
    proof_context,
    refuse_seeded,
    relayed_contributions,
    release_and_commit,
    send_partial,
    sum_context,
    threshold_decrypt,
    trent_deliver,
)
from smcdp.v1 import messages_pb2 as pb


@dataclass(frozen=True)
class ZeroTestRound:
    """One zero test's messages: its thermometers (G1) and its blinded counts (G2)."""

    levels: Tags
    blinded: Tags

    @classmethod
    def named(cls, name: str) -> ZeroTestRound:
        return cls(
            Tags(
                f"g1{name}/levels", f"g1{name}/digest", f"g1{name}/contrib", "", "", f"g1{name}/pok", f"g1{name}/echo"
            ),
            Tags(
                f"g2{name}/blinded",
                f"g2{name}/digest",
                f"g2{name}/contrib",
                f"g2{name}/partial",
                f"g2{name}/zero",
                f"g2{name}/proof",
                f"g2{name}/echo",
            ),
        )


#: the two zero tests: the smallest party's group of levels (an octave at the default spacing), then its level
#: within that group -- ⌈L/s⌉ − 1 + s − 1 thresholds instead of L − 1, the same information (the level)
COARSE, FINE = ZeroTestRound.named("a"), ZeroTestRound.named("b")
#: G3's releases
RELEASE = Tags("g3/release", "g3/digest", "g3/contrib", "g3/partial", "g3/total", "g3/pok", "g3/echo")


#: G1's proof: every thermometer entry encrypts 0 or 1 (an OR-proof each, verified in one batch; it shows that the
#: owner knows the plaintexts too).  Without it, a party encrypting −1 at a level would turn the zero test there
#: into "does exactly one other party sit at or below this level?" (what it cannot stop: a party claiming another
#: level for itself, the top one included -- then ℓ* is the honest parties' smallest, docs)
def _prove_bits(pk: PublicKey, cts: list[int], ms: list[int], rs: list[int], context: bytes, key: bytes) -> list[int]:
    """The bit proofs of G1, each entry's nonces from a ChaCha20 stream keyed by HMAC(key, context ‖ k ‖ its
    witness): a replay sends the same proof, and nobody lacking the witness predicts the nonces."""
    rngs = []
    for k, (c, m, r) in enumerate(zip(cts, ms, rs)):
        msg = b"".join(len(b).to_bytes(4, "big") + b for b in (context, b"%d" % k, b"%d" % c, b"%d" % m, b"%d" % r))
        rngs.append(DrbgRandom(Drbg(hmac.new(key, msg, hashlib.sha256).digest())))
    return prove_bits(pk, cts, [int(m) for m in ms], rs, context, rngs, djn=True)  # rs: h^a (replayable)


BITS = ProofKind("that every entry encrypts 0 or 1", lambda n: 5 * n, _prove_bits, verify_bits, verify_bits_many)
#: party1 to Charlie: the group's public key (JSON) and the share index of every data role
KEY_TAG = "g0/key"
#: the blinding exponents have this many bits beyond N's: Σ_j r_j[ℓ] is within 2^-64 of uniform mod N
BLIND_EXTRA_BITS = 64


@dataclass
class Stage:
    """What power iteration's group-key release flow reads of its parameters (its ``PowerIterationParams``
    protocol), for one of this protocol's stages: the values' fixed-point bits, bound and packing."""

    n_parties: int
    key_bits: int
    key_group: str | None
    key_threshold: int | None
    roles: tuple[str, ...]
    bound: int
    slot_bits: int | None = None  # packed into slots of this width; None: one value per ciphertext
    frac_bits: int = 0

    @property
    def data_roles(self) -> list[str]:
        return list(self.roles)

    @property
    def noise_share(self) -> int:  # pragma: no cover - part of the protocol type; the noise is drawn here
        return 1

    def contribution_bound(self) -> int:
        return self.bound

    def release_frac_bits(self) -> int:
        return self.frac_bits

    def packing(self, pk: PublicKey) -> Packing:
        return Packing.for_key(pk, self.slot_bits) if self.slot_bits else Packing()


def stages(params: DPAggregateParams) -> tuple[Stage, Stage, Stage]:
    """The three stages' parameters: G1's bits, G2's blinded counts (any plaintext), G3's residues mod M."""
    common = (params.n_parties, params.key_bits, params.key_group, params.key_threshold, tuple(params.party_roles))
    M = 1 << params.modulus_bits
    return (
        Stage(*common, bound=1),
        Stage(*common, bound=0),  # no bound: what D encrypts is uniform mod N (its bound is the key's)
        Stage(*common, bound=M - 1, slot_bits=params.slot_bits if params.packed else None),
    )


def level_of(key: int, levels: list[int]) -> int:
    """ℓ = max{ℓ : K(ℓ) <= key}: the public level a sensitivity key rounds down to (the top one beyond it)."""
    if key < levels[0]:
        raise InvalidMessage("the sensitivity key is below the smallest admissible one (sensitivity above Δ_max)")
    return bisect.bisect_right(levels, key) - 1


def thermometer(level: int, thresholds: list[int]) -> list[int]:
    """b[i] = [level <= thresholds[i]]: whether this party sits at or below each tested level."""
    return [int(level <= thr) for thr in thresholds]


def coarse_thresholds(size_levels: int, per_group: int) -> list[int]:
    """The first zero test's levels: the last level of every group of ``per_group`` levels but the last group
    (every party is at or below the top level: its count says nothing)."""
    groups = -(-size_levels // per_group)
    return [min(per_group * (g + 1) - 1, size_levels - 1) for g in range(groups - 1)]


def fine_thresholds(size_levels: int, per_group: int, group: int) -> list[int]:
    """The second zero test's levels: those of ``group`` but its last, always ``per_group`` − 1 of them (the top
    group's are padded with the top level, so that the count does not depend on the group: Charlie relays the
    same shapes whatever the data)."""
    return [min(per_group * group + i, size_levels - 1) for i in range(per_group - 1)]


def first_nonzero(zero_test: list[int]) -> int:
    """The first tested level whose blinded count is nonzero (``len`` if none).  Counts only grow with the level,
    so anything but zeros-then-nonzeros means a party deviated."""
    first = next((i for i, z in enumerate(zero_test) if z != 0), len(zero_test))
    if any(z == 0 for z in zero_test[first:]):
        raise InvalidMessage(
            "dp-aggregate: the size levels' zero test is not zeros-then-nonzeros -- a data party's level "
            "contribution is not a thermometer; refusing the selection"
        )
    return first


def blinding_exponents(key: bytes, n: int, count: int, obfuscation_bits: int) -> tuple[list[int], list[int]]:
    """r[i] of exactly |N| + BLIND_EXTRA_BITS bits (at most: the verifier bounds the proof's responses by it) and
    the re-randomisers' exponents a[i] of ``obfuscation_bits`` bits (:func:`_blind`: s[i]^N = (h^N)^a[i]):
    HMAC-SHA256(key, label ‖ i) in counter mode (a stream of the party's root: a replay blinds alike)."""
    rbits = n.bit_length() + BLIND_EXTRA_BITS

    def stream(label: bytes, i: int, bits: int) -> int:
        size = (bits + 128 + 7) // 8
        msg = label + i.to_bytes(4, "big")
        raw = b"".join(
            hmac.new(key, msg + k.to_bytes(4, "big"), hashlib.sha256).digest() for k in range(-(-size // 32))
        )
        return int.from_bytes(raw[:size], "big") % (1 << bits)

    return [stream(b"r", i, rbits) for i in range(count)], [stream(b"a", i, obfuscation_bits) for i in range(count)]


def key_summary(params: DPAggregateParams, key: GroupKey) -> dict[str, Any]:
    """The session's key, as a result records it."""
    t = key.public.threshold
    return {
        "kind": "threshold",
        "group": params.key_group,
        "threshold": t,
        "parties": sorted(key.indices, key=lambda r: key.indices[r]),
        "fingerprint": key.public.fingerprint.hex(),
        "noise_share": params.noise_parties,
        "honest_noise_sigma2": (params.n_parties - t) / params.noise_parties,
    }


# =============================================================================== data party
async def data_party(
    ch: Channel,
    weights: ArrayLike,
    sensitivity: float,
    params: DPAggregateParams,
    group_key: GroupKey,
    *,
    seed: SeedLike = None,
    output_dir: Path | None = None,
    noise_random_state: Any = None,
) -> PartyResult:
    """Role ``party<j>`` under the group key ``group_key`` (this party's share and the share map): its locally
    trained model ŵ_j and its L2 sensitivity Δ_j, as :func:`smcdp.protocols.dp_aggregate.data_party`."""
    params.validate()
    if params.key_group is None:
        raise InvalidMessage("dp-aggregate: this session names no key group")
    if ch.role not in params.party_roles:
        raise InvalidMessage(f"role {ch.role!r} is not a data party of this session")
    refuse_seeded(stages(params)[2], seed)  # the releases' randomness comes from the root
    w, sensitivity = checked_model(ch.role, weights, sensitivity, params)
    key, _ = sensitivity_key(sensitivity)
    W = [to_fixed(x, params.frac_bits) for x in w]
    rng = protocol_rng(seed, PROTOCOL, ch.role)
    if noise_random_state is None:
        noise_random_state = noise_source(seed, PROTOCOL, "noise", ch.role)
    release_stage = stages(params)[2]
    check_group_key(release_stage, group_key, ch.role)
    pub = group_key.public

    # --- G0: Charlie gets the group's public key and share map from party1 (to check relays and combine his
    # share's partials), and a hash of the same from every other data party: a party1 that sent him another map
    # (so that an honest party's partial decryption fails under another index) is caught before anything else.
    key_msg = _key_message(pub, group_key.indices)
    if ch.role == params.party_roles[0]:
        await ch.send(CHARLIE, KEY_TAG, pb.Blobs(values=key_msg))
    else:
        await ch.send(CHARLIE, KEY_TAG, pb.Blobs(values=[_key_hash(key_msg)]))

    # --- G1, G2 twice: the smallest party's group of levels, then its level within that group.
    ch.progress(round=1, step="size-levels")
    table, L, s = params.level_keys, params.size_levels, params.levels_per_octave
    mine = level_of(key, table)
    group = await _zero_test_round(ch, params, group_key, mine, coarse_thresholds(L, s), COARSE, seed)
    ch.progress(round=2, step="size-levels")
    within = await _zero_test_round(ch, params, group_key, mine, fine_thresholds(L, s, group), FINE, seed)
    smallest = min(s * group + within, L - 1)
    k_hat = table[smallest]  # <= every party's key: the calibration covers every party's data

    # --- G3: our noise share for k̂, our published share t_j, and Y_j = W_j + N_j − t_j mod M under G.
    ch.progress(round=3, step="publish")
    N = shared_noise(ch.role, params, k_hat, noise_random_state)
    M = 1 << params.modulus_bits
    t = [rng.randrange(M) for _ in range(params.dim)]
    Y = np.array([(w + n - ti) % M for w, n, ti in zip(W, N, t)], dtype=object)
    packing = release_stage.packing(pub.public_key)
    digests, echo = await release_and_commit(ch, release_stage, group_key, Y, packing, CHARLIE, RELEASE, seed)
    total = await checked_sum(ch, release_stage, group_key, packing, digests, params.dim, CHARLIE, RELEASE)
    await send_partial(ch, group_key, total, RELEASE, seed, echo, [CHARLIE], protocol=PROTOCOL)
    share, path = await publish_share(ch, t, params, output_dir, ch.session_id)
    return PartyResult(
        share=share,
        share_file=path,
        stats=ch.stats.as_dict(),
        key=key_summary(params, group_key),
        size_level={"selected": smallest, "levels": L, "levels_per_octave": s},
    )


async def _zero_test_round(
    ch: Channel,
    params: DPAggregateParams,
    group_key: GroupKey,
    mine: int,
    thresholds: list[int],
    rnd: ZeroTestRound,
    seed: SeedLike,
) -> int:
    """G1 and G2 for the tested levels ``thresholds``: our thermometer (each entry proven a bit), committed,
    released and summed, C[i] = G(c[i]), c[i] the number of parties at or below thresholds[i]; the blinded
    zero test; the first nonzero index.  We refuse if our own entry's count is zero (someone cancelled it)."""
    if not thresholds:  # nothing to test (one level a group, or one group): Charlie skips it alike
        return 0
    levels_stage, blinded_stage, _ = stages(params)
    bits = thermometer(mine, thresholds)
    T = len(thresholds)
    vec = np.array(bits, dtype=object)
    digests, _ = await release_and_commit(ch, levels_stage, group_key, vec, Packing(), CHARLIE, rnd.levels, seed, BITS)
    counts = await checked_sum(ch, levels_stage, group_key, Packing(), digests, T, CHARLIE, rnd.levels, BITS)
    ch.progress(step="zero-test")
    first = first_nonzero(await _zero_test(ch, params, blinded_stage, group_key, counts, seed, rnd.blinded))
    if first > next((i for i, b in enumerate(bits) if b), T):
        refuse_selection(ch.role)
    return first


async def _zero_test(
    ch: Channel,
    params: DPAggregateParams,
    stage: Stage,
    group_key: GroupKey,
    counts: EncryptedVector,
    seed: SeedLike,
    tags: Tags,
) -> list[int]:
    """G2 at a data party: D[ℓ] = C[ℓ]^{r[ℓ]}·s[ℓ]^N and its scaling proof, committed (digest, echo) and released to
    Charlie; everyone's, as Charlie relays them, checked against their digests (a mismatch names Charlie) and
    their proofs against the C recomputed here (a failure names the owner); their product decrypted together:
    z[ℓ] = c[ℓ]·Σ_j r_j[ℓ] mod N."""
    pub = group_key.public
    pk = pub.public_key
    n2 = pk.nsquare
    C = [mpz(c) for c in counts.ciphertexts]
    key = stream_key(seed, PROTOCOL, ch.role, "zero-test", tags.release)
    rs, exps = blinding_exponents(key, int(pk.n), len(C), pk.obfuscation_bits)
    context = _context(ch, ch.role, group_key, tags)
    D, proof = await asyncio.to_thread(_blind, pk, C, rs, exps, context, seed, ch.role)
    vec = EncryptedVector(pk, D, len(D), 0, Packing(), None)
    digests, echo = await commit_and_release(ch, stage, group_key, vec, proof, CHARLIE, tags, seed)
    relayed = await relayed_contributions(ch, stage, pk, Packing(), digests, len(C), CHARLIE, tags, scaling_size)
    exponent_bits = int(pk.n).bit_length() + BLIND_EXTRA_BITS
    statements = {
        role: ([int(c) for c in got.ciphertexts], got_proof, _context(ch, role, group_key, tags))
        for role, (got, got_proof) in relayed.items()
    }
    # every party's proof at once (they scale the same counts); one by one only to name a failing owner
    role = await first_failing(
        statements,
        lambda sts: verify_scalings(pk, C, sts, exponent_bits),
        lambda st: verify_scaling(pk, C, st[0], st[1], st[2], exponent_bits),
    )
    if role is not None:
        bad = BadContributionProof(
            f"{ch.role} refuses to decrypt: {role}'s blinded counts ({tags.release}) come with no valid proof that "
            f"each is a multiple of the recomputed count ({tags.proof}) -- another ciphertext mixed in"
        )
        bad.origin = ch.roles[role]
        raise bad
    product = [mpz(1)] * len(C)
    for cts, _, _ in statements.values():
        product = [p * c % n2 for p, c in zip(product, cts)]
    total = EncryptedVector(pk, product, len(C), 0, Packing(), None)
    return await threshold_decrypt(ch, stage, group_key, total, tags, seed, echo, signed=False, protocol=PROTOCOL)


def _context(ch: Channel, role: str, group_key: GroupKey, tags: Tags) -> bytes:
    """A scaling proof's context: the session, its owner's role, holder and share index, the tag, the key."""
    return proof_context(ch.session_id, role, ch.roles[role], group_key.indices[role], tags.release, group_key.public)


def _blind(
    pk: PublicKey, C: list[mpz], rs: list[int], exps: list[int], context: bytes, seed: SeedLike, role: str
) -> tuple[list[mpz], list[int]]:
    """D[i] = C[i]^{r[i]}·s[i]^N (re-randomised: see :func:`~smcdp.crypto.zkp.prove_scaling`) and its proof; s[i]^N
    is the fixed-base obfuscator (h^N)^a[i] of the key's public base, s[i] = h^a[i] mod N its opening
    (:func:`~smcdp.crypto.threshold.replayable_obfuscator`)."""
    n2 = pk.nsquare
    obfuscators = [replayable_obfuscator(pk, a) for a in exps]
    D = [powmod(c, r, n2) * sn % n2 for c, r, (sn, _) in zip(C, rs, obfuscators)]
    nonce_key = stream_key(seed, PROTOCOL, role, "zero-test-proof", hashlib.sha256(context).hexdigest())
    return D, prove_scaling(pk, C, D, rs, [int(s) for _, s in obfuscators], context, nonce_key, djn=True)


def scaling_size(count: int) -> int:
    """A scaling proof's integers for ``count`` blinded counts: commitments, z and w responses."""
    return 3 * count


# =============================================================================== Charlie
async def charlie(
    ch: Channel, params: DPAggregateParams, *, output_dir: Path | None = None, allow_insecure_keys: bool = False
) -> CharlieResult:
    """Role ``charlie`` under the group key: relays every stage's commitments and releases (checking each
    against its owner's digest; a mismatch names the owner), and publishes X mod M, X = Σ_j Y_j from t + 1
    verified partial decryptions of the sum of the releases he relayed.  He decrypts nothing else and holds no
    key."""
    params.validate()
    if ch.role != CHARLIE:
        raise InvalidMessage(f"role {ch.role!r} is not charlie")
    roles = params.party_roles
    levels_stage, blinded_stage, release_stage = stages(params)
    pub, indices = await _group_public_key(ch, params, allow_insecure_keys)
    pk, fp = pub.public_key, pub.fingerprint
    L, s = params.size_levels, params.levels_per_octave
    for i, (rnd, count) in enumerate(((COARSE, len(coarse_thresholds(L, s))), (FINE, s - 1)), 1):
        ch.progress(round=i, step="size-levels")
        if count:
            await trent_deliver(ch, levels_stage, pk, count, rnd.levels, fp, BITS.size)
            await trent_deliver(ch, blinded_stage, pk, count, rnd.blinded, fp, scaling_size)
    ch.progress(round=3, step="publish")
    echo, releases = await trent_deliver(ch, release_stage, pk, params.dim, RELEASE, fp)
    total, *rest = [releases[r] for r in roles]
    for v in rest:
        total = total + v
    got = await ch.recv_all(roles, RELEASE.partial, pb.BigInts)
    context = sum_context(ch.session_id, RELEASE.sum, total, echo)
    X = await combine_partials(ch, pub, indices, total, RELEASE, context, got)
    M = 1 << params.modulus_bits
    if any(not 0 <= x < params.n_parties * M for x in X):
        raise InvalidMessage("the releases' sum decrypts to values outside [0, K·M): a release was out of range")
    share, path = await publish_share(ch, [x % M for x in X], params, output_dir, ch.session_id)
    return CharlieResult(share=share, share_file=path, comparisons=0, stats=ch.stats.as_dict())


def _key_message(pub: ThresholdPublicKey, indices: Mapping[str, int]) -> list[bytes]:
    """G0: the group's public key and the role -> share index map, canonical JSON."""
    return [json.dumps(pub.to_json(), sort_keys=True).encode(), json.dumps(dict(indices), sort_keys=True).encode()]


def _key_hash(values: list[bytes]) -> bytes:
    h = hashlib.sha256(b"smcdp/dp-aggregate/group-key-message/v1")
    for v in values:
        h.update(len(v).to_bytes(4, "big") + v)
    return h.digest()


async def _group_public_key(
    ch: Channel, params: DPAggregateParams, allow_insecure_keys: bool
) -> tuple[ThresholdPublicKey, dict[str, int]]:
    """G0 at Charlie: party1's group public key and share map, checked for shape and against the hash every
    other data party sent of its own (every digest must then name the key's fingerprint:
    :func:`~smcdp.protocols.power_iteration_threshold.trent_deliver`)."""
    roles = params.party_roles
    got = await ch.recv_all(roles, KEY_TAG, pb.Blobs)
    msg = got[roles[0]]
    if len(msg.values) != 2:
        raise InvalidMessage(f"{KEY_TAG} from party1 must be (public key JSON, share map JSON)")
    differ = [r for r in roles[1:] if list(got[r].values) != [_key_hash(list(msg.values))]]
    if differ:  # party1 or those parties hold another key or map: the message alone does not say who deviated
        raise InvalidMessage(
            f"{ch.role} relays nothing: the group key and share map party1 sent differ from those "
            f"{', '.join(differ)} hold ({KEY_TAG})"
        )
    try:
        pub = ThresholdPublicKey.from_json(json.loads(msg.values[0]), allow_insecure_keys)
        indices = json.loads(msg.values[1])
    except (ValueError, TypeError, UnicodeDecodeError, RecursionError):
        raise InvalidMessage(f"{KEY_TAG} from party1 is not the group's key and share map as JSON") from None
    except InvalidMessage as exc:
        raise InvalidMessage(f"{KEY_TAG} from party1: {exc}") from None
    if (
        not isinstance(indices, dict)
        or any(not isinstance(i, int) or isinstance(i, bool) for i in indices.values())
        or sorted(indices) != sorted(roles)
        or sorted(indices.values()) != list(range(1, len(roles) + 1))
    ):
        raise InvalidMessage(f"{KEY_TAG} from party1: the share map must give every data role one share index")
    if pub.parties != params.n_parties or pub.threshold != params.key_threshold:
        raise InvalidMessage(f"{KEY_TAG} from party1 is not a ({params.key_threshold}, {params.n_parties}) key")
    if pub.public_key.bits != params.key_bits:
        raise InvalidMessage(f"{KEY_TAG} from party1 is not a {params.key_bits}-bit key")
    return pub, {str(r): int(i) for r, i in indices.items()}
