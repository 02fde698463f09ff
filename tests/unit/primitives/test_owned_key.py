"""A key its owner made (primitives.owned_key): sent with the proof that its modulus is square-free, taken only with
it, at the session's size, and never swapped for another in a replay."""

from __future__ import annotations

import asyncio

import pytest

from smcdp.crypto.paillier import generate_keypair
from smcdp.errors import InvalidMessage
from smcdp.net.channel import InMemoryNetwork, ReplayDiverged
from smcdp.primitives.owned_key import recv_owned_key, send_owned_key
from smcdp.runtime.durability.journal import FileJournal
from tests.support.crafted_keys import key_with_a_small_factor

ROLES = {"owner": "owner", "peer": "peer"}
CONTEXT = b"smcdp/test/owned-key/session-1/t"


def _exchange(key, bits=512, send_context=CONTEXT, journals=None):
    async def owner(ch):
        await send_owned_key(ch, ["peer"], "t/zeta", key, send_context)

    async def peer(ch):
        return await recv_owned_key(ch, "owner", "t/zeta", CONTEXT, bits=bits, allow_insecure=True)

    net = InMemoryNetwork(ROLES, journals=journals)
    return asyncio.run(net.run({"owner": owner, "peer": peer}))["peer"]


@pytest.fixture(scope="module")
def key():
    return generate_keypair(512, allow_insecure=True)[1]


def test_a_key_with_its_proof_is_taken(key):
    assert _exchange(key) == key.public_key


def test_a_key_of_another_size_than_the_sessions_is_refused(key):
    with pytest.raises(InvalidMessage, match="512 bits; the session agreed on 768"):
        _exchange(key, bits=768)


def test_a_modulus_with_a_small_prime_factor_is_refused_whatever_its_proof():
    """A modulus with a 13-bit prime factor and gcd(n, φ(n)) = 1 has a valid modulus proof; it is refused for the
    factor (a bit proof under it is sound only with every prime above 2^16)."""
    with pytest.raises(InvalidMessage, match="prime factor below 2\\^16"):
        _exchange(key_with_a_small_factor(512, 7))


def test_a_proof_for_another_context_is_refused(key):
    with pytest.raises(InvalidMessage, match="does not show gcd"):
        _exchange(key, send_context=b"smcdp/test/owned-key/session-2/t")


def test_a_replayed_owner_sends_its_journal_key_or_says_it_diverged(tmp_path, key):
    """A replayed owner re-sends what its journal holds; one whose key is not that one (send_many would have sent
    the journal's key, and the owner then decrypted under another) raises ReplayDiverged naming itself."""
    _exchange(key, journals={"owner": FileJournal(tmp_path / "owner.log")})

    async def owner_with(k):
        net = InMemoryNetwork(ROLES, journals={"owner": FileJournal(tmp_path / "owner.log")})
        await send_owned_key(net.channels["owner"], ["peer"], "t/zeta", k, CONTEXT)
        return net

    net = asyncio.run(owner_with(key))
    assert net.transcript == [] and net.channels["owner"].replayed_sends == 2  # nothing leaves again
    other = generate_keypair(512, allow_insecure=True)[1]
    with pytest.raises(ReplayDiverged, match="t/zeta-pk is not the key it sent before") as err:
        asyncio.run(owner_with(other))
    assert err.value.origin == "owner"
