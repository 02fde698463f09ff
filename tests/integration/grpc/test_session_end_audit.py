"""A session that a party reports ended has its end settled and in that party's audit trail.

CI (the group-key process tests) read a data party's audit trail as soon as its GetResult said "failed", and
once found no ``session-end`` line: the party published its final record first and settled its governance
(reservation, audit line) after it, on the same thread.  The end is now settled before the record can be seen
(:attr:`smcdp.runtime.session.Session.on_end`).  Here the settling is made slow on purpose (a slow disk)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from smcdp.errors import SmcdpError
from smcdp.net.server import namespaced
from smcdp.runtime import client
from smcdp.runtime.governance.audit import read_entries
from smcdp.runtime.governance.gate import Governor
from smcdp.runtime.states import SessionState
from tests.support.deployment import PartiesInThread, make_deployment

ROLES = {"a": "alice", "b": "bob"}


def test_a_party_reports_a_session_ended_only_once_its_end_is_in_the_audit_trail(tmp_path, monkeypatch):
    real = Governor.session_done

    def slow(self, session_id, record, began=True):
        time.sleep(0.5)  # the audit trail's fsync on a loaded disk
        real(self, session_id, record, began)

    monkeypatch.setattr(Governor, "session_done", slow)
    cfgs = make_deployment(tmp_path, ["alice", "bob"])
    runner = PartiesInThread()
    try:
        for cfg in cfgs.values():
            runner.start(cfg)
        outcomes = {}
        for name, params in (("ok", {}), ("fails", {"fail_role": "b"})):  # one succeeds, one fails at bob
            sid = namespaced("alice", name)
            # each party's operator API polled from before the session starts, as `smcdp session show` would be
            with ThreadPoolExecutor(2) as pool:
                seen = {p: pool.submit(_first_ended, cfgs[p], sid, tmp_path / "state" / p) for p in ("alice", "bob")}
                try:
                    client.start_session(cfgs["alice"], "net-echo", ROLES, params, session_id=name, timeout=60)
                except SmcdpError:
                    assert name == "fails"
                for party, fut in seen.items():
                    state, ends = fut.result(60)
                    assert [e["state"] for e in ends] == [state], (party, state, ends)
                    outcomes[(sid, party)] = state
        assert sorted(set(outcomes.values())) == ["failed", "succeeded"], outcomes
    finally:
        runner.close()


def _first_ended(cfg, sid, state_dir):
    """The state the party first reports as ended, and the session-end lines its audit trail held just then."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            r = client.get_result(cfg, sid)
        except SmcdpError as exc:  # not proposed yet
            assert exc.code == "NOT_FOUND", exc
            r = {"state": "unknown"}
        if r["state"] != "unknown" and SessionState(r["state"]).ended:
            ends = [
                e
                for _, e, _ in read_entries(state_dir)
                if e is not None and e.get("event") == "session-end" and e.get("session") == sid
            ]
            return r["state"], ends
        time.sleep(0.005)
    raise AssertionError(f"{sid} never ended")
