"""Secure exponent, logarithm and LOGSUM (vectorised) against numpy, over the in-memory network."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from scipy.special import logsumexp

from smcdp.crypto.vector import EncryptedVector
from smcdp.errors import CryptoOverflow, InvalidMessage
from smcdp.primitives import logsum as hp
from smcdp.primitives.rng import protocol_rng
from smcdp.v1 import messages_pb2 as pb
from tests.unit.protocols.keyword_util import run_pair

F = 40


def _pools(sk):
    return hp.ObfuscatorPool.for_private_key(sk, background=False), \
        hp.ObfuscatorPool.for_public_key(sk.public_key, background=False)


def test_secure_log(keypair512):
    pk, sk = keypair512
    mp = hp.MaskParams()
    rng = np.random.default_rng(1)
    xs = [int(x) for x in rng.integers(1, 1 << 60, 12)]
    lf = rng.normal(size=12) * 50
    cts = [pk.raw_encrypt(x) for x in xs]
    apool, bpool = _pools(sk)

    async def bob(ch):
        return await hp.secure_log_bob(ch, "alice", cts, 1 << 60, lf, [0] * 12, mp, bpool, random.Random(3), "t",
                                       pk=pk)

    async def alice(ch):
        await hp.secure_log_alice(ch, "bob", sk, mp, apool, "t", length=12)

    res, net = run_pair(alice, bob)
    got = res["bob"].decrypt(sk)
    want = np.log(np.array(xs, dtype=float)) + lf
    assert np.max(np.abs(got - want)) < 1e-9
    # what Alice saw is masked: never the plain x
    seen = EncryptedVector.from_proto(pb.CiphertextVector.FromString(net.received_by("alice")[0][3]), pk)
    assert seen.decrypt_ints(sk) != xs


def test_secure_exp_with_rescaling(keypair512):
    pk, sk = keypair512
    mp = hp.MaskParams()
    logs = np.array([-800.0, -805.5, -1200.0, -1201.0, 3.0, -1e-3])      # far beyond float exp range
    groups = [0, 0, 1, 1, 2, 2]
    vec = EncryptedVector.encrypt(pk, logs, frac_bits=F)
    apool, bpool = _pools(sk)
    out = {}

    async def bob(ch):
        return await hp.secure_exp_bob(ch, "alice", vec, groups, mp, bpool, random.Random(5), "x")

    async def alice(ch):
        out["offsets"] = await hp.secure_exp_alice(ch, "bob", sk, mp, apool, "x", length=6, exponent=-F)

    res, _ = run_pair(alice, bob)
    ex = res["bob"]
    e = np.array([sk.raw_decrypt_signed(c) for c in ex.ciphertexts], dtype=float)
    # log θ_i = log ê_i + log_factor_i + M_g   (M_g known to Alice only)
    rec = np.log(e) + ex.log_factor + np.array([out["offsets"][g] for g in groups])
    assert np.max(np.abs(rec - logs)) < 1e-6


def test_secure_logsum(keypair512):
    pk, sk = keypair512
    mp = hp.MaskParams()
    rng = np.random.default_rng(7)
    logs = np.concatenate([rng.normal(size=5) * 3 - 500, rng.normal(size=5) * 3 - 2000])
    groups = [0] * 5 + [1] * 5
    A = np.zeros((4, 10))
    A[0, :5] = rng.random(5)
    A[1, :3] = rng.random(3)
    A[2, 5:] = rng.random(5)
    A[3, 7] = 0.25
    vec = EncryptedVector.encrypt(pk, logs, frac_bits=F)
    apool, bpool = _pools(sk)

    async def bob(ch):
        return await hp.secure_logsum_bob(ch, "alice", vec, A, mp, bpool, random.Random(9), "s", groups=groups)

    async def alice(ch):
        await hp.secure_logsum_alice(ch, "bob", sk, mp, apool, "s", length=10, exponent=-F, rows=4)

    res, _ = run_pair(alice, bob)
    got = res["bob"].decrypt(sk)
    with np.errstate(divide="ignore"):
        want = np.array([logsumexp(logs + np.log(A[r])) for r in range(4)])
    assert np.max(np.abs(got - want) / np.abs(want)) < 1e-9


def test_logsum_rejects_mixed_groups(keypair512):
    pk, sk = keypair512
    vec = EncryptedVector.encrypt(pk, [0.0, 1.0], frac_bits=F)
    _, bpool = _pools(sk)

    async def bob(ch):
        await hp.secure_logsum_bob(ch, "alice", vec, np.ones((1, 2)), hp.MaskParams(), bpool, random.Random(1),
                                   "s", groups=[0, 1])

    async def alice(ch):
        await ch.recv("bob", "never", pb.Ints, timeout=5)

    with pytest.raises(InvalidMessage, match="several groups"):
        run_pair(alice, bob)


def test_weighted_sums_detect_overflow(keypair512):
    pk, sk = keypair512
    _, bpool = _pools(sk)
    wr = hp.WeightedRows([[(0, 1 << 40), (1, 1 << 40)]], np.zeros(1))
    packing = hp.Packing.for_key(pk, 64)
    with pytest.raises(CryptoOverflow):
        hp.packed_weighted_sums(pk, [pk.raw_encrypt(1), pk.raw_encrypt(2)], 1 << 30, wr, packing, bpool)


def test_pack_ciphertexts_roundtrip(keypair512):
    pk, sk = keypair512
    packing = hp.Packing.for_key(pk, 50)
    vals = [3, 0, 1 << 40, 17, 5]
    cts = [pk.raw_encrypt(v) if v else None for v in vals]
    packed = hp.pack_ciphertexts(pk, cts, packing)
    vec = EncryptedVector(pk, packed, len(vals), 0, packing)
    assert vec.decrypt_ints(sk) == vals


def test_integer_weights_normalise_per_group():
    wr = hp.integer_weights([[(0, 0.0), (1, -1.0)], [(0, -30.0)], [(2, float("-inf"))]], [0, 1, 1], 20)
    assert wr.rows[0][0] == (0, 1 << 20)
    assert wr.rows[1] == [(0, 1 << 20)]            # own group: the tiny weight keeps full precision
    assert wr.rows[2] == [] and wr.log_scale[2] == float("-inf")
    assert math.isclose(wr.rows[0][1][1] / 2 ** 20, math.exp(-1), rel_tol=2.0 ** -18)


def test_mask_params_validation():
    with pytest.raises(InvalidMessage):
        hp.MaskParams(mask_nats=-1).validate()
    with pytest.raises(InvalidMessage):
        hp.MaskParams(precision_bits=4).validate()
    m = hp.MaskParams()
    assert m.e_bits > m.precision_bits and m.weight_bits > m.e_bits - m.range_bits


def test_uniform_masks_range_and_seed():
    a = hp.uniform_masks(random.Random(1), 1000, 4.0)
    b = hp.uniform_masks(random.Random(1), 1000, 4.0)
    assert np.array_equal(a, b)
    assert a.min() >= -4.0 and a.max() < 4.0 and abs(a.mean()) < 0.5
    c = hp.uniform_masks(protocol_rng(None), 1000, 4.0)
    assert not np.array_equal(a, c)
