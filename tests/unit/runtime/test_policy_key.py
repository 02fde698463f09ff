"""[policy.<protocol>] key = "threshold" | "single": which kind of key a party's data may be encrypted under
(power iteration: party1's key pair, or a group key no party holds whole)."""

from __future__ import annotations

import tomllib

import pytest

from smcdp.net.config import ConfigError
from smcdp.plugins.registry import get_plugin
from smcdp.runtime.governance.policy import PolicyDenied, evaluate, parse_policy

PEERS = {"bob": "h:1", "carol": "h:2", "trent": "h:5"}
ROLES2 = {"trent": "trent", "party1": "alice", "party2": "bob"}
ROLES3 = {**ROLES2, "party3": "carol"}
BASE = """
[policy.power-iteration]
roles = ["party*"]
initiators = ["trent"]
coordinators = ["trent"]
release_to = ["bob", "carol"]
"""
DP = dict(key_bits=2048, epsilon=1.0, delta=1e-6, dp_method="covariance", rows=4)


def _policy(extra: str = ""):
    return parse_policy(tomllib.loads(BASE + extra)["policy"], "alice", PEERS)


def _eval(policy, roles=ROLES2, key_groups=None, **params):
    plugin = get_plugin("power-iteration")
    p = dict(DP, n_parties=len(roles) - 1, **params)
    summary = plugin.summary(plugin.validate_params(p, roles), roles)
    return _evaluate(policy, summary, roles, key_groups)


def _evaluate(policy, summary, roles, key_groups=None, role="party1", initiator="trent"):
    """alice (``role``, party1 by default) asked by ``initiator`` to take part in the session ``summary`` describes."""
    evaluate(
        policy,
        me="alice",
        session_id="s1",
        initiator=initiator,
        role=role,
        roles=roles,
        summary=summary,
        allow_insecure_keys=False,
        key_groups=key_groups,
    )
    return summary


GROUP = dict(key_group="lab", key_threshold=1)


def test_the_summary_says_which_key_the_session_uses():
    plugin = get_plugin("power-iteration")
    for params, kind in ((DP, "single"), ({**DP, **GROUP}, "threshold"), ({"key_bits": 2048}, "single")):
        s = plugin.summary(plugin.validate_params(dict(params, n_parties=2), ROLES2), ROLES2)
        assert s.key == kind and s.as_dict()["key"] == kind


def test_key_threshold_refuses_a_single_key_session_and_admits_a_group_key():
    pol = _policy('key = "threshold"\n')
    assert pol.protocols["power-iteration"].as_dict()["key"] == "threshold"
    with pytest.raises(PolicyDenied) as ei:
        _eval(pol)
    assert ei.value.rule == "policy.power-iteration.key" and "one party's key pair" in str(ei.value)
    _eval(pol, **GROUP)


def test_by_default_a_single_key_session_is_refused_where_a_group_of_exactly_its_data_parties_exists():
    """No key rule: threshold where this party holds a group key of exactly the session's data parties
    (alice and bob); a group of other parties, or key = "single", admits the single key."""
    with pytest.raises(PolicyDenied) as ei:
        _eval(_policy(), key_groups={"lab": ("alice", "bob")})
    assert ei.value.rule == "policy.power-iteration.key" and "'lab'" in str(ei.value)
    _eval(_policy(), key_groups={"other": ("alice", "bob", "carol")})
    _eval(_policy(), key_groups={})
    _eval(_policy('key = "single"\n'), key_groups={"lab": ("alice", "bob")})


def test_a_group_key_shares_the_noise_among_n_minus_t_only_where_the_party_states_its_coalition_bound():
    """Under a group key the proposal's default is h = n − t: trent with t parties cannot isolate a contribution,
    but t + 1 of them read one carrying σ²/h.  A party that states min_threshold = m admits h up to n − m
    without raising max_noise_parties; without it max_noise_parties (default 1) applies, as for a single key,
    and the group key with h = 1 is admitted."""
    s = _eval(_policy("min_threshold = 1\n"), roles=ROLES3, **GROUP)
    assert s.noise_parties["party1"] == 2
    with pytest.raises(PolicyDenied) as ei:
        _eval(_policy(), roles=ROLES3, **GROUP)
    assert ei.value.rule == "policy.power-iteration.max_noise_parties" and "min_threshold" in str(ei.value)
    _eval(_policy(), roles=ROLES3, noise_parties=1, **GROUP)
    _eval(_policy("max_noise_parties = 2\n"), roles=ROLES3, **GROUP)
    with pytest.raises(PolicyDenied) as ei:
        _eval(_policy("min_threshold = 1\n"), roles=ROLES3, noise_parties=2)
    assert ei.value.rule == "policy.power-iteration.max_noise_parties"


def test_min_threshold_bounds_the_group_key_a_session_uses():
    """A party's data under a group key of threshold t: t + 1 of the group's parties decrypt it.  A policy's
    min_threshold refuses a smaller t (FAILED_PRECONDITION naming the rule); without it any t >= 1."""
    from smcdp.runtime.governance.policy import OutOfBounds

    peers = {**PEERS, "dave": "h:4"}
    text = BASE.replace('release_to = ["bob", "carol"]', 'release_to = ["bob", "carol", "dave"]')
    pol = parse_policy(tomllib.loads(text + "min_threshold = 2\n")["policy"], "alice", peers)
    assert pol.protocols["power-iteration"].as_dict()["min_threshold"] == 2
    roles4 = {**ROLES3, "party4": "dave"}
    with pytest.raises(OutOfBounds) as ei:
        _eval(pol, roles=roles4, **GROUP)
    assert ei.value.rule == "policy.power-iteration.min_threshold" and "t = 1" in str(ei.value)
    s = _eval(pol, roles=roles4, key_group="lab", key_threshold=2)
    assert s.threshold == 2 and s.as_dict()["threshold"] == 2
    no_floor = parse_policy(tomllib.loads(text)["policy"], "alice", peers)
    assert _eval(no_floor, roles=roles4, noise_parties=1, **GROUP).threshold == 1


def test_min_threshold_bounds_the_key_ceremony_a_party_joins():
    """The threshold is fixed when the key is made: a party whose [policy.key-ceremony] says min_threshold = 2
    holds no share of a key that any two of the group's parties could use to decrypt its data."""
    from smcdp.runtime.governance.policy import OutOfBounds

    pol = parse_policy(
        tomllib.loads('[policy.key-ceremony]\nroles = ["party*"]\ninitiators = ["bob"]\nmin_threshold = 2\n')["policy"],
        "alice",
        {**PEERS, "dave": "h:4"},
    )
    plugin = get_plugin("key-ceremony")
    roles = {"party1": "bob", "party2": "alice", "party3": "carol", "party4": "trent", "party5": "dave"}

    def ask(t):
        params = plugin.validate_params({"group": "lab", "parties": 5, "threshold": t, "key_bits": 2048}, roles)
        evaluate(
            pol,
            me="alice",
            session_id="k1",
            initiator="bob",
            role="party2",
            roles=roles,
            summary=plugin.summary(params, roles),
            allow_insecure_keys=False,
        )

    with pytest.raises(OutOfBounds) as ei:
        ask(1)
    assert ei.value.rule == "policy.key-ceremony.min_threshold"
    ask(2)


def test_an_unknown_key_kind_is_a_config_error():
    with pytest.raises(ConfigError, match="key must be one of 'threshold', 'single'"):
        _policy('key = "both"\n')


def test_the_governor_reads_its_stored_groups_parties_and_skips_one_that_does_not_load(tmp_path):
    """What the default of the key rule is decided from: each stored group's parties by share index."""
    from smcdp.crypto.paillier import generate_keypair
    from smcdp.crypto.threshold import deal
    from smcdp.plugins.keystore import GROUP_FILE, KeyGroup, KeyStore, stored_groups

    pub, shares = deal(generate_keypair(512, allow_insecure=True)[1], 2, 1)
    store = KeyStore(tmp_path)
    store.save(KeyGroup("lab", pub, 1, {1: "alice", 2: "bob"}, 512, "t", "s", 1.0), shares[0], replace=False)
    store.save(KeyGroup("old", pub, 1, {1: "alice", 2: "carol"}, 512, "t", "s", 1.0), shares[0], replace=False)
    (tmp_path / "old" / GROUP_FILE).write_text("{}")
    assert stored_groups(tmp_path, allow_insecure=True) == {"lab": ("alice", "bob")}
    assert stored_groups(tmp_path / "none") == {}


AGG_ROLES = {"charlie": "trent", "dave": "carol", "party1": "alice", "party2": "bob"}
AGG_POLICY = """
[policy.dp-aggregate]
roles = ["party*"]
initiators = ["trent"]
coordinators = ["trent", "carol"]
release_to = ["carol"]
"""


def _eval_aggregate(extra: str = "", key_groups=None):
    policy = parse_policy(tomllib.loads(AGG_POLICY + extra)["policy"], "alice", PEERS)
    plugin = get_plugin("dp-aggregate")
    params = {"n_parties": 2, "dim": 3, "epsilon": 1.0, "lam": 0.1, "key_bits": 2048}
    summary = plugin.summary(plugin.validate_params(params, AGG_ROLES), AGG_ROLES)
    return _evaluate(policy, summary, AGG_ROLES, key_groups)


def test_dp_aggregate_is_a_single_key_session_which_a_threshold_policy_refuses():
    """dp-aggregate encrypts under party1's key pair (shared with every data party) and Charlie's: it has no
    group-key mode, so a party whose policy asks for a group key refuses it, and so does a party holding a
    group key of exactly its data parties unless its policy says key = "single" (before, the summary named
    no key and every such policy admitted the session)."""
    assert _eval_aggregate().key == "single"
    with pytest.raises(PolicyDenied) as ei:
        _eval_aggregate('key = "threshold"\n')
    assert ei.value.rule == "policy.dp-aggregate.key"
    assert "dp-aggregate has no group-key mode" in str(ei.value)
    with pytest.raises(PolicyDenied) as ei:
        _eval_aggregate(key_groups={"lab": ("alice", "bob")})
    assert ei.value.rule == "policy.dp-aggregate.key" and "propose key_group" not in str(ei.value)
    _eval_aggregate('key = "single"\n', key_groups={"lab": ("alice", "bob")})
    _eval_aggregate(key_groups={"other": ("alice", "bob", "carol")})


def test_the_exact_mode_has_a_group_key_mode_too_and_a_threshold_policy_admits_it():
    """Power iteration's exact mode runs under a group key as well (test_power_iteration_exact_group): a party
    holding the group refuses its single-key session advising key_group, and admits the group-key one."""
    with pytest.raises(PolicyDenied) as ei:
        _eval(_policy(), key_groups={"lab": ("alice", "bob")})
    assert "propose key_group" in str(ei.value)
    plugin = get_plugin("power-iteration")
    base = {"key_bits": 2048, "rows": 4, "n_parties": 2}
    exact = plugin.summary(plugin.validate_params(base, ROLES2), ROLES2)
    assert exact.key == "single" and exact.group_key_mode
    exact_policy = parse_policy(
        tomllib.loads(BASE.replace('"carol"]', '"carol", "trent"]') + "allow_non_dp = true\n")["policy"], "alice", PEERS
    )
    with pytest.raises(PolicyDenied) as ei:
        _evaluate(exact_policy, exact, ROLES2, {"lab": ("alice", "bob")})
    assert ei.value.rule == "policy.power-iteration.key" and "propose key_group" in str(ei.value)
    grouped = plugin.summary(plugin.validate_params({**base, "key_group": "lab", "key_threshold": 1}, ROLES2), ROLES2)
    assert grouped.key == "threshold" and grouped.threshold == 1
    _evaluate(exact_policy, grouped, ROLES2, {"lab": ("alice", "bob")})


def _eval_aggregate_shared(extra: str = "", key_groups=None, **params):
    """dp-aggregate with shared noise (its only group-key mode); alice may release the smallest size level (or
    k_sel) to bob, the other data party: allow_non_dp, bob in release_to."""
    text = AGG_POLICY.replace('release_to = ["carol"]', 'release_to = ["carol", "bob"]\nallow_non_dp = true')
    policy = parse_policy(tomllib.loads(text + extra)["policy"], "alice", PEERS)
    plugin = get_plugin("dp-aggregate")
    p = {"n_parties": 2, "dim": 3, "epsilon": 1.0, "lam": 0.1, "key_bits": 2048, "calibration": "gaussian"}
    p.update(delta=1e-6, **params)
    summary = plugin.summary(plugin.validate_params(p, AGG_ROLES), AGG_ROLES)
    return _evaluate(policy, summary, AGG_ROLES, key_groups)


def test_dp_aggregates_shared_noise_has_a_group_key_mode_which_a_threshold_policy_admits():
    """calibration = "gaussian" under key_group: the summary says key threshold and t, and names the smallest
    size level as the data parties' exact output; key = "threshold" admits it and refuses the single-key
    shared noise with the advice to propose key_group; h = K − t needs the party's own min_threshold (or
    max_noise_parties), as power iteration's group key does."""
    s = _eval_aggregate_shared('key = "threshold"\n', key_group="lab", key_threshold=1)
    assert s.key == "threshold" and s.threshold == 1 and s.group_key_mode
    assert [o.name for o in s.outputs] == ["model", "smallest_size_level"] and "dgk" not in s.key_bits
    with pytest.raises(PolicyDenied) as ei:
        _eval_aggregate_shared('key = "threshold"\n')
    assert ei.value.rule == "policy.dp-aggregate.key" and "has no group-key mode" not in str(ei.value)
    with pytest.raises(PolicyDenied) as ei:  # a group of exactly its data parties, and no key rule
        _eval_aggregate_shared(key_groups={"lab": ("alice", "bob")})
    assert "propose key_group" in str(ei.value)
    # three data parties, t = 1: h = 2 is each party's decision
    roles = {**AGG_ROLES, "party3": "carol", "dave": "dave"}
    peers = {**PEERS, "dave": "h:4"}
    text = AGG_POLICY.replace('release_to = ["carol"]', 'release_to = ["dave", "bob", "carol"]\nallow_non_dp = true')
    text = text.replace('coordinators = ["trent", "carol"]', 'coordinators = ["trent", "dave"]')
    plugin = get_plugin("dp-aggregate")
    p = {"n_parties": 3, "dim": 3, "epsilon": 1.0, "lam": 0.1, "key_bits": 2048, "calibration": "gaussian"}
    p.update(delta=1e-6, key_group="lab", key_threshold=1, noise_parties=2)
    summary = plugin.summary(plugin.validate_params(p, roles), roles)
    with pytest.raises(PolicyDenied) as ei:
        _evaluate(parse_policy(tomllib.loads(text)["policy"], "alice", peers), summary, roles)
    assert ei.value.rule == "policy.dp-aggregate.max_noise_parties" and "min_threshold" in str(ei.value)
    _evaluate(parse_policy(tomllib.loads(text + "min_threshold = 1\n")["policy"], "alice", peers), summary, roles)


CEREMONY = """
[policy.key-ceremony]
roles = ["party*"]
initiators = ["bob"]
"""


@pytest.mark.parametrize(
    ("parties", "role", "allow", "refused"),
    [
        (2, "party2", "", True),  # party 2 of two: a deviating party 1 factors the key (docs/crypto.md, "Assumptions")
        (2, "party2", 'allow_reveal = ["key-to-deviating-party1"]\n', False),  # its policy's decision
        (2, "party1", "", False),  # party 1 is protected against party 2 (range checks before it opens anything)
        (3, "party2", "", False),  # three or more: BGW with committed, range-checked openings
    ],
)
def test_party2_of_a_two_party_ceremony_takes_part_only_where_its_policy_allows(parties, role, allow, refused):
    """With two parties the ceremony's products carry no proof that party 1's ciphertexts hold its shares in range
    and party 1 decrypts every product, so a deviating party 1 factors the group key (a review, 2026-12-06).  That
    weakens party 2's guarantee, so party 2's policy decides (the summary's reveals, allow_reveal), not the proposer
    who chose two parties."""
    plugin = get_plugin("key-ceremony")
    names = ["bob", "alice", "carol"][:parties] if role == "party2" else ["alice", "bob", "carol"][:parties]
    roles = {f"party{i}": n for i, n in enumerate(names, 1)}
    params = plugin.validate_params({"group": "g", "parties": parties, "threshold": 1, "key_bits": 2048}, roles)
    summary = plugin.summary(params, roles)
    policy = parse_policy(tomllib.loads(CEREMONY + allow)["policy"], "alice", PEERS)

    def ask():
        _evaluate(policy, summary, roles, role=role, initiator="bob")

    if refused:
        with pytest.raises(PolicyDenied) as ei:
            ask()
        assert ei.value.rule == "policy.key-ceremony.allow_reveal" and "key-to-deviating-party1" in str(ei.value)
    else:
        ask()
