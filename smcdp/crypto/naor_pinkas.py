"""Group arithmetic and Naor–Pinkas 1-out-of-M oblivious transfer math (random-oracle variant).

Group: the 2048-bit MODP group of RFC 3526 (group 14), p = 2q + 1 a safe
prime, restricted to its subgroup of quadratic residues, of prime order q;
g = 2 generates it (p = 7 mod 8, so 2 is a square).  Elements travel as
fixed-width 256-byte big-endian strings; a received element is accepted only
if 1 < x < p and its Legendre symbol is +1 (membership in the order-q
subgroup; cheaper than x^q = 1).

Naor–Pinkas (SODA 2001, the efficient random-oracle protocol), as used here:

* C_1..C_{M-1}: group elements nobody knows a discrete log of.  Naor–Pinkas
  let the sender pick them; we derive them from SHAKE-256 of the session,
  tag and index (hash onto Z_p^*, then square into the subgroup), which saves
  the sender's first message (the chooser must not know log_g C_i; with a
  random oracle nobody does).
* Chooser, transfer j with choice s_j: random k_j in [1, q);
  PK_{j,0} = g^k_j if s_j = 0, else C_{s_j} * g^(-k_j).  Sends PK_{j,0}.
  (So PK_{j,s_j} = g^k_j where PK_{j,i} = C_i / PK_{j,0} for i >= 1.)
  PK_{j,0} is uniform in the group whatever s_j is: the choice is perfectly hidden.
* Sender: random r in [1, q) for the batch; sends g^r and, for every j and i,
  M_{j,i} xor KDF(K_{j,i}, j, i) with K_{j,0} = PK_{j,0}^r and
  K_{j,i} = C_i^r / K_{j,0}  (= PK_{j,i}^r).
* Chooser: K = (g^r)^k_j = PK_{j,s_j}^r decrypts M_{j,s_j}.  Any other key
  K_{j,i} = (C_i / C_{s_j})^r * g^{r k_j} needs (C_i/C_{s_j})^r: a CDH instance.

KDF: SHAKE-256 over a domain string, the session id, tag, transfer index j,
message index i and the 256-byte key element, squeezed to the message length
(the "H(K, j, i) xor M" of Naor–Pinkas with a variable-length output).
"""

from __future__ import annotations

import hashlib
import random
import secrets
from dataclasses import dataclass, field

import gmpy2
from gmpy2 import mpz

from smcdp.crypto.modexp import FixedBase, powmod
from smcdp.errors import InvalidMessage

_MODP2048_HEX = (
    "FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74"
    "020BBEA63B139B22514A08798E3404DDEF9519B3CD3A431B302B0A6DF25F1437"
    "4FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7ED"
    "EE386BFB5A899FA5AE9F24117C4B1FE649286651ECE45B3DC2007CB8A163BF05"
    "98DA48361C55D39A69163FA8FD24CF5F83655D23DCA3AD961C62F356208552BB"
    "9ED529077096966D670C354E4ABC9804F1746C08CA18217C32905E462E36CE3B"
    "E39E772C180E86039B2783A2EC07A28FB5C55DF06F4C52C9DE2BCBF695581718"
    "3995497CEA956AE515D2261898FA051015728E5A8AACAA68FFFFFFFFFFFFFFFF"
)

DOMAIN = b"smcdp/naor-pinkas-ot/v1"


@dataclass(eq=False)
class SchnorrGroup:
    """The order-q subgroup of quadratic residues modulo a safe prime p = 2q + 1."""

    p: mpz
    g: mpz
    name: str = ""
    _g_table: FixedBase | None = field(default=None, repr=False)

    @property
    def q(self) -> mpz:
        return (self.p - 1) // 2

    @property
    def byte_length(self) -> int:
        return (self.p.bit_length() + 7) // 8

    def random_exponent(self, rng: random.Random | None = None) -> mpz:
        """Uniform in [1, q) (from ``rng`` when given, e.g. a role's keyed stream; else the OS CSPRNG)."""
        q1 = int(self.q) - 1
        return mpz(1 + (secrets.randbelow(q1) if rng is None else rng.randrange(q1)))

    def g_table(self) -> FixedBase:
        """Fixed-base table for g (about 20 MB at 2048 bits; built on first use, kept)."""
        if self._g_table is None:
            self._g_table = FixedBase(self.g, self.p, self.q.bit_length())
        return self._g_table

    def exp_g(self, e: int, *, table: bool = False) -> mpz:
        if table:
            return self.g_table().pow(e)
        return powmod(self.g, e, self.p)

    def is_element(self, x: int) -> bool:
        """1 < x < p and x is a quadratic residue (x in the order-q subgroup, x != 1)."""
        x = mpz(x)
        return 1 < x < self.p and gmpy2.legendre(x, self.p) == 1

    def encode(self, x: int) -> bytes:
        return int(x).to_bytes(self.byte_length, "big")

    def decode(self, b: bytes, what: str = "group element") -> mpz:
        if len(b) != self.byte_length:
            raise InvalidMessage(f"{what} has {len(b)} bytes, expected {self.byte_length}")
        x = mpz(int.from_bytes(b, "big"))
        if not self.is_element(x):
            raise InvalidMessage(f"{what} is not an element of the order-q subgroup (range or Legendre check failed)")
        return x

    def hash_to_element(self, *parts: bytes) -> mpz:
        """Random-oracle map onto the subgroup: SHAKE-256 -> Z_p (128 spare bits) -> square."""
        ctr = 0
        while True:
            xof = hashlib.shake_256(DOMAIN + b"/hash-to-group")
            for part in parts + (ctr.to_bytes(4, "big"),):
                xof.update(len(part).to_bytes(8, "big") + part)
            x = mpz(int.from_bytes(xof.digest(self.byte_length + 16), "big")) % self.p
            y = x * x % self.p
            if y > 1:
                return y
            ctr += 1  # probability ~2^-2047


#: RFC 3526 group 14 (2048-bit MODP), quadratic-residue subgroup, g = 2.
MODP2048 = SchnorrGroup(p=mpz(int(_MODP2048_HEX, 16)), g=mpz(2), name="RFC3526-MODP-2048-QR")


def _lp(b: bytes) -> bytes:
    return len(b).to_bytes(8, "big") + b


def context_bytes(session_id: str, tag_prefix: str, m: int) -> bytes:
    """What binds C_i and the KDF to one protocol run."""
    return _lp(session_id.encode()) + _lp(tag_prefix.encode()) + m.to_bytes(4, "big")


def derive_c(group: SchnorrGroup, context: bytes, i: int) -> mpz:
    """C_i (i >= 1): nobody knows its discrete log (a random-oracle image of the context and i)."""
    return group.hash_to_element(context, b"C", i.to_bytes(4, "big"))


def derive_cs(group: SchnorrGroup, context: bytes, m: int) -> list[mpz | None]:
    """C_1..C_{m-1} (index 0 unused, None)."""
    return [None] + [derive_c(group, context, i) for i in range(1, m)]


def kdf(group: SchnorrGroup, context: bytes, j: int, i: int, key: int, length: int) -> bytes:
    xof = hashlib.shake_256(DOMAIN + b"/kdf")
    xof.update(_lp(context) + j.to_bytes(8, "big") + i.to_bytes(4, "big") + group.encode(key))
    return xof.digest(length)


def xor_bytes(a: bytes, b: bytes) -> bytes:
    return (int.from_bytes(a, "little") ^ int.from_bytes(b, "little")).to_bytes(len(a), "little")


def chooser_first(
    group: SchnorrGroup, cs: list[mpz], choice: int, *, table: bool = False, rng: random.Random | None = None
) -> tuple[mpz, mpz]:
    """(k, PK_0) for one transfer."""
    k = group.random_exponent(rng)
    gk = group.exp_g(k, table=table)
    if choice == 0:
        return k, gk
    return k, cs[choice] * gmpy2.invert(gk, group.p) % group.p


def sender_encrypt(
    group: SchnorrGroup, context: bytes, j: int, pk0: mpz, r: int, c_r: list[mpz], messages: list[bytes]
) -> list[bytes]:
    """Ciphertexts of one transfer j: M_i xor KDF(K_{j,i}); c_r[i] = C_i^r (i >= 1)."""
    p = group.p
    k0 = powmod(pk0, r, p)
    k0_inv = gmpy2.invert(k0, p)
    out = []
    for i, msg in enumerate(messages):
        key = k0 if i == 0 else c_r[i] * k0_inv % p
        out.append(xor_bytes(msg, kdf(group, context, j, i, key, len(msg))))
    return out


def chooser_decrypt(
    group: SchnorrGroup, context: bytes, j: int, choice: int, k: int, gr_table_or_gr: FixedBase | int, ciphertext: bytes
) -> bytes:
    """M_{j,choice} from (g^r)^k."""
    if isinstance(gr_table_or_gr, FixedBase):
        key = gr_table_or_gr.pow(k)
    else:
        key = powmod(gr_table_or_gr, k, group.p)
    return xor_bytes(ciphertext, kdf(group, context, j, choice, key, len(ciphertext)))
