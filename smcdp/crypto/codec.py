"""Protocol-buffer forms of keys and integers (the wire format of ``smcdp/v1/messages.proto``).

Every ``*_from_proto`` validates what a peer sent before anything computes
with it: key sizes against the security floor, canonical integer encodings,
counts and bounds, ciphertexts in Z*_{n²}.  :meth:`EncryptedVector.from_proto
<smcdp.crypto.vector.EncryptedVector.from_proto>` does the same for vectors.
"""

from __future__ import annotations

from collections.abc import Sequence

from gmpy2 import mpz

from smcdp.crypto.encoding import bytes_to_int, int_to_bytes
from smcdp.crypto.paillier import PrivateKey, PublicKey, check_key_bits
from smcdp.errors import InvalidMessage, PermissionDenied
from smcdp.v1 import messages_pb2 as pb

#: largest Paillier modulus a peer may send (bits)
MAX_MODULUS_BITS = 16384


# --------------------------------------------------------------------------- Paillier keys
def public_key_to_proto(pk: PublicKey) -> pb.PaillierPublicKey:
    base = pk.subgroup_base
    if base is None:
        return pb.PaillierPublicKey(n=int_to_bytes(pk.n))
    return pb.PaillierPublicKey(n=int_to_bytes(pk.n), subgroup_base=int_to_bytes(base), subgroup_bits=pk.subgroup_bits)


def public_key_from_proto(
    msg: pb.PaillierPublicKey, *, allow_insecure: bool = False, allow_subgroup: bool = False
) -> PublicKey:
    """The peer's public key, validated.  A subgroup key is refused (:class:`~smcdp.errors.PermissionDenied`)
    unless ``allow_subgroup``: re-randomising under it uses the owner's base, whose order nobody else can
    check (docs/crypto.md, "Subgroup keys"), so it is the receiving party's policy that admits it."""
    n = bytes_to_int(msg.n)
    if n.bit_length() > MAX_MODULUS_BITS:
        raise InvalidMessage("public key modulus is unreasonably large")
    check_key_bits(n.bit_length(), allow_insecure)
    if not msg.subgroup_base and not msg.subgroup_bits:
        return PublicKey(n)
    if not allow_subgroup:
        raise PermissionDenied(
            "the peer's Paillier key is a subgroup key, which this party's policy does not admit here "
            "(docs/crypto.md, 'Subgroup keys')"
        )
    return PublicKey(n, bytes_to_int(msg.subgroup_base), int(msg.subgroup_bits))


def peer_public_key(
    msg: pb.PaillierPublicKey, *, bits: int, kind: str, who: str, allow_insecure: bool = False
) -> PublicKey:
    """A key owner's public key as a session agreed on it: ``bits`` bits and of ``kind`` (``"standard"`` or
    ``"subgroup"``: a subgroup key is admitted only when the session names it, which every party's policy
    has then admitted); anything else is an :class:`~smcdp.errors.InvalidMessage` naming ``who`` sent it."""
    pk = public_key_from_proto(msg, allow_insecure=allow_insecure, allow_subgroup=kind == "subgroup")
    if pk.bits != bits:
        raise InvalidMessage(f"{who}'s public key has {pk.bits} bits; the session agreed on {bits}")
    if pk.kind != kind:
        raise InvalidMessage(f"{who}'s public key is a {pk.kind} key; the session agreed on a {kind} key")
    return pk


def keypair_to_proto(sk: PrivateKey) -> pb.PaillierKeyPair:
    pub = public_key_to_proto(sk.public_key)
    msg = pb.PaillierKeyPair(n=pub.n, p=int_to_bytes(sk.p), q=int_to_bytes(sk.q))
    if sk.orders is not None:
        msg.subgroup_base, msg.subgroup_bits = pub.subgroup_base, pub.subgroup_bits
        msg.alpha_p, msg.alpha_q = int_to_bytes(sk.orders[0]), int_to_bytes(sk.orders[1])
    return msg


def keypair_from_proto(
    msg: pb.PaillierKeyPair, *, allow_insecure: bool = False, allow_subgroup: bool = False
) -> PrivateKey:
    """A co-owner's key pair, with its factors (and a subgroup key's orders) checked."""
    pub = pb.PaillierPublicKey(n=msg.n, subgroup_base=msg.subgroup_base, subgroup_bits=msg.subgroup_bits)
    pk = public_key_from_proto(pub, allow_insecure=allow_insecure, allow_subgroup=allow_subgroup)
    orders = (bytes_to_int(msg.alpha_p), bytes_to_int(msg.alpha_q)) if pk.subgroup else None
    return PrivateKey.from_factors(pk, bytes_to_int(msg.p), bytes_to_int(msg.q), orders)


# --------------------------------------------------------------------------- single ciphertexts
def ciphertext_to_proto(pk: PublicKey, c: int) -> pb.CiphertextVector:
    """One unpacked ciphertext with exponent 0, as a one-element CiphertextVector."""
    return pb.CiphertextVector(
        ciphertexts=[int_to_bytes(c)],
        exponent=0,
        length=1,
        slots_per_ciphertext=1,
        slot_bits=0,
        key_fingerprint=pk.fingerprint,
    )


def ciphertext_from_proto(msg: pb.CiphertextVector, pk: PublicKey, what: str) -> mpz:
    """One validated, unpacked ciphertext with exponent 0 under ``pk``."""
    if msg.key_fingerprint != pk.fingerprint:
        raise InvalidMessage(f"{what} was encrypted under a different public key")
    if msg.length != 1 or len(msg.ciphertexts) != 1 or msg.slots_per_ciphertext > 1 or msg.exponent != 0:
        raise InvalidMessage(f"{what} must be exactly one unpacked ciphertext with exponent 0")
    b = msg.ciphertexts[0]
    if len(b) > (pk.nsquare.bit_length() + 7) // 8:
        raise InvalidMessage(f"{what} is longer than n²")
    return pk.validate_ciphertext(bytes_to_int(b), what)


# --------------------------------------------------------------------------- signed big integers
def bigints(values: Sequence[int]) -> pb.BigInts:
    msg = pb.BigInts()
    for v in values:
        v = int(v)
        msg.magnitude.append(int_to_bytes(abs(v)))
        msg.negative.append(v < 0)
    return msg


def from_bigints(msg: pb.BigInts, *, count: int, bound_bits: int, what: str, nonnegative: bool = False) -> list[int]:
    """Signed integers from a BigInts message; exactly ``count`` values with |v| < 2^bound_bits."""
    if len(msg.magnitude) != count or len(msg.negative) != count:
        raise InvalidMessage(f"{what} must hold exactly {count} integers, got {len(msg.magnitude)}")
    max_bytes = (bound_bits + 7) // 8
    out = []
    for i, (m, neg) in enumerate(zip(msg.magnitude, msg.negative)):
        if len(m) > max_bytes or m[:1] == b"\x00":
            raise InvalidMessage(f"{what}[{i}] is not a canonical integer below 2^{bound_bits}")
        v = bytes_to_int(m) if m else 0
        if neg:
            if v == 0:
                raise InvalidMessage(f"{what}[{i}] is a negative zero")
            v = -v
        if abs(v) >= 1 << bound_bits:
            raise InvalidMessage(f"{what}[{i}] lies outside ±2^{bound_bits}")
        if nonnegative and v < 0:
            raise InvalidMessage(f"{what}[{i}] must not be negative")
        out.append(v)
    return out
