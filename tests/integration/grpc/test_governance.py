"""Party governance over real gRPC (mutual TLS, parties served in-process): every policy rule,
its status code, the party still serving afterwards; the budget; no data read before the checks."""

from __future__ import annotations

import errno
import os
import time
import tomllib

import numpy as np
import pytest

from smcdp.dp.ledger import Ledger
from smcdp.errors import SmcdpError
from smcdp.plugins.dp_aggregate import DPAggregateParams, privacy_cost
from smcdp.runtime import client
from smcdp.runtime.config import dump_config, load_config
from smcdp.runtime.governance.audit import read_entries, verify_log
from smcdp.runtime.governance.charges import BudgetConfig
from smcdp.runtime.governance.policy import Policy, parse_policy
from tests.support.deployment import make_deployment

PARTIES = ["charlie", "dave", "eve", "trent", "alice", "bob", "carol", "frank", "grace"]
ALICE = """
[policy.dp-aggregate]
roles = ["party1"]
initiators = ["charlie"]
coordinators = ["charlie", "dave", "eve"]
release_to = ["dave"]
max_epsilon = 2.0
min_records = 10
min_key_bits = 768
data_bounds = { records = 20 }
[policy.power-iteration]
roles = ["party*"]
initiators = ["trent"]
coordinators = ["trent"]
release_to = ["trent", "bob"]
[policy.net-echo]
roles = ["a"]
initiators = ["bob"]
"""
PERMISSIVE = """
[policy.dp-aggregate]
roles = ["party*"]
initiators = ["*"]
coordinators = ["*"]
release_to = ["*"]
data_bounds = { records = 20 }
"""
PARAMS = {
    "n_parties": 2,
    "dim": 3,
    "epsilon": 1.0,
    "lam": 0.1,
    "key_bits": 768,
    "dgk_bits": 768,
    "dgk_t": 96,
    "min_records": 20,
}


def _policy(text: str, name: str) -> Policy:
    return parse_policy(tomllib.loads(text)["policy"], name, {p: "x:1" for p in PARTIES if p != name})


def _npz(path, n=40, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None] * 1.001
    np.savez(path, X=X, y=np.where(X @ np.array([1.0, -2.0, 0.5]) > 0, 1, -1))
    return path


@pytest.fixture(scope="module")
def governed(tmp_path_factory, request):
    from tests.support.deployment import PartiesInThread

    root = tmp_path_factory.mktemp("governed")
    inputs = {
        p: {"dp-aggregate": {"data": _npz(root / f"{p}.npz", seed=i)}}
        for i, p in enumerate(("alice", "bob", "carol", "frank", "grace"))
    }
    np.save(root / "alice-A.npy", np.eye(3))
    inputs["alice"]["power-iteration"] = {"data": root / "alice-A.npy"}
    policies = {
        "alice": _policy(ALICE, "alice"),
        "carol": _policy(PERMISSIVE, "carol"),
        "frank": _policy(PERMISSIVE, "frank"),
        "grace": _policy(PERMISSIVE.replace('release_to = ["*"]', 'release_to = ["*"]\nmax_delta = 1e-20'), "grace"),
    }
    # the others accept seeds, so that alice's own rule is what refuses a seeded session
    policies.update({p: Policy(open=True, allow_seeded=True) for p in ("charlie", "dave", "eve", "trent", "bob")})
    budgets = {p: BudgetConfig(dataset=p, epsilon=2.5, delta=1e-9) for p in ("alice", "frank", "grace")}
    cfgs = make_deployment(root, PARTIES, inputs=inputs, policies=policies, budgets=budgets)
    frank = load_config(cfgs["frank"])
    dump_config(frank.with_changes(allow_insecure_keys=False), cfgs["frank"])
    runner = PartiesInThread()
    try:
        for p in PARTIES:
            runner.start(cfgs[p])
        yield root, cfgs
    finally:
        runner.close()


DPA = {"charlie": "charlie", "dave": "dave", "party1": "alice", "party2": "bob"}
CASES = [
    # (case id, initiator, protocol, roles, params, seed, code, refusing party, rule)
    (
        "protocol not joined",
        "bob",
        "keyword",
        {"alice": "alice", "bob": "bob"},
        {"key_bits": 512},
        None,
        "PERMISSION_DENIED",
        "alice",
        "policy.keyword",
    ),
    (
        "role",
        "charlie",
        "dp-aggregate",
        {**DPA, "party1": "bob", "party2": "alice"},
        {},
        None,
        "PERMISSION_DENIED",
        "alice",
        "policy.dp-aggregate.roles",
    ),
    (
        "initiator",
        "dave",
        "dp-aggregate",
        DPA,
        {},
        None,
        "PERMISSION_DENIED",
        "alice",
        "policy.dp-aggregate.initiators",
    ),
    (
        "coordinator",
        "charlie",
        "dp-aggregate",
        {**DPA, "dave": "trent"},
        {},
        None,
        "PERMISSION_DENIED",
        "alice",
        "policy.dp-aggregate.coordinators",
    ),
    (
        "recipient",
        "charlie",
        "dp-aggregate",
        {**DPA, "dave": "eve"},
        {},
        None,
        "PERMISSION_DENIED",
        "alice",
        "policy.dp-aggregate.release_to",
    ),
    (
        "exact outputs",
        "trent",
        "power-iteration",
        {"trent": "trent", "party1": "alice", "party2": "bob"},
        {"n_parties": 2, "key_bits": 768},
        None,
        "PERMISSION_DENIED",
        "alice",
        "policy.power-iteration.allow_non_dp",
    ),
    (
        "key size",
        "charlie",
        "dp-aggregate",
        DPA,
        {"key_bits": 512, "dgk_bits": 512},
        None,
        "FAILED_PRECONDITION",
        "alice",
        "policy.dp-aggregate.min_key_bits",
    ),
    (
        "epsilon",
        "charlie",
        "dp-aggregate",
        DPA,
        {"epsilon": 3.0},
        None,
        "FAILED_PRECONDITION",
        "alice",
        "policy.dp-aggregate.max_epsilon",
    ),
    (
        "record bound",
        "charlie",
        "dp-aggregate",
        DPA,
        {"min_records": 5},
        None,
        "FAILED_PRECONDITION",
        "alice",
        "policy.dp-aggregate.min_records",
    ),
    ("seed", "charlie", "dp-aggregate", DPA, {}, 7, "FAILED_PRECONDITION", "alice", "policy.allow_seeded"),
    (
        "no summary",
        "bob",
        "net-echo",
        {"a": "alice", "b": "bob"},
        None,
        None,
        "FAILED_PRECONDITION",
        "alice",
        "summary",
    ),
    (
        "no budget",
        "charlie",
        "dp-aggregate",
        {**DPA, "party2": "carol"},
        {},
        None,
        "FAILED_PRECONDITION",
        "carol",
        "budget",
    ),
    (
        "insecure keys",
        "charlie",
        "dp-aggregate",
        {**DPA, "party2": "frank"},
        {},
        None,
        "FAILED_PRECONDITION",
        "frank",
        "party.allow_insecure_keys",
    ),
    (
        "delta",
        "charlie",
        "dp-aggregate",
        {**DPA, "party2": "grace"},
        {},
        None,
        "FAILED_PRECONDITION",
        "grace",
        "policy.dp-aggregate.max_delta",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_each_rule_refuses_with_its_status_and_the_party_keeps_serving(governed, case):
    root, cfgs = governed
    name, initiator, protocol, roles, params, seed, code, refuser, rule = case
    sid = f"{initiator}.m-" + name.replace(" ", "-")  # the initiator's namespace (issue 24)
    p = {} if params is None else dict(PARAMS, **params) if protocol == "dp-aggregate" else params
    with pytest.raises(SmcdpError) as ei:
        client.start_session(cfgs[initiator], protocol, roles, p, session_id=sid, timeout=60, seed=seed)
    assert ei.value.code == code, str(ei.value)
    text = str(ei.value)
    assert f"party '{refuser}' refuses session '{sid}'" in text and f"(rule {rule})" in text, text
    assert client.check_health(cfgs[refuser]) == "SERVING"
    refusals = [
        e
        for _, e, _ in read_entries(root / "state" / refuser)
        if e and e.get("event") == "refused" and e.get("session") == sid
    ]
    assert [(e["rule"], e["code"]) for e in refusals] == [(rule, code)]
    if refuser != "alice" and "alice" in roles.values():
        # alice accepted first (proposals go out in name order) and gives her reservation back when the
        # initiator's Abort reaches her (it may arrive just after the refusal reached the operator)
        end = time.monotonic() + 15
        while _entry(root, sid) is not None and _entry(root, sid).state != "released" and time.monotonic() < end:
            time.sleep(0.1)
        assert _entry(root, sid) is None or _entry(root, sid).state == "released"


def _entry(root, sid):
    return Ledger(root / "state" / "alice" / "ledger.sqlite").reservation("alice", sid)


def test_the_budget_admits_what_fits_then_refuses_with_resource_exhausted(governed):
    root, cfgs = governed
    for i in (1, 2):
        rec = client.start_session(cfgs["charlie"], "dp-aggregate", DPA, PARAMS, session_id=f"b-{i}", timeout=120)
        assert rec["state"] == "succeeded"
    with pytest.raises(SmcdpError) as ei:
        client.start_session(cfgs["charlie"], "dp-aggregate", DPA, PARAMS, session_id="b-3", timeout=60)
    assert ei.value.code == "RESOURCE_EXHAUSTED"
    assert "party 'alice' refuses session 'charlie.b-3'" in str(ei.value) and "budget" in str(ei.value)
    eps, delta = privacy_cost(DPAggregateParams.from_mapping(PARAMS))  # the cost exactly (delta: K * 2^-64, not "0")
    assert f"does not admit epsilon={eps!r}, delta={delta!r} more" in str(ei.value)
    for sid in ("charlie.b-1", "charlie.b-2"):  # alice ends after charlie: her own API says when (its end audited)
        deadline = time.monotonic() + 30
        while client.get_result(cfgs["alice"], sid)["state"] != "succeeded" and time.monotonic() < deadline:
            time.sleep(0.05)
    assert client.check_health(cfgs["alice"]) == "SERVING"
    st = Ledger(root / "state" / "alice" / "ledger.sqlite").status("alice")
    assert (str(st.spent_epsilon), str(st.reserved_epsilon), st.n_charges) == ("2", "0", 2)
    for sid in ("charlie.b-1", "charlie.b-2"):
        assert _entry(root, sid).state == "charged"
    assert verify_log(root / "state" / "alice").ok
    events = [(e["event"], e.get("session")) for _, e, _ in read_entries(root / "state" / "alice")]
    for sid in ("charlie.b-1", "charlie.b-2"):
        assert [ev for ev, s in events if s == sid] == ["proposal", "reserved", "accepted", "charged", "session-end"]


# ------------------------------------------------------------------ nothing read before the checks
def _has_reader(fifo) -> bool:
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        assert exc.errno == errno.ENXIO
        return False
    os.close(fd)
    return True


def test_no_input_is_opened_before_policy_and_budget_pass(tmp_path):
    from tests.support.deployment import PartiesInThread

    fifo = tmp_path / "alice-data.npz"
    os.mkfifo(fifo)  # opening it to read blocks until a writer comes: a visible trace
    policies = {
        "alice": _policy(ALICE.replace("max_epsilon = 2.0", "max_epsilon = 5.0").replace(', "eve"]', "]"), "alice"),
        "bob": _policy(PERMISSIVE.replace('release_to = ["*"]', 'release_to = ["*"]\nmax_epsilon = 1.0'), "bob"),
    }
    policies.update({p: Policy(open=True, allow_seeded=True) for p in ("charlie", "dave", "trent")})
    cfgs = make_deployment(
        tmp_path,
        ["charlie", "dave", "trent", "alice", "bob"],
        inputs={
            "alice": {"dp-aggregate": {"data": fifo}},
            "bob": {"dp-aggregate": {"data": _npz(tmp_path / "bob.npz")}},
        },
        policies=policies,
        budgets={
            "alice": BudgetConfig(dataset="alice", epsilon=2.0, delta=1e-9),
            "bob": BudgetConfig(dataset="bob", epsilon=100.0, delta=1e-9),
        },
    )
    runner = PartiesInThread()
    try:
        for p in ("charlie", "dave", "trent", "alice", "bob"):
            runner.start(cfgs[p])
        refused = [
            ({}, 7, "policy.allow_seeded"),  # alice: seed
            ({"epsilon": 6.0}, None, "policy.dp-aggregate.max_epsilon"),  # alice: bound
            ({"epsilon": 3.0}, None, "budget"),  # alice: budget (2.0)
            ({"epsilon": 1.5}, None, "policy.dp-aggregate.max_epsilon"),  # alice accepts, bob refuses
        ]
        for i, (params, seed, rule) in enumerate(refused):
            with pytest.raises(SmcdpError, match=rule.replace(".", r"\.")):
                client.start_session(
                    cfgs["charlie"],
                    "dp-aggregate",
                    DPA,
                    dict(PARAMS, **params),
                    session_id=f"f-{i}",
                    timeout=60,
                    seed=seed,
                )
            time.sleep(0.3)
            assert not _has_reader(fifo), f"alice opened her input for a refused proposal ({rule})"
        # alice's reservation for the session bob refused was given back (when the initiator's Abort
        # reaches her, which may be just after the refusal reached the operator)
        led = Ledger(tmp_path / "state" / "alice" / "ledger.sqlite")
        end = time.monotonic() + 15
        while getattr(led.reservation("alice", "charlie.f-3"), "state", None) != "released" and time.monotonic() < end:
            time.sleep(0.1)
        assert led.reservation("alice", "charlie.f-3").state == "released"
        assert not _has_reader(fifo), "alice opened her input for the session bob refused"
        # the control: a proposal every party accepts makes alice open her input once the session begins
        import threading

        done = {}
        th = threading.Thread(target=lambda: done.update(err=_try(cfgs)))
        th.start()
        end = time.monotonic() + 30
        while not _has_reader(fifo):
            assert time.monotonic() < end, "alice never opened her input for an accepted session"
            time.sleep(0.1)
        th.join(90)  # the FIFO is no .npz: the session then fails, cleanly
        assert done["err"] is not None
    finally:
        runner.close()


def _try(cfgs):
    try:
        client.start_session(cfgs["charlie"], "dp-aggregate", DPA, PARAMS, session_id="f-ok", timeout=60)
    except SmcdpError as exc:
        return exc
    return None
