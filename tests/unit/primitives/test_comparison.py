"""The DGK two-party comparison protocol over InMemoryNetwork.

Role "a" holds the x's, role "b" holds the y's and the DGK private key.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
from concurrent.futures import ProcessPoolExecutor

import pytest

from smcdp.crypto import dgk
from smcdp.errors import InsecureParameters, InvalidMessage, public_message
from smcdp.primitives import comparison as cmp
from smcdp.v1 import messages_pb2

from .util import run_roles


def compare(key, xs, ys, ell, predicate="lt", output="shared", **kw):
    res, net = run_roles(
        {
            "a": lambda ch: cmp.compare_holder_a(
                ch, "b", xs, ell=ell, predicate=predicate, output=output, allow_insecure=True, **kw
            ),
            "b": lambda ch: cmp.compare_holder_b(
                ch, "a", ys, ell=ell, key=key, predicate=predicate, output=output, **kw
            ),
        }
    )
    if output == "shared":
        assert res["a"] is not None and res["b"] is not None
        assert set(res["a"]) <= {0, 1} and set(res["b"]) <= {0, 1}
        return [sa ^ sb for sa, sb in zip(res["a"], res["b"])], res, net
    other = "b" if output == "a" else "a"
    assert res[other] is None
    return res[output], res, net


def expected(xs, ys, predicate):
    return [int(x < y) if predicate == "lt" else int(x <= y) for x, y in zip(xs, ys)]


@pytest.mark.parametrize("predicate", ["lt", "le"])
@pytest.mark.parametrize("output", ["shared", "a", "b"])
def test_exhaustive_ell4(small_key, predicate, output):
    pairs = list(itertools.product(range(-8, 8), repeat=2))  # every pair, equal values and negatives
    xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
    z, _, _ = compare(small_key, xs, ys, 4, predicate, output)
    assert z == expected(xs, ys, predicate)


@pytest.mark.parametrize("predicate", ["lt", "le"])
def test_exhaustive_ell5_shared(small_key, predicate):
    pairs = list(itertools.product(range(-16, 16), repeat=2))
    xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
    z, _, _ = compare(small_key, xs, ys, 5, predicate, "shared")
    assert z == expected(xs, ys, predicate)


def _edge_and_random(ell, n_random):
    lo, hi = -(1 << (ell - 1)), (1 << (ell - 1)) - 1
    edges = [lo, lo + 1, -1, 0, 1, hi - 1, hi]
    xs, ys = [], []
    for a, b in itertools.product(edges, repeat=2):
        xs.append(a)
        ys.append(b)
    for _ in range(n_random):
        x = secrets.randbelow(1 << ell) + lo
        xs.append(x)
        # a quarter equal, a quarter close, the rest independent
        r = secrets.randbelow(4)
        ys.append(
            x
            if r == 0
            else min(hi, max(lo, x + secrets.randbelow(5) - 2))
            if r == 1
            else secrets.randbelow(1 << ell) + lo
        )
    return xs, ys


@pytest.mark.parametrize("ell", [64, 128])
@pytest.mark.parametrize("predicate,output", [("lt", "shared"), ("le", "a"), ("lt", "b")])
def test_random_large(small_key, ell, predicate, output):
    xs, ys = _edge_and_random(ell, 40)
    z, _, _ = compare(small_key, xs, ys, ell, predicate, output)
    assert z == expected(xs, ys, predicate)


def test_constant_round_trips_for_any_batch(small_key):
    counts = {}
    for n in (1, 3, 60):
        xs = [secrets.randbelow(256) - 128 for _ in range(n)]
        ys = [secrets.randbelow(256) - 128 for _ in range(n)]
        for output in ("shared", "a"):
            z, _, net = compare(small_key, xs, ys, 8, "lt", output)
            assert z == expected(xs, ys, "lt")
            counts.setdefault(output, set()).add(len(net.transcript))
            # ell ciphertexts per pair one way, ell + 1 the other
            sizes = {
                t: len(messages_pb2.Blobs.FromString(d).values)
                for (_, _, t, tn, d) in net.transcript
                if tn == "smcdp.v1.Blobs"
            }
            assert sizes == {"cmp/dgk-bits": 8 * n, "cmp/dgk-c": 9 * n}
    # header + key + bits, blinded ciphertexts (+ result bits for output "a"): independent of n
    assert counts == {"shared": {4}, "a": {5}}


def test_empty_batch(small_key):
    z, _, _ = compare(small_key, [], [], 16)
    assert z == []


def test_shares_are_random_and_blinding_hides_plaintexts(small_key):
    """B's share is not the result itself, and what B can decrypt is one zero or none among blinded values."""
    ell, n = 6, 80
    xs = [-5] * n
    ys = [7] * n  # x < y for every pair
    z, res, net = compare(small_key, xs, ys, ell, "lt", "shared")
    assert z == [1] * n
    assert 0 < sum(res["b"]) < n  # B's shares vary (prob. of failure 2^-79)
    cts = messages_pb2.Blobs.FromString(next(d for (_, _, t, _, d) in net.transcript if t == "cmp/dgk-c")).values
    pub = small_key.public
    nonzero, zero_pos = [], []
    for k in range(n):
        plains = [small_key.decrypt(pub.ciphertext_from_bytes(b)) for b in cts[k * (ell + 1) : (k + 1) * (ell + 1)]]
        zeros = [i for i, m in enumerate(plains) if m == 0]
        assert len(zeros) == res["b"][k]  # delta_B = [a zero is present]
        zero_pos += zeros
        nonzero += [m for m in plains if m]
    assert len(set(zero_pos)) > 3  # the zero is not at a fixed position (permutation)
    assert len(set(nonzero)) > pub.u // 2  # multiplicative blinding spreads values over Z_u^*


def test_process_pool_executor(small_key):
    xs, ys = _edge_and_random(32, 30)
    with ProcessPoolExecutor(max_workers=2) as pool:
        z, _, _ = compare(small_key, xs, ys, 32, "le", "a", executor=pool, chunk=8)
    assert z == expected(xs, ys, "le")


def test_key_reuse_across_calls_and_default_key_refused_small():
    key = dgk.generate_keypair(512, 32, max_ell=16, allow_insecure=True)
    xs, ys = [3, -4], [3, 5]
    for _ in range(2):
        z, _, _ = compare(key, xs, ys, 16)
        assert z == [0, 1]
    # the key's u = 19 cannot carry 17-bit comparisons
    with pytest.raises(InvalidMessage, match="u = 19"):
        compare(key, xs, ys, 17)
    # A refuses a small key without the opt-in
    with pytest.raises(InsecureParameters):
        run_roles(
            {
                "a": lambda ch: cmp.compare_holder_a(ch, "b", xs, ell=8),
                "b": lambda ch: cmp.compare_holder_b(ch, "a", ys, ell=8, key=key),
            }
        )


@pytest.mark.parametrize(
    "bad",
    [
        dict(xs=[128], ell=8),  # out of range
        dict(xs=[-129], ell=8),
        dict(xs=[1.5], ell=8),
        dict(xs=[True], ell=8),
        dict(xs=[1], ell=0),
        dict(xs=[1], ell=8, predicate="lte"),
        dict(xs=[1], ell=8, output="both"),
        dict(xs=[1], ell=8, chunk=0),
    ],
)
def test_bad_arguments(small_key, bad):
    kw = dict(bad)
    xs = kw.pop("xs")
    ell = kw.pop("ell")
    with pytest.raises(InvalidMessage):
        asyncio.run(cmp.compare_holder_a(None, "b", xs, ell=ell, **kw))
    with pytest.raises(InvalidMessage):
        asyncio.run(cmp.compare_holder_b(None, "a", xs, ell=ell, key=small_key, **kw))


# ---------------------------------------------------------------- malformed peers
def _run_a_against(fake_b, ell=8, xs=(1, 2), **kw):
    return run_roles(
        {
            "a": lambda ch: cmp.compare_holder_a(ch, "b", list(xs), ell=ell, allow_insecure=True, **kw),
            "b": fake_b,
        }
    )


def _honest_b_messages(key, ys, ell, predicate="lt", output="shared"):
    hdr = cmp._header(ell, len(ys), predicate, output)
    bits = [
        key.public.ciphertext_to_bytes(key.encrypt((y + (1 << (ell - 1)) >> i) & 1)) for y in ys for i in range(ell)
    ]
    return hdr, key.public.to_proto(), bits


@pytest.mark.parametrize(
    "defect,match",
    [
        ("ell", "ell: theirs 9 vs ours 8"),
        ("count", "count"),
        ("bits_count", "encrypted bits"),
        ("bits_short", "bytes"),
        ("bits_range", "out of range"),
        ("bits_zero_mod_p", "unit"),
        ("u_small", "u > 10"),
    ],
)
def test_a_refuses_malformed_messages(small_key, defect, match):
    key = small_key
    ell = 8

    async def fake_b(ch):
        hdr, pk, bits = _honest_b_messages(key, [5, -6], ell)
        if defect == "ell":
            hdr = cmp._header(9, 2, "lt", "shared")
        if defect == "count":
            hdr = cmp._header(ell, 3, "lt", "shared")
        if defect == "bits_count":
            bits = bits[:-1]
        if defect == "bits_short":
            bits[3] = bits[3][1:]
        if defect == "bits_range":
            bits[3] = key.public.ciphertext_to_bytes(key.n)
        if defect == "bits_zero_mod_p":
            bits[3] = key.public.ciphertext_to_bytes(key.p)
        if defect == "u_small":
            k2 = dgk.generate_keypair(512, 32, max_ell=4, allow_insecure=True)  # u = 7: too small for ell = 8
            pk = k2.public.to_proto()
        await ch.send("a", "cmp/dgk-hdr", hdr)
        await ch.send("a", "cmp/dgk-pk", pk)
        await ch.send("a", "cmp/dgk-bits", cmp._blobs(bits))
        await ch.recv("a", "cmp/dgk-c", messages_pb2.Blobs)

    with pytest.raises(InvalidMessage, match=match):
        _run_a_against(fake_b, ell=ell, xs=[1, 2])


def test_a_refuses_bad_result_bits(small_key):
    key = small_key

    async def fake_b(ch):
        hdr, pk, bits = _honest_b_messages(key, [5, -6], 8, output="a")
        await ch.send("a", "cmp/dgk-hdr", hdr)
        await ch.send("a", "cmp/dgk-pk", pk)
        await ch.send("a", "cmp/dgk-bits", cmp._blobs(bits))
        await ch.recv("a", "cmp/dgk-c", messages_pb2.Blobs)
        await ch.send("a", "cmp/dgk-delta", messages_pb2.Ints(values=[0, 2]))

    with pytest.raises(InvalidMessage, match="result bits"):
        _run_a_against(fake_b, output="a")


@pytest.mark.parametrize(
    "defect,match",
    [
        ("count", "expected 18 comparison ciphertexts"),
        ("not_in_subgroup", "subgroup"),
        ("two_zeros", "2 zero ciphertexts"),
        ("wrong_type", "expected smcdp.v1.Blobs"),
    ],
)
def test_b_refuses_malformed_messages(small_key, defect, match):
    key, pub, ell = small_key, small_key.public, 8

    async def fake_a(ch):
        await ch.recv("b", "cmp/dgk-hdr", messages_pb2.Ints)
        await ch.recv("b", "cmp/dgk-pk", messages_pb2.BigInts)
        await ch.recv("b", "cmp/dgk-bits", messages_pb2.Blobs)
        cts = [pub.encrypt(1 + secrets.randbelow(pub.u - 1)) for _ in range(2 * (ell + 1))]
        if defect == "count":
            cts = cts[:-1]
        if defect == "not_in_subgroup":
            cts[4] = 2 + secrets.randbelow(int(pub.n) - 3)
        if defect == "two_zeros":
            cts[0], cts[1] = pub.encrypt(0), pub.encrypt(0)
        if defect == "wrong_type":
            await ch.send("b", "cmp/dgk-c", messages_pb2.Ints(values=[1]))
            return
        await ch.send("b", "cmp/dgk-c", cmp._blobs([pub.ciphertext_to_bytes(c) for c in cts]))

    with pytest.raises(InvalidMessage, match=match) as err:
        run_roles(
            {
                "a": fake_a,
                "b": lambda ch: cmp.compare_holder_b(ch, "a", [3, 4], ell=ell, key=key),
            }
        )
    if defect == "two_zeros":
        # what A is told (the session's abort carries public_message): the rule, not B's count nor the comparison
        assert public_message(err.value) == cmp.ZEROS_REFUSED
