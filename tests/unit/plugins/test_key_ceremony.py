"""The key ceremony as a protocol plug-in (``key-ceremony``) and the key store it writes.

Small keys (256 bits) are a test-only opt-in (allow_insecure_keys); the runs are in process."""

from __future__ import annotations

import asyncio
import json
import math
import os
import stat
import tomllib

import pytest

from smcdp.crypto.paillier import PublicKey
from smcdp.crypto.threshold import combine, partial_decrypt
from smcdp.errors import InsecureParameters, InvalidMessage
from smcdp.net.channel import InMemoryNetwork
from smcdp.plugins.base import SessionContext
from smcdp.plugins.keygen import CANDIDATE_MARGIN, KeyCeremonyParams
from smcdp.plugins.keystore import GROUP_FILE, SHARE_FILE, GroupExists, KeyStore
from smcdp.plugins.registry import get_plugin
from smcdp.primitives.rng import Randomness
from smcdp.protocols.keygen import expected_candidates
from smcdp.runtime.governance.policy import OutOfBounds, PolicyDenied, evaluate, parse_policy

PLUGIN = get_plugin("key-ceremony")
ROLES3 = {"party1": "alice", "party2": "bob", "party3": "carol"}
SMALL = {"group": "hospitals", "parties": 3, "threshold": 1, "key_bits": 256}


def _run(tmp_path, params, roles=ROLES3, session_id="s1", insecure=True, roots=None):
    """Run every role of a ceremony through the plug-in, each party with its own key store."""
    norm = PLUGIN.validate_params(params, roles)
    net = InMemoryNetwork(roles, timeout=300)

    def ctx(role):
        return SessionContext(
            session_id=session_id,
            protocol="key-ceremony",
            roles=roles,
            params=norm,
            allow_insecure_keys=insecure,
            seed=(roots or {}).get(role),
            keys_dir=tmp_path / roles[role] / "keys",
        )

    results = asyncio.run(net.run({r: (lambda ch, r=r: PLUGIN.run_role(r, ch, ctx(r))) for r in roles}))
    return results, net


# ------------------------------------------------------------------ parameters and governance
def test_parameters_are_validated():
    with pytest.raises(InvalidMessage, match="group name"):
        PLUGIN.validate_params({**SMALL, "group": "../etc"}, ROLES3)
    with pytest.raises(InvalidMessage, match="group name"):
        PLUGIN.validate_params({**SMALL, "group": "Hospitals"}, ROLES3)
    with pytest.raises(InvalidMessage, match="group"):
        PLUGIN.validate_params({k: v for k, v in SMALL.items() if k != "group"}, ROLES3)
    with pytest.raises(InvalidMessage, match="2t \\+ 1"):
        PLUGIN.validate_params({**SMALL, "threshold": 2}, ROLES3)
    with pytest.raises(InvalidMessage, match="roles"):
        PLUGIN.validate_params(SMALL, {"party1": "alice", "party2": "bob"})
    with pytest.raises(InvalidMessage, match="different party"):
        PLUGIN.validate_params(SMALL, {"party1": "alice", "party2": "bob", "party3": "bob"})
    with pytest.raises(InvalidMessage, match="replace"):
        PLUGIN.validate_params({**SMALL, "replace": "yes"}, ROLES3)
    with pytest.raises(InvalidMessage, match="key_bits"):
        PLUGIN.validate_params({**SMALL, "key_bits": 16384}, ROLES3)
    with pytest.raises(InvalidMessage, match="max_candidates"):
        PLUGIN.validate_params({**SMALL, "max_candidates": 0}, ROLES3)
    with pytest.raises(InvalidMessage, match="unknown"):
        PLUGIN.validate_params({**SMALL, "dealer": "trent"}, ROLES3)
    norm = PLUGIN.validate_params({"group": "g", "parties": 3, "threshold": 1}, ROLES3)
    assert norm["key_bits"] == 2048 and norm["replace"] is False


def test_the_candidate_budget_is_a_margin_over_the_expected_count_in_whole_batches():
    p = KeyCeremonyParams(group="g", parties=3, threshold=1, key_bits=2048).validate()
    budget = p.candidate_budget()
    assert budget % p.batch == 0
    assert (
        CANDIDATE_MARGIN * expected_candidates(2048, 3)
        <= budget
        < CANDIDATE_MARGIN * expected_candidates(2048, 3) + p.batch
    )
    assert KeyCeremonyParams(group="g", parties=3, threshold=1, max_candidates=77).candidate_budget() == 77


def test_the_expected_candidate_count_grows_with_the_key_and_matches_the_prime_density():
    e = {b: expected_candidates(b, 3) for b in (512, 1024, 2048)}
    assert e[512] < e[1024] < e[2048]
    # without any sieve (M = 1) a random odd h-bit number is prime with probability 2/(h ln 2)
    h = 1024
    assert math.isclose(1 / (2 / (h * math.log(2))) ** 2, (h * math.log(2) / 2) ** 2)
    # the sieve at 2048 bits removes every prime factor below a few hundred: a few thousand pairs, not 10^5
    assert 1000 < e[2048] < 20000


def test_the_summary_has_no_data_roles_no_dp_and_gives_the_public_key_to_everyone():
    s = PLUGIN.summary(PLUGIN.validate_params({**SMALL, "key_bits": 3072}, ROLES3), ROLES3)
    assert s.protocol == "key-ceremony" and s.key_bits == {"paillier": 3072}
    assert s.data_roles == () and s.coordinator_roles == () and s.epsilon is None
    assert [(o.recipients, o.sources, o.dp) for o in s.outputs] == [(("party1", "party2", "party3"), (), False)]
    assert "hospitals" in s.outputs[0].name


POLICY = """
[policy]
[policy.key-ceremony]
roles = ["party*"]
initiators = ["bob"]
min_key_bits = 3072
"""


def _evaluate(policy_text, key_bits=3072, initiator="bob", insecure=False, **extra):
    peers = {"bob": "h:1", "carol": "h:2", "eve": "h:3"}
    policy = parse_policy(tomllib.loads(policy_text)["policy"], "alice", peers)
    params = PLUGIN.validate_params({**SMALL, "key_bits": key_bits, **extra}, ROLES3)
    evaluate(
        policy,
        me="alice",
        session_id="s1",
        initiator=initiator,
        role="party1",
        roles=ROLES3,
        summary=PLUGIN.summary(params, ROLES3),
        allow_insecure_keys=insecure,
    )


def test_a_party_joins_only_as_its_key_ceremony_table_allows():
    _evaluate(POLICY)  # admitted: no data role, so no release_to / allow_non_dp rule applies
    with pytest.raises(PolicyDenied, match=r"policy\.key-ceremony\.initiators"):
        _evaluate(POLICY, initiator="eve")
    with pytest.raises(OutOfBounds, match="min_key_bits"):
        _evaluate(POLICY, key_bits=2048)
    with pytest.raises(OutOfBounds, match="max_key_bits"):
        _evaluate(POLICY, key_bits=8192)
    with pytest.raises(OutOfBounds, match="allow_insecure_keys"):
        _evaluate(POLICY.replace("3072", "256"), key_bits=512)
    _evaluate(POLICY.replace("3072", "256"), key_bits=512, insecure=True)
    with pytest.raises(PolicyDenied, match=r"no \[policy.key-ceremony\] table"):
        _evaluate(POLICY.replace("key-ceremony", "dp-aggregate"))


def test_fewer_biprimality_rounds_are_the_partys_decision():
    """jacobi_rounds below the default (80) lets a modulus that is no RSA modulus through more often (2^-rounds a
    candidate): a hiding parameter of the summary, refused below the default unless the party's min_hiding says
    lower (a review: the proposer could set 40)."""
    s = PLUGIN.summary(PLUGIN.validate_params({**SMALL, "key_bits": 3072, "jacobi_rounds": 40}, ROLES3), ROLES3)
    assert s.hiding == {"jacobi_rounds": (40.0, 80.0)}
    _evaluate(POLICY, jacobi_rounds=120)
    with pytest.raises(OutOfBounds, match="jacobi_rounds = 40 hides its data less than 80"):
        _evaluate(POLICY, jacobi_rounds=40)
    _evaluate(POLICY + "min_hiding = { jacobi_rounds = 40 }\n", jacobi_rounds=40)


# ------------------------------------------------------------------ the ceremony through the plug-in
def test_every_party_stores_the_same_public_key_and_its_own_share(tmp_path):
    results, _ = _run(tmp_path, SMALL)
    fps = {r["fingerprint"] for r in results.values()}
    assert len(fps) == 1
    for role, party in ROLES3.items():
        res = results[role]
        assert res["group"] == "hospitals" and res["threshold"] == 1 and res["key_bits"] == 256
        assert res["parties"] == ["alice", "bob", "carol"] and res["index"] == int(role[5:])
        assert res["session_id"] == "s1" and res["generation_seconds"] > 0 and res["candidates"] > 0
        assert "secret" not in json.dumps(res)
        keys = tmp_path / party / "keys"
        group = keys / "hospitals"
        assert stat.S_IMODE(os.stat(keys).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(group).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(group / SHARE_FILE).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(group / GROUP_FILE).st_mode) == 0o600
        assert sorted(p.name for p in group.iterdir()) == [GROUP_FILE, SHARE_FILE]
        info = KeyStore(keys).load("hospitals", allow_insecure=True)
        assert info.fingerprint in fps and dict(info.parties) == {1: "alice", 2: "bob", 3: "carol"}
        assert "secret" not in (group / GROUP_FILE).read_text()
    # any t + 1 = 2 stored shares decrypt a ciphertext under the group key
    shares = {p: KeyStore(tmp_path / p / "keys").load_share("hospitals", allow_insecure=True) for p in ROLES3.values()}
    pk: PublicKey = shares["alice"].public.public_key
    c = pk.raw_encrypt(123456789)
    for a, b in (("alice", "bob"), ("bob", "carol"), ("alice", "carol")):
        parts = [partial_decrypt(shares[x], [c], b"ctx") for x in (a, b)]
        assert combine(shares[a].public, [c], parts, b"ctx") == [123456789]


def test_an_existing_group_is_refused_before_any_message_unless_replaced(tmp_path):
    first, _ = _run(tmp_path, SMALL)
    with pytest.raises(GroupExists, match="replace"):
        _run(tmp_path, SMALL, session_id="s2")
    refused_net = InMemoryNetwork(ROLES3, timeout=30)
    ctx = SessionContext(
        session_id="s2",
        protocol="key-ceremony",
        roles=ROLES3,
        params=PLUGIN.validate_params(SMALL, ROLES3),
        allow_insecure_keys=True,
        keys_dir=tmp_path / "alice" / "keys",
    )
    with pytest.raises(GroupExists):
        asyncio.run(PLUGIN.run_role("party1", refused_net.channels["party1"], ctx))
    assert refused_net.transcript == []  # refused before it sent anything
    again, _ = _run(tmp_path, {**SMALL, "replace": True}, session_id="s2")
    assert again["party1"]["fingerprint"] != first["party1"]["fingerprint"]
    for party in ROLES3.values():
        info = KeyStore(tmp_path / party / "keys").load("hospitals", allow_insecure=True)
        assert info.session_id == "s2" and info.fingerprint == again["party1"]["fingerprint"]
        assert [p.name for p in (tmp_path / party / "keys").iterdir()] == ["hospitals"]  # nothing left behind


def test_a_replay_of_the_same_session_rewrites_its_own_group_with_the_same_key(tmp_path):
    roots = {r: Randomness.fresh() for r in ROLES3}
    first, _ = _run(tmp_path, SMALL, roots=roots)
    again, _ = _run(tmp_path, SMALL, roots={r: Randomness(k.key) for r, k in roots.items()})
    assert again["party1"]["fingerprint"] == first["party1"]["fingerprint"]


def test_a_party_without_insecure_keys_refuses_a_small_key(tmp_path):
    with pytest.raises(InsecureParameters):
        _run(tmp_path, SMALL, insecure=False)
    assert not (tmp_path / "alice" / "keys").exists()


@pytest.mark.parametrize("n,t", [(2, 1), (3, 1)])
def test_what_a_party_receives_stays_within_the_envelope(tmp_path, n, t):
    roles = {f"party{i}": f"org{i}" for i in range(1, n + 1)}
    params = {"group": "g", "parties": n, "threshold": t, "key_bits": 256, "batch": 16}
    _, net = _run(tmp_path, params, roles=roles)
    norm = PLUGIN.validate_params(params, roles)
    for role in roles:
        env = PLUGIN.traffic_envelope(norm, roles, role)
        got = net.received_by(role)
        assert got and env is not None
        assert max(len(d) for *_, d in got) <= env.message_bytes
        assert sum(len(d) for *_, d in got) <= env.session_bytes
        assert len({(s, tag) for s, tag, *_ in got}) <= env.tags


def test_the_envelope_grows_with_the_candidate_budget_not_its_largest_message():
    roles = dict(ROLES3)
    small = PLUGIN.traffic_envelope(PLUGIN.validate_params({**SMALL, "max_candidates": 128}, roles), roles, "party1")
    large = PLUGIN.traffic_envelope(PLUGIN.validate_params({**SMALL, "max_candidates": 1280}, roles), roles, "party1")
    assert small is not None and large is not None
    assert large.session_bytes > 5 * small.session_bytes and large.message_bytes == small.message_bytes


# ------------------------------------------------------------------ the store on its own
def test_the_store_lists_groups_and_refuses_tampered_or_readable_files(tmp_path):
    _run(tmp_path, SMALL)
    store = KeyStore(tmp_path / "bob" / "keys")
    assert store.groups() == ["hospitals"]
    assert KeyStore(tmp_path / "nobody" / "keys").groups() == []
    (store.root / ".hospitals.partial").mkdir()  # a directory being written is not a group
    assert store.groups() == ["hospitals"]
    share = store.group_dir("hospitals") / SHARE_FILE
    os.chmod(share, 0o644)
    with pytest.raises(InvalidMessage, match="chmod 600"):
        store.load_share("hospitals", allow_insecure=True)
    os.chmod(share, 0o600)
    group = store.group_dir("hospitals") / GROUP_FILE
    obj = json.loads(group.read_text())
    obj["fingerprint"] = "00" * 32
    group.write_text(json.dumps(obj))
    with pytest.raises(InvalidMessage, match="fingerprint"):
        store.load("hospitals", allow_insecure=True)
    with pytest.raises(InvalidMessage, match="group name"):
        store.group_dir("../alice")
    with pytest.raises(InvalidMessage, match="no key group"):
        store.load("absent")


def test_keys_generate_gives_this_party_the_role_of_its_place_in_parties():
    from smcdp.cli.keys import ceremony_request

    roles, params = ceremony_request("bob", ["alice", "bob", "carol"], "g", 1, 2048, False)
    assert roles == ROLES3 and params == {"group": "g", "parties": 3, "threshold": 1, "key_bits": 2048}
    assert ceremony_request("carol", ["carol", "alice"], "g", 1, 2048, True)[1]["replace"] is True
    with pytest.raises(InvalidMessage, match="must be one of --parties"):
        ceremony_request("dave", ["alice", "bob", "carol"], "g", 1, 2048, False)
    with pytest.raises(InvalidMessage, match="twice"):
        ceremony_request("bob", ["alice", "bob", "bob"], "g", 1, 2048, False)
    with pytest.raises(InvalidMessage, match="2t \\+ 1"):
        ceremony_request("bob", ["alice", "bob", "carol"], "g", 2, 2048, False)


def test_the_progress_step_counts_the_candidates_tried_against_the_expected_count(tmp_path):
    from smcdp.protocols.keygen import KeygenParams, party

    params = KeygenParams(parties=3, threshold=1, key_bits=256, allow_insecure=True, batch=8).validate()
    net = InMemoryNetwork(ROLES3, timeout=300)
    steps: list[str] = []
    ch1 = net.channels["party1"]
    progress = ch1.progress

    def record(round=None, step=None):
        if step is not None:
            steps.append(step)
        progress(round=round, step=step)

    ch1.progress = record  # type: ignore[method-assign]
    res = asyncio.run(net.run({r: (lambda ch: party(ch, params)) for r in ROLES3}))
    expected = round(expected_candidates(256, 3))
    sieving = [s for s in steps if s.startswith("sieve, ")]
    assert sieving[0] == f"sieve, 0 of ~{expected} candidates tried"
    assert sieving[-1] == f"sieve, {res['party1'].candidates - 8} of ~{expected} candidates tried"
    assert steps[-2:] == ["exponent", "shares"]


def test_a_seeded_ceremony_is_refused_unless_insecure_keys_are_allowed(tmp_path):
    """Every share, p and q follow from the session's roots: a seeded ceremony stored a group key whose private
    key whoever knows the seed can compute, and later unseeded sessions naming the group trusted it (a review).
    A party refuses one before any work -- unless it allows insecure keys (tests, as 256-bit keys)."""
    from smcdp.errors import PreconditionFailed

    with pytest.raises(PreconditionFailed, match="refuses a seeded key ceremony"):
        _run(tmp_path, {**SMALL, "key_bits": 2048}, insecure=False, roots={r: 7 for r in ROLES3})
    for role in ROLES3.values():
        assert not (tmp_path / role / "keys").exists() or not any((tmp_path / role / "keys").iterdir())
    results, _ = _run(tmp_path / "tests", SMALL, roots={r: 7 for r in ROLES3})  # the tests' opt-in
    assert len({r["fingerprint"] for r in results.values()}) == 1


def test_too_many_parties_for_the_key_size_are_refused_at_validation():
    """256-bit keys with 61 parties left a sieving modulus of 1 (each party's share of p mod M gets (h − 8)/n
    bits) and the ceremony crashed on an empty range; from 31 parties M = 3 barely sieved.  Refused up front."""
    from smcdp.protocols.keygen import MIN_SIEVE_MODULUS, KeygenParams, sieve_modulus

    assert sieve_modulus(128, 61) < MIN_SIEVE_MODULUS
    with pytest.raises(InvalidMessage, match="too little room to sieve"):
        KeygenParams(key_bits=256, parties=61, threshold=30, allow_insecure=True).validate()
    KeygenParams(key_bits=2048, parties=64, threshold=31).validate()  # the largest ceremony: fine
