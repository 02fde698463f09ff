"""A persistent privacy-budget ledger in SQLite.

Semantics
---------
* One budget per dataset name: total ``(epsilon, delta)`` and a composition
  rule -- ``linear`` (basic composition; epsilons and deltas add, compared
  exactly in decimal arithmetic) or ``zcdp`` (charges carry rho, pure
  eps-DP charges count eps**2/2, and the total rho converted by the
  Canonne-Kamath-Steinke bound at the budget's delta must stay within epsilon).
* :meth:`Ledger.charge` is one ``BEGIN IMMEDIATE`` transaction: it takes the
  database's write lock, re-reads everything already charged, refuses with
  :class:`~smcdp.dp.accounting.BudgetExceeded` (naming the remaining budget) if
  the charge does not fit, and otherwise inserts it and commits.  Concurrent
  processes serialise on the lock, so racing charges can never overspend.
* The database runs in WAL mode with ``synchronous=FULL``: once ``charge``
  returns, the charge is on disk.  A process killed mid-transaction leaves no
  trace of its charge (SQLite rolls the WAL back on next open) and no stuck
  lock.  :meth:`Ledger.guarded_release` charges first and computes the release
  only after the commit, so nothing is released without a durable charge; a
  release that then fails keeps its charge (the ledger cannot know whether the
  output escaped).
* Amounts are stored as decimal text exactly as given (floats via their
  shortest repr), so ten charges of 0.1 exhaust a budget of 1 exactly.
"""

from __future__ import annotations

import math
import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation, localcontext
from pathlib import Path
from typing import Any, TypeVar

from smcdp.dp.accounting import BudgetExceeded, _rho_capacity, zcdp_epsilon_cks
from smcdp.errors import InvalidMessage, PreconditionFailed

__all__ = [
    "RULES",
    "BudgetExceeded",
    "BudgetStatus",
    "Charge",
    "Ledger",
    "default_ledger_path",
]

RULES = ("linear", "zcdp")
APPLICATION_ID = 0x534D4344  # "SMCD"
SCHEMA_VERSION = 1
_MAX_NAME = 200
_MAX_NOTE = 2000
T = TypeVar("T")


def default_ledger_path() -> Path:
    """``$SMCDP_LEDGER`` if set, else ``$XDG_DATA_HOME/smcdp/ledger.sqlite``
    (``~/.local/share/smcdp/ledger.sqlite`` when XDG_DATA_HOME is unset)."""
    env = os.environ.get("SMCDP_LEDGER")
    if env:
        return Path(env)
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "share"
    )
    return Path(base) / "smcdp" / "ledger.sqlite"


def _dec(
    name: str, value: Any, *, allow_zero: bool, upper_one: bool = False
) -> Decimal:
    if isinstance(value, bool):
        raise InvalidMessage(f"{name} must be a number, got {value!r}")
    try:
        if isinstance(value, Decimal):
            d = value
        elif isinstance(value, float):
            d = Decimal(repr(value))
        elif isinstance(value, int):
            d = Decimal(value)
        elif isinstance(value, str):
            d = Decimal(value.strip())
        else:
            d = Decimal(repr(float(value)))
    except (InvalidOperation, ValueError, TypeError):
        raise InvalidMessage(f"{name} must be a number, got {value!r}") from None
    if not d.is_finite():
        raise InvalidMessage(f"{name} must be finite, got {value!r}")
    if d < 0 or (d == 0 and not allow_zero):
        raise InvalidMessage(
            f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}"
        )
    if upper_one and d >= 1:
        raise InvalidMessage(f"{name} must be < 1, got {value!r}")
    return d.normalize() if d != 0 else Decimal(0)


def _check_name(dataset: Any) -> str:
    if not isinstance(dataset, str):
        raise InvalidMessage(
            f"dataset name must be a string, got {type(dataset).__name__}"
        )
    if (
        not dataset
        or len(dataset) > _MAX_NAME
        or not dataset.isprintable()
        or dataset != dataset.strip()
    ):
        raise InvalidMessage(
            f"dataset name must be 1-{_MAX_NAME} printable characters without leading/trailing spaces, got {dataset!r}"
        )
    return dataset


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def _fmt(d: Decimal | float | None) -> str:
    if d is None:
        return "-"
    if isinstance(d, Decimal):
        s = format(d.normalize(), "f") if d != 0 else "0"
        return s
    return f"{d:.6g}"


@dataclass(frozen=True)
class Charge:
    id: int
    dataset: str
    epsilon: Decimal
    delta: Decimal
    rho: Decimal | None
    note: str
    created_at: str


@dataclass(frozen=True)
class BudgetStatus:
    """Budget, amount spent and remaining for one dataset.

    For the ``zcdp`` rule ``spent_epsilon`` is the CKS conversion of the rho
    spent at the budget's delta, and ``remaining_rho`` is what can still be
    charged; ``remaining_epsilon`` is then the largest pure-DP charge that fits.
    """

    dataset: str
    rule: str
    epsilon: Decimal
    delta: Decimal
    spent_epsilon: Decimal | float
    spent_delta: Decimal
    remaining_epsilon: Decimal | float
    remaining_delta: Decimal
    spent_rho: float | None
    remaining_rho: float | None
    n_charges: int


class Ledger:
    """SQLite privacy-budget ledger (see module docstring for the semantics)."""

    def __init__(
        self, path: str | os.PathLike[str] | None = None, *, timeout: float = 60.0
    ):
        self.path = Path(path) if path is not None else default_ledger_path()
        if self.path.exists() and self.path.is_dir():
            raise InvalidMessage(f"ledger path {self.path} is a directory")
        if not self.path.parent.exists():
            self.path.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
        self.timeout = float(timeout)
        self._init_schema()

    # -- connection ---------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        try:
            con = sqlite3.connect(
                str(self.path), timeout=self.timeout, isolation_level=None
            )
        except sqlite3.Error as exc:
            raise InvalidMessage(f"cannot open ledger {self.path}: {exc}") from None
        try:
            con.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
            mode = con.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise InvalidMessage(
                    f"ledger {self.path}: cannot enable WAL journaling (got {mode})"
                )
            con.execute("PRAGMA synchronous = FULL")
            con.execute("PRAGMA foreign_keys = ON")
        except sqlite3.DatabaseError as exc:
            con.close()
            raise InvalidMessage(
                f"{self.path} is not an SQLite database usable as a ledger: {exc}"
            ) from None
        return con

    def _init_schema(self) -> None:
        with closing(self._connect()) as con:
            try:
                # fast path without the write lock: an existing ledger only needs checking
                app = con.execute("PRAGMA application_id").fetchone()[0]
                if app == APPLICATION_ID:
                    ver = con.execute("PRAGMA user_version").fetchone()[0]
                    if ver != SCHEMA_VERSION:
                        raise InvalidMessage(
                            f"ledger {self.path} has schema version {ver}; this smcdp reads {SCHEMA_VERSION}"
                        )
                    return
                con.execute("BEGIN IMMEDIATE")
                app = con.execute("PRAGMA application_id").fetchone()[0]
                tables = {
                    r[0]
                    for r in con.execute(
                        "SELECT name FROM sqlite_master WHERE type='table'"
                    )
                }
                if app == 0 and not tables:
                    con.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                    con.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                    con.execute(
                        """CREATE TABLE budgets (
                               dataset TEXT PRIMARY KEY,
                               epsilon TEXT NOT NULL,
                               delta TEXT NOT NULL,
                               rule TEXT NOT NULL CHECK (rule IN ('linear', 'zcdp')),
                               created_at TEXT NOT NULL,
                               updated_at TEXT NOT NULL)"""
                    )
                    con.execute(
                        """CREATE TABLE charges (
                               id INTEGER PRIMARY KEY AUTOINCREMENT,
                               dataset TEXT NOT NULL REFERENCES budgets(dataset),
                               epsilon TEXT NOT NULL,
                               delta TEXT NOT NULL,
                               rho TEXT,
                               note TEXT NOT NULL DEFAULT '',
                               created_at TEXT NOT NULL,
                               pid INTEGER)"""
                    )
                    con.execute("CREATE INDEX charges_dataset ON charges(dataset, id)")
                elif app != APPLICATION_ID:
                    con.execute("ROLLBACK")
                    raise InvalidMessage(
                        f"{self.path} exists but is not an smcdp privacy ledger"
                    )
                else:
                    ver = con.execute("PRAGMA user_version").fetchone()[0]
                    if ver != SCHEMA_VERSION:
                        con.execute("ROLLBACK")
                        raise InvalidMessage(
                            f"ledger {self.path} has schema version {ver}; this smcdp reads {SCHEMA_VERSION}"
                        )
                con.execute("COMMIT")
            except sqlite3.DatabaseError as exc:
                raise InvalidMessage(
                    f"{self.path} is not usable as a ledger: {exc}"
                ) from None

    # -- budgets -------------------------------------------------------------
    def set_budget(
        self, dataset: str, epsilon: Any, delta: Any = 0, *, rule: str = "linear"
    ) -> BudgetStatus:
        """Create or change the budget of ``dataset``.

        Changing is refused when the new budget would be below what is already
        spent, or when the rule would change after charges were made.
        """
        dataset = _check_name(dataset)
        eps = _dec("epsilon", epsilon, allow_zero=False)
        dlt = _dec("delta", delta, allow_zero=True, upper_one=True)
        if rule not in RULES:
            raise InvalidMessage(
                f"rule must be one of {', '.join(RULES)}; got {rule!r}"
            )
        if rule == "zcdp" and dlt == 0:
            raise InvalidMessage("the zcdp rule needs a budget delta > 0")
        with closing(self._connect()) as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                row = con.execute(
                    "SELECT rule FROM budgets WHERE dataset = ?", (dataset,)
                ).fetchone()
                now = _now()
                if row is None:
                    con.execute(
                        "INSERT INTO budgets(dataset, epsilon, delta, rule, created_at, updated_at) VALUES (?,?,?,?,?,?)",
                        (dataset, str(eps), str(dlt), rule, now, now),
                    )
                else:
                    charges = self._charges(con, dataset)
                    if charges and row[0] != rule:
                        raise PreconditionFailed(
                            f"dataset {dataset!r} already has charges under rule {row[0]!r}; the rule cannot change"
                        )
                    spent = self._status(con, dataset, override=(eps, dlt, rule))
                    if (
                        spent.remaining_epsilon < 0
                        or spent.remaining_delta < 0
                        or (spent.remaining_rho is not None and spent.remaining_rho < 0)
                    ):
                        raise PreconditionFailed(
                            f"new budget for {dataset!r} is below what is already spent "
                            f"(epsilon {_fmt(spent.spent_epsilon)}, delta {_fmt(spent.spent_delta)})"
                        )
                    con.execute(
                        "UPDATE budgets SET epsilon = ?, delta = ?, rule = ?, updated_at = ? WHERE dataset = ?",
                        (str(eps), str(dlt), rule, now, dataset),
                    )
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
            return self.status(dataset)

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
        """Atomically record a release, or raise :class:`BudgetExceeded`.

        When this returns the charge is committed to disk.  ``rho`` is needed
        under the ``zcdp`` rule for charges with ``delta > 0`` (e.g. a Gaussian
        release, rho = Delta**2/(2 sigma**2)); pure charges default to eps**2/2.
        """
        dataset = _check_name(dataset)
        eps = _dec("epsilon", epsilon, allow_zero=False)
        dlt = _dec("delta", delta, allow_zero=True, upper_one=True)
        r = _dec("rho", rho, allow_zero=False) if rho is not None else None
        if not isinstance(note, str) or len(note) > _MAX_NOTE:
            raise InvalidMessage(
                f"note must be a string of at most {_MAX_NOTE} characters"
            )
        with closing(self._connect()) as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                row = con.execute(
                    "SELECT epsilon, delta, rule FROM budgets WHERE dataset = ?",
                    (dataset,),
                ).fetchone()
                if row is None:
                    raise PreconditionFailed(
                        f"no privacy budget is set for dataset {dataset!r}; set one first (smcdp budget set)"
                    )
                rule = row[2]
                if rule == "zcdp" and r is None:
                    if dlt > 0:
                        raise InvalidMessage(
                            "the zcdp rule needs --rho for a charge with delta > 0 (rho = Delta^2/(2 sigma^2))"
                        )
                    with localcontext() as ctx:
                        ctx.prec = 50
                        r = (eps * eps / 2).normalize()
                st = self._status(con, dataset)
                self._check_fits(st, eps, dlt, r)
                created = _now()
                cur = con.execute(
                    "INSERT INTO charges(dataset, epsilon, delta, rho, note, created_at, pid) VALUES (?,?,?,?,?,?,?)",
                    (
                        dataset,
                        str(eps),
                        str(dlt),
                        None if r is None else str(r),
                        note,
                        created,
                        os.getpid(),
                    ),
                )
                cid = int(cur.lastrowid)
                if _before_commit is not None:
                    _before_commit()
                con.execute("COMMIT")
            except BaseException:
                try:
                    con.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                raise
            return Charge(cid, dataset, eps, dlt, r, note, created)

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
        with closing(self._connect()) as con:
            return [
                r[0]
                for r in con.execute("SELECT dataset FROM budgets ORDER BY dataset")
            ]

    def status(self, dataset: str) -> BudgetStatus:
        dataset = _check_name(dataset)
        with closing(self._connect()) as con:
            con.execute("BEGIN")
            try:
                return self._status(con, dataset)
            finally:
                con.execute("COMMIT")

    def history(self, dataset: str) -> list[Charge]:
        dataset = _check_name(dataset)
        with closing(self._connect()) as con:
            if (
                con.execute(
                    "SELECT 1 FROM budgets WHERE dataset = ?", (dataset,)
                ).fetchone()
                is None
            ):
                raise PreconditionFailed(
                    f"no privacy budget is set for dataset {dataset!r}"
                )
            return self._charges(con, dataset)

    def remaining(self, dataset: str) -> dict[str, Any]:
        st = self.status(dataset)
        out: dict[str, Any] = {
            "epsilon": st.remaining_epsilon,
            "delta": st.remaining_delta,
        }
        if st.remaining_rho is not None:
            out["rho"] = st.remaining_rho
        return out

    # -- internals ---------------------------------------------------------------
    @staticmethod
    def _charges(con: sqlite3.Connection, dataset: str) -> list[Charge]:
        rows = con.execute(
            "SELECT id, dataset, epsilon, delta, rho, note, created_at FROM charges WHERE dataset = ? ORDER BY id",
            (dataset,),
        ).fetchall()
        return [
            Charge(
                r[0],
                r[1],
                Decimal(r[2]),
                Decimal(r[3]),
                None if r[4] is None else Decimal(r[4]),
                r[5],
                r[6],
            )
            for r in rows
        ]

    def _status(
        self,
        con: sqlite3.Connection,
        dataset: str,
        override: tuple[Decimal, Decimal, str] | None = None,
    ) -> BudgetStatus:
        row = con.execute(
            "SELECT epsilon, delta, rule FROM budgets WHERE dataset = ?", (dataset,)
        ).fetchone()
        if row is None:
            raise PreconditionFailed(
                f"no privacy budget is set for dataset {dataset!r}; set one first (smcdp budget set)"
            )
        eps_b, dlt_b, rule = (
            (Decimal(row[0]), Decimal(row[1]), row[2]) if override is None else override
        )
        charges = self._charges(con, dataset)
        with localcontext() as ctx:
            ctx.prec = 60
            s_eps = sum((c.epsilon for c in charges), Decimal(0))
            s_dlt = sum((c.delta for c in charges), Decimal(0))
            if rule == "linear":
                return BudgetStatus(
                    dataset,
                    rule,
                    eps_b,
                    dlt_b,
                    s_eps,
                    s_dlt,
                    eps_b - s_eps,
                    dlt_b - s_dlt,
                    None,
                    None,
                    len(charges),
                )
            s_rho = sum((c.rho or Decimal(0) for c in charges), Decimal(0))
        cap = _rho_capacity(float(eps_b), float(dlt_b))
        rho_used = float(s_rho)
        spent_eps = zcdp_epsilon_cks(rho_used, float(dlt_b)) if rho_used > 0 else 0.0
        rem_rho = cap - rho_used
        rem_eps = (
            math.sqrt(2 * rem_rho) if rem_rho > 0 else (0.0 if rem_rho == 0 else -1.0)
        )
        return BudgetStatus(
            dataset,
            rule,
            eps_b,
            dlt_b,
            spent_eps,
            s_dlt,
            rem_eps,
            dlt_b,
            rho_used,
            rem_rho,
            len(charges),
        )

    @staticmethod
    def _check_fits(
        st: BudgetStatus, eps: Decimal, dlt: Decimal, rho: Decimal | None
    ) -> None:
        if st.rule == "linear":
            if eps > st.remaining_epsilon or dlt > st.remaining_delta:
                raise BudgetExceeded(
                    f"charge of epsilon={_fmt(eps)}, delta={_fmt(dlt)} to dataset {st.dataset!r} refused: "
                    f"remaining budget is epsilon={_fmt(max(st.remaining_epsilon, Decimal(0)))}, "
                    f"delta={_fmt(max(st.remaining_delta, Decimal(0)))} "
                    f"(of epsilon={_fmt(st.epsilon)}, delta={_fmt(st.delta)}, rule linear)"
                )
            return
        assert (
            rho is not None
            and st.remaining_rho is not None
            and st.spent_rho is not None
        )
        total = st.spent_rho + float(rho)
        if zcdp_epsilon_cks(total, float(st.delta)) > float(st.epsilon) * (1 + 1e-12):
            raise BudgetExceeded(
                f"charge of rho={_fmt(rho)} (epsilon={_fmt(eps)}) to dataset {st.dataset!r} refused: "
                f"remaining budget is rho={max(st.remaining_rho, 0.0):.6g} "
                f"(of epsilon={_fmt(st.epsilon)} at delta={_fmt(st.delta)}, rule zcdp)"
            )

    def statuses(self) -> Iterator[BudgetStatus]:
        for name in self.datasets():
            yield self.status(name)
