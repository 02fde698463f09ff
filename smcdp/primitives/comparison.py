"""Two-party secure comparison of private integers (DGK with Veugen-style equality handling).

Role A holds integers x_1..x_N, role B holds y_1..y_N (both in the clear,
each a signed integer in [-2^(ell-1), 2^(ell-1))).  B is the DGK *key holder*:
it generates (or brings) the DGK key pair and is the only side that ever
decrypts.  For every pair the protocol computes the bit

    z_k = [x_k < y_k]      (predicate="lt", the default)   or
    z_k = [x_k <= y_k]     (predicate="le")

and delivers it XOR-shared (z_k = share_A xor share_B, output="shared"),
to A only (output="a") or to B only (output="b").

Vectorised: the whole batch takes one message B -> A (key, header, encrypted
bits of every y) and one message A -> B (blinded ciphertexts), plus one
message B -> A for output="a".  Nothing is sent per pair.

How it works (docs/primitives.md has the full write-up):

* Both inputs are offset to unsigned X = x + 2^(ell-1), Y = y + 2^(ell-1) and
  extended by one low bit so that they can never be equal:
  "lt": a = 2X + 1, b = 2Y;  "le": a = 2X, b = 2Y + 1.  Then z = [a < b]
  exactly, for ell+1-bit a, b.  (This plays the role of Veugen's extra c_{-1}
  term: the DGK "shared" variant is otherwise wrong on x = y.)
* B sends E(Y_i) for the ell bits of Y (the extra low bit of b is public).
* A draws sigma in {+1, -1} (delta_A = [sigma = -1]; fixed to +1 for
  output="b") and computes for every bit position i = 0..ell
      c_i = 1 + sigma*(a_i - b_i) + sum_{j>i} (a_j xor b_j)
  homomorphically.  c_i is in [0, ell+2] < u and is 0 exactly at the first
  differing bit when sigma*(a_i - b_i) = -1, i.e. when a < b (sigma=+1) or
  a > b (sigma=-1).  A blinds every c_i multiplicatively by a random
  rho_i in [1, u), re-randomises with h^R (R of 2.5t bits) and permutes the
  ell+1 ciphertexts of each pair at random.
* B zero-tests each ciphertext: delta_B = [some c_i = 0].  Since a != b,
  delta_B = [a < b] xor delta_A, so z = delta_A xor delta_B.

B learns delta_B only, a uniformly random bit when sigma is uniform (and z
itself for output="b"); A learns nothing but DGK ciphertexts (and z for
output="a").

Heavy arithmetic runs in chunks; pass ``executor`` (e.g. a
``concurrent.futures.ProcessPoolExecutor``) to keep the event loop free and
use several cores.  Chunks only carry small key "specs"; each worker builds
and caches the fixed-base tables once per key.
"""

from __future__ import annotations

import operator
import random
import secrets
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Executor
from typing import Any

import gmpy2
from gmpy2 import mpz

from smcdp.crypto.dgk import (
    DEFAULT_MAX_ELL,
    DEFAULT_MODULUS_BITS,
    DEFAULT_T_BITS,
    MIN_MODULUS_BITS,
    DGKPrivateKey,
    DGKPublicKey,
    generate_keypair,
)
from smcdp.errors import InvalidMessage
from smcdp.net.channel import Channel
from smcdp.primitives.offload import run_chunked
from smcdp.v1 import messages_pb2

PROTOCOL_VERSION = 1
PREDICATES = {"lt": 0, "le": 1}
#: what A is told when B refuses its blinded ciphertexts for holding more than one zero (never how many, nor where)
ZEROS_REFUSED = "the comparison's blinded ciphertexts hold more than one zero (at most one is possible): refused"
OUTPUTS = {"shared": 0, "a": 1, "b": 2}
#: Upper bounds on what a peer may ask for (memory safety).
MAX_ELL = 1024
MAX_BATCH = 1_000_000
#: Comparisons per work chunk (one chunk = one executor task / one event-loop slice).
DEFAULT_CHUNK = 16

_sysrand = secrets.SystemRandom()


# --------------------------------------------------------------------------
# argument checks
def _check_params(ell: int, predicate: str, output: str, chunk: int = DEFAULT_CHUNK) -> int:
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise InvalidMessage(f"chunk must be a positive int, got {chunk!r}")
    if isinstance(ell, bool) or not isinstance(ell, int):
        raise InvalidMessage(f"ell must be an int, got {type(ell).__name__}")
    if not (1 <= ell <= MAX_ELL):
        raise InvalidMessage(f"ell = {ell} is outside [1, {MAX_ELL}]")
    if predicate not in PREDICATES:
        raise InvalidMessage(f"predicate must be one of {sorted(PREDICATES)}, got {predicate!r}")
    if output not in OUTPUTS:
        raise InvalidMessage(f"output must be one of {sorted(OUTPUTS)}, got {output!r}")
    return ell


def _unsigned_inputs(values: Sequence[int], ell: int, name: str) -> list[int]:
    try:
        values = list(values)
    except TypeError:
        raise InvalidMessage(f"{name} must be a sequence of integers") from None
    if len(values) > MAX_BATCH:
        raise InvalidMessage(f"{name} has {len(values)} values; at most {MAX_BATCH} per call")
    lo, hi = -(1 << (ell - 1)), 1 << (ell - 1)
    out = []
    for i, v in enumerate(values):
        if isinstance(v, bool):
            raise InvalidMessage(f"{name}[{i}] is a bool, expected an integer")
        try:
            v = operator.index(v)
        except TypeError:
            raise InvalidMessage(f"{name}[{i}] = {v!r} is not an integer") from None
        if not (lo <= v < hi):
            raise InvalidMessage(f"{name}[{i}] = {v} is outside [-2^{ell - 1}, 2^{ell - 1})")
        out.append(v + hi)
    return out


#: the largest DGK modulus A accepts unless told otherwise (``compare_holder_a``'s ``max_key_bits``)
DEFAULT_MAX_KEY_BITS = 4096
#: the largest t A accepts unless told otherwise (the largest any session may agree: speaker's dgk_t ≤ 1024)
DEFAULT_MAX_T = 1024


def max_plaintext_modulus(ell: int) -> int:
    """The largest u A accepts for comparisons of ``ell`` bits: twice what a key made for them has (the smallest
    prime above max(ell, DEFAULT_MAX_ELL) + 2), plus slack."""
    return 2 * (max(ell, DEFAULT_MAX_ELL) + 2) + 64


#: the picklable form of a DGK public key (n, g, h, u, t) and key pair (p, q, vp, vq, g, h, u, t)
PubSpec = tuple[int, int, int, int, int]
PrivSpec = tuple[int, int, int, int, int, int, int, int]


# --------------------------------------------------------------------------
# key caches (per process) so that executor workers build tables once per key
_PUB_CACHE: OrderedDict[PubSpec, DGKPublicKey] = OrderedDict()
_PRIV_CACHE: OrderedDict[PrivSpec, DGKPrivateKey] = OrderedDict()
_CACHE_SIZE = 4


def _cache_put(cache: OrderedDict[Any, Any], spec: PubSpec | PrivSpec, obj: DGKPublicKey | DGKPrivateKey) -> None:
    cache[spec] = obj
    cache.move_to_end(spec)
    while len(cache) > _CACHE_SIZE:
        cache.popitem(last=False)


def _pub_spec(pub: DGKPublicKey) -> PubSpec:
    return (int(pub.n), int(pub.g), int(pub.h), pub.u, pub.t)


def _priv_spec(key: DGKPrivateKey) -> PrivSpec:
    pub = key.public
    return (int(key.p), int(key.q), int(key.vp), int(key.vq), int(pub.g), int(pub.h), pub.u, pub.t)


def _pub_from_spec(spec: PubSpec) -> DGKPublicKey:
    pub = _PUB_CACHE.get(spec)
    if pub is None:  # values were validated by the process that made the spec
        n, g, h, u, t = spec
        pub = DGKPublicKey(n=mpz(n), g=mpz(g), h=mpz(h), u=u, t=t)
        _cache_put(_PUB_CACHE, spec, pub)
    return pub


def _priv_from_spec(spec: PrivSpec) -> DGKPrivateKey:
    key = _PRIV_CACHE.get(spec)
    if key is None:
        p, q, vp, vq, g, h, u, t = spec
        pub = DGKPublicKey(n=mpz(p) * mpz(q), g=mpz(g), h=mpz(h), u=u, t=t)
        key = DGKPrivateKey(public=pub, p=mpz(p), q=mpz(q), vp=mpz(vp), vq=mpz(vq))
        _cache_put(_PRIV_CACHE, spec, key)
    return key


# --------------------------------------------------------------------------
# chunk workers (module level: picklable for process pools)
def _b_encrypt_chunk(priv_spec: PrivSpec, ys: list[int], ell: int) -> list[bytes]:
    """B: E(bit i of Y) for each Y, LSB first, as fixed-width bytes."""
    key = _priv_from_spec(priv_spec)
    pub = key.public
    out = []
    for y in ys:
        for i in range(ell):
            out.append(pub.ciphertext_to_bytes(key.encrypt((y >> i) & 1)))
    return out


def _batch_invert(values: list[mpz], n: mpz) -> list[mpz]:
    """Inverses of all values mod n with one modular inversion (Montgomery's trick)."""
    if not values:
        return []
    prefix = [values[0]]
    for v in values[1:]:
        prefix.append(prefix[-1] * v % n)
    try:
        inv = gmpy2.invert(prefix[-1], n)
    except ZeroDivisionError:
        raise InvalidMessage("an encrypted bit is not a unit modulo n") from None
    out = [mpz(0)] * len(values)
    for k in range(len(values) - 1, 0, -1):
        out[k] = inv * prefix[k - 1] % n
        inv = inv * values[k] % n
    out[0] = inv
    return out


def _a_blind_chunk(
    pub_spec: PubSpec, ell: int, lt: bool, xs: list[int], sigmas: list[int], y_cts: list[bytes]
) -> list[bytes]:
    """A: for each pair, the ell+1 blinded, re-randomised, permuted E(rho_i * c_i)."""
    pub = _pub_from_spec(pub_spec)
    n, u = pub.n, pub.u
    h_table = pub.h_table()
    a0, b0 = (1, 0) if lt else (0, 1)
    g = pub.g_pow
    out: list[bytes] = []
    for k, (x, sigma) in enumerate(zip(xs, sigmas)):
        ys = [
            pub.ciphertext_from_bytes(b, what=f"encrypted bit {k * ell + i}", check_unit=False)
            for i, b in enumerate(y_cts[k * ell : (k + 1) * ell])
        ]
        eb = [g(b0)] + ys  # E(b_i), i = 0..ell
        ebinv = [g(u - b0)] + _batch_invert(ys, n)
        a_bits = [a0] + [(x >> i) & 1 for i in range(ell)]
        cts = []
        suffix = mpz(1)  # E(sum_{j>i} a_j xor b_j)
        for i in range(ell, -1, -1):
            ai = a_bits[i]
            c = g(1 + sigma * ai) * (ebinv[i] if sigma == 1 else eb[i]) % n
            c = c * suffix % n
            rho = 1 + secrets.randbelow(u - 1)
            c = gmpy2.powmod(c, rho, n) * h_table.pow(secrets.randbits(pub.r_bits)) % n
            cts.append(c)
            w = g(1) * ebinv[i] % n if ai else eb[i]  # E(a_i xor b_i)
            suffix = suffix * w % n
        _sysrand.shuffle(cts)
        out.extend(pub.ciphertext_to_bytes(c) for c in cts)
    return out


def _b_zero_chunk(priv_spec: PrivSpec, ell: int, c_bytes: list[bytes], first: int) -> list[int]:
    """B: delta_B per pair = [some of its ell+1 ciphertexts encrypts 0]."""
    key = _priv_from_spec(priv_spec)
    pub = key.public
    group = ell + 1
    out = []
    for k in range(len(c_bytes) // group):
        zeros = 0
        for i in range(group):
            c = pub.ciphertext_from_bytes(
                c_bytes[k * group + i], check_unit=False, what=f"comparison ciphertext {(first + k) * group + i}"
            )
            zeros += key.zero_test(c)
        if zeros > 1:
            # the count and the comparison stay in this party's log: the abort tells A only the rule.  A who chose
            # c_i = Enc(y_i − 1) (zero where B's bit is 1) would read B's input's popcount and the comparison's
            # index from them -- B's decryptions, beyond the one bit a comparison the protocol allows
            exc = InvalidMessage(f"comparison {first + k}: {zeros} zero ciphertexts (at most one is possible)")
            exc.public_message = ZEROS_REFUSED  # type: ignore[attr-defined]  # InvalidMessage declares none
            raise exc
        out.append(zeros)
    return out


# --------------------------------------------------------------------------
# messages
def _header(ell: int, count: int, predicate: str, output: str) -> messages_pb2.Ints:
    return messages_pb2.Ints(values=[PROTOCOL_VERSION, ell, count, PREDICATES[predicate], OUTPUTS[output]])


def _blobs(values: list[bytes]) -> messages_pb2.Blobs:
    msg = messages_pb2.Blobs()
    msg.values.extend(values)
    return msg


def _tags(prefix: str) -> dict[str, str]:
    if not isinstance(prefix, str) or not prefix:
        raise InvalidMessage("tag_prefix must be a non-empty string")
    return {k: f"{prefix}/dgk-{k}" for k in ("hdr", "pk", "bits", "c", "delta")}


# --------------------------------------------------------------------------
# roles
async def compare_holder_b(
    ch: Channel,
    peer_role: str,
    ys: Sequence[int],
    *,
    ell: int,
    key: DGKPrivateKey | None = None,
    predicate: str = "lt",
    output: str = "shared",
    tag_prefix: str = "cmp",
    executor: Executor | None = None,
    chunk: int = DEFAULT_CHUNK,
    rng: random.Random | None = None,
) -> list[int] | None:
    """Role B (holds y's and the DGK private key; the only side that decrypts).

    ``key``: DGK key pair to use (reuse one across calls; it carries its
    tables).  If None a fresh default key (2048-bit n, t = 224) is generated
    from ``rng`` (a role's stream; default the OS CSPRNG), about 0.1 s.  The
    key's u must exceed ell + 2.

    Returns B's XOR shares (output="shared"), the bits z_k (output="b") or
    None (output="a").
    """
    ell = _check_params(ell, predicate, output, chunk)
    ys_u = _unsigned_inputs(ys, ell, "ys")
    tags = _tags(tag_prefix)
    if key is None:
        key = generate_keypair(DEFAULT_MODULUS_BITS, DEFAULT_T_BITS, max_ell=max(ell, 256), rng=rng)
    if not isinstance(key, DGKPrivateKey):
        raise InvalidMessage("key must be a DGKPrivateKey")
    if key.public.u <= ell + 2:
        raise InvalidMessage(f"the DGK key's u = {key.public.u} supports ell <= {key.public.u - 3}, not {ell}")
    spec = _priv_spec(key)
    _cache_put(_PRIV_CACHE, spec, key)
    if executor is not None:  # the key's CRT tables once, here, before threads of the executor ask for them
        key.encrypt(0)
    count = len(ys_u)

    await ch.send(peer_role, tags["hdr"], _header(ell, count, predicate, output))
    await ch.send(peer_role, tags["pk"], key.public.to_proto())
    bits = await run_chunked(
        executor, _b_encrypt_chunk, [(spec, ys_u[s : s + chunk], ell) for s in range(0, count, chunk)]
    )
    await ch.send(peer_role, tags["bits"], _blobs(bits))

    msg = await ch.recv(peer_role, tags["c"], messages_pb2.Blobs)
    group = ell + 1
    if len(msg.values) != count * group:
        raise InvalidMessage(f"expected {count * group} comparison ciphertexts from {peer_role}, got {len(msg.values)}")
    cvals = list(msg.values)
    step = chunk * group
    deltas = await run_chunked(
        executor, _b_zero_chunk, [(spec, ell, cvals[s : s + step], s // group) for s in range(0, len(cvals), step)]
    )

    if output == "a":
        await ch.send(peer_role, tags["delta"], messages_pb2.Ints(values=deltas))
        return None
    return deltas  # "shared": B's share; "b": sigma = +1, so delta_B = z


async def compare_holder_a(
    ch: Channel,
    peer_role: str,
    xs: Sequence[int],
    *,
    ell: int,
    predicate: str = "lt",
    output: str = "shared",
    tag_prefix: str = "cmp",
    allow_insecure: bool = False,
    min_key_bits: int = MIN_MODULUS_BITS,
    max_key_bits: int | None = None,
    max_t: int | None = None,
    executor: Executor | None = None,
    chunk: int = DEFAULT_CHUNK,
    rng: random.Random | None = None,
) -> list[int] | None:
    """Role A (holds x's; receives B's DGK public key and never decrypts).

    The key's size is B's choice only within bounds A sets (``max_key_bits``, default the larger of
    ``min_key_bits`` and :data:`DEFAULT_MAX_KEY_BITS`; ``max_t``, default :data:`DEFAULT_MAX_T`; u at most
    :func:`max_plaintext_modulus` of ``ell``): A builds tables sized by n, t and u, and a 16,384-bit key with the
    largest t took about 1.4 GB of A's memory (a review).  A protocol passes the sizes its session agreed on.

    ``rng`` draws A's output shares (a role's stream from :mod:`smcdp.primitives.rng`;
    default the OS CSPRNG); the blinding inside the ciphertexts is never part of
    A's state and comes from the OS CSPRNG.

    Refuses a key below 2048 bits or with t < 160 unless ``allow_insecure``.
    Returns A's XOR shares (output="shared"), the bits z_k (output="a") or
    None (output="b").
    """
    ell = _check_params(ell, predicate, output, chunk)
    xs_u = _unsigned_inputs(xs, ell, "xs")
    tags = _tags(tag_prefix)
    count = len(xs_u)

    hdr = await ch.recv(peer_role, tags["hdr"], messages_pb2.Ints)
    want = list(_header(ell, count, predicate, output).values)
    got = list(hdr.values)
    if got != want:
        names = ["version", "ell", "count", "predicate", "output"]
        diffs = ", ".join(f"{nm}: theirs {g} vs ours {w}" for nm, g, w in zip(names, got, want) if g != w)
        raise InvalidMessage(
            f"comparison parameters of {peer_role} do not match ours "
            f"({diffs or f'header has {len(got)} fields, expected {len(want)}'})"
        )
    pkmsg = await ch.recv(peer_role, tags["pk"], messages_pb2.BigInts)
    pub = DGKPublicKey.from_proto(pkmsg, allow_insecure=allow_insecure, min_modulus_bits=min_key_bits)
    if pub.u <= ell + 2:
        raise InvalidMessage(f"{peer_role}'s DGK key has u = {pub.u}; comparisons of {ell} bits need u > {ell + 2}")
    most_bits = max(min_key_bits, DEFAULT_MAX_KEY_BITS) if max_key_bits is None else max_key_bits
    most_t = DEFAULT_MAX_T if max_t is None else max_t
    if pub.n.bit_length() > most_bits or pub.t > most_t or pub.u > max_plaintext_modulus(ell):
        raise InvalidMessage(
            f"{peer_role}'s DGK key ({pub.n.bit_length()}-bit n, t = {pub.t}, u = {pub.u}) is larger than this "
            f"comparison allows ({most_bits} bits, t ≤ {most_t}, u ≤ {max_plaintext_modulus(ell)})"
        )
    spec = _pub_spec(pub)
    if spec not in _PUB_CACHE:
        _cache_put(_PUB_CACHE, spec, pub)
    if executor is not None:  # the cached key's tables once, here, before threads of the executor ask for them
        cached = _pub_from_spec(spec)
        cached.h_table()
        cached.g_pow(0)

    bits = await ch.recv(peer_role, tags["bits"], messages_pb2.Blobs)
    if len(bits.values) != count * ell:
        raise InvalidMessage(f"expected {count * ell} encrypted bits from {peer_role}, got {len(bits.values)}")
    yvals = list(bits.values)

    if output == "b":
        sigmas = [1] * count  # B learns z directly
    else:
        draw = rng.getrandbits if rng is not None else secrets.randbits
        sigmas = [1 - 2 * draw(1) for _ in range(count)]
    lt = predicate == "lt"
    cts = await run_chunked(
        executor,
        _a_blind_chunk,
        [
            (spec, ell, lt, xs_u[s : s + chunk], sigmas[s : s + chunk], yvals[s * ell : (s + chunk) * ell])
            for s in range(0, count, chunk)
        ],
    )
    await ch.send(peer_role, tags["c"], _blobs(cts))

    shares = [1 if s == -1 else 0 for s in sigmas]
    if output == "shared":
        return shares
    if output == "b":
        return None
    dmsg = await ch.recv(peer_role, tags["delta"], messages_pb2.Ints)
    if len(dmsg.values) != count or any(v not in (0, 1) for v in dmsg.values):
        raise InvalidMessage(f"{peer_role} must send {count} result bits in {{0, 1}}")
    return [s ^ d for s, d in zip(shares, dmsg.values)]
