"""A malicious Alice against Bob in keyword recognition (docs/security.md, "Keyword recognition")."""

import asyncio

import pytest

from smcdp.errors import PermissionDenied
from smcdp.net.channel import InMemoryNetwork
from smcdp.plugins.base import SessionContext
from smcdp.plugins.keyword import KeywordPlugin
from tests.support.paths import KEYWORD_DATA


def _bob_run(params, allow_insecure_keys, timeout=5.0):
    net = InMemoryNetwork({"alice": "a", "bob": "b"}, timeout=timeout)
    ctx = SessionContext(
        session_id="s",
        protocol="keyword",
        roles={"alice": "a", "bob": "b"},
        params=KeywordPlugin().validate_params(params, {"alice": "a", "bob": "b"}),
        inputs={"models": str(KEYWORD_DATA / "models.npz")},
        allow_insecure_keys=allow_insecure_keys,
    )
    return asyncio.run(KeywordPlugin().run_role("bob", net.channel("bob"), ctx))


def test_bob_refuses_debug_reveal_outside_test_deployments():
    """Alice (the initiator) chooses the parameters: with debug_reveal she would receive every
    model's score in model order.  Bob's party refuses it unless it is a test deployment, before it
    reads its models."""
    with pytest.raises(PermissionDenied, match="debug_reveal would reveal every model's score"):
        _bob_run({"key_bits": 2048, "debug_reveal": True}, allow_insecure_keys=False)


def test_bob_with_debug_reveal_on_a_test_deployment_goes_on_to_the_protocol():
    """On a test deployment the request is accepted: Bob proceeds and waits for Alice's key (which
    never comes here), i.e. the refusal above is the rule, not a failure to start."""
    from smcdp.errors import DeadlineExceeded

    with pytest.raises(DeadlineExceeded):  # (a refusal would raise PermissionDenied at once)
        _bob_run({"key_bits": 512, "debug_reveal": True}, allow_insecure_keys=True, timeout=1.0)
