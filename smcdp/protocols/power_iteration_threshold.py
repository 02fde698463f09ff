"""Power iteration under a group (threshold) key (docs/protocols/power-iteration.md, "The covariance mode with a
group key", "The noisy power method with a group key" and "The exact mode with a group key"; dp-aggregate's
group-key mode builds on the same steps).

The data parties hold shares of a (t, n) threshold Paillier key made by the key ceremony
(:mod:`smcdp.protocols.keygen`, stored by :mod:`smcdp.plugins.keystore`); nobody holds the private key.
Trent gets the public key only.  The steps of one release (the covariance mode's one, each round's in the
power method; :class:`Tags` names its messages), numbered as in the docs:

1. Party i computes its clipped covariance S_i (one pass), packs it and adds an exact discrete Gaussian of
   variance σ²/h, h = n − t by default (:func:`noise_guarantee`), encrypts the release E_i, and proves that
   it knows what E_i encrypts (:func:`~smcdp.crypto.zkp.prove_plaintext_knowledge`, bound to the session,
   its role, the party holding it and its share index, the round's tag and the key: :func:`proof_context`).
2. It sends a digest of E_i and its proof to Trent, who relays every data party's digest to every data party
   in one message (the same bytes to each); its own entry must be the digest it sent (else it names Trent:
   :class:`ContributionMismatch`): every contribution is fixed (committed) before any party's ciphertext
   leaves it.
   2b. Echo: it checks that every other data party holds the hash of the same digests (:func:`echo_hash`);
   unless all equal its own, it releases nothing (:class:`EchoMismatch`) -- Trent cannot relay one digest to
   one party and another (chosen late) to another; Trent relays nothing unless every echo is the hash of what
   he relayed.  A session's first echo goes to every other data party directly, with a link key; the later
   ones through Trent, as MACs under the pairs' keys (:mod:`smcdp.primitives.links`).  A data party has one
   digest, the one it sent Trent: there is nothing for it to send differently to different participants.
3. Only then it sends E_i and its proof to Trent (its release point).
4. Trent checks every release against the digest its owner sent him (a mismatch names that party:
   :class:`ContributionMismatch`) and sends every data party all n contributions and proofs.
5. Party i checks each contribution against its owner's digest as Trent relayed it (its own against its
   own; a mismatch names Trent, who checked the same digest), verifies every contribution's
   proof (a failure names its owner: :class:`BadContributionProof`), all before anything is summed,
   recomputes E[Σ_j W_j] = Π_j E_j itself, and sends its partial decryption **of that sum** (with its proof
   of correctness, bound to the session, the round's tag, the echo and the sum's digest) to the other data
   parties.  **It never partially
   decrypts a ciphertext it did not recompute itself**: there is no other call of
   :func:`~smcdp.crypto.threshold.partial_decrypt` here, so a coordinator asking for the decryption of one
   party's contribution (sending it in place of the contributions, say) is refused with the deviating
   participant named (the error's ``origin``, which the session's failure and the audit trail's
   ``session-end`` line carry).
6. It verifies every other party's partial decryption (a wrong one raises
   :class:`~smcdp.crypto.threshold.BadPartialDecryption`, re-raised with the party's name as ``origin``)
   and combines t + 1 of them: the noisy sum, from which it takes u_1 … u_r as in the single-key mode.

The exact mode releases every contribution and Gram by steps 1–5 and decrypts only what Trent proves to be a
combination of the recomputed sums (:func:`proven_combination`, :func:`check_combination`, ``EXACT_WINDOW``),
with a digest of the ciphertext exchanged beside each partial decryption (``threshold_decrypt(agree=...)``).

Randomness: the release's encryption randomness and both proofs' nonces derive from the party's root (a
replayed party re-sends every message bit for bit); the randomness also from the plaintext (a replay with other
data never reuses it), the nonces also from a secret (the witness, the share), so a known root does not reveal
them -- and a seeded session, whose root is public, is refused
(:func:`refuse_seeded`).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import math
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, NoReturn
from typing import Protocol as TypingProtocol

import gmpy2
import numpy as np

from smcdp.crypto.codec import bigints, from_bigints
from smcdp.crypto.encoding import Packing
from smcdp.crypto.modexp import multi_exp
from smcdp.crypto.paillier import PublicKey
from smcdp.crypto.threshold import (
    BadPartialDecryption,
    KeyShare,
    PartialDecryption,
    ThresholdPublicKey,
    assigned,
    combine,
    combine_assigned,
    encrypt_replayable,
    partial_decrypt,
)
from smcdp.crypto.vector import EncryptedVector
from smcdp.crypto.zkp import (
    prove_combination,
    prove_plaintext_knowledge,
    verify_combination,
    verify_plaintext_knowledge,
)
from smcdp.dp.conversions import distributed_gaussian_tau
from smcdp.errors import InvalidMessage
from smcdp.net.channel import Channel
from smcdp.net.limits import ciphertext_vector_bytes
from smcdp.net.tls import validate_party_name
from smcdp.primitives import links
from smcdp.primitives.rng import SeedLike, stream_key
from smcdp.v1 import messages_pb2 as pb

if TYPE_CHECKING:  # pragma: no cover
    from smcdp.dp.mechanisms import GaussianMechanism


class PowerIterationParams(TypingProtocol):
    """What these steps read of :class:`smcdp.protocols.power_iteration.PowerIterationParams` (a structural
    type, so that this module, which that one imports, does not import it back)."""

    n_parties: int
    key_bits: int
    frac_bits: int
    key_group: str | None
    key_threshold: int | None

    @property
    def data_roles(self) -> list[str]: ...

    @property
    def noise_share(self) -> int: ...

    def contribution_bound(self) -> int: ...

    def release_frac_bits(self) -> int: ...

    def packing(self, pk: PublicKey) -> Packing: ...


#: a data party's digest of its contribution, to every other data party (step 2)
DIGEST_TAG = "digest/cov"
#: Trent's relay of every data party's contribution and proof, one message to every data party (step 4)
CONTRIB_TAG = "contrib/cov"
#: a data party's partial decryption of the sum it recomputed, to every other data party (step 5)
PARTIAL_TAG = "partial/cov"
#: a data party's hash of every digest it holds, to every other data party (step 2b)
ECHO_TAG = "echo/cov"
#: a data party's proof that it knows what its release encrypts, to Trent (step 3), relayed in "contrib/cov"
PROOF_TAG = "pok/cov"
_DOMAIN = b"smcdp/power-iteration/threshold-cov/v1"
#: the most one relay message carries (by the public bound :func:`relay_entry_bytes`): a stage whose n releases
#: exceed it is relayed in several messages of whole releases (:func:`relay_groups`) -- one relay of n covariance
#: releases at k = 4096 would pass the transport's 256 MiB a message
RELAY_MESSAGE_BYTES = 64 << 20


def relay_entry_bytes(key_bits: int, ciphertexts: int, proof_ints: int) -> int:
    """A public bound on one release and its proof of ``proof_ints`` integers as an entry of a relay message."""
    return ciphertext_vector_bytes(ciphertexts, key_bits) + proof_ints * (2 * key_bits // 8 + 8) + 32


def relay_groups(roles: Sequence[str], entry_bytes: int) -> list[list[str]]:
    """The data roles of each relay message of a stage, in role order: runs of RELAY_MESSAGE_BYTES // entry_bytes
    roles (at least one).  Message j goes under the stage's relay tag (j = 0) or ``<tag>/<j>``
    (:func:`relay_tag`); one message unless the releases are large."""
    per = max(1, RELAY_MESSAGE_BYTES // max(1, entry_bytes))
    return [list(roles[i : i + per]) for i in range(0, len(roles), per)]


def stage_relays(
    roles: Sequence[str], tag: str, pk: PublicKey, packing: Packing, L: int, proof_size: Callable[[int], int]
) -> list[tuple[str, list[str]]]:
    """(tag, roles) of each relay message of a stage whose releases hold ``L`` values in ``packing`` with proofs of
    ``proof_size(ciphertexts)`` integers: what the coordinator sends and a data party expects -- both from this one
    function, so that they group alike."""
    count = packing.n_ciphertexts(L)
    groups = relay_groups(roles, relay_entry_bytes(pk.bits, count, proof_size(count)))
    return [(relay_tag(tag, j), group) for j, group in enumerate(groups)]


def relay_tag(tag: str, j: int) -> str:
    """The tag of relay message j of a stage (:func:`relay_groups`)."""
    return tag if j == 0 else f"{tag}/{j}"


def relay_envelope(n: int, entry_bytes: int) -> tuple[int, int, int]:
    """(messages, largest, total bytes) of one stage's relay to a data party, for a traffic envelope: one message
    of n entries, or -- whenever those pass RELAY_MESSAGE_BYTES by this estimate -- at most n messages, each within
    RELAY_MESSAGE_BYTES or one entry (an estimate from other public sizes than the protocol's may group otherwise;
    this covers either)."""
    if n * entry_bytes <= RELAY_MESSAGE_BYTES:
        return (1, n * entry_bytes + 64, n * entry_bytes + 64)
    return (n, max(entry_bytes, RELAY_MESSAGE_BYTES) + 64, n * (entry_bytes + 64))


@dataclass(frozen=True)
class Tags:
    """The messages of one release under the group key: to Trent (``release``), the digests to the other data
    parties, Trent's relay (``contrib``: every release and proof in one message), the partial decryptions, and the
    tag the partial decryptions' proofs are bound to (``sum``)."""

    release: str
    digest: str
    contrib: str
    partial: str
    sum: str
    #: the release's proof of plaintext knowledge, to Trent (he relays it with the release, in ``contrib``)
    proof: str
    #: the hash of every digest a data party received (its echo), to every other data party
    echo: str

    @classmethod
    def covariance(cls) -> Tags:
        return cls("noisy/cov", DIGEST_TAG, CONTRIB_TAG, PARTIAL_TAG, "final/cov", PROOF_TAG, ECHO_TAG)

    @classmethod
    def power_round(cls, t: int) -> Tags:
        """Round t of the noisy power method: its release ``noisy/<t>``, the sum being the next block."""
        return cls(f"noisy/{t}", f"digest/{t}", f"contrib/{t}", f"partial/{t}", f"sum/{t}", f"pok/{t}", f"echo/{t}")

    @classmethod
    def exact_release(cls, what: str, t: int) -> Tags:
        """The exact mode's release ``what`` (``contrib``: C_i⁽ᵗ⁾; ``gram``: H_i of round t): committed, sent to
        Trent as ``<what>/<t>``, relayed (every party's in one message) as ``relayed/<what>/<t>``; nothing of it is
        decrypted as such."""
        return cls(
            f"{what}/{t}",
            f"digest/{what}/{t}",
            f"relayed/{what}/{t}",
            f"partial/{what}/{t}",
            f"sum/{what}/{t}",
            f"pok/{what}/{t}",
            f"echo/{what}/{t}",
        )

    @classmethod
    def decryption(cls, name: str) -> Tags:
        """The threshold decryption of Trent's ciphertext ``name`` (a block, a blinded Gram): partial decryptions
        ``partial/<name>`` among the data parties, their proofs bound to ``name``."""
        return cls(name, name, name, f"partial/{name}", name, name, name)


@dataclass(frozen=True)
class ProofKind:
    """What a release's proof shows about its ciphertexts, made from the encryptor's witness (plaintexts and
    randomness) and checked by every data party before anything is combined: its name in a refusal, its size in
    integers for ``n`` ciphertexts, the prover (pk, cts, plaintexts, randomness, context, nonce key) and the
    verifier (pk, cts, proof, context)."""

    claim: str
    size: Callable[[int], int]
    prove: Callable[[PublicKey, list[int], list[int], list[int], bytes, bytes], list[int]]
    verify: Callable[[PublicKey, list[int], Sequence[int], bytes], bool]
    #: every party's proof in one check (True: all hold; False: one fails, :attr:`verify` then names it)
    verify_many: Callable[[PublicKey, list[tuple[list[int], Sequence[int], bytes]]], bool] | None = None


#: the default: the owner knows what its release encrypts (it is no copy or power of another's ciphertext)
PLAINTEXT_KNOWLEDGE = ProofKind(
    "that it knows what it encrypts",
    lambda n: 3,
    # the randomness of a release is h^a (its replayable encryption): the proof's nonce is a power of h too
    lambda pk, cts, ms, rs, context, key: list(prove_plaintext_knowledge(pk, cts, ms, rs, context, key, djn=True)),
    verify_plaintext_knowledge,
)


class ContributionMismatch(InvalidMessage):
    """A contribution is not what its owner committed to.  At Trent (step 4): the release a data party sent
    him, ``origin`` that party; nothing is relayed.  At a data party (step 5): what Trent delivered -- Trent
    checked it against the same digest first, so ``origin`` is Trent's party; nothing is decrypted.  Or (step
    2) the digest Trent relays as this party's own is not the one it sent him: ``origin`` Trent's party; nothing
    is released."""


class EchoMismatch(InvalidMessage):
    """Another data party holds other digests than this one, or (at Trent) than he relayed (step 2b): Trent
    relayed different digests to different data parties, or a data party echoes something else than it was
    relayed.  Nothing is released (at Trent: nothing relayed).  ``parties``: the roles whose echoes differ from
    this participant's.
    No ``origin``: the echoes alone do not say whether Trent equivocated or the party that differs lied."""

    def __init__(self, message: str, parties: list[str]) -> None:
        super().__init__(message)
        self.parties = parties


class BadContributionProof(InvalidMessage):
    """A contribution's proof of plaintext knowledge fails (step 5): its owner committed to a ciphertext whose
    plaintext it cannot show it knows -- a copy of another's, say.  Nothing is decrypted.  ``origin``: the
    contribution's owner."""


@dataclass(frozen=True)
class GroupKey:
    """A data party's view of the group key of a session: its share and the share index of each data role."""

    share: KeyShare
    #: data role -> share index (1..n), from the key group's parties and the session's roles
    indices: Mapping[str, int]
    group: str = ""
    #: session id -> other data role -> the pair's key for the echoes through Trent (step 2b), agreed at the
    #: session's first echo (:func:`echo_digests`)
    links: dict[str, dict[str, bytes]] = field(default_factory=dict, compare=False, repr=False)

    @property
    def public(self) -> ThresholdPublicKey:
        return self.share.public


def validate_group_params(
    bad: Callable[[str], NoReturn], key_group: str | None, key_threshold: int | None, n_parties: int
) -> bool:
    """A session's group-key parameters (power iteration's, dp-aggregate's): the group's name and threshold t
    together, a valid name, 1 <= t <= n − 1; ``bad`` raises.  True if the session names a group."""
    if (key_group is None) != (key_threshold is None):
        bad("key_group and key_threshold go together: the group's name and its threshold t")
    if key_group is None:
        return False
    try:
        validate_party_name(key_group, "key_group")
    except InvalidMessage as exc:
        bad(str(exc))
    t = key_threshold
    if isinstance(t, bool) or not isinstance(t, int) or not 1 <= t <= n_parties - 1:
        bad(f"key_threshold={t!r} must be an integer in [1, {n_parties - 1}]")
    return True


def check_noise_share(bad: Callable[[str], NoReturn], h: int, n_parties: int, t: int, coordinator: str) -> None:
    """Under a group key each party adds σ²/h: h may not exceed n − t, else the coordinator with t data parties
    could leave less than σ² of honest noise on the sum."""
    if h > n_parties - t:
        bad(
            f"noise_parties={h} exceeds n − t = {n_parties - t}: {coordinator} with t data parties could leave "
            "less than σ² of honest noise on the sum"
        )


def check_group_key(params: PowerIterationParams, key: GroupKey, role: str) -> None:
    """The session's data roles must be exactly the group's parties, its threshold and key size the group's."""
    pub = key.public
    if pub.parties != params.n_parties or pub.threshold != params.key_threshold:
        raise InvalidMessage(
            f"key group {params.key_group!r} is a ({pub.threshold}, {pub.parties}) key; the session asks for "
            f"key_threshold = {params.key_threshold} among n_parties = {params.n_parties} data parties"
        )
    if pub.public_key.bits != params.key_bits:
        raise InvalidMessage(
            f"key group {params.key_group!r} has a {pub.public_key.bits}-bit key; the session says key_bits = "
            f"{params.key_bits}"
        )
    if sorted(key.indices) != sorted(params.data_roles) or sorted(key.indices.values()) != list(
        range(1, params.n_parties + 1)
    ):
        raise InvalidMessage(
            f"the data roles must be held by exactly the parties of key group {params.key_group!r}, one per share"
        )
    if key.indices.get(role) != key.share.index:
        raise InvalidMessage(f"{role} holds share {key.share.index} of the group, not the one its role maps to")


def refuse_seeded(params: PowerIterationParams, seed: SeedLike) -> None:
    """A group key needs secret randomness: a release's Paillier randomness comes from the party's root (so a
    replayed party re-sends it bit for bit), and under an experiment seed that root is known to everyone who
    knows the seed -- every release would be decryptable by them.  So a seeded session is refused."""
    if params.key_group is not None and (isinstance(seed, int) or getattr(seed, "seeded", False)):
        raise InvalidMessage(
            f"key_group {params.key_group!r} cannot run in a seeded session: a release's encryption randomness "
            "comes from the party's randomness root, which a known seed makes public (every release would be "
            "readable by whoever knows the seed); run it without a seed"
        )


def noise_guarantee(n: int, t: int, h: int) -> float:
    """The honest noise's variance, in units of σ², that Trent plus any t data parties cannot remove from
    the sum: the n − t other parties' (n − t)·σ²/h.  At least 1 (one curator's σ²) iff h <= n − t."""
    return (n - t) / h


#: the Kairouz–Liu–Steinke correction τ√d may add at most this fraction of Δ/σ to the honest sum's zCDP ε
#: parameter: far inside the calibration's margins (DP_PLD_MARGIN, DP_FP_MARGIN, 2^-20 each)
KLS_MARGIN = 2.0**-30


def check_distributed_noise(params: PowerIterationParams, mech: GaussianMechanism, shape: tuple[int, ...]) -> None:
    """Refuse unless the sum of the n − t honest parties' discrete Gaussians protects like one discrete
    Gaussian of their summed variance, up to KLS_MARGIN (Kairouz, Liu & Steinke 2021, Thm. 1): τ√d <=
    KLS_MARGIN·Δ/σ with σ one curator's noise.  At the grid's σ >= 2^20 steps, τ underflows to 0."""
    assert params.key_threshold is not None
    d = int(np.prod(shape))
    e = mech.grid_exponent(shape)
    honest = params.n_parties - params.key_threshold
    tau = distributed_gaussian_tau(math.ldexp(mech.grid_sigma(shape), -e), honest)
    central = mech.sigma * math.sqrt(params.noise_share)
    if tau * math.sqrt(d) > KLS_MARGIN * mech.sensitivity / central:
        raise InvalidMessage(
            f"power-iteration: the sum of {honest} discrete Gaussians is too far from one (τ√d = "
            f"{tau * math.sqrt(d):.3g}); raise epsilon's noise grid resolution"
        )


def key_summary(params: PowerIterationParams, key: GroupKey) -> dict[str, Any]:
    """The session's key, as a result records it."""
    return {
        "kind": "threshold",
        "group": params.key_group,
        "threshold": key.public.threshold,
        "parties": sorted(key.indices, key=lambda r: key.indices[r]),
        "fingerprint": key.public.fingerprint.hex(),
        "noise_share": params.noise_share,
        "honest_noise_sigma2": noise_guarantee(params.n_parties, key.public.threshold, params.noise_share),
    }


def contribution_digest(
    session_id: str, role: str, holder: str, vec: EncryptedVector, proof: Sequence[int] = ()
) -> bytes:
    """SHA-256 of a contribution: the session, its owner's role and the party holding that role (``holder``, its
    name in the session's roles: a role taken over by another party in a session of the same id commits to
    something else), its layout, every ciphertext and its proof of plaintext knowledge (a sum's digest has
    none).  The holder's share index is bound by the proof (:func:`proof_context`), which the digest covers:
    Trent, who checks releases against digests, does not know the group's share map."""
    h = hashlib.sha256(_DOMAIN + b"\x00contribution\x00")
    for part in (session_id.encode(), role.encode(), holder.encode()):
        h.update(len(part).to_bytes(4, "big") + part)
    h.update(b"%d,%d,%d,%d;" % (vec.exponent, vec.length, vec.packing.slots, vec.packing.slot_bits))
    for c in [*vec.ciphertexts, *proof]:
        b = int(c).to_bytes((int(c).bit_length() + 7) // 8 or 1, "big")
        h.update(len(b).to_bytes(4, "big") + b)
    return h.digest()


def proof_context(session_id: str, role: str, holder: str, index: int, tag: str, key: ThresholdPublicKey) -> bytes:
    """What a release's proof of plaintext knowledge is bound to: the session, its owner's role, the party
    holding that role (``holder``) and its share index, the release's tag (the round) and the group key's
    fingerprint -- it does not replay into another session, round or role, nor into the hands of another
    party (one that holds the same role name in a later session of the same id, say)."""
    h = hashlib.sha256(_DOMAIN + b"\x00plaintext-knowledge\x00")
    for part in (session_id.encode(), role.encode(), holder.encode(), b"%d" % index, tag.encode(), key.fingerprint):
        h.update(len(part).to_bytes(4, "big") + part)
    return h.digest()


def proof_from_proto(msg: pb.BigInts, pk: PublicKey, what: str, count: int = 3) -> list[int]:
    """A release's proof (``count`` integers; a proof of plaintext knowledge: (a, z, w)), sizes checked (the
    proof itself by :func:`checked_sum`)."""
    return [
        int(v) for v in from_bigints(msg, count=count, bound_bits=pk.nsquare.bit_length(), what=what, nonnegative=True)
    ]


def echo_hash(fingerprint: bytes, roles: list[str], digests: Mapping[str, bytes]) -> bytes:
    """SHA-256 of the group key's fingerprint and every data role's digest, in role order: what a data party
    (and Trent) echoes (step 2b) -- equal at two participants iff they hold the same digests."""
    h = hashlib.sha256(_DOMAIN + b"\x00echo\x00" + fingerprint)
    for role in roles:
        h.update(digests[role])
    return h.digest()


def sum_context(session_id: str, tag: str, total: EncryptedVector, echo: bytes) -> bytes:
    """The context a partial decryption's proof is bound to: the session, the round's tag, the echo every data
    party agreed on (step 2b) and the digest of the sum being decrypted (a proof does not replay into another
    session, round, set of commitments or ciphertext)."""
    return (
        _DOMAIN
        + b"\x00sum\x00"
        + hashlib.sha256(session_id.encode()).digest()
        + tag.encode()
        + b"\x00"
        + echo
        + contribution_digest(session_id, "sum", "", total)
    )


def partial_to_proto(p: PartialDecryption) -> pb.BigInts:
    """A batch partial decryption as BigInts: its values, then the proof's e and z."""
    if not p.batch or len(p.proofs) != 1:
        raise ValueError("only batch partial decryptions are sent")
    e, z = p.proofs[0]
    return bigints([*p.values, e, z])


def partial_from_proto(
    msg: pb.BigInts, pub: ThresholdPublicKey, party: int, count: int, what: str
) -> PartialDecryption:
    """A partial decryption of ``count`` ciphertexts by share ``party`` (sizes checked; the proof by combine)."""
    nbits = pub.public_key.nsquare.bit_length()
    values = from_bigints(msg, count=count + 2, bound_bits=max(nbits, pub.nonce_bits() + 2), what=what)
    if any(v <= 0 or v.bit_length() > nbits for v in values[:count]):
        raise BadPartialDecryption(party, "a value is not in (0, N²)")
    return PartialDecryption(party, tuple(values[:count]), ((values[count], values[count + 1]),), True)


def encryption_exponent(pk: PublicKey, key: bytes, tag: str, index: int, m: int) -> int:
    """The obfuscator's exponent a (``pk.obfuscation_bits`` bits) of ciphertext ``index`` of the release ``tag``
    encrypting ``m``: HMAC-SHA256(key, tag ‖ index ‖ m ‖ counter) in counter mode.  A function of the plaintext
    too, so a replay that re-encrypts other data (a lost record, changed data) never reuses a: E/E' = g^(m − m')
    would reveal the difference."""
    n = int(pk.n)
    bits = pk.obfuscation_bits
    mb = (int(m) % n).to_bytes((n.bit_length() + 7) // 8, "big")
    tb = tag.encode()
    msg = b"smcdp/replayable-encryption/v2\x00" + len(tb).to_bytes(4, "big") + tb + index.to_bytes(8, "big") + mb
    out = b"".join(hmac.new(key, msg + k.to_bytes(4, "big"), hashlib.sha256).digest() for k in range(-(-bits // 256)))
    return int.from_bytes(out, "big") >> (8 * len(out) - bits)


def _replayable_encryption(
    pk: PublicKey, key: bytes, tag: str, witness: list[tuple[int, int]]
) -> Callable[[list[int]], Awaitable[list[int]]]:
    """Encryption c = (1 + N)^m·(h^N)^a mod N² (:func:`~smcdp.crypto.threshold.encrypt_replayable`: the key's
    public base h, two table lookups) whose exponent a comes from ``key``, a stream of the party's randomness
    root, the release's tag, the ciphertext's index and its plaintext (:func:`encryption_exponent`): a replayed
    party re-encrypts its release bit for bit, so the digest it committed to (which may have left it before a
    crash, and the release not) still matches what it sends.  Each (m, r), r = h^a mod N (so c = g^m·r^N), is
    appended to ``witness``: the opening the release's proof is made from (its length is the next ciphertext's
    index)."""

    def encrypt(ms: list[int]) -> list[int]:
        out = []
        for m in ms:
            c, r = encrypt_replayable(pk, m, encryption_exponent(pk, key, tag, len(witness), m))
            witness.append((m, int(r)))
            out.append(int(c))
        return out

    async def run(ms: list[int]) -> list[int]:
        return await asyncio.to_thread(encrypt, ms)

    return run


#: the coordinator's channels (one a session) whose first echo has passed: the later echoes carry MACs
_ECHOED: weakref.WeakSet[Channel] = weakref.WeakSet()


def _named(exc: InvalidMessage, party: str) -> InvalidMessage:
    """``exc`` with ``party`` as its origin (the participant whose message it is about)."""
    exc.origin = party
    return exc


def digest_set_bytes(n: int) -> int:
    """A bound on the bytes of Trent's relay of ``n`` data roles' digests (step 2): each a key fingerprint and
    a 32-byte digest, two bytes of framing each."""
    return 72 * n + 64


async def exchange_digests(
    ch: Channel, params: PowerIterationParams, key: GroupKey, mine: bytes, trent: str, tags: Tags
) -> dict[str, bytes]:
    """Step 2: this party's digest to ``trent``; his relay of every data role's digest back (one message, the
    same bytes to every data party, role order).  Its own entry must be the digest it sent him -- else Trent
    substituted it (:class:`ContributionMismatch`, ``origin`` Trent's party) -- and every entry must name the
    group key's fingerprint.  Whether every data party holds the same set is the echo's business (step 2b)."""
    fp = key.public.fingerprint
    await ch.send(trent, tags.digest, pb.Blobs(values=[fp, mine]))
    msg = await ch.recv(trent, tags.digest, pb.Blobs)
    roles = params.data_roles
    if len(msg.values) != 2 * len(roles) or any(len(msg.values[2 * i + 1]) != 32 for i in range(len(roles))):
        raise InvalidMessage(
            f"{tags.digest} from {trent} must relay (key fingerprint, 32-byte digest) of each of the "
            f"{len(roles)} data roles, in order"
        )
    relayed = {role: (bytes(msg.values[2 * i]), bytes(msg.values[2 * i + 1])) for i, role in enumerate(roles)}
    if relayed[ch.role] != (fp, mine):
        exc = ContributionMismatch(
            f"{ch.role} releases nothing: the digest {trent} relayed as {ch.role}'s ({tags.digest}) is not the one "
            f"{ch.role} sent him: {trent} deviated"
        )
        exc.origin = ch.roles[trent]
        raise exc
    for role, (their_fp, _) in relayed.items():
        if their_fp != fp:
            raise InvalidMessage(f"{role} holds another key under group {params.key_group!r} (fingerprints differ)")
    return {role: d for role, (_, d) in relayed.items()}


#: bytes of a data party's first echo (the hash and its link public key, with framing)
FIRST_ECHO_BYTES = 96


def echo_relay_bytes(n: int) -> int:
    """A bound on Trent's relay of the n − 1 MACs of a later echo to one data party (step 2b)."""
    return (n - 1) * (links.MAC_BYTES + 2) + 16


def echo_to_trent_bytes(n: int) -> int:
    """A bound on a data party's later echo to Trent: the hash and a MAC for each other data party."""
    return 34 + echo_relay_bytes(n)


async def echo_digests(
    ch: Channel,
    params: PowerIterationParams,
    key: GroupKey,
    digests: Mapping[str, bytes],
    trent: str,
    tags: Tags,
    seed: SeedLike,
) -> bytes:
    """Step 2b: the hash of every digest held here, checked against every other data party's; unless all are
    equal, nothing is released (:class:`EchoMismatch` names the parties whose echoes differ).  Trent relayed the
    digests, so the echoes are what shows that he relayed the same ones to everybody; he checks every echo
    against the digests he relayed (:func:`_trent_echo`).

    The session's first echo goes to every other data party directly, with this party's link public key
    (:mod:`smcdp.primitives.links`; its secret from a stream of the party's root ``seed``, so that a replayed
    party sends the same key and every session has fresh ones), and to Trent; from the keys the pairs agree on, every later echo goes to
    Trent alone, as the hash and one MAC for each other data party, and Trent relays to each party the MACs
    addressed to it: a MAC of another party's echo verifies under the pair's key only if that echo is this
    party's, and Trent, who does not hold the key, can neither forge one nor pass one party's off as
    another's.  After this, Trent holds the very digests every data party holds, so a relayed contribution
    that does not match one is his doing."""
    others = [r for r in params.data_roles if r != ch.role]
    echo = echo_hash(key.public.fingerprint, params.data_roles, digests)
    pairs = key.links.get(ch.session_id)
    if pairs is None:
        secret = links.link_secret(stream_key(seed, "group-key", "links"), ch.session_id, ch.role)
        await asyncio.gather(
            ch.send_many(others, tags.echo, pb.Blobs(values=[echo, links.link_public(secret)])),
            ch.send(trent, tags.echo, pb.Blobs(values=[echo])),
        )
        got = await ch.recv_all(others, tags.echo, pb.Blobs)
        made: dict[str, bytes] = {}
        for r in others:
            try:
                if len(got[r].values) != 2 or len(got[r].values[0]) != 32:
                    raise ValueError("it must be (32-byte echo, link public key)")
                made[r] = links.pair_key(secret, bytes(got[r].values[1]), ch.session_id, ch.role, r)
            except ValueError as exc:  # it came over r's own channel: r's doing
                raise _named(InvalidMessage(f"{tags.echo} from {r}: {exc}"), ch.roles[r]) from None
        differ = [r for r in others if got[r].values[0] != echo]
        if not differ:
            key.links[ch.session_id] = made
    else:
        sid = ch.session_id
        macs = [links.pair_mac(pairs[r], sid, tags.echo, ch.role, r, echo) for r in others]
        await ch.send(trent, tags.echo, pb.Blobs(values=[echo, *macs]))
        msg = await ch.recv(trent, tags.echo, pb.Blobs)
        if len(msg.values) != len(others):
            raise _named(
                InvalidMessage(f"{tags.echo} from {trent} must relay one MAC from each other data party"),
                ch.roles[trent],
            )
        differ = [
            r
            for r, mac in zip(others, msg.values)
            if not hmac.compare_digest(bytes(mac), links.pair_mac(pairs[r], sid, tags.echo, r, ch.role, echo))
        ]
    if differ:
        raise EchoMismatch(
            f"{ch.role} releases nothing: {', '.join(differ)} hold(s) other digests ({tags.digest}) than "
            f"{ch.role} does ({tags.echo} differs) -- {trent} relayed different digests to different parties",
            differ,
        )
    return echo


async def _encrypt_and_prove(
    ch: Channel,
    params: PowerIterationParams,
    key: GroupKey,
    W: np.ndarray,
    packing: Packing,
    tags: Tags,
    seed: SeedLike,
    kind: ProofKind = PLAINTEXT_KNOWLEDGE,
) -> tuple[EncryptedVector, list[int]]:
    """Step 1: the release W encrypted (randomness from the party's root) and the proof that this party knows
    what it encrypts (it is no copy of another's; or what ``kind`` shows), bound to the session, the role, its
    holder and share index, the round and the key (:func:`proof_context`)."""
    pk = key.public.public_key
    witness: list[tuple[int, int]] = []
    key_r = stream_key(seed, "power-iteration", ch.role, "encryption", tags.release)
    vec = await EncryptedVector.encrypt_with(
        _replayable_encryption(pk, key_r, tags.release, witness),
        pk,
        W,
        frac_bits=params.release_frac_bits(),
        packing=packing,
        bound=params.contribution_bound(),
    )
    proof = await asyncio.to_thread(
        kind.prove,
        pk,
        [int(c) for c in vec.ciphertexts],
        [m for m, _ in witness],
        [r for _, r in witness],
        proof_context(ch.session_id, ch.role, ch.roles[ch.role], key.share.index, tags.release, key.public),
        stream_key(seed, "power-iteration", ch.role, "plaintext-knowledge", tags.release),
    )
    return vec, proof


async def release_and_commit(
    ch: Channel,
    params: PowerIterationParams,
    key: GroupKey,
    W: np.ndarray,
    packing: Packing,
    trent: str,
    tags: Tags,
    seed: SeedLike,
    kind: ProofKind = PLAINTEXT_KNOWLEDGE,
) -> tuple[dict[str, bytes], bytes]:
    """Steps 1–3 for the release W (already noisy and clamped): encrypt and prove, commit, echo, send it and
    its proof to ``trent`` (``tags.release``, ``tags.proof``).  Returns every data role's committed digest
    (its own included) and the echo every data party agreed on."""
    vec, proof = await _encrypt_and_prove(ch, params, key, W, packing, tags, seed, kind)
    return await commit_and_release(ch, params, key, vec, proof, trent, tags, seed)


async def commit_and_release(
    ch: Channel,
    params: PowerIterationParams,
    key: GroupKey,
    vec: EncryptedVector,
    proof: Sequence[int],
    trent: str,
    tags: Tags,
    seed: SeedLike,
) -> tuple[dict[str, bytes], bytes]:
    """Steps 2–3 for a release already made and proven (``vec``, ``proof``): commit, echo, send both to
    ``trent``.  Returns every data role's committed digest (its own included) and the agreed echo."""
    # --- Step 2: the digest to every other data party; every other party's digest before anything more.
    mine = contribution_digest(ch.session_id, ch.role, ch.roles[ch.role], vec, proof)
    digests = await exchange_digests(ch, params, key, mine, trent, tags)
    # --- Step 2b: every data party holds the same digests (nobody sent different ones to different parties).
    echo = await echo_digests(ch, params, key, digests, trent, tags, seed)
    # --- Step 3: the release to Trent (the release point), only now that every contribution is committed.
    await ch.send(trent, tags.release, vec.to_proto())
    await ch.send(trent, tags.proof, bigints(list(proof)))
    return digests, echo


def _release(
    msg: pb.CiphertextVector, pk: PublicKey, params: PowerIterationParams, L: int, packing: Packing, what: str
) -> EncryptedVector:
    """A data party's release as it arrives (at trent from its owner, at a data party from trent): its length,
    key, packing and value bound checked."""
    return EncryptedVector.from_proto(
        msg,
        pk,
        length=L,
        exponent=-params.release_frac_bits(),
        packing=packing,
        bound=params.contribution_bound(),
        what=what,
    )


def _relayed(
    msg: pb.RelayedReleases,
    roles: list[str],
    params: PowerIterationParams,
    pk: PublicKey,
    packing: Packing,
    L: int,
    what: str,
    proof_size: Callable[[int], int],
) -> dict[str, tuple[EncryptedVector, list[int]]]:
    """The releases and proofs (``proof_size(ciphertexts)`` integers) of ``roles`` as Trent relays them in one
    message (``what``): one entry per role, in role order; sizes, key and bound checked."""
    if [e.role for e in msg.releases] != roles:
        raise InvalidMessage(f"{what} must relay the release of every data role in order ({', '.join(roles)})")
    out = {}
    for entry in msg.releases:
        at = f"{what}, {entry.role}'s"
        vec = _release(entry.release, pk, params, L, packing, f"{at} release")
        out[entry.role] = (vec, proof_from_proto(entry.proof, pk, f"{at} proof", proof_size(len(vec.ciphertexts))))
    return out


async def checked_sum(
    ch: Channel,
    params: PowerIterationParams,
    key: GroupKey,
    packing: Packing,
    digests: Mapping[str, bytes],
    L: int,
    trent: str,
    tags: Tags,
    kind: ProofKind = PLAINTEXT_KNOWLEDGE,
) -> EncryptedVector:
    """Step 5's checks: every contribution ``trent`` delivers (with its proof) against its owner's digest
    (a mismatch names Trent), then every contribution's proof of plaintext knowledge (a failure names its
    owner) -- all of them before anything is summed or decrypted; then their sum, recomputed here."""
    pk = key.public.public_key
    vecs = await relayed_contributions(ch, params, pk, packing, digests, L, trent, tags, kind.size)
    statements = {  # its own release is the one it made (relayed_contributions checked it against its digest)
        role: (
            [int(c) for c in vec.ciphertexts],
            proof,
            proof_context(ch.session_id, role, ch.roles[role], key.indices[role], tags.release, key.public),
        )
        for role, (vec, proof) in vecs.items()
        if role != ch.role
    }
    many = None if kind.verify_many is None else partial(kind.verify_many, pk)
    role = await first_failing(statements, many, lambda st: kind.verify(pk, *st))
    if role is not None:
        bad = BadContributionProof(
            f"{ch.role} refuses to decrypt: {role}'s release ({tags.release}) comes with no valid proof "
            f"{kind.claim} ({tags.proof})"
            + (" -- it may be a copy of another party's ciphertext" if kind is PLAINTEXT_KNOWLEDGE else "")
        )
        bad.origin = ch.roles[role]
        raise bad
    total, *rest = [v for v, _ in vecs.values()]
    for v in rest:
        total = total + v
    return total


async def relayed_contributions(
    ch: Channel,
    params: PowerIterationParams,
    pk: PublicKey,
    packing: Packing,
    digests: Mapping[str, bytes],
    L: int,
    trent: str,
    tags: Tags,
    proof_size: Callable[[int], int] = PLAINTEXT_KNOWLEDGE.size,
) -> dict[str, tuple[EncryptedVector, list[int]]]:
    """Step 5's first check: every data role's release and proof as ``trent`` relays them, each against the
    digest its owner committed to -- a mismatch names Trent, who checked the same digest before relaying."""
    vecs: dict[str, tuple[EncryptedVector, list[int]]] = {}
    for tag, group in stage_relays(params.data_roles, tags.contrib, pk, packing, L, proof_size):
        msg = await ch.recv(trent, tag, pb.RelayedReleases)
        vecs.update(_relayed(msg, group, params, pk, packing, L, f"{tag} from {trent}", proof_size))
    for role, (vec, proof) in vecs.items():
        if contribution_digest(ch.session_id, role, ch.roles[role], vec, proof) != digests[role]:
            exc = ContributionMismatch(
                f"{ch.role} refuses to decrypt: the contribution of {role} that {trent} delivered "
                f"({tags.contrib}, {role}'s) is not the one {role} committed to ({tags.digest}), which {trent} "
                f"checked it against before relaying it: {trent} deviated -- a party partially decrypts only the "
                "sum it recomputed from the committed contributions"
            )
            exc.origin = ch.roles[trent]
            raise exc
    return vecs


async def first_failing(
    statements: Mapping[str, Any],
    verify_many: Callable[[list[Any]], bool] | None,
    verify: Callable[[Any], bool],
) -> str | None:
    """The first role whose statement (a proof and what it is about) fails ``verify``, or None: every one at once
    first where ``verify_many`` can (all hold: done), one by one only to find the one to name."""
    if verify_many is not None and await asyncio.to_thread(verify_many, list(statements.values())):
        return None
    for role, statement in statements.items():
        if not await asyncio.to_thread(verify, statement):
            return role
    return None


def split_offset(session_id: str, tag: str, parties: int) -> int:
    """The rotation of a split decryption's decryptors (:func:`~smcdp.crypto.threshold.decryptors`): a hash of the
    session and the partial decryptions' tag, so that successive rounds', stages' and sessions' vectors are
    decrypted by different parties.  Public: every party computes the same."""
    h = hashlib.sha256(b"smcdp/split-decryption\x00")
    for part in (session_id.encode(), tag.encode()):
        h.update(len(part).to_bytes(4, "big") + part)
    return int.from_bytes(h.digest()[:8], "big") % parties


async def threshold_decrypt(
    ch: Channel,
    params: PowerIterationParams,
    key: GroupKey,
    total: EncryptedVector,
    tags: Tags,
    seed: SeedLike,
    echo: bytes,
    *,
    signed: bool = True,
    protocol: str = "power-iteration",
    agree: str | None = None,
) -> list[int]:
    """Steps 5–6: this party's partial decryption of its share of ``total`` (the sum it recomputed) to the other
    data parties, theirs verified and combined: the sum's signed integers (``signed`` False: the plaintexts in
    [0, N), unpacked as they are).  **The work is split**: ciphertext k is partially decrypted by the t + 1
    parties :func:`~smcdp.crypto.threshold.decryptors` names (among m of the n parties, rotated by
    :func:`split_offset`), so each decryptor decrypts about (t + 1)/m of the ciphertexts, with one batch proof,
    and every partial a party receives is one it uses -- each is verified and a wrong one named.  The proof's
    nonce is derived from a stream of the party's root and the statement, so a replayed party sends the same
    bytes.

    ``agree``: ``total`` is a ciphertext the parties did not recompute but received from this participant (the
    exact mode's Trent): with its partial each party sends a digest of what it decrypts (``<partial>/agree``)
    and checks the others' before it verifies their partials -- a sender who gave different parties different
    ciphertexts (each valid) makes the digests differ (:class:`EchoMismatch`), instead of every partial of
    the others failing its proof and an honest party being named."""
    pub = key.public
    count = len(total.ciphertexts)
    others = [r for r in params.data_roles if r != ch.role]
    offset = split_offset(ch.session_id, tags.partial, pub.parties)
    share_of = {r: assigned(count, pub.parties, pub.threshold, key.indices[r], offset) for r in params.data_roles}
    if agree is not None:
        mine = hashlib.sha256(sum_context(ch.session_id, tags.sum, total, echo)).digest()
        await ch.send_many(others, f"{tags.partial}/agree", pb.Blobs(values=[mine]))
    own, context = await send_partial(
        ch, key, total, tags, seed, echo, others, protocol=protocol, positions=share_of[ch.role]
    )
    if agree is not None:
        held = await ch.recv_all(others, f"{tags.partial}/agree", pb.Blobs)
        differ = [r for r in others if list(held[r].values) != [mine]]
        if differ:
            raise EchoMismatch(
                f"{ch.role} combines nothing: {', '.join(differ)} decrypt(s) another {tags.sum} than {ch.role} "
                f"does -- {agree} sent different data parties different ciphertexts (or a data party says so "
                "falsely)",
                differ,
            )
    senders = [r for r in others if share_of[r]]
    got = await ch.recv_all(senders, tags.partial, pb.BigInts)
    return await combine_partials(
        ch, pub, key.indices, total, tags, context, got, own=own, signed=signed, split=share_of, offset=offset
    )


async def threshold_decrypt_many(
    ch: Channel,
    params: PowerIterationParams,
    key: GroupKey,
    vecs: Sequence[EncryptedVector],
    tags: Tags,
    seed: SeedLike,
    echo: bytes,
    agree: str | None = None,
) -> list[list[int]]:
    """:func:`threshold_decrypt` of several vectors at once (each this party checked it may decrypt): one partial
    decryption of all their ciphertexts with one proof, so that each party proves and verifies once, not once a
    vector.  Returns each vector's signed integers, unpacked by its own layout."""
    pk = key.public.public_key
    cts = [c for v in vecs for c in v.ciphertexts]
    raw = EncryptedVector(pk, cts, len(cts), 0)
    plain = await threshold_decrypt(ch, params, key, raw, tags, seed, echo, agree=agree)
    out, at = [], 0
    for v in vecs:
        count = len(v.ciphertexts)
        out.append(v._unpack(plain[at : at + count]))
        at += count
    return out


async def send_partial(
    ch: Channel,
    key: GroupKey,
    total: EncryptedVector,
    tags: Tags,
    seed: SeedLike,
    echo: bytes,
    to: list[str],
    *,
    protocol: str = "power-iteration",
    positions: Sequence[int] | None = None,
) -> tuple[PartialDecryption | None, bytes]:
    """This party's partial decryption of ``total`` (which it recomputed) -- of its ciphertexts at ``positions``
    only, when the work is split (none: nothing is sent) --, with its proof bound to the session, ``tags.sum``,
    the agreed ``echo`` and the sum's digest, sent to ``to``.  Returns it and that context."""
    context = sum_context(ch.session_id, tags.sum, total, echo)
    if positions is not None and not positions:
        return None, context
    cts = [int(c) for c in total.ciphertexts]
    if positions is not None:
        cts = [cts[k] for k in positions]
    nonce_key = stream_key(seed, protocol, ch.role, "proof", tags.partial)
    own = await asyncio.to_thread(partial_decrypt, key.share, cts, context, nonce_key=nonce_key)
    await ch.send_many(to, tags.partial, partial_to_proto(own))
    return own, context


async def combine_partials(
    ch: Channel,
    pub: ThresholdPublicKey,
    indices: Mapping[str, int],
    total: EncryptedVector,
    tags: Tags,
    context: bytes,
    got: Mapping[str, pb.BigInts],
    *,
    own: PartialDecryption | None = None,
    signed: bool = True,
    split: Mapping[str, Sequence[int]] | None = None,
    offset: int = 0,
) -> list[int]:
    """The plaintexts of ``total`` from the partial decryptions ``got`` (role -> message; and ``own``), every one
    verified first: a wrong one raises :class:`~smcdp.crypto.threshold.BadPartialDecryption` naming its role
    and party (``origin``).  ``signed``: as :func:`threshold_decrypt`.  ``split``: role -> the positions its
    partial covers (:func:`threshold_decrypt`'s split work; :func:`~smcdp.crypto.threshold.combine_assigned`), and
    ``offset`` the rotation of its decryptors."""
    role_of = {i: r for r, i in indices.items()}
    count = len(total.ciphertexts)
    try:
        partials = ([own] if own is not None else []) + [
            partial_from_proto(
                got[r], pub, indices[r], count if split is None else len(split[r]), f"{tags.partial} from {r}"
            )
            for r in got
        ]
        cts = [int(c) for c in total.ciphertexts]
        mine = own.party if own is not None else None
        if split is not None:
            plain = await asyncio.to_thread(
                combine_assigned, pub, cts, partials, context, signed=signed, own=mine, offset=offset
            )
        else:
            plain = await asyncio.to_thread(combine, pub, cts, partials, context, signed=signed, own=mine)
        return total._unpack(plain) if signed else plain
    except BadPartialDecryption as exc:
        role = role_of[exc.party]
        named = BadPartialDecryption(exc.party, f"{exc.reason} ({role}, {ch.roles[role]!r})")
        named.origin = ch.roles[role]
        raise named from None


async def _trent_echo(
    ch: Channel, params: PowerIterationParams, tags: Tags, fingerprint: bytes | None = None
) -> tuple[Mapping[str, pb.Blobs], bytes]:
    """Trent's part of steps 2 and 2b: every data party's digest, relayed to every data party in one message
    (role order, the same bytes to each: :func:`exchange_digests`); then every data party's echo, which must
    equal the hash of the digests he relayed -- else he relays nothing (:class:`EchoMismatch`).
    ``fingerprint``: the group key's, as Trent was told it -- every digest must name it.  Returns the digest
    messages and the echo."""
    roles = params.data_roles
    digests = await ch.recv_all(roles, tags.digest, pb.Blobs)
    for role in roles:
        values = digests[role].values
        if len(values) != 2 or len(values[0]) != 32 or len(values[1]) != 32:
            raise _named(
                InvalidMessage(f"{tags.digest} from {role} must be (32-byte key fingerprint, 32-byte digest)"),
                ch.roles[role],
            )
        if values[0] != (fingerprint if fingerprint is not None else digests[roles[0]].values[0]):
            raise _named(
                InvalidMessage(
                    f"{ch.role} relays nothing: the key {role}'s digest names is not the group key "
                    f"{'it was given' if fingerprint is not None else roles[0] + ' names'}"
                ),
                ch.roles[role],
            )
    await ch.send_many(roles, tags.digest, pb.Blobs(values=[v for role in roles for v in digests[role].values]))
    held = {role: bytes(digests[role].values[1]) for role in roles}
    echo = echo_hash(bytes(digests[roles[0]].values[0]), roles, held)
    got = await ch.recv_all(roles, tags.echo, pb.Blobs)
    first = ch not in _ECHOED  # a session's first echo is the hash alone; the later ones carry MACs
    for r in roles:
        values = got[r].values
        if len(values) != (1 if first else len(roles)) or len(values[0]) != 32:
            raise _named(
                InvalidMessage(
                    f"{tags.echo} from {r} must be the 32-byte hash"
                    + (" (a session's first echo)" if first else " and one MAC for each other data party")
                ),
                ch.roles[r],
            )
        if any(len(mac) != links.MAC_BYTES for mac in values[1:]):
            raise _named(InvalidMessage(f"{tags.echo} from {r}: a MAC has {links.MAC_BYTES} bytes"), ch.roles[r])
    differ = [r for r in roles if got[r].values[0] != echo]
    if differ:
        raise EchoMismatch(
            f"{ch.role} relays nothing: {', '.join(differ)} hold(s) other digests ({tags.digest}) than "
            f"{ch.role} relayed ({tags.echo} differs)",
            differ,
        )
    _ECHOED.add(ch)
    if not first:  # a later echo: each party the MACs the others addressed to it (echo_digests)
        position = {i: {r: k for k, r in enumerate(o for o in roles if o != i)} for i in roles}
        await asyncio.gather(
            *(
                ch.send(j, tags.echo, pb.Blobs(values=[got[i].values[1 + position[i][j]] for i in roles if i != j]))
                for j in roles
            )
        )
    return digests, echo


async def trent_deliver(
    ch: Channel,
    params: PowerIterationParams,
    pk: PublicKey,
    L: int,
    tags: Tags,
    fingerprint: bytes | None = None,
    proof_size: Callable[[int], int] = PLAINTEXT_KNOWLEDGE.size,
    packing: Packing | None = None,
) -> tuple[bytes, dict[str, EncryptedVector]]:
    """Trent's steps 2, 2b and 4: he relays the digests and checks the echoes (:func:`_trent_echo`), then relays
    every data party's release (``tags.release``) and its proof of plaintext knowledge (``tags.proof``) to every
    data party -- all of them in one ``RelayedReleases`` message (``tags.contrib``), the same bytes to each --
    each checked first (size, key, bound) and against the digest its owner committed to (``tags.digest``, which
    it sent him and he relayed to every data party): a release that is not what its sender committed
    to is refused, naming the sender (:class:`ContributionMismatch`), and nothing is relayed.  He sums
    nothing and decrypts nothing.  Returns the echo and the releases (dp-aggregate's Charlie combines the
    partial decryptions of their sum; ``fingerprint``: see :func:`_trent_echo`; ``packing``: the releases' layout,
    by default the contributions')."""
    roles = params.data_roles
    packing = packing or params.packing(pk)
    digests, echo = await _trent_echo(ch, params, tags, fingerprint)
    vecs = {}
    noisy = await ch.recv_all(roles, tags.release, pb.CiphertextVector)
    proofs = await ch.recv_all(roles, tags.proof, pb.BigInts)
    for role in roles:
        vec = vecs[role] = _release(noisy[role], pk, params, L, packing, f"{tags.release} from {role}")
        proof = proof_from_proto(proofs[role], pk, f"{tags.proof} from {role}", proof_size(len(vec.ciphertexts)))
        if contribution_digest(ch.session_id, role, ch.roles[role], vec, proof) != digests[role].values[1]:
            exc = ContributionMismatch(
                f"{ch.role} relays nothing: the release {role} sent ({tags.release}, {tags.proof}) is not the one "
                f"{role} committed to ({tags.digest}): {role} deviated"
            )
            exc.origin = ch.roles[role]
            raise exc
    # one message (several, for large releases): every release and proof, the same bytes to every data party
    for tag, group in stage_relays(roles, tags.contrib, pk, packing, L, proof_size):
        relay = pb.RelayedReleases(
            releases=[pb.RelayedRelease(role=role, release=noisy[role], proof=proofs[role]) for role in group]
        )
        await ch.send_many(roles, tag, relay)
    return echo, vecs


# ------------------------------------------------------------------ the exact mode: Trent's proven combinations
#: Under a group key Trent's block is a combination of the aggregates of the last this-many contribution
#: releases (every data party recomputes them): his decoys mix the ≤ 5 latest real states and never come twice in
#: a row, so those lie among the last 10; the final block is the last real state he sent, among the last 4.
EXACT_WINDOW = 10


class BadCombination(InvalidMessage):
    """Trent's block or blinded Gram comes with no valid proof that it is a combination of the sums this data
    party recomputed itself (:func:`~smcdp.crypto.zkp.prove_combination`): it could hold anything -- one party's
    contribution, say.  Nothing is decrypted; ``origin``: Trent's party."""


def combination_context(session_id: str, tag: str) -> bytes:
    """What Trent's proof of a combination is bound to: the session and the message's tag (the proof's challenge
    hashes the public key too)."""
    h = hashlib.sha256(_DOMAIN + b"\x00combination\x00")
    for part in (session_id.encode(), tag.encode()):
        h.update(len(part).to_bytes(4, "big") + part)
    return h.digest()


def _statement_digest(rows: Sequence[EncryptedVector], exps: Sequence[int]) -> int:
    h = hashlib.sha256(_DOMAIN + b"\x00combination-statement\x00")
    for v in [*(c for row in rows for c in row.ciphertexts), *exps]:
        b = int(v).to_bytes((int(v).bit_length() + 7) // 8 or 1, "big")
        h.update(len(b).to_bytes(4, "big") + b)
    return int.from_bytes(h.digest(), "big")


def proven_combination(
    pk: PublicKey,
    rows: Sequence[EncryptedVector],
    exps: Sequence[int],
    key: bytes,
    tag: str,
    context: bytes,
    exponent_bits: int,
) -> tuple[EncryptedVector, list[int]]:
    """Trent's E = Π_j rows_j^{a_j}·s^N (entry by entry; the plaintexts Σ_j a_j·row_j) and his proof that it is
    one such combination (:func:`~smcdp.crypto.zkp.prove_combination`).  The re-randomisers s and the proof's
    nonces come from ``key`` (a stream of his root), the tag, the entry and the whole statement, so a replayed
    Trent sends the same bytes, and no s is used for two statements.  Each s^N is a fixed-base obfuscator of the
    key's public base (:func:`~smcdp.crypto.threshold.encrypt_replayable`), s = h^a mod N its opening."""
    n2 = pk.nsquare
    first = rows[0]
    count = len(first.ciphertexts)
    statement = _statement_digest(rows, exps)
    rerandomisers = [encrypt_replayable(pk, 0, encryption_exponent(pk, key, tag, i, statement)) for i in range(count)]
    ss = [int(s) for _, s in rerandomisers]
    used = [(row, a) for row, a in zip(rows, exps) if a]
    cts = [
        int(multi_exp([row.ciphertexts[i] for row, _ in used], [a for _, a in used], n2) * sn % n2)
        for i, (sn, _) in enumerate(rerandomisers)
    ]
    nonce_key = hmac.new(key, b"combination-proof\x00" + tag.encode(), hashlib.sha256).digest()
    proof = prove_combination(
        pk,
        [[int(c) for c in row.ciphertexts] for row in rows],
        cts,
        exps,
        ss,
        context,
        exponent_bits,
        nonce_key,
        djn=True,
    )
    bound = sum(a * row.bound for row, a in used)
    vec = EncryptedVector(pk, [gmpy2.mpz(c) for c in cts], first.length, first.exponent, first.packing, bound)
    return vec, proof


def check_combination(
    ch: Channel,
    pk: PublicKey,
    rows: Sequence[EncryptedVector],
    vec: EncryptedVector,
    proof: Sequence[int],
    context: bytes,
    exponent_bits: int,
    what: str,
    trent: str,
) -> None:
    """A data party's check before it partially decrypts ``vec`` (Trent's ``what``): the proof shows that it is
    one integer combination, re-randomised, of ``rows`` -- sums this party recomputed from committed
    contributions -- and of nothing else; else :class:`BadCombination` naming Trent."""
    ok = len(vec.ciphertexts) == len(rows[0].ciphertexts) and verify_combination(
        pk,
        [[int(c) for c in row.ciphertexts] for row in rows],
        [int(c) for c in vec.ciphertexts],
        proof,
        context,
        exponent_bits,
    )
    if not ok:
        exc = BadCombination(
            f"{ch.role} refuses to decrypt {what}: it comes with no valid proof that it is a combination of the "
            f"sums {ch.role} recomputed from the committed contributions -- {trent} deviated"
        )
        exc.origin = ch.roles[trent]
        raise exc
