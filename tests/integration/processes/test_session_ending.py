"""A session ends the same way everywhere, between real party processes (docs/fault-tolerance.md, "How a
session ends").

A participant killed at its protocol's ending -- dp-aggregate: a data party killed after Charlie's role
ended, before it published its share to Dave; power iteration (DP mode): a data party killed before the
final aggregate from which it takes u reached it; keyword: Alice (the client, who learns the keyword) or
Bob killed once their role ended, before their confirmation left (the final acknowledgement round); and in
dp-aggregate and power iteration the initiator (Charlie, Trent) and Dave killed at that same confirming
step:

* restarted -> every participant ends "succeeded" with the undisturbed output;
* not restarted -> nobody reports "succeeded": the initiator's ``smcdp session start`` exits non-zero and
  names the dead party and the participants not confirmed to hold their outputs; every record is failed
  and resumable; once the party is back, ``smcdp session resume`` ends the session with the undisturbed
  output everywhere.

Before, Charlie's ``session start`` exited 0 "succeeded" while Dave never received the model (and a resume
was refused because the initiator had succeeded), and Bob succeeded while Alice never got u.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from smcdp.cli.demo.common import governed
from smcdp.errors import SmcdpError
from smcdp.net.server import namespaced, new_session_id
from smcdp.runtime import client
from smcdp.runtime.chaos import Chaos, ChaosAction
from smcdp.runtime.ending import CONFIRMING_STEP
from smcdp.runtime.governance.charges import BudgetConfig
from smcdp.runtime.local import LocalCluster
from tests.integration.processes.test_fault_tolerance import run_with
from tests.support.dpa_data import dpa_parties
from tests.support.kw_data import KW_PARAMS, KW_ROLES, kw_parties
from tests.support.pca_data import spectral_gap_data

REPO = Path(__file__).resolve().parents[3]
#: a killed party is restarted after 1 s and back within a few (see test_fault_tolerance.GRACE)
GRACE = 20.0

DPA_ROLES = {"charlie": "charlie", "dave": "dave", "party1": "alice", "party2": "bob", "party3": "carol"}
DPA_PARAMS = {"n_parties": 3, "dim": 3, "epsilon": 1.0, "lam": 0.05, "key_bits": 768, "dgk_bits": 512, "dgk_t": 64}
SEED = 5

PI_ROLES = {"trent": "trent", "party1": "alice", "party2": "bob"}
PI_PARAMS = {"n_parties": 2, "key_bits": 512, "epsilon": 1.0, "delta": 1e-6, "iterations": 12, "rows": 6}
PI_FINAL = PI_PARAMS["iterations"]  # a data party's round while it waits for the final aggregate


def _killed_at_its_ending(party: str, restart: bool) -> ChaosAction:
    """``party`` killed once its role ended and its messages were acknowledged, before its confirmation left."""
    return ChaosAction("kill", party, round=0, restart=restart, step=CONFIRMING_STEP)


def _restarted_at_its_confirmation(cluster: LocalCluster, protocol, roles, params, initiator, party) -> dict:
    """A seeded session with ``party`` killed at its confirming step and restarted: every participant ended
    succeeded and confirmed, ``party`` after one restart.  Returns the records (for the outputs)."""
    recs, chaos = run_with(cluster, protocol, roles, params, initiator, [_killed_at_its_ending(party, True)], seed=SEED)
    assert chaos.restarts == 1
    assert {r["state"] for r in recs.values()} == {"succeeded"}, {p: r.get("error") for p, r in recs.items()}
    assert recs[party]["restarts"] == 1
    assert all(r["unconfirmed"] == [] for r in recs.values())
    return recs


def _settle(cluster: LocalCluster, sid: str, parties) -> dict[str, dict]:
    return {p: cluster._record(p, sid, time.monotonic() + 90) for p in parties}


def _nobody_succeeded_and_all_name(records: dict[str, dict], culprit: str) -> None:
    for p, r in records.items():
        assert r["state"] == "failed", (p, r)
        assert r["error"]["code"] == "UNAVAILABLE" and r["error"]["origin"] == culprit, (p, r["error"])
        assert r["resumable"] is True, (p, r)


def _back_and_resumed(cluster: LocalCluster, party: str, sid: str, initiator: str, parties) -> dict[str, dict]:
    """``party`` started again: it reopens the session from its checkpoint and learns it failed; the
    initiator's ``session resume`` then ends it "succeeded" at every party.  Returns every party's record."""
    cluster.restart(party)
    assert _wait_ended(cluster, party, sid)["state"] == "failed"
    rec = client.resume_session(cluster.configs[initiator], sid, timeout=300)
    assert rec["state"] == "succeeded", rec
    recs = _settle(cluster, sid, parties)
    assert {r["state"] for r in recs.values()} == {"succeeded"}, {p: r.get("error") for p, r in recs.items()}
    return recs


def _wait_ended(cluster: LocalCluster, party: str, sid: str) -> dict:
    """``party``, restarted, reopened ``sid`` from its checkpoint: until it ended there (it learns from its
    peers that the session failed)."""
    return cluster._record(party, sid, time.monotonic() + 90)


# ----------------------------------------------------------------- dp aggregation
@pytest.fixture(scope="module")
def dpa(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dpa_end")
    parties = dpa_parties(tmp)
    with LocalCluster(
        parties,
        allow_insecure_keys=True,
        workdir=tmp / "run",
        peer_grace_seconds=GRACE,
        allow_seeded=True,
        open_policy=True,
    ) as c:
        undisturbed, _ = run_with(c, "dp-aggregate", DPA_ROLES, DPA_PARAMS, "charlie", [], seed=SEED)
        assert {r["state"] for r in undisturbed.values()} == {"succeeded"}, undisturbed
        assert all(r["unconfirmed"] == [] for r in undisturbed.values()), undisturbed
        yield c, undisturbed["dave"]["result"]["weights"]


def _cli_start_dpa(cluster: LocalCluster, sid: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    args = [
        sys.executable,
        "-m",
        "smcdp",
        "session",
        "start",
        "--config",
        str(cluster.configs["charlie"]),
        "--protocol",
        "dp-aggregate",
        "--session-id",
        sid,
        "--seed",
        str(SEED),
        "--timeout",
        "600",
        "--params",
        json.dumps(DPA_PARAMS),
    ] + [a for r, p in DPA_ROLES.items() for a in ("--role", f"{r}={p}")]
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_dp_aggregate_a_data_party_killed_at_its_ending_and_restarted(dpa):
    cluster, weights = dpa
    recs, chaos = run_with(cluster, "dp-aggregate", DPA_ROLES, DPA_PARAMS, "charlie", ["kill:carol:round=3"], seed=SEED)
    assert chaos.restarts == 1
    assert {r["state"] for r in recs.values()} == {"succeeded"}, {p: r.get("error") for p, r in recs.items()}
    assert recs["dave"]["result"]["weights"] == weights
    assert all(r["unconfirmed"] == [] for r in recs.values())


def test_dp_aggregate_a_data_party_killed_at_its_ending_and_not_restarted(dpa):
    """Carol dies at stage 3 (Charlie needs nothing more from her and ends his role); Dave never gets her
    share.  Nobody succeeds, the operator's CLI says so, and a resume once she is back ends it everywhere."""
    cluster, weights = dpa
    sid = namespaced("charlie", new_session_id("dp-aggregate"))
    chaos = Chaos(cluster, [ChaosAction.parse("kill:carol:round=3,restart=no")], sid).start()
    cli = _cli_start_dpa(cluster, sid)
    try:
        out, err = cli.communicate(timeout=GRACE + 120)
    finally:
        if cli.poll() is None:
            cli.kill()
        chaos.finish()
    assert chaos.error is None and all(e["done"] for e in chaos.events), chaos.events
    # the initiator's CLI: not "succeeded", exit non-zero, the dead party and the output that did not arrive
    assert cli.returncode != 0, (out, err)
    assert "error [UNAVAILABLE]" in err and "party 'carol'" in err, err
    recs = _settle(cluster, sid, ["charlie", "dave", "alice", "bob"])
    _nobody_succeeded_and_all_name(recs, "carol")
    assert recs["dave"]["unconfirmed"] is None  # dave's role never ended: carol's share never came
    # the CLI printed the failed session's record too (JSON on stdout, as for a success)
    printed = json.loads(out)
    assert printed["state"] == "failed" and printed["error"]["origin"] == "carol" and printed["resumable"] is True
    assert printed["unconfirmed"] == recs["charlie"]["unconfirmed"], (printed, recs["charlie"])
    # Charlie's role usually ended before carol died (he needs nothing more from her; it did in 2 of 3 runs
    # here, and then, before, his CLI exited 0 "succeeded"); unless his last messages to her were still
    # unacknowledged.  If it ended, his CLI and his record name the participants whose outputs are not known
    # to have arrived (alice among them too if her last messages to carol were unacknowledged)
    if recs["charlie"]["unconfirmed"] is not None:
        assert {"carol", "dave"} <= set(recs["charlie"]["unconfirmed"]), recs["charlie"]
        named = err.split("not confirmed to hold their outputs: ")[1]
        assert "carol" in named and "dave" in named, err
    # carol is back: she reopens the session from her checkpoint and learns it failed; then a resume
    recs = _back_and_resumed(cluster, "carol", sid, "charlie", DPA_ROLES.values())
    assert recs["dave"]["result"]["weights"] == weights  # the same noise: the undisturbed model


# ----------------------------------------------------------------- power iteration (DP mode)
@pytest.mark.parametrize("party", ["charlie", "dave"])
def test_dp_aggregate_a_participant_killed_at_its_confirmation_and_restarted(dpa, party):
    """The final acknowledgement round itself: Charlie (the initiator) or Dave (who reassembles the model)
    killed once its role ended, before its confirmation left; restarted, it replays to its ending and every
    participant succeeds with the undisturbed model (a data party: the tests above)."""
    cluster, weights = dpa
    recs = _restarted_at_its_confirmation(cluster, "dp-aggregate", DPA_ROLES, DPA_PARAMS, "charlie", party)
    assert recs["dave"]["result"]["weights"] == weights


@pytest.fixture(scope="module")
def pidp(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pidp_end")
    M = spectral_gap_data(4, k=6, n=4_000)
    parties: dict[str, dict] = {"trent": {}}
    for name, A in zip(("alice", "bob"), (M[:, :1_600], M[:, 1_600:])):
        np.save(tmp / f"{name}.npy", A)
        parties[name] = {"power-iteration": {"data": tmp / f"{name}.npy"}}
    options, _ = governed("power-iteration", PI_ROLES, PI_PARAMS, initiator="trent", seed=SEED)
    budgets = {p: BudgetConfig(dataset=p, epsilon=100.0, delta=1e-3) for p in ("alice", "bob")}
    with LocalCluster(
        parties, allow_insecure_keys=True, workdir=tmp / "run", peer_grace_seconds=GRACE, budgets=budgets, **options
    ) as c:
        base, _ = run_with(c, "power-iteration", PI_ROLES, PI_PARAMS, "trent", [], seed=SEED)
        assert {r["state"] for r in base.values()} == {"succeeded"}, base
        yield c, {p: base[p]["result"]["u"] for p in ("alice", "bob")}


def _pi_session_losing_alice_before_u(cluster: LocalCluster, restart: bool) -> tuple[str, dict[str, dict]]:
    """Trent stops himself once every last contribution is in (before he sends the final aggregate);
    meanwhile alice is killed; then trent goes on: bob gets the final aggregate, alice does not."""
    sid = new_session_id("power-iteration")
    chaos = Chaos(cluster, [ChaosAction.parse(f"stop:trent:round={PI_FINAL},for=4")], sid).start()
    out: dict = {}
    th = threading.Thread(
        target=lambda: out.update(
            recs=cluster.run("power-iteration", PI_ROLES, PI_PARAMS, initiator="trent", seed=SEED, session_id=sid)
        ),
        daemon=True,
    )
    th.start()
    try:
        end = time.monotonic() + 120
        # the chaos runner's own signal: the failpoint's 'stopped' file is gone once it handled the pause
        # (polling that file raced with it and missed the stop about one run in five)
        while not chaos.reached[0].wait(0.02):
            assert time.monotonic() < end and th.is_alive(), "trent never reached the final step"
        cluster.kill("alice", restart=restart)
        if restart:
            time.sleep(1.0)  # as the chaos runner does
            cluster.restart("alice")
        th.join(GRACE + 180)
    finally:
        chaos.finish()
    assert chaos.error is None and all(e["done"] for e in chaos.events), chaos.events
    return namespaced("trent", sid), out["recs"]


def test_power_iteration_a_data_party_killed_before_u_and_restarted(pidp):
    cluster, us = pidp
    _, recs = _pi_session_losing_alice_before_u(cluster, restart=True)
    assert {r["state"] for r in recs.values()} == {"succeeded"}, {p: r.get("error") for p, r in recs.items()}
    for p in ("alice", "bob"):
        assert recs[p]["result"]["u"] == us[p]
    assert recs["alice"]["restarts"] == 1


def test_power_iteration_a_data_party_killed_before_u_and_not_restarted(pidp):
    """Alice dies after her last contribution, around the final aggregate (while trent is paused at his
    final step): Bob gets his and ends his role, but neither he nor Trent may report "succeeded"."""
    cluster, us = pidp
    sid, recs = _pi_session_losing_alice_before_u(cluster, restart=False)
    assert recs["alice"]["state"] == "unknown"  # killed
    _nobody_succeeded_and_all_name({p: recs[p] for p in ("trent", "bob")}, "alice")
    # bob's role ended, and he was not told that everyone holds its output.  Whose confirmation he lacks
    # depends on where in trent's final step the pause fell (trent reports the round as he sends the final
    # aggregate): alice's (the aggregate never reached her), or trent's (she got it and confirmed while
    # trent was paused, then died before trent heard her confirmation, so trent waits for it), or both
    assert recs["bob"]["unconfirmed"] in (["alice"], ["trent"], ["alice", "trent"]), recs["bob"]
    recs = _back_and_resumed(cluster, "alice", sid, "trent", PI_ROLES.values())
    for p in ("alice", "bob"):
        assert recs[p]["result"]["u"] == us[p]


@pytest.mark.parametrize("party", ["trent"])
def test_power_iteration_a_participant_killed_at_its_confirmation_and_restarted(pidp, party):
    """Trent (the initiator) killed once his role ended, before his confirmation left: restarted, he replays
    to his ending and every participant succeeds with the undisturbed u (a data party: the tests above)."""
    cluster, us = pidp
    recs = _restarted_at_its_confirmation(cluster, "power-iteration", PI_ROLES, PI_PARAMS, "trent", party)
    for p in ("alice", "bob"):
        assert recs[p]["result"]["u"] == us[p]


# ----------------------------------------------------------------- keyword
def _kw_outputs(records: dict[str, dict]) -> dict:
    alice, bob = records["alice"]["result"], records["bob"]["result"]
    return {
        "keyword": alice["keyword"],
        "index": alice["index"],
        "log_likelihoods": alice["log_likelihoods"],
        "n_models": bob["n_models"],
    }


def _same_kw(got: dict, base: dict) -> bool:
    """The keyword, its index and the model count exactly; the (debug) log-likelihoods to the protocol's fixed-point
    bound -- two sessions round Bob's sub-grid emission masks differently (docs/protocols/keyword.md, *Who learns
    what*, item 2), so they agree to within a grid step a frame, not bit for bit (a replay within one session
    is bit-identical: its masks come from the session's root)."""
    rest = {k: v for k, v in got.items() if k != "log_likelihoods"}
    if rest != {k: v for k, v in base.items() if k != "log_likelihoods"}:
        return False
    return got["log_likelihoods"] == pytest.approx(base["log_likelihoods"], rel=1e-9)


@pytest.fixture(scope="module")
def kw(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("kw_end")
    parties = kw_parties(tmp)  # a short utterance, three models: the ending is tested, not the forward pass
    with LocalCluster(
        parties, allow_insecure_keys=True, workdir=tmp / "run", peer_grace_seconds=GRACE, open_policy=True
    ) as c:
        base, _ = run_with(c, "keyword", KW_ROLES, KW_PARAMS, "alice", [])
        assert {r["state"] for r in base.values()} == {"succeeded"}, base
        assert all(r["unconfirmed"] == [] for r in base.values()), base
        yield c, _kw_outputs(base)


@pytest.mark.parametrize("party", ["alice", "bob"])
def test_keyword_a_party_killed_at_its_ending_and_restarted(kw, party):
    cluster, base = kw
    recs, chaos = run_with(cluster, "keyword", KW_ROLES, KW_PARAMS, "alice", [_killed_at_its_ending(party, True)])
    assert chaos.restarts == 1
    assert {r["state"] for r in recs.values()} == {"succeeded"}, {p: r.get("error") for p, r in recs.items()}
    assert recs[party]["restarts"] == 1
    assert _same_kw(_kw_outputs(recs), base), (_kw_outputs(recs), base)
    assert all(r["unconfirmed"] == [] for r in recs.values())


@pytest.mark.parametrize("party", ["alice", "bob"])
def test_keyword_a_party_killed_at_its_ending_and_not_restarted(kw, party):
    """Alice (the initiator, who learns the keyword) or Bob dies with the role ended and the confirmation not
    sent: the other holds every message it needs, but must not report "succeeded"; the operator's call names
    the dead party; once it is back, a resume at Alice ends the session with the undisturbed keyword."""
    cluster, base = kw
    other = "bob" if party == "alice" else "alice"
    sid = namespaced("alice", new_session_id("keyword"))
    chaos = Chaos(cluster, [_killed_at_its_ending(party, False)], sid).start()
    try:
        with pytest.raises(SmcdpError) as raised:
            client.start_session(cluster.configs["alice"], "keyword", KW_ROLES, KW_PARAMS, session_id=sid, timeout=240)
    finally:
        chaos.finish()
    assert chaos.error is None and all(e["done"] for e in chaos.events), chaos.events
    # the initiator's call (the dead initiator's own, or that of the initiator left alone) names the dead party
    assert raised.value.code == "UNAVAILABLE" and f"party '{party}'" in str(raised.value), raised.value
    survivor = _settle(cluster, sid, [other])
    _nobody_succeeded_and_all_name(survivor, party)
    # the survivor's role ended once every message it sent was acknowledged -- usually before the dead party
    # died, though its last acknowledgement may still have been under way (the receiver acknowledges once the
    # message is durable, while its role goes on): then nobody is confirmed; else only the dead party is missing
    if survivor[other]["unconfirmed"] is not None:
        assert survivor[other]["unconfirmed"] == [party], survivor[other]
        if other == "alice":  # the initiator's call says whose output is not known to have arrived
            assert f"not confirmed to hold their outputs: {party}" in str(raised.value), raised.value
    recs = _back_and_resumed(cluster, party, sid, "alice", KW_ROLES.values())
    assert _same_kw(_kw_outputs(recs), base), (_kw_outputs(recs), base)
