"""The ``[policy.key-ceremony]`` a demo's ``--threshold`` gives its data parties admits the ceremony it proposes, at
the real key size too: a 2048-bit ceremony's byte envelope (capped by [limits] at 2 GiB) is above the default
``max_receive_mib`` (the demo's end-to-end test runs 512-bit keys, where it is not)."""

import pytest

from smcdp.cli.demo.common import DEMO_KEY_GROUP, ceremony_rules
from smcdp.cli.keys import ceremony_request
from smcdp.net.limits import Limits
from smcdp.plugins.keygen import PROTOCOL
from smcdp.plugins.registry import get_plugin
from smcdp.runtime.governance.policy import OutOfBounds, Policy, ProtocolRules, evaluate


def _admit(rules, names, threshold, bits):
    """What the proposal gate does at every party but the initiator (runtime/governance/gate.py)."""
    roles, params = ceremony_request(names[0], names, DEMO_KEY_GROUP, threshold, bits, False)
    plugin = get_plugin(PROTOCOL)
    params = plugin.validate_params(params, roles)
    summary = plugin.summary(params, roles)
    for role, party in roles.items():
        if party == names[0]:
            continue
        envelope = Limits().envelope(plugin.traffic_envelope(params, roles, role))
        evaluate(
            Policy(protocols={PROTOCOL: rules[party]}),
            me=party,
            session_id="alice.key-ceremony-1",
            initiator=names[0],
            role=role,
            roles=roles,
            summary=summary,
            allow_insecure_keys=bits < 2048,
            receive_bytes=envelope.session_bytes,
        )


@pytest.mark.parametrize("names", [["alice", "bob"], ["alice", "bob", "carol"]])
def test_the_demo_ceremony_rules_admit_a_2048_bit_ceremony(names):
    _admit(ceremony_rules(names, 1, 2048), names, 1, 2048)
    # the rules as the layout alone gives them (no receive bound) refuse it: what the demo had to raise
    plain = {
        p: ProtocolRules(roles=r.roles, initiators=r.initiators) for p, r in ceremony_rules(names, 1, 2048).items()
    }
    with pytest.raises(OutOfBounds, match="max_receive_mib"):
        _admit(plain, names, 1, 2048)
