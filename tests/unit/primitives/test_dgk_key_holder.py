"""What a DGK comparison's A accepts of B's public key (smcdp.primitives.comparison.compare_holder_a).

A cannot check the orders of g and h without p and q (docs/primitives.md).  A review built a key that passes
every check A makes -- g of large smooth order, h of a separate prime order -- with which B takes exact discrete
logarithms of A's blinded ciphertexts and reads A's input: a strict expected failure below carries it (docs:
primitives.md, protocols/dp-aggregate.md, protocols/speaker.md say what it means for each protocol).  The sizes
of B's key are bounded (fixed here)."""

from __future__ import annotations

import asyncio
import math
import random
import secrets

import gmpy2
import pytest
from gmpy2 import mpz

from smcdp.crypto import dgk
from smcdp.crypto.dgk import DGKPublicKey
from smcdp.errors import InvalidMessage
from smcdp.net.channel import InMemoryNetwork
from smcdp.primitives import comparison as cmp
from smcdp.v1 import messages_pb2 as pb
from tests.support.known_bugs import known_attack


def _run(a_fn, b_fn):
    net = InMemoryNetwork({"a": "alice", "b": "bob"}, session_id="s", timeout=120)
    return asyncio.run(net.run({"a": a_fn, "b": b_fn}))


def test_a_key_larger_than_the_comparison_allows_is_refused_before_its_tables_are_built():
    """A built tables sized by B's n, t and u, and accepted any size above the floor: an 8,192-bit key took
    318 MB and 23 s of A's (a review).  Now the session's agreed sizes bound them (default 4,096 bits, t ≤ 1,024)."""
    key = dgk.generate_keypair(768, 160, max_ell=16, allow_insecure=True, rng=random.Random(3))

    def b(ch):
        return cmp.compare_holder_b(ch, "a", [5], ell=16, key=key, output="b")

    for limits in ({"max_key_bits": 512}, {"max_t": 128}):
        with pytest.raises(InvalidMessage, match="larger than this comparison allows"):
            _run(
                lambda ch, lim=limits: cmp.compare_holder_a(
                    ch, "b", [3], ell=16, output="b", allow_insecure=True, **lim
                ),
                b,
            )
    res = _run(
        lambda ch: cmp.compare_holder_a(ch, "b", [3], ell=16, output="b", allow_insecure=True, max_key_bits=768), b
    )
    assert res["b"] == [1]  # 3 < 5


# ------------------------------------------------------------------ the crafted key (a review's attack)
def _small_primes(lo: int, hi: int) -> list[int]:
    out, x = [], mpz(lo)
    while (x := gmpy2.next_prime(x)) < hi:
        out.append(int(x))
    return out


def _side(half_bits: int, u: int, pool: list[int], rng: random.Random) -> tuple[int, int, list[int]]:
    """A prime p = 2·u·w·S·e + 1: w a 32-bit prime (h's order), S·e smooth (with u, g's order)."""
    while True:
        w = int(gmpy2.next_prime(mpz(rng.getrandbits(32)) | (1 << 31)))
        base, S, fs = 2 * u * w, 1, []
        for f in rng.sample(pool, len(pool)):
            if (base * S * f).bit_length() > half_bits - 14:
                break
            S, fs = S * f, [*fs, f]
        lo, hi = ((1 << (half_bits - 1)) + base * S - 1) // (base * S), ((1 << half_bits) - 1) // (base * S)
        for _ in range(200_000):
            e = rng.randrange(lo, hi + 1)
            if e != u and e not in fs and gmpy2.is_prime(e) and gmpy2.is_prime(base * S * e + 1, 40):
                return base * S * e + 1, w, [*fs, e]


def _element(p: int, order: int, factors: list[int], rng: random.Random) -> int:
    while True:
        x = gmpy2.powmod(rng.randrange(2, p - 1), (p - 1) // order, p)
        if all(gmpy2.powmod(x, order // f, p) != 1 for f in factors):
            return int(x)


def _crafted_key(bits: int, u: int, rng: random.Random) -> dict:
    pool = [f for f in _small_primes(300, 1 << 12) if f != u]
    rng.shuffle(pool)
    p, wp, fp = _side(bits // 2, u, pool[: len(pool) // 2], rng)
    q, wq, fq = _side(bits // 2, u, pool[len(pool) // 2 :], rng)
    gp, gq = _element(p, u * math.prod(fp), [u, *fp], rng), _element(q, u * math.prod(fq), [u, *fq], rng)
    hp, hq = _element(p, wp, [wp], rng), _element(q, wq, [wq], rng)

    def crt(a: int, b: int) -> int:
        return int(b + q * ((a - b) * gmpy2.invert(q, p) % p))

    sides = []
    for prime, w, fs, gx in ((p, wp, fp, gp), (q, wq, fq, gq)):
        order, base = u * math.prod(fs), gmpy2.powmod(gx, w, prime)
        tables = {}
        for f in [u, *fs]:
            gf, acc, t = gmpy2.powmod(base, order // f, prime), mpz(1), {}
            for k in range(f):
                t[int(acc)] = k
                acc = acc * gf % prime
            tables[f] = t
        sides.append((prime, w, order, tables))

    def dlog(c: int) -> int:
        """e of c = g^e·h^R, centred: c^w kills h's part, then Pohlig–Hellman over u and the small factors."""
        e, M, seen = 0, 1, set()
        for prime, w, order, tables in sides:
            y = gmpy2.powmod(mpz(c) % prime, w, prime)
            for f, t in tables.items():
                if f in seen:
                    continue
                seen.add(f)
                r = t[int(gmpy2.powmod(y, order // f, prime))]
                e, M = e + M * ((r - e) * pow(M, -1, f) % f), M * f
        return e if e <= M // 2 else e - M

    return {"n": p * q, "g": crt(gp, gq), "h": crt(hp, hq), "u": u, "dlog": dlog}


async def _crafted_b(ch, key: dict, ell: int, count: int, found: list) -> None:
    """B encrypts weights D0·D^(k−1) instead of bits: ciphertext 0 then holds every bit of X as a digit ±ρ."""
    u = key["u"]
    D0, D = 2 * (u - 1) * (ell + u + 3) + 1, 2 * (u - 1) + 1
    await ch.send("a", "cmp/dgk-hdr", pb.Ints(values=[1, ell, count, cmp.PREDICATES["lt"], cmp.OUTPUTS["b"]]))
    pk = DGKPublicKey.from_values(key["n"], key["g"], key["h"], u, 160, allow_insecure=True)
    await ch.send("a", "cmp/dgk-pk", pk.to_proto())
    n = mpz(key["n"])
    weights = [D0 * D ** (k - 1) for k in range(1, ell + 1)]
    cts = [pk.ciphertext_to_bytes(gmpy2.powmod(key["g"], w, n)) for _ in range(count) for w in weights]
    await ch.send("a", "cmp/dgk-bits", cmp._blobs(cts))
    msg = await ch.recv("a", "cmp/dgk-c", pb.Blobs)
    for j in range(count):
        xs = set()
        for b in msg.values[j * (ell + 1) : (j + 1) * (ell + 1)]:
            e = key["dlog"](int.from_bytes(b, "big"))
            d0 = ((e + D0 // 2) % D0) - D0 // 2
            rest, digits = (e - d0) // D0, []
            for _ in range(ell):
                d = ((rest + D // 2) % D) - D // 2
                digits.append(d)
                rest = (rest - d) // D
            if rest == 0 and all(digits):  # every bit's digit ±ρ: X's bits
                rho = abs(digits[-1])
                xs.add(sum(((1 - d // rho) // 2) << k for k, d in enumerate(digits)) - (1 << (ell - 1)))
        found.append(xs)


@known_attack(
    "known limitation (docs/primitives.md): A cannot check that B's DGK key is well formed, and a crafted "
    "key lets B read A's input; the fix is a proof of the key's form or a protocol where the untrusted party "
    "holds no DGK key",
)
def test_a_crafted_dgk_key_does_not_let_its_holder_read_a_s_input():
    ell = 48
    key = _crafted_key(512, int(gmpy2.next_prime(ell + 2)), random.Random(7))
    xs = [secrets.randbelow(1 << ell) - (1 << (ell - 1)) for _ in range(3)]
    found: list[set[int]] = []
    _run(
        lambda ch: cmp.compare_holder_a(ch, "b", xs, ell=ell, output="b", allow_insecure=True),
        lambda ch: _crafted_b(ch, key, ell, len(xs), found),
    )
    assert not all(x in f for x, f in zip(xs, found))  # B did not read A's inputs
