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
from smcdp.errors import InvalidMessage
from smcdp.v1 import messages_pb2 as pb

#: largest Paillier modulus a peer may send (bits)
MAX_MODULUS_BITS = 16384


# --------------------------------------------------------------------------- Paillier keys
def public_key_to_proto(pk: PublicKey) -> pb.PaillierPublicKey:
    return pb.PaillierPublicKey(n=int_to_bytes(pk.n))


def public_key_from_proto(msg: pb.PaillierPublicKey, *, allow_insecure: bool = False) -> PublicKey:
    n = bytes_to_int(msg.n)
    if n.bit_length() > MAX_MODULUS_BITS:
        raise InvalidMessage("public key modulus is unreasonably large")
    check_key_bits(n.bit_length(), allow_insecure)
    return PublicKey(n)


def keypair_to_proto(sk: PrivateKey) -> pb.PaillierKeyPair:
    return pb.PaillierKeyPair(n=int_to_bytes(sk.public_key.n), p=int_to_bytes(sk.p), q=int_to_bytes(sk.q))


def keypair_from_proto(msg: pb.PaillierKeyPair, *, allow_insecure: bool = False) -> PrivateKey:
    pk = public_key_from_proto(pb.PaillierPublicKey(n=msg.n), allow_insecure=allow_insecure)
    return PrivateKey.from_factors(pk, bytes_to_int(msg.p), bytes_to_int(msg.q))


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
