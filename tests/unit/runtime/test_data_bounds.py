"""Bounds a proposal sets on a party's own data (docs/governance.md, "Bounds on a party's data").

A session that tests a party's data against a bound the proposer chose -- dp-aggregate's records, power
iteration's samples, speaker-identify's enrolled speakers -- answers one bit of the data, whether it then ends
there or not: a proposer who moves the bound over sessions searched n_j (16 sessions gave 1,336 against 1,337).
Now a party answers only what its policy declares (``data_bounds``), or a counted few a period
(``max_bound_tests``), and a refusal follows from its policy and the proposal, never from its data.
"""

from __future__ import annotations

import tomllib
from dataclasses import replace

import numpy as np
import pytest

from smcdp.errors import InvalidMessage, SmcdpError
from smcdp.net.config import ConfigError
from smcdp.net.server import SessionSpec
from smcdp.plugins.base import DataBound
from smcdp.protocols.dp_aggregate import DPAggregateParams, train_local
from smcdp.runtime.config import PartyConfig
from smcdp.runtime.governance.policy import (
    OutOfBounds,
    Policy,
    parse_policy,
    untested_bounds,
)
from tests.unit.runtime.test_governance import RULES, CostPlugin, _events, _gov
from tests.unit.runtime.test_governance import _config as _cost_config
from tests.unit.runtime.test_policy import _eval as _policy_eval
from tests.unit.runtime.test_policy import _summary

PEERS = {"bob": "h:1", "charlie": "h:2", "dave": "h:3", "trent": "h:5"}
DPA_ROLES = {"charlie": "charlie", "dave": "dave", "party1": "alice", "party2": "bob"}
PI_ROLES = {"trent": "trent", "party1": "alice", "party2": "bob"}
SI_ROLES = {"alice": "bob", "bob": "alice"}  # alice (this party) holds bob's role: the enrolled speakers
DPA = dict(n_parties=2, dim=3, epsilon=1.0, lam=0.1, key_bits=2048)


def _policy(extra: str = "") -> Policy:
    text = f"""
[policy.dp-aggregate]
roles = ["party*"]
initiators = ["charlie"]
coordinators = ["charlie", "dave"]
release_to = ["dave"]
{extra}
[policy.power-iteration]
roles = ["party*"]
initiators = ["trent"]
coordinators = ["trent"]
release_to = ["bob"]
{extra}
[policy.speaker-identify]
roles = ["bob"]
initiators = ["bob"]
release_to = ["bob"]
{extra}
"""
    return parse_policy(tomllib.loads(text)["policy"], "alice", PEERS)


def _agg(policy, initiator="charlie", **params):
    _policy_eval(policy, "dp-aggregate", DPA_ROLES, initiator, "party1", **{**DPA, "min_records": 1, **params})


def _pi(policy, **params):
    dp = dict(epsilon=1.0, delta=1e-6)  # the DP mode: the policy keeps exact outputs in
    _policy_eval(policy, "power-iteration", PI_ROLES, "trent", "party1", **dp, **params)


def _si(policy, **params):
    _policy_eval(policy, "speaker-identify", SI_ROLES, "bob", "bob", **params)


def _refused(call, rule):
    with pytest.raises(OutOfBounds) as ei:
        call()
    assert ei.value.code == "FAILED_PRECONDITION" and ei.value.rule == rule
    return str(ei.value)


def test_the_protocols_state_the_bounds_they_test_on_each_data_roles_data():
    agg = _summary("dp-aggregate", DPA_ROLES, **DPA, min_records=300)
    assert agg.data_bounds == {r: (DataBound("records", "at_least", 300),) for r in ("party1", "party2")}
    # a sensitivity bound asks for records too: a model of n records has sensitivity up to 1/(nλ) + tol/λ
    strict = _summary("dp-aggregate", DPA_ROLES, **DPA, max_sensitivity=1 / (500 * 0.1))
    assert strict.data_bounds["party1"] == (DataBound("records", "at_least", 501),)
    assert _summary("dp-aggregate", DPA_ROLES, **DPA).data_bounds["party1"][0].trivial  # 1 record
    pi = _summary("power-iteration", PI_ROLES, n_parties=2, key_bits=2048, max_samples=4000)
    assert pi.data_bounds["party2"] == (DataBound("samples", "at_most", 4000),)
    assert _summary("power-iteration", PI_ROLES, n_parties=2, key_bits=2048).data_bounds["party1"][0].trivial
    si = _summary("speaker-identify", SI_ROLES, max_speakers=8)
    assert si.data_bounds == {"bob": (DataBound("speakers", "at_most", 8),)}
    assert _summary("speaker-identify", SI_ROLES).data_bounds["bob"][0].trivial  # the default K-bar
    assert _summary("speaker-verify", SI_ROLES, claim="spk01").data_bounds == {}


def test_a_bound_the_policy_does_not_declare_is_refused_before_any_data_is_read():
    """The proposer's min_records moved over sessions used to answer a bit each; now the party answers only
    what it declared, and the refusal is the same whatever its data holds."""
    pol = _policy()
    message = _refused(lambda: _agg(pol, min_records=1337), "policy.dp-aggregate.data_bounds.records")
    assert "at least 1337 records" in message and "states nothing" in message
    _agg(pol)  # min_records = 1: no question to the data
    _agg(pol, initiator="alice", min_records=1337)  # its own operator's session: its own decision
    declared = _policy("data_bounds = { records = 1000 }")
    for at_most in (1, 500, 1000):
        _agg(declared, min_records=at_most)
    message = _refused(lambda: _agg(declared, min_records=1001), "policy.dp-aggregate.data_bounds.records")
    assert "states at least 1000" in message
    # the sensitivity bound is the same question in other words
    _refused(lambda: _agg(declared, max_sensitivity=1 / (1200 * 0.1)), "policy.dp-aggregate.data_bounds.records")
    _agg(declared, max_sensitivity=1 / (900 * 0.1))


def test_an_upper_bound_is_declared_as_the_most_the_data_holds():
    declared = _policy("data_bounds = { samples = 5000, speakers = 4 }")
    for ok in (5000, 10_000):
        _pi(declared, max_samples=ok)
    _refused(lambda: _pi(declared, max_samples=4999), "policy.power-iteration.data_bounds.samples")
    _refused(lambda: _pi(_policy(), max_samples=5000), "policy.power-iteration.data_bounds.samples")
    _pi(_policy())  # the default max_samples: one fixed question, the same in every session
    _si(declared, max_speakers=4)
    _si(declared, max_speakers=8)
    _refused(lambda: _si(declared, max_speakers=3), "policy.speaker-identify.data_bounds.speakers")
    _refused(lambda: _si(_policy(), max_speakers=20), "policy.speaker-identify.data_bounds.speakers")
    _si(_policy())


def test_max_bound_tests_lets_the_policy_admit_undeclared_tests_which_the_gate_counts():
    pol = _policy("max_bound_tests = 3")
    _agg(pol, min_records=1337)  # admitted by the policy: the governor counts it
    s = _summary("dp-aggregate", DPA_ROLES, **DPA, min_records=1337)
    assert untested_bounds(pol, "dp-aggregate", s.data_bounds["party1"]) == ("records",)
    declared = _policy("data_bounds = { records = 2000 }")
    assert untested_bounds(declared, "dp-aggregate", s.data_bounds["party1"]) == ()
    assert untested_bounds(Policy(open=True), "dp-aggregate", s.data_bounds["party1"]) == ()


@pytest.mark.parametrize(
    "extra, message",
    [
        ("data_bounds = 5", "data_bounds must be a table"),
        ("data_bounds = { Records = 5 }", "data_bounds must be a table"),
        ("data_bounds = { records = -1 }", "data_bounds.records must be an integer"),
        ("data_bounds = { records = 1.5 }", "data_bounds.records must be an integer"),
        ("max_bound_tests = -1", "max_bound_tests must be an integer"),
        ("max_bound_tests = true", "max_bound_tests must be an integer"),
    ],
)
def test_the_rules_are_validated(extra, message):
    with pytest.raises(ConfigError, match=message):
        _policy(extra)


def test_the_rules_round_trip_and_period_days_is_their_window_too():
    pol = _policy("data_bounds = { records = 10, samples = 7 }\nmax_bound_tests = 2\nperiod_days = 7")
    rules = pol.protocols["dp-aggregate"]
    assert rules.data_bounds == (("records", 10), ("samples", 7)) and rules.max_bound_tests == 2
    assert rules.period_days == 7.0 and rules.declared("records") == 10 and rules.declared("speakers") is None
    assert parse_policy(pol.as_dict(), "alice", PEERS) == pol


@pytest.mark.parametrize("lam", [0.0944, 0.01, 1.0])
@pytest.mark.parametrize("max_sensitivity", [None, 0.7, 2.64816005])
def test_a_party_of_exactly_the_records_a_session_needs_passes_its_check_whatever_its_data(lam, max_sensitivity):
    """A declared bound is one the session's check honours: the reported sensitivity is a function of n, d and λ
    (1/(nλ) + s/λ, s the certified solve's slack), and records_needed is the least n by the check's own expression -- a review
    found n = 4, λ = 0.0944 refused at a max_sensitivity a hair above 1/(4λ) + tol/λ when g was below tol."""
    from smcdp.plugins.dp_aggregate import records_bound

    extra = {} if max_sensitivity is None else {"max_sensitivity": max_sensitivity}
    p = DPAggregateParams.from_mapping(dict(DPA, lam=lam, min_records=3, **extra))
    need = records_bound(p).value
    rng = np.random.default_rng(int(lam * 1e4))
    for trial in range(5):
        X = rng.normal(size=(need, 3))
        X /= np.linalg.norm(X, axis=1, keepdims=True) * rng.uniform(1.0, 3.0)
        y = np.arange(need) % 2
        _, sensitivity = train_local(X, y, lam)
        assert sensitivity <= p.sensitivity_bound, (trial, need)
        if need > 3:  # one record fewer does not meet it
            _, fewer = train_local(X[:-1], y[:-1], lam)
            assert fewer > p.sensitivity_bound


def test_a_data_set_of_exactly_min_records_records_meets_the_default_sensitivity_bound():
    """The bound a party declares must be the one the session tests: a model of n records has sensitivity
    1/(nλ) + s/λ (s its certified fit's gradient bound), so the default bound 1/(min_records·λ) refused a party with
    exactly min_records records (sensitivity 1.00000045 against 1.0)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(100, 3))
    X /= np.linalg.norm(X, axis=1, keepdims=True) * 1.01
    y = np.where(rng.normal(size=100) > 0, 1.0, -1.0)
    p = DPAggregateParams.from_mapping(dict(DPA, lam=0.01, min_records=100))
    _, sensitivity = train_local(X, y, 0.01)
    assert sensitivity <= p.sensitivity_bound
    assert p.sensitivity_bound == pytest.approx(1.0, rel=1e-5)  # what the noise is calibrated to: +1e-6


# ------------------------------------------------------------------------------- counted at the governor
class BoundPlugin(CostPlugin):
    """A data role whose data the session tests against params["at_least"] records (and releases nothing DP)."""

    name = "bounded"

    def summary(self, params, roles):
        bound = DataBound("records", "at_least", params["at_least"])
        return replace(super().summary({"epsilon": None}, roles), protocol=self.name, data_bounds={"data": (bound,)})


ROLES = {"curator": "charlie", "data": "alice"}


def _config(tmp_path, **rules) -> PartyConfig:
    """test_governance's party alice, joining only "bounded", without a budget (the sessions cost nothing)."""
    return replace(
        _cost_config(tmp_path, **rules), policy=Policy(protocols={"bounded": replace(RULES, **rules)}), budget=None
    )


def _spec(sid, at_least):
    return SessionSpec(sid, "bounded", ROLES, {"at_least": at_least}, 60.0)


def test_undeclared_tests_are_counted_per_period_from_the_audit_trail_across_restarts(tmp_path):
    """max_bound_tests = 2 a day: two sessions testing an undeclared bound are admitted, the third is refused
    (RESOURCE_EXHAUSTED naming the rule) -- a binary search gets two bits a day, not sixteen a morning; a
    declared bound is no test and not counted; a restarted party still counts from its audit trail; a session
    that ended before its role began tested nothing and gives its place back."""
    cfg = _config(tmp_path, max_bound_tests=2, period_days=1.0, data_bounds=(("records", 100),))
    g = _gov(cfg)
    g.admit("charlie", _spec("t1", 1000), BoundPlugin(), "data")
    g.admit("charlie", _spec("d1", 100), BoundPlugin(), "data")  # declared: not counted
    g.admit("charlie", _spec("t2", 500), BoundPlugin(), "data")
    with pytest.raises(SmcdpError) as ei:
        g.admit("charlie", _spec("t3", 750), BoundPlugin(), "data")
    assert ei.value.code == "RESOURCE_EXHAUSTED" and ei.value.rule == "policy.bounded.max_bound_tests"
    assert "records" in str(ei.value) and "at most 2" in str(ei.value)
    g.admit("charlie", _spec("d2", 50), BoundPlugin(), "data")  # still admitted: it asks the data nothing
    g.session_done("t2", {"state": "failed", "error": {"message": "aborted by charlie"}}, began=False)
    g.admit("charlie", _spec("t4", 750), BoundPlugin(), "data")  # t2's place
    g.stop()
    accepted = {e["session"]: e.get("bound_tests") for e in _events(tmp_path) if e["event"] == "accepted"}
    assert accepted["t1"] == accepted["t4"] == ["records"] and accepted.get("d1") is None
    assert [e["session"] for e in _events(tmp_path) if e["event"] == "bound-test-returned"] == ["t2"]
    g = _gov(cfg)  # a restart: t1 and t4 count
    with pytest.raises(SmcdpError, match="max_bound_tests"):
        g.admit("charlie", _spec("t5", 600), BoundPlugin(), "data")
    g.stop()


def test_without_max_bound_tests_the_governor_refuses_an_undeclared_bound(tmp_path):
    g = _gov(_config(tmp_path))
    with pytest.raises(SmcdpError) as ei:
        g.admit("charlie", _spec("t1", 1000), BoundPlugin(), "data")
    assert ei.value.code == "FAILED_PRECONDITION" and ei.value.rule == "policy.bounded.data_bounds.records"
    g.stop()


def test_generated_statements_merge_to_one_that_covers_both_layouts():
    from smcdp.runtime.governance.policy import ProtocolRules, merge_rules

    a = ProtocolRules(roles=("party1",), initiators=("charlie",), data_bounds=(("records", 50), ("samples", 900)))
    b = ProtocolRules(roles=("party2",), initiators=("charlie",), data_bounds=(("records", 80), ("samples", 400)))
    assert merge_rules(a, b).data_bounds == (("records", 80), ("samples", 400))
    assert merge_rules(a, replace(b, data_bounds=None)).data_bounds == a.data_bounds


def test_its_own_operators_session_is_admitted_uncounted_and_named_on_the_trail(tmp_path):
    """The party's own operator may test its data (its own decision): admitted without max_bound_tests, not
    counted, and the trail names the bounds it tests."""
    g = _gov(_config(tmp_path))
    g.admit("alice", _spec("own", 1000), BoundPlugin(), "data")
    g.stop()
    (entry,) = [e for e in _events(tmp_path) if e["event"] == "accepted" and e["session"] == "own"]
    assert entry["bound_tests_own"] == ["records"] and "bound_tests" not in entry


@pytest.mark.timeout(60)  # a hang guard: the answer is 62 bisection steps
@pytest.mark.parametrize(
    "bound, lam", [("hair", 0.1), (1 / (500 * 0.1) + 1e-7, 0.1), (0.7, 0.0944), (1e-9, 0.1), (1e8, 1.0)]
)
def test_the_records_a_bound_needs_are_the_least_by_the_checks_own_expression_for_any_proposed_bound(bound, lam):
    """A proposer's max_sensitivity a hair above the slack term s/λ (fit_sensitivity at 2^62 records) put the answer
    near 10^17 records, where neighbouring counts give the same float, and the step-by-step search from an estimate
    ran for minutes in the party's admission (the summary); it is a bisection now, and still the least count."""
    from smcdp.protocols.dp_aggregate import fit_sensitivity, records_needed

    if bound == "hair":  # the hang's case: every count up to 2^62 is a float step or less from the bound
        bound = fit_sensitivity(1 << 62, lam, DPA["dim"]) * (1 + 1e-15)
    params = {**DPA, "lam": lam, "max_sensitivity": bound}
    p = DPAggregateParams.from_mapping(params)
    n = records_needed(bound, lam, p.dim)
    if n == 1 << 62:
        assert not fit_sensitivity(n, lam, p.dim) <= bound
    else:
        assert fit_sensitivity(n, lam, p.dim) <= bound and (n == 1 or fit_sensitivity(n - 1, lam, p.dim) > bound)
    assert _summary("dp-aggregate", DPA_ROLES, **params).data_bounds["party1"][0].value == max(p.min_records, n)


def test_a_stored_data_bound_is_read_back_or_refused_by_name():
    bound = DataBound("records", "at_least", 300)
    assert DataBound.from_dict(bound.as_dict()) == bound
    for bad in ({"name": "records"}, {**bound.as_dict(), "value": "300"}, {**bound.as_dict(), "relation": "near"}, 3):
        with pytest.raises(InvalidMessage, match="stored data bound"):
            DataBound.from_dict(bad)
