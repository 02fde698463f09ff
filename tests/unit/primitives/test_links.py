"""Pairwise link keys and MACs (smcdp.primitives.links): both ends of a pair derive one key, which no other pair,
session or role shares; a MAC binds session, tag, direction and payload; an invalid public key is refused."""

from __future__ import annotations

import pytest

from smcdp.primitives import links


def _pair(session="s", secrets=(b"alice's share", b"bob's share"), roles=("party1", "party2")):
    a = links.link_secret(secrets[0], session, roles[0])
    b = links.link_secret(secrets[1], session, roles[1])
    return (
        links.pair_key(a, links.link_public(b), session, roles[0], roles[1]),
        links.pair_key(b, links.link_public(a), session, roles[1], roles[0]),
    )


def test_both_ends_derive_the_same_key_and_nothing_else_does():
    k_ab, k_ba = _pair()
    assert k_ab == k_ba and len(k_ab) == 32
    assert _pair(session="other")[0] != k_ab
    assert _pair(secrets=(b"another share", b"bob's share"))[0] != k_ab
    assert _pair(roles=("party1", "party3"))[0] != k_ab
    # the secret is a function of (secret, session, role): a replayed party sends the same public key
    again = links.link_public(links.link_secret(b"alice's share", "s", "party1"))
    assert again == links.link_public(links.link_secret(b"alice's share", "s", "party1"))
    assert again != links.link_public(links.link_secret(b"alice's share", "s", "party2"))


def test_a_mac_binds_session_tag_direction_and_payload():
    k, _ = _pair()
    mac = links.pair_mac(k, "s", "echo/1", "party1", "party2", b"x" * 32)
    assert len(mac) == links.MAC_BYTES
    assert mac == links.pair_mac(k, "s", "echo/1", "party1", "party2", b"x" * 32)
    for other in (
        links.pair_mac(k, "t", "echo/1", "party1", "party2", b"x" * 32),
        links.pair_mac(k, "s", "echo/2", "party1", "party2", b"x" * 32),
        links.pair_mac(k, "s", "echo/1", "party2", "party1", b"x" * 32),
        links.pair_mac(k, "s", "echo/1", "party1", "party2", b"y" * 32),
        links.pair_mac(bytes(32), "s", "echo/1", "party1", "party2", b"x" * 32),
    ):
        assert other != mac


@pytest.mark.parametrize("public", [b"", bytes(31), bytes(33), bytes(32)])
def test_an_invalid_public_key_is_refused(public):
    """Wrong lengths, and the all-zero point (low order: its shared secret is zero)."""
    with pytest.raises(ValueError):
        links.pair_key(links.link_secret(b"k", "s", "party1"), public, "s", "party1", "party2")
