"""A persistent privacy-budget ledger in SQLite.

Semantics
---------
* One budget per dataset name: total ``(epsilon, delta)`` and a composition
  rule, ``linear`` or ``zcdp``, with the arithmetic of :mod:`smcdp.dp.budget`
  (shared with the in-memory :class:`~smcdp.dp.budget.BudgetAccountant`).
  :class:`LedgerBudget` is one dataset of a ledger behind the common
  :class:`~smcdp.dp.budget.PrivacyBudget` interface.
* Every entry is a row of ``charges`` in one of three states: ``charged``
  (spent), ``reserved`` (held under a key) or ``released`` (given back).
  Reservations count as spent in every fit check, so a reservation is a lock on
  its share of the budget.
* Every write -- :meth:`Ledger.charge`, :meth:`Ledger.reserve`,
  :meth:`Ledger.commit`, :meth:`Ledger.release`, :meth:`Ledger.set_budget` --
  is one ``BEGIN IMMEDIATE`` transaction: it takes the database's write lock,
  re-reads every entry of the dataset, decides, writes and commits.  Concurrent
  processes serialise on the lock, so racing charges or reservations can never
  overspend.
* The database runs in WAL mode with ``synchronous=FULL``: once a write
  returns it is on disk.  A process killed mid-transaction leaves no trace of
  it (SQLite rolls the WAL back on next open) and no stuck lock; a process
  killed after ``reserve`` returned leaves its reservation held, to be
  committed or released by whoever picks up after it (``smcdp budget
  commit|release``).  :meth:`Ledger.guarded_release` charges first and
  computes the release only after the commit.
* Amounts are stored as decimal text exactly as given (floats via their
  shortest repr), so ten charges of 0.1 exhaust a budget of 1 exactly.

Schema (``PRAGMA user_version``): 1 had budgets and charges; 2 adds to each
charge its ``state``, reservation ``key`` (unique per dataset), ``reason`` and
``settled_at``.  Older files are migrated in place when first opened; existing
charges become ``charged`` entries.  A newer file is refused.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

from smcdp.dp.budget import (
    RULES,
    BudgetStatus,
    Charge,
    PrivacyBudget,
    charge_amount,
    check_fits,
    check_reserve_again,
    check_transition,
    check_zcdp_budget,
    fmt_amount,
    summarize,
    utc_now,
)
from smcdp.dp.validation import (
    InvalidParameter,
    check_choice,
    check_name,
    check_note,
    decimal_amount,
)
from smcdp.errors import DataLoss, NoSpace, PreconditionFailed, Unavailable

__all__ = [
    "SCHEMA_VERSION",
    "Ledger",
    "LedgerBudget",
    "LedgerDamaged",
    "default_ledger_path",
]

APPLICATION_ID = 0x534D4344  # "SMCD"
SCHEMA_VERSION = 2
T = TypeVar("T")

_SCHEMA_V1 = (
    """CREATE TABLE budgets (
           dataset TEXT PRIMARY KEY,
           epsilon TEXT NOT NULL,
           delta TEXT NOT NULL,
           rule TEXT NOT NULL CHECK (rule IN ('linear', 'zcdp')),
           created_at TEXT NOT NULL,
           updated_at TEXT NOT NULL)""",
    """CREATE TABLE charges (
           id INTEGER PRIMARY KEY AUTOINCREMENT,
           dataset TEXT NOT NULL REFERENCES budgets(dataset),
           epsilon TEXT NOT NULL,
           delta TEXT NOT NULL,
           rho TEXT,
           note TEXT NOT NULL DEFAULT '',
           created_at TEXT NOT NULL,
           pid INTEGER)""",
    "CREATE INDEX charges_dataset ON charges(dataset, id)",
)

#: statements taking a ledger from version v to v + 1 (a fresh ledger runs them all)
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        "ALTER TABLE charges ADD COLUMN state TEXT NOT NULL DEFAULT 'charged'"
        " CHECK (state IN ('reserved', 'charged', 'released'))",
        "ALTER TABLE charges ADD COLUMN key TEXT",
        "ALTER TABLE charges ADD COLUMN reason TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE charges ADD COLUMN settled_at TEXT",
        "CREATE UNIQUE INDEX charges_key ON charges(dataset, key) WHERE key IS NOT NULL",
    ),
}

_STATES = frozenset({"reserved", "charged", "released"})
_TABLES = frozenset({"budgets", "charges"})
_COLUMNS = "id, dataset, epsilon, delta, rho, note, created_at, state, key, reason, settled_at"


def default_ledger_path() -> Path:
    """``$SMCDP_LEDGER`` if set, else ``$XDG_DATA_HOME/smcdp/ledger.sqlite``
    (``~/.local/share/smcdp/ledger.sqlite`` when XDG_DATA_HOME is unset)."""
    env = os.environ.get("SMCDP_LEDGER")
    if env:
        return Path(env)
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "smcdp" / "ledger.sqlite"


class LedgerDamaged(DataLoss):
    """A ledger file whose rows or tables are not what smcdp wrote: an amount that is not a finite non-negative
    number, an unknown state or rule, a table missing, bytes that are not text, SQLite's own corruption errors.
    Nothing is read from it (a damaged amount could hand budget back); the file is left as it is for its owner to
    restore from a backup.  DATA_LOSS, not FAILED_PRECONDITION: no caller may take it for a refused transition.
    A busy or full ledger is not damaged (``Ledger._readable``)."""


#: SQLite's errors that say the file is not a sound database (the others -- busy, full, read-only -- say nothing of it)
_CORRUPT = frozenset({"SQLITE_CORRUPT", "SQLITE_NOTADB"})


def _stored_amount(path: Path, where: str, name: str, value: Any, *, upper_one: bool = False) -> Decimal:
    """A stored amount, checked (finite, >= 0, < 1 for a delta) and returned exactly as stored: a rho of 50 digits
    (eps²/2 under zcdp) must read back equal, or a repeated reservation would no longer match its entry."""
    try:
        decimal_amount(name, value, allow_zero=True, upper_one=upper_one)
        return value if isinstance(value, Decimal) else Decimal(value if isinstance(value, str) else repr(value))
    except InvalidParameter as exc:
        raise LedgerDamaged(f"ledger {path} is damaged: {where}: {exc}") from None


def _stored_text(path: Path, where: str, name: str, value: Any, *, optional: bool = False) -> Any:
    if (value is None and optional) or isinstance(value, str):
        return value
    raise LedgerDamaged(f"ledger {path} is damaged: {where}: {name} must be text, got {value!r}")


def _row_to_charge(path: Path, r: tuple[Any, ...]) -> Charge:
    where = f"entry {r[0]!r}"
    state = _stored_text(path, where, "state", r[7])
    if state not in _STATES:
        raise LedgerDamaged(f"ledger {path} is damaged: {where}: state must be one of {sorted(_STATES)}, got {state!r}")
    if not isinstance(r[0], int):
        raise LedgerDamaged(f"ledger {path} is damaged: an entry's id must be an integer, got {r[0]!r}")
    return Charge(
        id=r[0],
        dataset=_stored_text(path, where, "dataset", r[1]),
        epsilon=_stored_amount(path, where, "epsilon", r[2]),
        delta=_stored_amount(path, where, "delta", r[3], upper_one=True),
        rho=None if r[4] is None else _stored_amount(path, where, "rho", r[4]),
        note=_stored_text(path, where, "note", r[5]),
        created_at=_stored_text(path, where, "created_at", r[6]),
        state=state,
        key=_stored_text(path, where, "key", r[8], optional=True),
        reason=_stored_text(path, where, "reason", r[9]),
        settled_at=_stored_text(path, where, "settled_at", r[10], optional=True),
    )


class Ledger:
    """SQLite privacy-budget ledger over many datasets (see the module docstring)."""

    def __init__(self, path: str | os.PathLike[str] | None = None, *, timeout: float = 60.0, create: bool = True):
        """``create=False``: a ledger that does not exist is refused (``PreconditionFailed`` naming the path) instead of
        made -- for reading or settling a budget, where a new empty ledger would only hide a mistyped path."""
        if path is not None and not os.fspath(path):  # Path("") would be the working directory
            raise InvalidParameter("the ledger path is empty")
        self.path = Path(path) if path is not None else default_ledger_path()
        try:
            exists = self.path.exists()
            if exists and self.path.is_dir():
                raise InvalidParameter(f"ledger path {self.path} is a directory")
            if not exists and not create:
                raise PreconditionFailed(f"ledger {self.path} does not exist (smcdp budget set makes one)")
            if not self.path.parent.exists():
                self.path.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
        except OSError as exc:  # a name too long, a parent that is a file, no permission
            raise InvalidParameter(f"ledger path {self.path}: {exc.strerror or exc}") from None
        self.timeout = float(timeout)
        self._init_schema()

    def __repr__(self) -> str:
        return f"Ledger({str(self.path)!r})"

    def budget(self, dataset: str) -> LedgerBudget:
        """The :class:`~smcdp.dp.budget.PrivacyBudget` of one dataset of this ledger."""
        return LedgerBudget(self, dataset)

    # -- connection ---------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        try:
            con = sqlite3.connect(str(self.path), timeout=self.timeout, isolation_level=None)
        except sqlite3.Error as exc:
            raise InvalidParameter(f"cannot open ledger {self.path}: {exc}") from None
        try:
            con.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
            mode = con.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise InvalidParameter(f"ledger {self.path}: cannot enable WAL journaling (got {mode})")
            con.execute("PRAGMA synchronous = FULL")
            con.execute("PRAGMA foreign_keys = ON")
        except sqlite3.DatabaseError as exc:
            con.close()
            raise InvalidParameter(f"{self.path} is not an SQLite database usable as a ledger: {exc}") from None
        return con

    @contextmanager
    def _readable(self) -> Iterator[None]:
        """SQLite's errors on a ledger that opened: a damaged file (corrupt pages, a table or column dropped, a row's
        bytes not text) is :class:`LedgerDamaged`; a lock held past the timeout is UNAVAILABLE and a full disk
        :class:`~smcdp.errors.NoSpace` (both transient: nothing to restore); anything else is raised as it is."""
        try:
            yield
        except sqlite3.DatabaseError as exc:
            name, text = getattr(exc, "sqlite_errorname", None), str(exc)
            if name in _CORRUPT or text.startswith(("no such table", "no such column", "Could not decode")):
                raise LedgerDamaged(f"ledger {self.path} is damaged: {exc}") from None
            if name in ("SQLITE_BUSY", "SQLITE_LOCKED"):
                raise Unavailable(f"ledger {self.path} is busy (another process holds its lock): {exc}") from None
            if name == "SQLITE_FULL":
                raise NoSpace(f"ledger {self.path}: {exc}") from None
            raise

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction: committed when the block returns,
        rolled back when it raises."""
        with self._readable(), self._transaction() as con:
            yield con

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with closing(self._connect()) as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                yield con
                con.execute("COMMIT")
            except BaseException:
                try:
                    con.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                raise

    def _init_schema(self) -> None:
        try:
            with closing(self._connect()) as con:
                # fast path without the write lock: a current ledger only needs checking
                app = con.execute("PRAGMA application_id").fetchone()[0]
                ver = con.execute("PRAGMA user_version").fetchone()[0]
                if app == APPLICATION_ID and ver == SCHEMA_VERSION:
                    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
                    if not tables >= _TABLES:
                        raise LedgerDamaged(
                            f"ledger {self.path} is damaged: its tables {sorted(_TABLES - tables)} are missing"
                        )
                    return
            with self._transaction() as con:
                app = con.execute("PRAGMA application_id").fetchone()[0]
                ver = con.execute("PRAGMA user_version").fetchone()[0]
                tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
                if app == 0 and not tables:
                    con.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                    for stmt in _SCHEMA_V1:
                        con.execute(stmt)
                    ver = 1
                elif app != APPLICATION_ID:
                    raise InvalidParameter(f"{self.path} exists but is not an smcdp privacy ledger")
                if ver > SCHEMA_VERSION or ver < 1:
                    raise InvalidParameter(
                        f"ledger {self.path} has schema version {ver}; this smcdp reads 1 to {SCHEMA_VERSION}"
                    )
                while ver < SCHEMA_VERSION:
                    for stmt in _MIGRATIONS[ver]:
                        con.execute(stmt)
                    ver += 1
                con.execute(f"PRAGMA user_version = {ver}")
        except sqlite3.DatabaseError as exc:
            raise InvalidParameter(f"{self.path} is not usable as a ledger: {exc}") from None

    # -- budgets -------------------------------------------------------------
    def set_budget(self, dataset: str, epsilon: Any, delta: Any = 0, *, rule: str = "linear") -> BudgetStatus:
        """Create or change the budget of ``dataset``.

        Changing is refused when the new budget would be below what is already
        spent or reserved, or when the rule would change while charges or
        reservations exist.
        """
        dataset = check_name(dataset)
        eps = decimal_amount("epsilon", epsilon, allow_zero=False)
        dlt = decimal_amount("delta", delta, allow_zero=True, upper_one=True)
        check_choice(rule, "rule", RULES)
        if rule == "zcdp":
            check_zcdp_budget(float(eps), float(dlt))
        with self._write() as con:
            row = con.execute("SELECT rule FROM budgets WHERE dataset = ?", (dataset,)).fetchone()
            now = utc_now()
            if row is None:
                con.execute(
                    "INSERT INTO budgets(dataset, epsilon, delta, rule, created_at, updated_at) VALUES (?,?,?,?,?,?)",
                    (dataset, str(eps), str(dlt), rule, now, now),
                )
            else:
                active = [c for c in self._charges(con, dataset) if c.state != "released"]
                if active and row[0] != rule:
                    raise PreconditionFailed(
                        f"dataset {dataset!r} already has charges under rule {row[0]!r}; the rule cannot change"
                    )
                st = self._status(con, dataset, override=(eps, dlt, rule))
                if (
                    st.remaining_epsilon < 0
                    or st.remaining_delta < 0
                    or (st.remaining_rho is not None and st.remaining_rho < 0)
                ):
                    raise PreconditionFailed(
                        f"new budget for {dataset!r} is below what is already spent or reserved "
                        f"(spent epsilon {fmt_amount(st.spent_epsilon)}, delta {fmt_amount(st.spent_delta)}; "
                        f"reserved epsilon {fmt_amount(st.reserved_epsilon)}, delta {fmt_amount(st.reserved_delta)})"
                    )
                con.execute(
                    "UPDATE budgets SET epsilon = ?, delta = ?, rule = ?, updated_at = ? WHERE dataset = ?",
                    (str(eps), str(dlt), rule, now, dataset),
                )
        return self.status(dataset)

    def _insert(
        self,
        dataset: str,
        key: str | None,
        state: str,
        epsilon: Any,
        delta: Any,
        rho: Any,
        note: str,
        what: str,
        before_commit: Callable[[], None] | None,
    ) -> Charge:
        """Check and insert one entry in one transaction (the heart of charge and reserve)."""
        dataset = check_name(dataset)
        note = check_note(note)
        with self._write() as con:
            rule = self._budget_row(con, dataset)[2]
            eps, dlt, r = charge_amount(rule, epsilon, delta, rho, what=what)
            if key is not None:
                existing = self._find(con, dataset, key)
                if existing is not None:
                    return check_reserve_again(existing, eps, dlt, r)
            check_fits(self._status(con, dataset), eps, dlt, r, what=what)
            cur = con.execute(
                "INSERT INTO charges(dataset, epsilon, delta, rho, note, created_at, pid, state, key) "
                "VALUES (?,?,?,?,?,?,?,?,?)",
                (dataset, str(eps), str(dlt), None if r is None else str(r), note, utc_now(), os.getpid(), state, key),
            )
            assert cur.lastrowid is not None  # set by every successful INSERT
            entry = self._get(con, cur.lastrowid)
            if before_commit is not None:
                before_commit()
        return entry

    def charge(
        self,
        dataset: str,
        epsilon: Any,
        delta: Any = 0,
        *,
        rho: Any = None,
        note: str = "",
        _before_commit: Callable[[], None] | None = None,
    ) -> Charge:
        """Atomically record a release, or raise :class:`~smcdp.dp.budget.BudgetExceeded`.

        When this returns the charge is committed to disk.  ``rho`` is needed
        under the ``zcdp`` rule for charges with ``delta > 0`` (e.g. a Gaussian
        release, rho = Delta**2/(2 sigma**2)); pure charges default to eps**2/2.
        """
        return self._insert(dataset, None, "charged", epsilon, delta, rho, note, "charge", _before_commit)

    def reserve(
        self,
        dataset: str,
        key: str,
        epsilon: Any,
        delta: Any = 0,
        *,
        rho: Any = None,
        note: str = "",
        _before_commit: Callable[[], None] | None = None,
    ) -> Charge:
        """Hold an amount under ``key`` (one transaction), or raise :class:`~smcdp.dp.budget.BudgetExceeded`.

        Idempotent: the same key with the same amount returns the existing
        entry (whatever its state, unless released); a different amount, or a
        released key, raises :class:`~smcdp.errors.PreconditionFailed`."""
        key = check_name(key, "reservation key")
        return self._insert(dataset, key, "reserved", epsilon, delta, rho, note, "reservation", _before_commit)

    def _settle(self, dataset: str, key: str, to_state: str, reason: str) -> Charge:
        dataset = check_name(dataset)
        key = check_name(key, "reservation key")
        reason = check_note(reason, "reason")
        with self._write() as con:
            self._budget_row(con, dataset)
            entry = self._find(con, dataset, key)
            if not check_transition(entry, key, to_state):
                assert entry is not None  # check_transition raised for a missing key
                return entry
            assert entry is not None
            con.execute(
                "UPDATE charges SET state = ?, reason = ?, settled_at = ? WHERE id = ? AND state = 'reserved'",
                (to_state, reason, utc_now(), entry.id),
            )
            return self._get(con, entry.id)

    def commit(self, dataset: str, key: str) -> Charge:
        """Turn the reservation ``key`` into a charge (idempotent; refused after a release)."""
        return self._settle(dataset, key, "charged", "")

    def release(self, dataset: str, key: str, reason: str = "") -> Charge:
        """Give the reservation ``key`` back (idempotent; refused after a commit)."""
        return self._settle(dataset, key, "released", reason)

    def guarded_release(
        self,
        dataset: str,
        epsilon: Any,
        delta: Any,
        release: Callable[[], T],
        *,
        rho: Any = None,
        note: str = "",
    ) -> T:
        """Charge first (durably), then compute and return ``release()``."""
        self.charge(dataset, epsilon, delta, rho=rho, note=note)
        return release()

    # -- queries ---------------------------------------------------------------
    def datasets(self) -> list[str]:
        """The names of the datasets with a budget, sorted."""
        with self._read() as con:
            return [
                _stored_text(self.path, "a budget", "dataset", r[0])
                for r in con.execute("SELECT dataset FROM budgets ORDER BY dataset")
            ]

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """A read transaction: one consistent snapshot, no write lock."""
        with self._readable(), closing(self._connect()) as con:
            con.execute("BEGIN")
            try:
                yield con
            finally:
                con.execute("COMMIT")

    def status(self, dataset: str) -> BudgetStatus:
        """The :class:`~smcdp.dp.budget.BudgetStatus` of ``dataset``."""
        dataset = check_name(dataset)
        with self._read() as con:
            return self._status(con, dataset)

    def statuses(self) -> Iterator[BudgetStatus]:
        """The status of every dataset, in name order."""
        for name in self.datasets():
            yield self.status(name)

    def check(self, dataset: str, epsilon: Any, delta: Any = 0, *, rho: Any = None) -> None:
        """Raise :class:`~smcdp.dp.budget.BudgetExceeded` if the amount does not fit now
        (advisory, no lock)."""
        self.budget(dataset).check(epsilon, delta, rho=rho)

    def history(self, dataset: str) -> list[Charge]:
        """Every entry of ``dataset``, oldest first, reservations and released ones included."""
        dataset = check_name(dataset)
        with self._read() as con:
            self._budget_row(con, dataset)
            return self._charges(con, dataset)

    def reservation(self, dataset: str, key: str) -> Charge | None:
        """The reservation ``key`` of ``dataset`` in any state, or ``None``."""
        dataset = check_name(dataset)
        key = check_name(key, "reservation key")
        with self._read() as con:
            return self._find(con, dataset, key)

    def reservations(self, dataset: str) -> list[Charge]:
        """The open reservations of ``dataset``."""
        return [c for c in self.history(dataset) if c.state == "reserved"]

    def remaining(self, dataset: str) -> dict[str, Any]:
        """:meth:`~smcdp.dp.budget.PrivacyBudget.remaining` of ``dataset``."""
        return self.budget(dataset).remaining()

    # -- internals ---------------------------------------------------------------
    def _budget_row(self, con: sqlite3.Connection, dataset: str) -> tuple[Decimal, Decimal, str]:
        """The dataset's budget (epsilon, delta, rule), checked as read."""
        row = con.execute("SELECT epsilon, delta, rule FROM budgets WHERE dataset = ?", (dataset,)).fetchone()
        if row is None:
            raise PreconditionFailed(
                f"no privacy budget is set for dataset {dataset!r} in ledger {self.path}; set one first (smcdp budget set)"
            )
        where = f"the budget of {dataset!r}"
        eps = _stored_amount(self.path, where, "epsilon", row[0])
        if eps == 0:
            raise LedgerDamaged(f"ledger {self.path} is damaged: {where}: epsilon must be > 0, got {row[0]!r}")
        rule = _stored_text(self.path, where, "rule", row[2])
        if rule not in RULES:
            raise LedgerDamaged(f"ledger {self.path} is damaged: {where}: rule must be one of {RULES}, got {rule!r}")
        return eps, _stored_amount(self.path, where, "delta", row[1], upper_one=True), rule

    def _charges(self, con: sqlite3.Connection, dataset: str) -> list[Charge]:
        rows = con.execute(f"SELECT {_COLUMNS} FROM charges WHERE dataset = ? ORDER BY id", (dataset,))
        return [_row_to_charge(self.path, r) for r in rows.fetchall()]

    def _find(self, con: sqlite3.Connection, dataset: str, key: str) -> Charge | None:
        r = con.execute(f"SELECT {_COLUMNS} FROM charges WHERE dataset = ? AND key = ?", (dataset, key)).fetchone()
        return None if r is None else _row_to_charge(self.path, r)

    def _get(self, con: sqlite3.Connection, entry_id: int) -> Charge:
        r = con.execute(f"SELECT {_COLUMNS} FROM charges WHERE id = ?", (entry_id,)).fetchone()
        return _row_to_charge(self.path, r)

    def _status(
        self,
        con: sqlite3.Connection,
        dataset: str,
        override: tuple[Decimal, Decimal, str] | None = None,
    ) -> BudgetStatus:
        row = self._budget_row(con, dataset)
        eps_b, dlt_b, rule = row if override is None else override
        return summarize(dataset, rule, eps_b, dlt_b, self._charges(con, dataset))

    @staticmethod
    def _check_fits(st: BudgetStatus, eps: Decimal, dlt: Decimal, rho: Decimal | None) -> None:
        check_fits(st, eps, dlt, rho)


class LedgerBudget(PrivacyBudget):
    """One dataset of a :class:`Ledger` as a :class:`~smcdp.dp.budget.PrivacyBudget`.

    ``LedgerBudget(ledger_or_path, dataset)``; the dataset's budget is set with
    :meth:`Ledger.set_budget` (or ``smcdp budget set``).  Durable and safe
    across processes: every write is one transaction of the ledger."""

    def __init__(self, ledger: Ledger | str | os.PathLike[str], dataset: str):
        self.ledger = ledger if isinstance(ledger, Ledger) else Ledger(ledger)
        self._dataset = check_name(dataset)

    def __repr__(self) -> str:
        return f"LedgerBudget({str(self.ledger.path)!r}, {self._dataset!r})"

    @property
    def dataset(self) -> str:
        return self._dataset

    def status(self) -> BudgetStatus:
        return self.ledger.status(self._dataset)

    def spend(self, epsilon: Any, delta: Any = 0, *, rho: Any = None, note: str = "") -> Charge:
        return self.ledger.charge(self._dataset, epsilon, delta, rho=rho, note=note)

    def reserve(self, key: str, epsilon: Any, delta: Any = 0, *, rho: Any = None, note: str = "") -> Charge:
        return self.ledger.reserve(self._dataset, key, epsilon, delta, rho=rho, note=note)

    def commit(self, key: str) -> Charge:
        return self.ledger.commit(self._dataset, key)

    def release(self, key: str, reason: str = "") -> Charge:
        return self.ledger.release(self._dataset, key, reason)

    def reservation(self, key: str) -> Charge | None:
        return self.ledger.reservation(self._dataset, key)

    def history(self) -> list[Charge]:
        return self.ledger.history(self._dataset)
