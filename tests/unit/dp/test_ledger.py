"""SQLite ledger: exact accounting, refusal, races between processes, kill -9."""

from __future__ import annotations

import multiprocessing as mp
import os
import re
import shutil
import signal
import sqlite3
import time
from contextlib import closing
from decimal import Decimal
from pathlib import Path

import pytest

from smcdp.dp.budget import BudgetExceeded
from smcdp.dp.ledger import SCHEMA_VERSION, Ledger, default_ledger_path
from smcdp.errors import InvalidMessage, PreconditionFailed

CTX = mp.get_context("fork")


def test_default_path(monkeypatch, tmp_path):
    monkeypatch.delenv("SMCDP_LEDGER", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_ledger_path() == tmp_path / "xdg" / "smcdp" / "ledger.sqlite"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_ledger_path() == tmp_path / "home" / ".local" / "share" / "smcdp" / "ledger.sqlite"
    led = Ledger()
    assert led.path.exists()
    with sqlite3.connect(led.path) as con:
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_exact_decimal_budget(tmp_path):
    led = Ledger(tmp_path / "l.sqlite")
    led.set_budget("census", 1.0, 1e-5)
    for i in range(10):
        led.charge("census", 0.1, note=f"q{i}")  # 10 x 0.1 == 1 exactly in decimal
    with pytest.raises(BudgetExceeded) as ei:
        led.charge("census", 0.01)
    msg = str(ei.value)
    assert "remaining budget is epsilon=0" in msg and "census" in msg
    st = led.status("census")
    assert st.spent_epsilon == Decimal(1) and st.n_charges == 10
    assert [c.note for c in led.history("census")] == [f"q{i}" for i in range(10)]


def test_delta_is_budgeted_and_refusal_names_remaining(tmp_path):
    led = Ledger(tmp_path / "l.sqlite")
    led.set_budget("d", "2", "1e-5")
    led.charge("d", "0.5", "6e-6")
    with pytest.raises(BudgetExceeded, match=r"remaining budget is epsilon=1.5, delta=0.000004"):
        led.charge("d", "0.5", "6e-6")
    assert led.status("d").n_charges == 1


def test_set_budget_rules(tmp_path):
    led = Ledger(tmp_path / "l.sqlite")
    led.set_budget("a", 1, 0)
    led.charge("a", 0.6)
    with pytest.raises(PreconditionFailed, match="below what is already spent"):
        led.set_budget("a", 0.5, 0)
    led.set_budget("a", 2, 0)  # raising is allowed
    assert led.remaining("a")["epsilon"] == Decimal("1.4")
    with pytest.raises(PreconditionFailed, match="rule cannot change"):
        led.set_budget("a", 2, 1e-5, rule="zcdp")
    with pytest.raises(PreconditionFailed, match="no privacy budget"):
        led.charge("unknown", 0.1)
    for bad in ("", " x", "a\nb", "x" * 300):
        with pytest.raises(InvalidMessage):
            led.set_budget(bad, 1, 0)
    for eps, dl in ((0, 0), (-1, 0), ("nan", 0), (1, 1), (1, -0.1), (True, 0)):
        with pytest.raises(InvalidMessage):
            led.set_budget("b", eps, dl)


def test_zcdp_rule(tmp_path):
    led = Ledger(tmp_path / "l.sqlite")
    led.set_budget("z", 1.0, 1e-5, rule="zcdp")
    led.charge("z", 0.2)  # pure: rho = 0.02
    with pytest.raises(InvalidMessage, match="rho"):
        led.charge("z", 0.5, 1e-6)
    led.charge("z", 0.5, 1e-6, rho=0.005)
    rem = led.remaining("z")["rho"]
    with pytest.raises(BudgetExceeded, match="remaining budget is rho"):
        led.charge("z", 0.1, 1e-6, rho=rem * 1.01)
    led.charge("z", 0.1, 1e-6, rho=rem * 0.99)


def test_not_a_ledger(tmp_path):
    p = tmp_path / "junk.sqlite"
    p.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(InvalidMessage):
        Ledger(p)
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as con:
        con.execute("CREATE TABLE t(x)")
    with pytest.raises(InvalidMessage, match="not an smcdp privacy ledger"):
        Ledger(other)


def test_guarded_release_charges_before_computing(tmp_path):
    led = Ledger(tmp_path / "l.sqlite")
    led.set_budget("g", 1.0, 0)
    seen = []

    def release():
        # the charge is already committed and visible to another connection
        seen.append(Ledger(led.path).status("g").n_charges)
        return 42

    assert led.guarded_release("g", 0.4, 0, release) == 42
    assert seen == [1]
    with pytest.raises(BudgetExceeded):
        led.guarded_release("g", 0.7, 0, lambda: pytest.fail("must not run"))


# ---------------------------------------------------------------------------
# concurrency
# ---------------------------------------------------------------------------


class _RacyLedger(Ledger):
    """A deliberately broken ledger: check and insert in separate transactions."""

    def charge(self, dataset, epsilon, delta=0, *, rho=None, note="", _before_commit=None):
        st = self.status(dataset)
        self._check_fits(st, Decimal(epsilon), Decimal(delta), None)
        time.sleep(0.05)
        with closing(self._connect()) as con:
            con.execute(
                "INSERT INTO charges(dataset, epsilon, delta, rho, note, created_at, pid) VALUES (?,?,?,?,?,?,?)",
                (dataset, str(epsilon), str(delta), None, note, "", os.getpid()),
            )


def _racer(path: str, barrier, attempts: int, results, racy: bool = False) -> None:
    led = _RacyLedger(path) if racy else Ledger(path)
    barrier.wait()
    ok = 0
    for _ in range(attempts):
        try:
            led.charge("race", "0.1", note=f"pid {os.getpid()}")
            ok += 1
        except BudgetExceeded:
            pass
    results.put(ok)


def _race(path: str, racy: bool) -> int:
    n_proc, attempts = 4, 6
    barrier = CTX.Barrier(n_proc)
    results = CTX.Queue()
    procs = [CTX.Process(target=_racer, args=(path, barrier, attempts, results, racy)) for _ in range(n_proc)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    return sum(results.get(timeout=5) for _ in procs)


def test_processes_racing_for_the_last_budget_never_overspend(tmp_path):
    path = str(tmp_path / "race.sqlite")
    led = Ledger(path)
    led.set_budget("race", "1", 0)
    total_ok = _race(path, racy=False)
    st = led.status("race")
    assert total_ok == 10 == st.n_charges
    assert st.spent_epsilon == Decimal(1)
    # charges came from several processes
    pids = {c.note for c in led.history("race")}
    assert len(pids) >= 2


def test_race_harness_catches_a_non_atomic_ledger(tmp_path):
    # the same harness against check-then-insert in separate transactions overspends
    path = str(tmp_path / "racy.sqlite")
    led = Ledger(path)
    led.set_budget("race", "1", 0)
    _race(path, racy=True)
    assert led.status("race").spent_epsilon > Decimal(1)


def _killed_mid_transaction(path: str, ready) -> None:
    led = Ledger(path)

    def hook():
        ready.set()
        time.sleep(120)

    led.charge("k", 0.5, note="never committed", _before_commit=hook)


def _killed_after_commit(path: str, ready) -> None:
    led = Ledger(path)
    led.charge("k", 0.25, note="committed")
    ready.set()
    time.sleep(120)


def test_kill_9_mid_transaction_leaves_no_charge_and_no_lock(tmp_path):
    path = str(tmp_path / "kill.sqlite")
    led = Ledger(path, timeout=10)
    led.set_budget("k", 1.0, 0)
    ready = CTX.Event()
    p = CTX.Process(target=_killed_mid_transaction, args=(path, ready))
    p.start()
    assert ready.wait(30), "child never reached the commit point"
    # while the child holds the write lock, a reader still sees the old state
    assert Ledger(path).status("k").n_charges == 0
    os.kill(p.pid, signal.SIGKILL)
    p.join(10)
    assert p.exitcode == -signal.SIGKILL
    led2 = Ledger(path, timeout=10)
    assert led2.status("k").n_charges == 0
    t0 = time.monotonic()
    led2.charge("k", 1.0)  # the whole budget is still there and the lock is free
    assert time.monotonic() - t0 < 5
    with sqlite3.connect(path) as con:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_kill_9_after_commit_keeps_the_charge(tmp_path):
    path = str(tmp_path / "kill2.sqlite")
    Ledger(path).set_budget("k", 1.0, 0)
    ready = CTX.Event()
    p = CTX.Process(target=_killed_after_commit, args=(path, ready))
    p.start()
    assert ready.wait(30)
    os.kill(p.pid, signal.SIGKILL)
    p.join(10)
    h = Ledger(path).history("k")
    assert [c.note for c in h] == ["committed"] and h[0].epsilon == Decimal("0.25")


# ---------------------------------------------------------------------------
# reservations across processes
# ---------------------------------------------------------------------------


class _RacyReserveLedger(Ledger):
    """A deliberately broken ledger: the fit check and the insert of a reservation
    run in separate transactions."""

    def reserve(self, dataset, key, epsilon, delta=0, *, rho=None, note="", _before_commit=None):
        st = self.status(dataset)
        self._check_fits(st, Decimal(str(epsilon)), Decimal(str(delta)), None)
        time.sleep(0.05)
        with closing(self._connect()) as con:
            con.execute(
                "INSERT INTO charges(dataset, epsilon, delta, note, created_at, state, key) VALUES (?,?,?,?,?,?,?)",
                (dataset, str(epsilon), str(delta), note, "", "reserved", key),
            )


def _proposer(path: str, barrier, index: int, results, racy: bool) -> None:
    led = _RacyReserveLedger(path) if racy else Ledger(path)
    barrier.wait()
    try:
        led.reserve("hospital", f"session-{index}", "1", note=f"pid {os.getpid()}")
        results.put((index, True))
    except BudgetExceeded:
        results.put((index, False))


def _propose_concurrently(path: str, n: int, racy: bool = False) -> list[int]:
    barrier = CTX.Barrier(n)
    results = CTX.Queue()
    procs = [CTX.Process(target=_proposer, args=(path, barrier, i, results, racy)) for i in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    outcome = [results.get(timeout=5) for _ in procs]
    return sorted(i for i, ok in outcome if ok)


def test_eight_concurrent_reservations_from_processes_against_a_budget_for_three(tmp_path):
    path = str(tmp_path / "gov.sqlite")
    led = Ledger(path)
    led.set_budget("hospital", "3", 0)
    won = _propose_concurrently(path, 8)
    assert len(won) == 3
    st = led.status("hospital")
    assert st.n_reserved == 3 and st.reserved_epsilon == Decimal(3) and st.remaining_epsilon == 0
    assert sorted(c.key for c in led.reservations("hospital")) == sorted(f"session-{i}" for i in won)
    assert len({c.note for c in led.history("hospital")}) == 3  # three different processes
    for i in won:
        led.commit("hospital", f"session-{i}")
    st = led.status("hospital")
    assert st.spent_epsilon == Decimal(3) and st.n_charges == 3 and st.n_reserved == 0
    with pytest.raises(BudgetExceeded):
        led.reserve("hospital", "late", "0.001")


def test_reservation_race_harness_catches_a_non_atomic_ledger(tmp_path):
    path = str(tmp_path / "racy.sqlite")
    led = Ledger(path)
    led.set_budget("hospital", "3", 0)
    won = _propose_concurrently(path, 8, racy=True)
    assert len(won) > 3 and led.status("hospital").remaining_epsilon < 0


def _reserve_then_hang(path: str, ready) -> None:
    led = Ledger(path)
    led.reserve("k", "session-7", 0.5, note="killed before commit")
    ready.set()
    time.sleep(120)


def _killed_mid_reserve(path: str, ready) -> None:
    led = Ledger(path)

    def hook():
        ready.set()
        time.sleep(120)

    led.reserve("k", "session-8", 0.5, _before_commit=hook)


def _kill(p, ready) -> None:
    p.start()
    assert ready.wait(30), "child never got there"
    os.kill(p.pid, signal.SIGKILL)
    p.join(10)
    assert p.exitcode == -signal.SIGKILL


@pytest.mark.parametrize("then", ["commit", "release"])
def test_kill_9_between_reserve_and_commit_loses_nothing_and_overspends_nothing(tmp_path, then):
    path = str(tmp_path / "kill.sqlite")
    Ledger(path).set_budget("k", 1.0, 0)
    ready = CTX.Event()
    _kill(CTX.Process(target=_reserve_then_hang, args=(path, ready)), ready)
    led = Ledger(path, timeout=10)
    r = led.reservation("k", "session-7")
    assert r is not None and r.state == "reserved" and r.epsilon == Decimal("0.5")
    st = led.status("k")
    assert st.reserved_epsilon == Decimal("0.5") and st.remaining_epsilon == Decimal("0.5")
    with pytest.raises(BudgetExceeded):  # the held half is not available to anyone else
        led.reserve("k", "other", 0.6)
    assert led.reserve("k", "session-7", 0.5) == r  # the restarted owner finds its reservation
    if then == "commit":
        led.commit("k", "session-7")
        assert led.status("k").spent_epsilon == Decimal("0.5")
    else:
        led.release("k", "session-7", "party restarted before any output left")
        assert led.status("k").remaining_epsilon == Decimal(1)
    with sqlite3.connect(path) as con:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_kill_9_inside_the_reserve_transaction_leaves_no_reservation_and_no_lock(tmp_path):
    path = str(tmp_path / "kill2.sqlite")
    Ledger(path).set_budget("k", 1.0, 0)
    ready = CTX.Event()
    _kill(CTX.Process(target=_killed_mid_reserve, args=(path, ready)), ready)
    led = Ledger(path, timeout=10)
    assert led.reservation("k", "session-8") is None and led.history("k") == []
    t0 = time.monotonic()
    led.reserve("k", "session-8", 1.0)
    assert time.monotonic() - t0 < 5


# ---------------------------------------------------------------------------
# schema
# ---------------------------------------------------------------------------

FIXTURE_V1 = Path(__file__).parent / "data" / "ledger-v1.sqlite"


def test_a_ledger_written_by_schema_1_opens_and_works(tmp_path):
    """ledger-v1.sqlite was written by the previous release's Ledger (schema 1)."""
    path = tmp_path / "old.sqlite"
    shutil.copy(FIXTURE_V1, path)
    with sqlite3.connect(path) as con:
        assert con.execute("PRAGMA user_version").fetchone()[0] == 1
    led = Ledger(path)
    with sqlite3.connect(path) as con:
        assert con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    st = led.status("census")
    assert (st.spent_epsilon, st.spent_delta, st.n_charges) == (Decimal("0.65"), Decimal("0.000003"), 3)
    assert st.remaining_epsilon == Decimal("0.35") and st.n_reserved == 0
    h = led.history("census")
    assert [c.note for c in h] == ["mean age", "count", "histogram"]
    assert all(c.state == "charged" and c.key is None for c in h)
    z = led.status("zc")
    assert z.rule == "zcdp" and z.spent_rho == pytest.approx(0.135)
    # and it works: reservations, commits, charges, refusals
    led.reserve("census", "s1", "0.3")
    with pytest.raises(BudgetExceeded):
        led.charge("census", "0.1")
    led.commit("census", "s1")
    led.charge("census", "0.05")
    assert led.status("census").remaining_epsilon == 0
    Ledger(path)  # opening again is a no-op


def test_a_newer_schema_is_refused(tmp_path):
    path = tmp_path / "new.sqlite"
    Ledger(path)
    with sqlite3.connect(path) as con:
        con.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(InvalidMessage, match="schema version"):
        Ledger(path)


def _damage(path: Path, *statements: str) -> None:
    with closing(sqlite3.connect(path, isolation_level=None)) as con:
        con.execute("PRAGMA ignore_check_constraints = 1")
        for s in statements:
            con.execute(s)


@pytest.mark.parametrize(
    ("statement", "words"),
    [
        ("UPDATE charges SET epsilon = '-5' WHERE id = 1", "epsilon must be >= 0"),
        ("UPDATE charges SET epsilon = 'NaN' WHERE id = 1", "epsilon must be finite"),
        ("UPDATE charges SET epsilon = 'abc' WHERE id = 1", "epsilon must be a number"),
        ("UPDATE charges SET delta = '2' WHERE id = 1", "delta must be < 1"),
        ("UPDATE charges SET rho = x'00ff' WHERE id = 1", "rho must be a number"),
        ("UPDATE charges SET state = 'forgotten' WHERE id = 1", "state must be one of"),
        ("UPDATE budgets SET epsilon = '-10'", "the budget of 'census': epsilon must be >= 0"),
        ("UPDATE budgets SET epsilon = '0'", "epsilon must be > 0"),
        ("UPDATE budgets SET rule = 'bogus'", "rule must be one of"),
        ("DROP TABLE charges", "tables ['charges'] are missing"),
    ],
)
def test_a_damaged_row_stops_the_ledger_and_hands_no_budget_back(tmp_path, statement, words):
    """A negative or NaN amount read back would return budget (remaining > total): every read checks its rows, and a
    write on a damaged ledger is refused before it writes (FAILED_PRECONDITION, the file named, left as it was)."""
    from smcdp.dp.ledger import LedgerDamaged

    p = tmp_path / "l.sqlite"
    led = Ledger(p)
    led.set_budget("census", 1.0, 1e-5)
    led.charge("census", 0.75, note="one")
    _damage(p, statement)
    before = p.read_bytes()
    for call in (
        lambda: Ledger(p).status("census"),
        lambda: Ledger(p).history("census"),
        lambda: Ledger(p).charge("census", 0.1),
        lambda: Ledger(p).reserve("census", "k1", 0.1),
    ):
        with pytest.raises(LedgerDamaged, match=re.escape(words)) as exc:
            call()
        assert str(p) in str(exc.value) and exc.value.code == "DATA_LOSS"
        assert not isinstance(exc.value, PreconditionFailed)  # no caller may take it for a refused transition
    assert p.read_bytes() == before


def test_a_busy_ledger_is_unavailable_not_damaged(tmp_path):
    """A lock held past the timeout says nothing of the file: UNAVAILABLE (transient), never LedgerDamaged (whose
    remedy, restoring a backup, would lose the charges since)."""
    from smcdp.dp.ledger import LedgerDamaged
    from smcdp.errors import Unavailable

    p = tmp_path / "l.sqlite"
    led = Ledger(p, timeout=0.2)
    led.set_budget("census", 1.0, 1e-5)
    led.reserve("census", "k", 0.25)
    with closing(sqlite3.connect(p, isolation_level=None)) as holder:
        holder.execute("BEGIN IMMEDIATE")
        for call in (lambda: led.charge("census", 0.1), lambda: led.release("census", "k")):
            with pytest.raises(Unavailable, match="busy") as exc:
                call()
            assert not isinstance(exc.value, (LedgerDamaged, PreconditionFailed))
        holder.execute("ROLLBACK")
    assert led.release("census", "k").state == "released"


def test_a_repeated_zcdp_reservation_of_a_computed_epsilon_is_the_same_entry(tmp_path):
    """Under zcdp rho = eps²/2 is stored with all its digits; read back rounded (to 28), a repeated reservation of the
    same float amount (0.1 + 0.2, 1/3) no longer matched its entry and was refused."""
    led = Ledger(tmp_path / "l.sqlite")
    led.set_budget("d", 5, 1e-6, rule="zcdp")
    for eps in (0.1 + 0.2, 1 / 3):
        first = led.reserve("d", f"k{eps}", eps)
        assert led.reserve("d", f"k{eps}", eps) == first
        assert Ledger(led.path).reservation("d", f"k{eps}").rho == first.rho


def test_amounts_read_back_are_what_was_written(tmp_path):
    """The row checks accept every amount the ledger writes (the smallest, the largest delta, rho under zcdp)."""
    p = tmp_path / "l.sqlite"
    led = Ledger(p)
    led.set_budget("z", 4.0, 0.999999, rule="zcdp")
    led.charge("z", 1e-12, 0.5, rho=1e-9)
    led.reserve("z", "k", 0.5)
    st = Ledger(p).status("z")
    assert st.spent_delta == Decimal("0.5") and len(Ledger(p).history("z")) == 2
