"""[policy] parsing and evaluation against plug-in summaries (no processes)."""

from __future__ import annotations

import tomllib
from dataclasses import replace

import pytest

from smcdp.errors import InvalidMessage
from smcdp.net.config import ConfigError
from smcdp.net.limits import Limits
from smcdp.plugins.registry import get_plugin
from smcdp.runtime.governance.policy import (
    OutOfBounds,
    Policy,
    PolicyDenied,
    ProtocolRules,
    check_seed,
    evaluate,
    merge_rules,
    parse_policy,
    rules_for_layout,
)

PEERS = {"bob": "h:1", "charlie": "h:2", "dave": "h:3", "eve": "h:4", "trent": "h:5"}
DPA_ROLES = {"charlie": "charlie", "dave": "dave", "party1": "alice", "party2": "bob"}
PI_ROLES = {"trent": "trent", "party1": "alice", "party2": "bob"}


def _policy(text: str) -> Policy:
    return parse_policy(tomllib.loads(text).get("policy", {}), "alice", PEERS)


def _summary(protocol, roles, **params):
    plugin = get_plugin(protocol)
    return plugin.summary(plugin.validate_params(params, roles), roles)


DPA = dict(n_parties=2, dim=3, epsilon=1.0, lam=0.1, key_bits=2048, min_records=50)
POLICY = """
[policy]
approval = "operator"
[policy.dp-aggregate]
roles = ["party*"]
initiators = ["charlie"]
coordinators = ["charlie", "dave", "eve"]
release_to = ["dave"]
max_epsilon = 2.0
max_delta = 1e-15
min_records = 10
min_key_bits = 2048
data_bounds = { records = 1000 }
approval = "auto"
[policy.power-iteration]
roles = ["party*"]
initiators = ["trent"]
coordinators = ["trent"]
release_to = ["trent", "bob"]
"""


def _eval(policy, protocol="dp-aggregate", roles=None, initiator="charlie", role="party1", insecure=False, **params):
    roles = dict(roles or (DPA_ROLES if protocol == "dp-aggregate" else PI_ROLES))
    base = {"dp-aggregate": DPA, "power-iteration": {"n_parties": 2, "key_bits": 2048}}.get(protocol, {})
    p = dict(base, **params)
    plugin = get_plugin(protocol)
    # the receive limit, as the governor asks: the protocol's envelope capped by [limits]
    derived = plugin.traffic_envelope(plugin.validate_params(p, roles), roles, role)
    envelope = None if derived is None else Limits().envelope(derived)
    evaluate(
        policy,
        me="alice",
        session_id="s1",
        initiator=initiator,
        role=role,
        roles=roles,
        summary=_summary(protocol, roles, **p),
        allow_insecure_keys=insecure,
        receive_bytes=None if envelope is None else envelope.session_bytes,
    )


def test_parses_every_key_and_round_trips():
    pol = _policy(POLICY)
    assert pol.approval == "operator" and pol.approval_for("dp-aggregate") == "auto"
    assert pol.approval_for("power-iteration") == "operator"
    r = pol.protocols["dp-aggregate"]
    assert (r.roles, r.initiators, r.release_to, r.max_epsilon, r.min_records) == (
        ("party*",),
        ("charlie",),
        ("dave",),
        2.0,
        10,
    )
    assert pol.protocols["power-iteration"].allow_non_dp is False  # default: exact outputs stay in
    assert parse_policy(pol.as_dict(), "alice", PEERS) == pol


@pytest.mark.parametrize(
    "text, message",
    [
        ("[policy]\nmode = 1", "unknown key(s) in [policy]"),
        (
            "[policy.dp-aggregate]\nroles = ['party*']\ninitiators = []\nmax_eps = 1",
            "unknown key(s) in [policy.dp-aggregate]",
        ),
        ("[policy.dp-aggregate]\ninitiators = []", "must say roles"),
        ("[policy.dp-aggregate]\nroles = ['party*']", "must say initiators"),
        ("[policy.dp-aggregate]\nroles = []\ninitiators = []", "non-empty list of role names"),
        ("[policy.dp-aggregate]\nroles = ['p!']\ninitiators = []", "non-empty list of role names"),
        ("[policy.dp-aggregate]\nroles = ['x']\ninitiators = ['mallory']", "neither this party nor in [peers]"),
        ("[policy.dp-aggregate]\nroles = ['x']\ninitiators = ['Bad Name']", "initiators"),
        ("[policy.dp-aggregate]\nroles = ['x']\ninitiators = []\nmax_epsilon = 0", "max_epsilon must be a number"),
        ("[policy.dp-aggregate]\nroles = ['x']\ninitiators = []\nmax_delta = 1", "max_delta must be a number"),
        (
            "[policy.dp-aggregate]\nroles = ['x']\ninitiators = []\nmin_key_bits = 2048.0",
            "min_key_bits must be an integer",
        ),
        ("[policy.dp-aggregate]\nroles = ['x']\ninitiators = []\nmin_records = true", "min_records must be an integer"),
        (
            "[policy.dp-aggregate]\nroles = ['x']\ninitiators = []\nallow_non_dp = 'yes'",
            "allow_non_dp must be true or false",
        ),
        ("[policy]\napproval = 'maybe'", "approval must be one of"),
        ("[policy]\nallow_seeded = 1", "allow_seeded must be true or false"),
        ("[policy]\nopen = true\n[policy.keyword]\nroles = ['alice']\ninitiators = []", "cannot be combined"),
        (
            "[policy.power-iteration]\nroles = ['x']\ninitiators = []\nmax_components = 0",
            "max_components must be an integer",
        ),
        ("[policy.power-iteration]\nroles = ['x']\ninitiators = []\nperiod_days = 7", "period_days is the window"),
        (
            "[policy.power-iteration]\nroles = ['x']\ninitiators = []\nmax_exact_sessions = 2\nperiod_days = 0",
            "period_days must be a number",
        ),
        (
            "[policy.power-iteration]\nroles = ['x']\ninitiators = []\nmax_exact_sessions = -1",
            "max_exact_sessions must be an integer",
        ),
    ],
)
def test_invalid_policies_are_refused_naming_the_field(text, message):
    with pytest.raises(ConfigError) as ei:
        _policy(text)
    assert message in str(ei.value)


def test_admits_what_it_allows():
    _eval(_policy(POLICY))  # the session it was written for
    _eval(_policy(POLICY), role="party2", roles={**DPA_ROLES, "party1": "bob", "party2": "alice"})
    _eval(_policy(POLICY), roles={**DPA_ROLES, "charlie": "eve"}, initiator="charlie")  # eve may coordinate
    _eval(_policy(POLICY), initiator="alice")  # its own operator may always start one


@pytest.mark.parametrize(
    "kw, exc, rule",
    [
        (
            dict(protocol="keyword", roles={"alice": "alice", "bob": "bob"}, role="alice", initiator="bob"),
            PolicyDenied,
            "policy.keyword",
        ),
        (
            dict(role="charlie", roles={"charlie": "alice", "dave": "dave", "party1": "bob", "party2": "eve"}),
            PolicyDenied,
            "policy.dp-aggregate.roles",
        ),
        (dict(initiator="dave"), PolicyDenied, "policy.dp-aggregate.initiators"),
        (dict(roles={**DPA_ROLES, "dave": "trent"}), PolicyDenied, "policy.dp-aggregate.coordinators"),
        (dict(roles={**DPA_ROLES, "dave": "eve"}), PolicyDenied, "policy.dp-aggregate.release_to"),
        (dict(protocol="power-iteration", initiator="trent"), PolicyDenied, "policy.power-iteration.allow_non_dp"),
        (dict(key_bits=1024, insecure=True), OutOfBounds, "policy.dp-aggregate.min_key_bits"),
        (dict(dgk_bits=1024, insecure=True), OutOfBounds, "policy.dp-aggregate.min_key_bits"),
        (dict(epsilon=2.5), OutOfBounds, "policy.dp-aggregate.max_epsilon"),
        (dict(n_parties=3, roles={**DPA_ROLES, "party3": "eve"}), None, None),  # 3 * 2^-64 < 1e-15: admitted
        (dict(min_records=9), OutOfBounds, "policy.dp-aggregate.min_records"),
    ],
)
def test_each_rule_refuses_with_its_code_naming_party_and_rule(kw, exc, rule):
    pol = _policy(POLICY)
    if exc is None:
        _eval(pol, **kw)
        return
    with pytest.raises(exc) as ei:
        _eval(pol, **kw)
    assert ei.value.rule == rule
    assert ei.value.code == ("PERMISSION_DENIED" if exc is PolicyDenied else "FAILED_PRECONDITION")
    text = str(ei.value)
    assert text.startswith("party 'alice' refuses session 's1': ") and text.endswith(f"(rule {rule})")


def test_max_delta_and_the_insecure_key_floor():
    pol = _policy(POLICY.replace("max_delta = 1e-15", "max_delta = 1e-20"))
    with pytest.raises(
        OutOfBounds,
        match=r"delta=1\.08\d*e-19, above its per-session maximum of 1e-20 "
        r"\(rule policy.dp-aggregate.max_delta\)",
    ):
        _eval(pol)
    pol = _policy(POLICY.replace("min_key_bits = 2048", "min_key_bits = 512"))
    with pytest.raises(OutOfBounds) as ei:
        _eval(pol, key_bits=1024, dgk_bits=1024)
    assert ei.value.rule == "party.allow_insecure_keys"
    _eval(pol, key_bits=1024, dgk_bits=1024, insecure=True)


def test_a_record_bound_is_required_where_the_protocol_declares_none():
    pol = _policy(
        POLICY.replace(
            'release_to = ["trent", "bob"]', 'release_to = ["trent", "bob"]\nallow_non_dp = true\nmin_records = 5'
        )
    )
    with pytest.raises(OutOfBounds, match="declares no public record bound"):
        _eval(pol, protocol="power-iteration", initiator="trent")


def test_coordinators_only_read_data_roles_rules():
    """trent holds no data: coordinator and output rules do not apply to its role."""
    pol = _policy("[policy.power-iteration]\nroles = ['trent']\ninitiators = ['trent']")
    evaluate(
        pol,
        me="alice",
        session_id="s",
        initiator="alice",
        role="trent",
        roles={"trent": "alice", "party1": "bob", "party2": "eve"},
        summary=_summary(
            "power-iteration", {"trent": "alice", "party1": "bob", "party2": "eve"}, n_parties=2, key_bits=2048
        ),
        allow_insecure_keys=False,
    )


def test_no_policy_open_policy_and_a_policy_without_tables():
    _eval(
        _policy("[policy]\nopen = true"), epsilon=50.0, initiator="trent", roles={**DPA_ROLES, "dave": "trent"}
    )  # anything goes
    with pytest.raises(PolicyDenied, match="does not join protocol 'dp-aggregate'"):
        _eval(_policy("[policy]\napproval = 'operator'"))


def test_no_policy_denies_every_peer_and_admits_the_own_operator():
    """Deny by default (issue 24): without [policy] a peer's proposal is refused, whatever it asks."""
    for kw in (dict(initiator="trent", roles={**DPA_ROLES, "dave": "trent"}, epsilon=50.0), dict(initiator="charlie")):
        with pytest.raises(PolicyDenied) as ei:
            _eval(None, **kw)
        assert ei.value.rule == "policy" and ei.value.code == "PERMISSION_DENIED"
        assert "deny by default" in str(ei.value)
    _eval(None, initiator="alice", epsilon=50.0)  # the party's own operator starts what it wants


def test_the_seed_rule_holds_with_and_without_a_policy():
    for pol in (None, _policy("[policy]\nopen = true"), _policy(POLICY)):
        with pytest.raises(OutOfBounds) as ei:
            check_seed(7, pol, "alice", "s1")
        assert ei.value.rule == "policy.allow_seeded" and ei.value.code == "FAILED_PRECONDITION"
        check_seed(None, pol, "alice", "s1")
    check_seed(7, _policy("[policy]\nopen = true\nallow_seeded = true"), "alice", "s1")


def test_refusals_say_nothing_of_the_data():
    """Messages quote public parameters and the policy, never record or feature counts."""
    pol = _policy(POLICY)
    for kw in (dict(min_records=9), dict(epsilon=2.5), dict(initiator="dave")):
        with pytest.raises(Exception) as ei:
            _eval(pol, **kw)
        assert "records than" not in str(ei.value) and "features" not in str(ei.value)


def test_generated_rules_admit_exactly_the_layout():
    s = _summary("dp-aggregate", DPA_ROLES, **DPA)
    rules = rules_for_layout(DPA_ROLES, initiators=["charlie"], coordinating_roles=("charlie", "dave"), summary=s)
    assert rules["alice"] == ProtocolRules(
        roles=("party1",),
        initiators=("charlie",),
        coordinators=("charlie", "dave"),
        release_to=("dave",),
        data_bounds=(("records", 50),),  # the layout's maker states what the session asks of its data
    )
    assert rules["charlie"] == ProtocolRules(roles=("charlie",), initiators=("charlie",))
    pol = Policy(protocols={"dp-aggregate": rules["alice"]})
    _eval(pol)
    with pytest.raises(PolicyDenied):
        _eval(pol, role="party2", roles={**DPA_ROLES, "party1": "bob", "party2": "alice"})
    pi = rules_for_layout(PI_ROLES, initiators=["trent"], coordinating_roles=("trent",), allow_non_dp=True)
    assert pi["alice"].release_to == ("bob", "trent") and pi["alice"].allow_non_dp
    merged = merge_rules(pi["alice"], ProtocolRules(roles=("party2",), initiators=("bob",)))
    assert merged.roles == ("party1", "party2") and merged.initiators == ("bob", "trent")


PI_DP = dict(epsilon=1.0, delta=1e-6)
PI_POLICY = """
[policy.power-iteration]
roles = ["party*"]
initiators = ["trent"]
coordinators = ["trent"]
release_to = ["bob"]
max_epsilon = 1.0
max_delta = 1e-6
max_components = 2
"""


def test_a_party_that_allows_no_exact_output_joins_the_dp_mode_of_power_iteration():
    """allow_non_dp = false (the default) refuses the exact mode and admits the DP mode, whose outputs
    are marked DP and go to the other data parties only (Trent receives ciphertexts); max_epsilon,
    max_delta and max_components apply (oversampled directions count as components)."""
    pol = _policy(PI_POLICY)
    s = _summary("power-iteration", PI_ROLES, n_parties=2, key_bits=2048, **PI_DP)
    assert s.epsilon == 1.0 and s.delta == 1e-6 and s.rho > 0 and s.components == 1
    assert [(o.name, o.dp, o.recipients) for o in s.outputs] == [("u", True, ("party1", "party2"))]
    _eval(pol, protocol="power-iteration", initiator="trent", **PI_DP)
    _eval(pol, protocol="power-iteration", initiator="trent", components=2, **PI_DP)
    cases = [
        ({}, PolicyDenied, "allow_non_dp"),
        (dict(PI_DP, epsilon=1.5), OutOfBounds, "max_epsilon"),
        (dict(PI_DP, delta=1e-5), OutOfBounds, "max_delta"),
        (dict(PI_DP, components=3), OutOfBounds, "max_components"),
        (dict(PI_DP, components=2, oversample=1), OutOfBounds, "max_components"),
        (dict(components=3), OutOfBounds, "max_components"),
    ]
    exact = _policy(
        PI_POLICY.replace("max_epsilon", "allow_non_dp = true\nmax_epsilon").replace(
            'release_to = ["bob"]', 'release_to = ["bob", "trent"]'
        )
    )
    for params, exc, rule in cases:
        with pytest.raises(exc) as ei:
            _eval(
                exact if params == dict(components=3) else pol, protocol="power-iteration", initiator="trent", **params
            )
        assert ei.value.rule == f"policy.power-iteration.{rule}", params
    # a protocol that declares no number of components is refused by a max_components rule
    dpa = _policy(POLICY.replace("min_key_bits = 2048\n", "min_key_bits = 2048\nmax_components = 4\n", 1))
    with pytest.raises(OutOfBounds, match="no number of components"):
        _eval(dpa)


KW_ROLES = {"alice": "bob", "bob": "alice"}  # this party ("alice") holds the models: role bob
KW_POLICY = """
[policy.keyword]
roles = ["bob"]
initiators = ["bob"]
release_to = ["bob"]
allow_non_dp = true
"""


def test_keyword_rounds_of_several_frames_need_the_model_holders_consent():
    """A keyword session whose induction rounds cover m ≥ 2 frames shows Alice more of Bob's models
    (docs/protocols/keyword.md): the models' party admits it only up to its max_frames_per_round, 1 when
    its policy does not say -- the seed's rounds need no rule, and Alice's side never does."""
    s = _summary("keyword", KW_ROLES, key_bits=2048, frames_per_round=2)
    assert s.frames_per_round == {"bob": 2} and s.as_dict()["frames_per_round"] == {"bob": 2}
    _eval(_policy(KW_POLICY), protocol="keyword", roles=KW_ROLES, role="bob", initiator="bob")
    with pytest.raises(OutOfBounds, match="rounds cover 2 frames each") as ei:
        _eval(_policy(KW_POLICY), protocol="keyword", roles=KW_ROLES, role="bob", initiator="bob", frames_per_round=2)
    assert ei.value.rule == "policy.keyword.max_frames_per_round"
    allowing = _policy(KW_POLICY + "max_frames_per_round = 2\n")
    assert allowing.protocols["keyword"].as_dict()["max_frames_per_round"] == 2
    _eval(allowing, protocol="keyword", roles=KW_ROLES, role="bob", initiator="bob", frames_per_round=2)
    with pytest.raises(OutOfBounds, match="at most 2"):
        _eval(allowing, protocol="keyword", roles=KW_ROLES, role="bob", initiator="bob", frames_per_round=3)
    alice = _policy(KW_POLICY.replace('roles = ["bob"]', 'roles = ["alice"]'))
    _eval(
        alice,
        protocol="keyword",
        roles={"alice": "alice", "bob": "bob"},
        role="alice",
        initiator="bob",
        frames_per_round=3,
    )
    with pytest.raises(ConfigError, match="max_frames_per_round must be an integer"):
        _policy(KW_POLICY + "max_frames_per_round = 0\n")
    # two generated layouts merged: the rule of the one that allows longer rounds holds
    one = ProtocolRules(roles=("bob",), initiators=("alice",))
    for a, b in ((one, replace(one, max_frames_per_round=2)), (replace(one, max_frames_per_round=2), one)):
        assert merge_rules(a, b).max_frames_per_round == 2
    assert merge_rules(one, one).max_frames_per_round is None


def test_the_data_party_not_the_proposer_decides_how_many_share_its_noise():
    """noise_parties = h > 1 makes each data party add 1/h of the noise's variance, so h − 1 colluding
    parties (every data party holds the key) remove theirs: trent proposing h = 2 had alice's releases
    carry 1/√2 of the calibrated noise while her ledger was charged the whole ε.  Refused unless her
    policy allows it (max_noise_parties, default 1), with PERMISSION_DENIED naming the rule."""
    s = _summary("power-iteration", PI_ROLES, n_parties=2, key_bits=2048, noise_parties=2, **PI_DP)
    assert s.noise_parties == {"party1": 2, "party2": 2} and s.as_dict()["noise_parties"]["party1"] == 2
    pol = _policy(PI_POLICY)
    _eval(pol, protocol="power-iteration", initiator="trent", **PI_DP)  # h = 1: admitted
    with pytest.raises(PolicyDenied, match="shared among 2 parties") as ei:
        _eval(pol, protocol="power-iteration", initiator="trent", noise_parties=2, **PI_DP)
    assert ei.value.rule == "policy.power-iteration.max_noise_parties"
    assert ei.value.code == "PERMISSION_DENIED" and "alice" in str(ei.value)
    allowing = _policy(PI_POLICY + "max_noise_parties = 2\n")
    assert allowing.protocols["power-iteration"].as_dict()["max_noise_parties"] == 2
    _eval(allowing, protocol="power-iteration", initiator="trent", noise_parties=2, **PI_DP)
    with pytest.raises(ConfigError, match="max_noise_parties must be an integer"):
        _policy(PI_POLICY + "max_noise_parties = 0\n")
    # trent's own rules are not asked: the noise protects the data parties
    trent = _policy(PI_POLICY.replace('roles = ["party*"]', 'roles = ["trent"]'))
    _eval(trent, protocol="power-iteration", initiator="trent", role="trent", noise_parties=2, **PI_DP)
    # a layout that proposes h = 2 generates rules that admit it; merged layouts keep the larger
    one = ProtocolRules(roles=("party1",), initiators=("trent",))
    assert merge_rules(one, replace(one, max_noise_parties=2)).max_noise_parties == 2


def test_what_a_proposal_may_make_a_party_receive_is_bounded_by_its_policy():
    """Key size and rounds size a session's byte envelope (the receive limit derived from the proposal):
    the policy bounds both, with defaults (4096 bits, 2000 rounds) that an honest session of today's
    documented sizes stays within -- for every role, data or coordinator."""
    pol = _policy(
        PI_POLICY.replace("max_epsilon", "allow_non_dp = true\nmax_epsilon").replace(
            'release_to = ["bob"]', 'release_to = ["bob", "trent"]'
        )
    )
    _eval(pol, protocol="power-iteration", initiator="trent", key_bits=4096, max_iterations=2000)
    cases = [
        (dict(key_bits=8192), "max_key_bits", "above its maximum of 4096"),
        (dict(max_iterations=100_000), "max_iterations", "may run 100000 rounds"),
    ]
    for params, rule, words in cases:
        with pytest.raises(OutOfBounds, match=words) as ei:
            _eval(pol, protocol="power-iteration", initiator="trent", **params)
        assert ei.value.rule == f"policy.power-iteration.{rule}" and ei.value.code == "FAILED_PRECONDITION"
    # the DP mode's rounds are its fixed T
    fifty = _policy(PI_POLICY + "max_iterations = 50\n")
    _eval(fifty, protocol="power-iteration", initiator="trent", iterations=50, **PI_DP)
    with pytest.raises(OutOfBounds, match="may run 60 rounds; it allows at most 50"):
        _eval(fifty, protocol="power-iteration", initiator="trent", iterations=60, **PI_DP)
    raised = _policy(
        PI_POLICY.replace(
            "max_epsilon",
            "allow_non_dp = true\nmax_key_bits = 8192\nmax_iterations = 100000\nmax_receive_mib = 1048576\nmax_epsilon",
        ).replace('release_to = ["bob"]', 'release_to = ["bob", "trent"]')
    )
    _eval(raised, protocol="power-iteration", initiator="trent", key_bits=8192, max_iterations=100_000)
    coordinator = _policy(PI_POLICY.replace('roles = ["party*"]', 'roles = ["trent"]'))
    with pytest.raises(OutOfBounds, match="above its maximum of 4096"):
        _eval(coordinator, protocol="power-iteration", initiator="trent", role="trent", key_bits=8192)


def test_the_receive_limit_a_peer_proposes_is_bounded_by_the_policy():
    """64 components of 4096-bit keys over 2,000 rounds -- every one within its own bound -- derived a
    power-iteration envelope of gigabytes, capped only by [limits] max_session_mib (2 GiB), and 300 MB of
    junk was accepted.  The envelope the proposal derives for this party's role is bounded by
    max_receive_mib (default 512 MiB): an honest session of the documented defaults fits, this one is
    refused naming the rule; a policy may raise it, and the party's own sessions are not its peers' to size."""
    text = PI_POLICY.replace("max_components = 2", "allow_non_dp = true").replace(
        'release_to = ["bob"]', 'release_to = ["bob", "trent"]'
    )
    pol = _policy(text)
    assert pol.protocols["power-iteration"].max_receive_mib is None
    big = dict(components=64, key_bits=4096, max_iterations=2000)
    _eval(pol, protocol="power-iteration", initiator="trent", key_bits=3072, max_iterations=2000)  # the defaults
    for role in ("party1", "trent"):
        roles = {"trent": "alice", "party1": "bob", "party2": "charlie"} if role == "trent" else PI_ROLES
        policy = _policy(text.replace('roles = ["party*"]', 'roles = ["party*", "trent"]'))
        with pytest.raises(OutOfBounds, match="it allows at most 512 MiB") as ei:
            _eval(policy, protocol="power-iteration", initiator="trent", role=role, roles=roles, **big)
        assert ei.value.rule == "policy.power-iteration.max_receive_mib" and ei.value.code == "FAILED_PRECONDITION"
    _eval(pol, protocol="power-iteration", initiator="alice", **big)  # its own operator's session
    raised = _policy(text + "max_receive_mib = 8192\n")
    assert raised.protocols["power-iteration"].as_dict()["max_receive_mib"] == 8192
    _eval(raised, protocol="power-iteration", initiator="trent", **big)
    with pytest.raises(ConfigError, match="max_receive_mib must be an integer"):
        _policy(text + "max_receive_mib = 0\n")


def test_the_data_party_not_the_proposer_decides_how_weakly_its_data_is_hidden():
    """Statistical hiding parameters (power iteration's blinding, keyword's masks, offsets and smudging,
    speaker's statistical bits) used to be the proposer's choice within the protocols' own ranges: trent
    could propose blind_bits = 1.  Each is now bounded below by the party's min_hiding, the protocol's
    default where its policy names none; a lower floor is the party's decision."""
    s = _summary("power-iteration", PI_ROLES, n_parties=2, key_bits=2048, blind_bits=4, **PI_DP)
    assert s.hiding["blind_bits"] == (4.0, 16.0) and s.as_dict()["hiding"]["sigma_bits"] == [16.0, 16.0]
    pol = _policy(PI_POLICY)
    _eval(pol, protocol="power-iteration", initiator="trent", **PI_DP)  # the defaults: admitted
    _eval(pol, protocol="power-iteration", initiator="trent", blind_bits=24, **PI_DP)  # more hiding: admitted
    with pytest.raises(OutOfBounds, match="blind_bits = 4 hides its data less than 16") as ei:
        _eval(pol, protocol="power-iteration", initiator="trent", blind_bits=4, **PI_DP)
    assert ei.value.rule == "policy.power-iteration.min_hiding.blind_bits" and ei.value.code == "FAILED_PRECONDITION"
    allowing = _policy(PI_POLICY + "min_hiding = { blind_bits = 4 }\n")
    assert allowing.protocols["power-iteration"].as_dict()["min_hiding"] == {"blind_bits": 4.0}
    _eval(allowing, protocol="power-iteration", initiator="trent", blind_bits=4, **PI_DP)
    with pytest.raises(OutOfBounds, match="sigma_bits = 2"):  # a floor for one name leaves the others' defaults
        _eval(allowing, protocol="power-iteration", initiator="trent", sigma_bits=2, **PI_DP)
    kw = _summary("keyword", KW_ROLES, key_bits=2048, mask_nats=1.0)
    assert kw.hiding["mask_nats"] == (1.0, 4.0) and set(kw.hiding) >= {"smudge_bits", "offset_nats"}
    with pytest.raises(OutOfBounds, match="mask_nats = 1 hides"):
        _eval(_policy(KW_POLICY), protocol="keyword", roles=KW_ROLES, role="bob", initiator="bob", mask_nats=1.0)
    sp = _summary("speaker-verify", {"alice": "alice", "bob": "bob"}, key_bits=2048, claim="carol", stat_bits=20)
    assert sp.hiding["stat_bits"] == (20.0, 40.0)
    for bad in ("min_hiding = 3", "min_hiding = { blind_bits = 0 }", 'min_hiding = { "Blind Bits" = 2 }'):
        with pytest.raises(ConfigError, match="min_hiding"):
            _policy(PI_POLICY + bad + "\n")


def test_the_exact_modes_scale_range_and_padding_are_the_data_partys_decision_too():
    """A review: in the exact mode a data party learns r_(t+1)/m_t, so Trent's scale r_t (log-uniform in
    [2^8, 2^scale_bits]) -- and with it U_t, hence the others' summed contribution -- is hidden by
    min(scale_bits − 8, blind_bits) bits; scale_bits = 9 (accepted) left one.  The padding ρ_i keeps the
    eigenvalues' ratios from the data parties; 1e-300 (accepted) removed it.  Both are now hiding parameters of
    the exact mode's summary, floored at the defaults unless the party's min_hiding says lower, and blind_bits
    above scale_bits − 8 is refused as a promise the range cannot keep."""
    exact = PI_POLICY.replace('release_to = ["bob"]', 'release_to = ["trent", "bob"]') + "allow_non_dp = true\n"
    pol = _policy(exact)
    s = _summary("power-iteration", PI_ROLES, n_parties=2, key_bits=2048, scale_bits=9, blind_bits=1)
    assert s.hiding["scale_bits"] == (9.0, 24.0) and s.hiding["padding"] == (0.1, 0.1)
    assert "scale_bits" not in _summary("power-iteration", PI_ROLES, n_parties=2, key_bits=2048, **PI_DP).hiding
    _eval(pol, protocol="power-iteration", initiator="trent")  # the defaults: admitted
    _eval(pol, protocol="power-iteration", initiator="trent", scale_bits=40, padding=0.5)  # more: admitted
    blind_ok = _policy(exact + "min_hiding = { blind_bits = 1 }\n")  # scale_bits 9 needs blind_bits <= 1
    with pytest.raises(OutOfBounds, match="scale_bits = 9 hides its data less than 24") as ei:
        _eval(blind_ok, protocol="power-iteration", initiator="trent", scale_bits=9, blind_bits=1)
    assert ei.value.rule == "policy.power-iteration.min_hiding.scale_bits"
    with pytest.raises(OutOfBounds, match="padding = 1e-300 hides"):
        _eval(pol, protocol="power-iteration", initiator="trent", padding=1e-300)
    lower = _policy(exact + "min_hiding = { scale_bits = 9, blind_bits = 1, padding = 0.01 }\n")
    _eval(lower, protocol="power-iteration", initiator="trent", scale_bits=9, blind_bits=1, padding=0.01)
    with pytest.raises(InvalidMessage, match="blind_bits = 17 needs scale_bits >= blind_bits \\+ 8 = 25"):
        _summary("power-iteration", PI_ROLES, n_parties=2, key_bits=2048, blind_bits=17)
    _summary("power-iteration", PI_ROLES, n_parties=2, key_bits=2048, blind_bits=17, scale_bits=25)
    _summary("power-iteration", PI_ROLES, n_parties=2, key_bits=2048, blind_bits=17, **PI_DP)  # no r_t in DP


def test_dp_aggregates_shared_noise_is_the_data_partys_decision():
    """calibration = "gaussian" (every data party adds a share of the noise) weakens a party's guarantee in two
    ways its policy must admit, never the proposer: every data party learns the selected calibration exactly
    (the smallest data set's size) -- an exact output to the other data parties, so ``allow_non_dp`` and
    ``release_to`` -- and with noise_parties = h > 1 its noise survives only K − h colluding parties
    (``max_noise_parties``); and its δ counts against ``max_delta``."""
    shared = dict(calibration="gaussian", delta=1e-6, n_parties=2)

    def dpa(extra: str = "", release: str = '"dave"', max_delta: str = "1e-5") -> Policy:
        text = POLICY.replace("max_delta = 1e-15", f"max_delta = {max_delta}")
        text = text.replace('release_to = ["dave"]\n', f"release_to = [{release}]\n" + extra, 1)
        return _policy(text)

    with pytest.raises(PolicyDenied, match="selected_sensitivity") as ei:
        _eval(dpa(), **shared)
    assert ei.value.rule == "policy.dp-aggregate.allow_non_dp"
    with pytest.raises(PolicyDenied, match="selected_sensitivity") as ei:  # exact outputs, but not to bob
        _eval(dpa("allow_non_dp = true\n"), **shared)
    assert ei.value.rule == "policy.dp-aggregate.release_to"
    both = '"dave", "bob"'
    _eval(dpa("allow_non_dp = true\n", both), **shared)  # h = 1: every party adds all of the noise
    with pytest.raises(PolicyDenied) as ei:
        _eval(dpa("allow_non_dp = true\n", both), noise_parties=2, **shared)
    assert ei.value.rule == "policy.dp-aggregate.max_noise_parties"
    _eval(dpa("allow_non_dp = true\nmax_noise_parties = 2\n", both), noise_parties=2, **shared)
    with pytest.raises(OutOfBounds) as ei:  # δ above the policy's max_delta
        _eval(dpa("allow_non_dp = true\n", both, max_delta="1e-7"), **shared)
    assert ei.value.rule == "policy.dp-aggregate.max_delta"


def test_a_subgroup_key_needs_the_consent_of_both_parties_it_protects():
    """key_kind = "subgroup" (docs/crypto.md, "Subgroup keys") rests Alice's features on another hardness
    assumption and has Bob re-randomise under a base whose order only Alice can check: each party admits
    it only with allow_subgroup_key = true, whoever proposes; the standard key needs no rule."""
    for who in ("speaker-verify", "keyword"):
        s = _summary(who, KW_ROLES, key_bits=2048, key_kind="subgroup", **({"claim": "x"} if who != "keyword" else {}))
        assert set(s.subgroup_key) == {"alice", "bob"} and s.as_dict()["subgroup_key"]
        assert _summary("keyword", KW_ROLES, key_bits=2048).subgroup_key == ()
    for role, roles, text in (
        ("bob", KW_ROLES, KW_POLICY),
        ("alice", {"alice": "alice", "bob": "bob"}, KW_POLICY.replace('roles = ["bob"]', 'roles = ["alice"]')),
    ):
        _eval(_policy(text), protocol="keyword", roles=roles, role=role, initiator="bob")
        with pytest.raises(PolicyDenied, match="subgroup Paillier key") as ei:
            _eval(_policy(text), protocol="keyword", roles=roles, role=role, initiator="bob", key_kind="subgroup")
        assert ei.value.rule == "policy.keyword.allow_subgroup_key"
        allowing = _policy(text + "allow_subgroup_key = true\n")
        assert allowing.protocols["keyword"].as_dict()["allow_subgroup_key"] is True
        _eval(allowing, protocol="keyword", roles=roles, role=role, initiator="bob", key_kind="subgroup")
    with pytest.raises(ConfigError, match="allow_subgroup_key must be true or false"):
        _policy(KW_POLICY + "allow_subgroup_key = 1\n")
    # the demos' generated rules admit exactly the layout proposed
    s = _summary("keyword", {"alice": "alice", "bob": "bob"}, key_bits=2048, key_kind="subgroup")
    rules = rules_for_layout({"alice": "alice", "bob": "bob"}, initiators=["alice"], coordinating_roles=(), summary=s)
    assert rules["alice"].allow_subgroup_key and rules["bob"].allow_subgroup_key
    one = ProtocolRules(roles=("bob",), initiators=("alice",))
    assert merge_rules(one, replace(one, allow_subgroup_key=True)).allow_subgroup_key
    assert merge_rules(one, one).allow_subgroup_key is None


SV_POLICY = """
[policy.speaker-verify]
roles = ["bob"]
initiators = ["alice"]
release_to = ["bob"]
allow_non_dp = true
"""


def test_a_shared_ubm_needs_the_consent_of_the_party_whose_ubm_it_shows():
    """speaker-verify with ubm = "shared" shows Alice Bob's UBM (docs/protocols/speaker.md): Bob's party
    admits it only when its policy's allow_reveal names "ubm", whoever proposes; Alice's side needs no rule,
    and the private UBM none."""
    roles = {"alice": "alice", "bob": "bob"}
    s = _summary("speaker-verify", roles, key_bits=2048, claim="x", ubm="shared")
    assert dict(s.reveals) == {"bob": ("ubm",)} and s.as_dict()["reveals"] == {"bob": ["ubm"]}
    assert _summary("speaker-verify", roles, key_bits=2048, claim="x").reveals == {}
    assert _summary("speaker-identify", roles, key_bits=2048).reveals == {}
    kw = dict(protocol="speaker-verify", roles=roles, role="bob", initiator="alice", key_bits=2048, claim="x")
    _eval(_policy(SV_POLICY), **kw)
    with pytest.raises(PolicyDenied, match="shows a peer its 'ubm' in the clear") as ei:
        _eval(_policy(SV_POLICY), ubm="shared", **kw)
    assert ei.value.rule == "policy.speaker-verify.allow_reveal"
    with pytest.raises(PolicyDenied, match="allows 'means'"):
        _eval(_policy(SV_POLICY + 'allow_reveal = ["means"]\n'), ubm="shared", **kw)
    allowing = _policy(SV_POLICY + 'allow_reveal = ["ubm"]\n')
    assert allowing.protocols["speaker-verify"].as_dict()["allow_reveal"] == ["ubm"]
    _eval(allowing, ubm="shared", **kw)
    alice = SV_POLICY.replace('roles = ["bob"]', 'roles = ["alice"]')
    _eval(_policy(alice), **dict(kw, role="alice"), ubm="shared")  # Alice's inputs are not shown
    for bad in ('allow_reveal = "ubm"\n', "allow_reveal = [1]\n", 'allow_reveal = ["UBM!"]\n'):
        with pytest.raises(ConfigError, match="allow_reveal must be a list of names"):
            _policy(SV_POLICY + bad)
    # the demos' generated rules admit exactly the layout proposed; merged layouts admit the union
    rules = rules_for_layout(roles, initiators=["alice"], coordinating_roles=(), summary=s)
    assert rules["bob"].allow_reveal == ("ubm",) and rules["alice"].allow_reveal is None
    one = ProtocolRules(roles=("bob",), initiators=("alice",))
    assert merge_rules(one, replace(one, allow_reveal=("ubm",))).allow_reveal == ("ubm",)
    assert merge_rules(one, one).allow_reveal is None
