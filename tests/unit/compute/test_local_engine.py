"""The local engine's crypto (issue 27): threads started once per party process, the key's tables built once
per key in the party process, no worker processes, and the same values as the key's own operations."""

import asyncio
import multiprocessing
import threading

import numpy as np
import pytest

from smcdp.compute import ArraySource, LocalEngine
from smcdp.compute.local import POOL_MIN_BATCH, TABLE_BATCHES
from smcdp.crypto.modexp import window_for_uses
from smcdp.crypto.paillier import generate_keypair
from smcdp.errors import CryptoOverflow


def _source():
    return ArraySource(np.random.default_rng(0).normal(size=(4, 6)))


def test_sessions_share_the_engines_crypto_threads_and_spawn_no_process():
    _, sk = generate_keypair(512, allow_insecure=True)
    ints = [0, 1, -1, 2**100, -(2**90)] + list(range(-40, 40))
    engine = LocalEngine(2)
    seen = []

    async def one_session():
        async with engine.session(_source(), sk) as cs:
            cts = await cs.encrypt(ints)
            assert [sk.raw_decrypt_signed(c) for c in cts] == ints  # ordinary CRT ciphertexts
            assert await cs.decrypt(cts) == ints
            assert await cs.decrypt(cts[:3]) == ints[:3]  # a small batch, one thread
            # before issue 27 each session spawned a process pool here (workers importing smcdp and
            # building their own tables): the key now never leaves this process
            assert multiprocessing.active_children() == []
            seen.append(engine.crypto())

    async def both():
        await one_session()
        await one_session()
        await engine.aclose()

    before = {t.name for t in threading.enumerate()}
    asyncio.run(both())
    assert seen[0] is seen[1]  # started once, shared by the sessions
    assert not [t for t in threading.enumerate() if t.name not in before and t.name.startswith("smcdp-compute")]


def test_a_keys_tables_are_built_once_and_sized_for_the_session():
    _, sk = generate_keypair(512, allow_insecure=True)
    engine = LocalEngine(2)
    batch = list(range(POOL_MIN_BATCH + 4))

    async def go():
        async with engine.session(_source(), sk) as cs:
            await cs.encrypt(batch)
            tables = sk._tables
            await cs.encrypt(batch)
        async with engine.session(_source(), sk) as cs:
            await cs.encrypt(batch)
        await engine.aclose()
        return tables

    tables = asyncio.run(go())
    assert sk._tables is tables  # one build for every batch and session of this key
    want = window_for_uses(sk.public_key.obfuscation_bits, sk.psquare.bit_length(), TABLE_BATCHES * len(batch))
    assert [t.window for t in tables] == [want, want]


def test_a_plaintext_beyond_the_key_fails_before_any_work():
    _, sk = generate_keypair(512, allow_insecure=True)
    engine = LocalEngine(2)

    async def go():
        async with engine.session(_source(), sk) as cs:
            with pytest.raises(CryptoOverflow):
                await cs.encrypt([1] * POOL_MIN_BATCH + [sk.public_key.max_int + 1])
        await engine.aclose()

    asyncio.run(go())
    assert sk._tables is None
