"""Crypto threads: decryptions split into their CRT halves, GIL-free gmpy2, background priority."""

import asyncio
import os
import sys
import threading

import gmpy2
import pytest

from smcdp.crypto.modexp import multi_exp
from smcdp.crypto.obfuscation import ObfuscatorPool
from smcdp.crypto.threads import CryptoThreads
from smcdp.primitives import logsum as ls

VALUES = list(range(-20, 21)) + [2**100, -(2**100), 2**300 + 7]


def test_decryption_halves_join_to_the_plaintext(keypair512):
    pk, sk = keypair512
    for m in VALUES:
        c = pk.raw_encrypt(m)
        assert sk.decode_signed(sk.combine_halves(sk.decrypt_half(c, 0), sk.decrypt_half(c, 1))) == m
        assert sk.raw_decrypt_signed(c) == m


def test_threads_decrypt_in_order_sync_and_async(keypair512):
    pk, sk = keypair512
    cts = [pk.raw_encrypt(m) for m in VALUES]
    for priority in ("urgent", "background"):
        with CryptoThreads(3, priority=priority) as threads:
            assert threads.decrypt_signed(sk, cts) == VALUES
            assert asyncio.run(threads.adecrypt_signed(sk, cts)) == VALUES
            assert threads.decrypt_signed(sk, []) == []


def test_worker_threads_let_gmpy2_release_the_gil_and_leave_the_caller_alone():
    with CryptoThreads(2) as threads:
        assert threads.map(lambda _: gmpy2.get_context().allow_release_gil, range(4)) == [True] * 4
    assert gmpy2.get_context().allow_release_gil is False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice is Linux's")
def test_background_threads_run_at_the_lowest_priority():
    def nice(_):
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    base = os.getpriority(os.PRIO_PROCESS, 0)
    with CryptoThreads(2, priority="background") as bg, CryptoThreads(2, priority="urgent") as urgent:
        assert set(bg.map(nice, range(4))) == {19}
        assert set(urgent.map(nice, range(4))) == {base}
    assert os.getpriority(os.PRIO_PROCESS, 0) == base  # the process itself is untouched


def test_errors_reach_the_caller_and_priorities_are_checked():
    def boom(x):
        raise ValueError(f"bad {x}")

    with CryptoThreads(2) as threads:
        with pytest.raises(ValueError, match="bad"):
            threads.map(boom, [1, 2])
        with pytest.raises(ValueError, match="bad"):
            asyncio.run(threads.amap(boom, [1]))
    with pytest.raises(ValueError, match="priority"):
        CryptoThreads(priority="high")


def test_threaded_weighted_sums_equal_the_serial_ones(keypair512):
    """Bob's step (W) on threads: the same sums (decrypted) as the serial path, slot by slot."""
    pk, sk = keypair512
    lay = ls.LogsumLayout.make(ls.MaskParams(), 3, pk)
    rng = __import__("random").Random(5)
    terms, nu, plain = [], [], []
    for r in range(2 * lay.slots + 1):  # three ciphertexts, the last one partly filled
        es = [rng.randrange(1 << 20) for _ in range(3)]
        ks = [rng.randrange(1, 1 << lay.weight_bits) for _ in range(3)]
        terms.append([(pk.raw_encrypt(e << lay.shift(r)), k) for e, k in zip(es, ks)])
        nu.append(rng.randrange(1 << lay.smudge_bits))
        plain.append(sum(e * k for e, k in zip(es, ks)) + nu[-1])
    with ObfuscatorPool.for_public_key(pk, capacity=8) as pool, CryptoThreads(2) as threads:
        serial = ls.weighted_sums(pk, terms, nu, lay, pool)
        threaded = asyncio.run(ls.aweighted_sums(pk, terms, nu, lay, pool, threads))
    for out in (serial, threaded):
        sums = ls.unpack_sums([sk.raw_decrypt_signed(c) for c in out], len(terms), lay)
        assert sums == plain
    assert multi_exp([], [], pk.nsquare) == 1
