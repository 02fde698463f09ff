"""Dealer-free threshold Paillier key generation (smcdp.protocols.keygen), in process.

Small keys (256 bits): an explicit, test-only opt-in.  The factors are never output by the protocol;
the tests recover them from t + 1 key shares (Δ·d is a multiple of φ(N), which factors N) -- only
here, to check that N really is a product of two primes and that no message carried them."""

import asyncio
import itertools
import math
import secrets

import gmpy2
import numpy as np
import pytest

from smcdp.crypto.codec import bigints, from_bigints
from smcdp.crypto.encoding import Packing
from smcdp.crypto.threshold import (
    NotEnoughShares,
    combine,
    combine_vector,
    lagrange_at_zero,
    partial_decrypt,
    partial_decrypt_vector,
)
from smcdp.crypto.vector import EncryptedVector
from smcdp.errors import InsecureParameters, InvalidMessage
from smcdp.net.channel import InMemoryNetwork
from smcdp.protocols.keygen import KeygenFailed, KeygenParams, _Ceremony, party, party_roles, sieve_modulus
from smcdp.v1 import messages_pb2 as pb

BITS = 256
CTX = b"keygen-test/decrypt"


def _run(n, t, bits=BITS, tamper=None, **kw):
    params = KeygenParams(parties=n, threshold=t, key_bits=bits, allow_insecure=True, **kw).validate()
    roles = party_roles(n)
    net = InMemoryNetwork({r: f"org{r[5:]}" for r in roles}, timeout=300)
    if tamper is not None:
        tamper(net)
    res = asyncio.run(net.run({r: (lambda ch: party(ch, params)) for r in roles}))
    return [res[r] for r in roles], net


@pytest.fixture(scope="module", params=[(2, 1), (3, 1), (5, 2)], ids=["n2t1", "n3t1", "n5t2"])
def ceremony(request):
    n, t = request.param
    results, net = _run(n, t)
    return n, t, results, net


def _factor_from_phi_multiple(N: int, k: int) -> tuple[int, int]:
    """p, q from N and a multiple k of φ(N) (the standard randomized reduction)."""
    s, r = 0, k
    while r % 2 == 0:
        s, r = s + 1, r // 2
    for _ in range(200):
        g = secrets.randbelow(N - 3) + 2
        x = pow(g, r, N)
        if x in (1, N - 1):
            continue
        for _ in range(s):
            y = x * x % N
            if y == 1:
                p = math.gcd(x - 1, N)
                return min(p, N // p), max(p, N // p)
            if y == N - 1:
                break
            x = y
    raise AssertionError("could not factor N from a multiple of φ(N)")


def _factors(results, t):
    pub = results[0].public
    subset = [r.share.index for r in results[: t + 1]]
    # the shares are of Δ·d: t + 1 of them give Δ²·d
    delta2_d = sum(lagrange_at_zero(pub.delta, subset, r.share.index) * r.share.secret for r in results[: t + 1])
    assert delta2_d > 0
    return _factor_from_phi_multiple(int(pub.n), delta2_d), delta2_d


def test_every_party_holds_the_same_public_key_and_a_matching_share(ceremony):
    n, t, results, _ = ceremony
    pub = results[0].public
    assert pub.parties == n and pub.threshold == t
    assert pub.n.bit_length() == BITS
    for i, r in enumerate(results, 1):
        assert r.public == pub
        assert r.share.index == i
        r.share.check()
    assert len({r.share.secret for r in results}) == n


def test_n_is_a_product_of_two_primes_3_mod_4(ceremony):
    _n, t, results, _ = ceremony
    pub = results[0].public
    (p, q), delta2_d = _factors(results, t)
    N = int(pub.n)
    assert p * q == N and p != q
    assert gmpy2.is_prime(p, 50) and gmpy2.is_prime(q, 50)
    assert p % 4 == 3 and q % 4 == 3
    assert p.bit_length() == q.bit_length() == BITS // 2
    assert math.gcd(N, (p - 1) * (q - 1)) == 1
    # the exponent: d ≡ 0 mod φ(N) and d ≡ θ mod N (Δ²·d as reconstructed: the shares are of Δ·d)
    phi = (p - 1) * (q - 1)
    assert delta2_d % pub.delta**2 == 0
    assert delta2_d % phi == 0
    assert delta2_d % N == pub.delta**2 * pub.theta % N
    # nothing below the sieve bound divides p or q (distributed sieving), nor below the trial bound
    for ell in (3, 5, 7, 11, 13, 17, 19):
        assert p % ell and q % ell


def test_the_key_decrypts_with_any_t_plus_one_parties_and_not_with_t(ceremony):
    _n, t, results, _ = ceremony
    pub = results[0].public
    pk = pub.public_key
    values = [0, 17, -17, 2**60 + 3]
    cts = [pk.raw_encrypt(v) for v in values]
    partials = {r.share.index: partial_decrypt(r.share, cts, CTX) for r in results}
    for subset in itertools.combinations(sorted(partials), t + 1):
        assert combine(pub, cts, [partials[i] for i in subset], CTX) == values
    with pytest.raises(NotEnoughShares):
        combine(pub, cts, [partials[i] for i in range(1, t + 1)], CTX)


def test_existing_vector_arithmetic_works_under_the_generated_key(ceremony):
    _n, t, results, _ = ceremony
    pub = results[0].public
    pk = pub.public_key
    a, b = [5, -6, 7, 8], [1, 1, -20, 0]
    pack = Packing.for_key(pk, 40)
    ea = EncryptedVector.encrypt_ints(pk, a, packing=pack)
    out = (ea + EncryptedVector.encrypt_ints(pk, b, packing=pack)).mul_int(-2)
    partials = [partial_decrypt_vector(r.share, out, CTX) for r in results[-(t + 1) :]]
    from smcdp.crypto.threshold import combine_vector_ints

    assert combine_vector_ints(pub, out, partials, CTX) == [-2 * (x + y) for x, y in zip(a, b)]
    x = np.array([1.5, -0.25])
    ev = EncryptedVector.encrypt(pk, x) + EncryptedVector.encrypt(pk, x)
    partials = [partial_decrypt_vector(r.share, ev, CTX) for r in results[: t + 1]]
    np.testing.assert_allclose(combine_vector(pub, ev, partials, CTX), 2 * x, rtol=0, atol=1e-9)


def _int_bytes(v: int) -> bytes:
    return v.to_bytes((v.bit_length() + 7) // 8, "big")


def test_no_share_tells_its_party_the_exponent_modulo_its_index(ceremony):
    """Every dealer shares Δ·d_j, so share i ≡ 0 mod i: a share of d itself was ≡ d mod i, and for d = β·φ(N) that
    told party i whether i divides φ(N) (a review's finding)."""
    n, _t, results, _ = ceremony
    assert [r.share.secret % r.share.index for r in results] == [0] * n


def test_no_message_carries_p_q_phi_or_the_exponent(ceremony):
    """Inspect the whole transcript: the factors, φ(N), d and Δ·d appear in no message's bytes."""
    n, t, results, net = ceremony
    (p, q), delta2_d = _factors(results, t)
    N = int(results[0].public.n)
    delta = results[0].public.delta
    secrets_ = {
        "p": p,
        "q": q,
        "phi": (p - 1) * (q - 1),
        "p+q": p + q,
        "d": delta2_d // delta**2,
        "delta*d": delta2_d // delta,
        "delta^2*d": delta2_d,
    }
    assert net.transcript
    senders = {s for (s, *_rest) in net.transcript}
    assert senders == set(party_roles(n))
    for sender, receiver, tag, _type, data in net.transcript:
        for name, v in secrets_.items():
            assert _int_bytes(v) not in data, (name, sender, receiver, tag)
    # the search does find what is sent: the public key's fingerprint (step 8) and the θ-bearing key
    fp = _int_bytes(int.from_bytes(results[0].public.fingerprint, "big"))
    assert sum(fp in data for *_rest, data in net.transcript) == n * (n - 1)
    assert N > 0


def test_params_are_validated():
    with pytest.raises(InvalidMessage, match="2 to 64 parties"):
        KeygenParams(parties=1, threshold=1, key_bits=BITS, allow_insecure=True).validate()
    with pytest.raises(InvalidMessage, match="two parties the threshold is t = 1"):
        KeygenParams(parties=2, threshold=2, key_bits=BITS, allow_insecure=True).validate()
    with pytest.raises(InvalidMessage, match="2t \\+ 1 <= n"):
        KeygenParams(parties=4, threshold=2, key_bits=BITS, allow_insecure=True).validate()
    with pytest.raises(InvalidMessage):
        KeygenParams(parties=3, threshold=0, key_bits=BITS, allow_insecure=True).validate()
    with pytest.raises(InsecureParameters):
        KeygenParams(parties=3, threshold=1, key_bits=1024).validate()
    with pytest.raises(InvalidMessage):
        KeygenParams(parties=3, threshold=1, key_bits=BITS, allow_insecure=True, jacobi_rounds=10).validate()
    with pytest.raises(InvalidMessage, match="unknown"):
        KeygenParams.from_mapping({"parties": 3, "threshold": 1, "dealer": "party1"})
    assert KeygenParams(parties=3, threshold=1).validate().key_bits == 2048


def test_a_wrong_exponent_share_is_caught_by_the_commitments():
    """party2 sends party3 a share of its d_2 that does not match its Feldman commitments: party3
    refuses it and names party2."""

    def tamper(net):
        ch = net.channels["party2"]
        original = ch._transmit

        async def _transmit(to_role, tag, type_url, data):
            if tag.endswith("/share") and to_role == "party3":
                msg = pb.BigInts.FromString(data)
                (v,) = from_bigints(msg, count=1, bound_bits=1 << 16, what="share")
                data = bigints([v + 1]).SerializeToString()
            await original(to_role, tag, type_url, data)

        ch._transmit = _transmit

    with pytest.raises(KeygenFailed, match="party 2's share") as exc:
        _run(3, 1, tamper=tamper)
    assert exc.value.code == "INVALID_ARGUMENT" and exc.value.origin == "org2"


def _equivocate(sender: str, to: str, tag_end: str):
    """``sender`` sends ``to`` (only) its first message whose tag ends with ``tag_end`` with its first value + 1: the
    others receive what it computed, so ``to``'s view of that opening differs from theirs."""

    def tamper(net):
        ch = net.channels[sender]
        original = ch._transmit
        done: list[str] = []

        async def _transmit(to_role, tag, type_url, data):
            if tag.endswith(tag_end) and to_role == to and not done:
                done.append(tag)
                msg = pb.BigInts.FromString(data)
                values = from_bigints(msg, count=len(msg.magnitude), bound_bits=1 << 16, what=tag)
                data = bigints([values[0] + 1, *values[1:]]).SerializeToString()
            await original(to_role, tag, type_url, data)

        ch._transmit = _transmit

    return tamper


@pytest.mark.parametrize(
    ("n", "sender", "to", "tag_end"),
    [
        (2, "party1", "party2", "/n/open"),  # n = 2: party1 tells party2 another N than its own
    ],
)
def test_parties_whose_views_of_an_opening_differ_stop_at_once(n, sender, to, tag_end):
    """A party that sends different values to different parties (or a message changed on one link) would send the
    parties down different branches, each then waiting for the other until the session's deadline: the echo after
    each opening (_Ceremony.agree) stops the ceremony at once (ViewsDiffer, ABORTED) -- well inside the limit here,
    where the network's deadline is 300 s."""
    from smcdp.protocols.keygen import ViewsDiffer
    from tests.support.limits import time_limit

    with time_limit(60, "a ceremony with an equivocating party"), pytest.raises(ViewsDiffer) as exc:
        _run(n, 1, tamper=_equivocate(sender, to, tag_end))
    assert exc.value.code == "ABORTED" and tag_end.removesuffix("/open").strip("/") in str(exc.value)


@pytest.mark.parametrize(
    ("n", "sender", "to", "tag_end"),
    [
        (3, "party1", "party2", "/theta/open"),  # an opening's point (step 6)
        (3, "party3", "party1", "/jacobi/0"),  # a Jacobi factor (step 4): party1 would take other candidates on
        (2, "party2", "party1", "/jacobi/0"),
    ],
)
def test_values_revealed_other_than_committed_stop_the_ceremony_naming_their_party(n, sender, to, tag_end):
    """What a party reveals at an opening or a Jacobi round is committed to before anyone reveals
    (_Ceremony.reveal_committed); a party that reveals to another something other than it committed to is refused and
    named before anything is computed with it."""
    from smcdp.protocols.keygen import BadOpening

    with pytest.raises(BadOpening, match="not the ones it committed to") as exc:
        _run(n, 1, tamper=_equivocate(sender, to, tag_end))
    assert exc.value.code == "INVALID_ARGUMENT" and exc.value.origin == f"org{sender[5:]}"


def test_a_party_that_commits_and_reveals_other_points_to_one_party_stops_the_ceremony(monkeypatch):
    """n ≥ 3: party1 commits to and reveals, to party2 only, other points of step 6's opening than to party3 --
    each honest party's commitment check passes, but their openings differ: the echo stops the ceremony at once."""
    import smcdp.protocols.keygen as kg

    class Equivocating(kg._Ceremony):
        async def open_committed(self, step, mine, P):
            if self.me != 1 or not step.startswith("theta"):
                return await super().open_committed(step, mine, P)
            tag, nonce = self.tag(step), self.rng["commit"].getrandbits(256)
            rows = [mine if j != 2 else [(mine[0] + 1) % P, *mine[1:]] for j in range(1, self.n + 1)]
            await self.exchange(
                step + "/commit", [[kg._commitment(tag, 1, row, nonce, P.bit_length())] for row in rows], 256
            )
            got = await self.exchange(step, [[*row, nonce] for row in rows], P.bit_length())
            return [self.open([got[j][c] for j in range(self.n)], P) for c in range(len(mine))]

    monkeypatch.setattr(kg, "_Ceremony", Equivocating)
    with pytest.raises(kg.ViewsDiffer) as exc:
        _run(3, 1)
    assert exc.value.code == "ABORTED" and "theta" in str(exc.value)


def test_a_wrong_role_set_is_refused():
    params = KeygenParams(parties=3, threshold=1, key_bits=BITS, allow_insecure=True)
    net = InMemoryNetwork({"party1": "a", "party2": "b", "trent": "c"}, timeout=30)

    async def go():
        await party(net.channel("party1"), params)

    with pytest.raises(InvalidMessage, match="roles"):
        asyncio.run(go())


@pytest.mark.parametrize("n,t", [(2, 1), (3, 1), (5, 2)])
def test_distributed_sieving_yields_shares_of_numbers_3_mod_4_free_of_small_primes(n, t):
    """Step 1 on its own: the parties' shares sum to candidates p ≡ 3 (mod 4), coprime to M, of exactly
    key_bits/2 bits; party 1's share is ≡ 3 and the others' ≡ 0 (mod 4) (the biprimality test needs it)."""
    params = KeygenParams(parties=n, threshold=t, key_bits=BITS, allow_insecure=True).validate()
    roles = party_roles(n)
    net = InMemoryNetwork({r: r for r in roles}, timeout=60)

    async def sieve(ch):
        st = _Ceremony(ch, params)
        if n == 2:
            await st.two_party_setup()
        return await st.sieve(40)

    res = asyncio.run(net.run({r: sieve for r in roles}))
    M = sieve_modulus(BITS // 2, n)
    assert M % 3 == 0 and M % 4 and M.bit_length() * n <= BITS // 2 - 8
    for c in range(40):
        shares = [res[r][c] for r in roles]
        p = sum(shares)
        assert p % 4 == 3 and shares[0] % 4 == 3 and all(s % 4 == 0 for s in shares[1:])
        assert math.gcd(p, M) == 1
        assert p.bit_length() == BITS // 2
    # the candidates differ (fresh randomness per candidate)
    assert len({sum(res[r][c] for r in roles) for c in range(40)}) == 40


def test_two_parties_answers_are_re_randomised_uniformly_against_party_1():
    """n = 2: party 1 holds its ephemeral key's factors, so party 2's answers must hide its values from it without
    DCR.  A fixed-base obfuscator (h^N)^a has the Legendre symbols mod p_e and q_e of h^a: two of the four pairs
    at most, and through such characters party 1 read party 2's values mod small primes (a review's finding).
    Party 2's answers to 64 products whose own terms are 0 are its obfuscators alone: every pair must appear."""
    params = KeygenParams(parties=2, threshold=1, key_bits=BITS, allow_insecure=True).validate()
    roles = party_roles(2)
    net = InMemoryNetwork({r: r for r in roles}, timeout=60)
    count = 64

    async def go(ch):
        st = _Ceremony(ch, params)
        await st.two_party_setup()
        xs = [secrets.randbelow(1 << 64) for _ in range(count)] if st.me == 1 else [0] * count
        await st.two_party_products("probe", "small", xs, None, [secrets.randbelow(1 << 64) for _ in range(count)])
        return st

    res = asyncio.run(net.run({r: go for r in roles}))
    sk = res["party1"].ek["small"]
    answers = pb.Blobs.FromString(next(d for s, tag, _, d in net.received_by("party1") if tag.endswith("probe/ret")))
    pairs = set()
    for raw in answers.values:
        c = int.from_bytes(raw, "big")
        pairs.add((gmpy2.legendre(c, sk.p), gmpy2.legendre(c, sk.q)))
    assert pairs == {(1, 1), (1, -1), (-1, 1), (-1, -1)}  # 64 uniform draws miss one with probability < 2^-24


def test_two_parties_refuse_an_ephemeral_key_of_the_wrong_size():
    """n = 2: party 2 multiplies under party 1's ephemeral Paillier keys; keys of another size than the
    public parameters give (too small: products would wrap) are refused."""

    def tamper(net):
        ch = net.channels["party1"]
        original = ch._transmit

        async def _transmit(to_role, tag, type_url, data):
            if tag.endswith("ephemeral-keys"):
                ns = from_bigints(pb.BigInts.FromString(data), count=2, bound_bits=1 << 16, what="keys")
                data = bigints([ns[0] >> 8, ns[1]]).SerializeToString()
            await original(to_role, tag, type_url, data)

        ch._transmit = _transmit

    with pytest.raises(InvalidMessage, match="ephemeral key"):
        _run(2, 1, tamper=tamper)
