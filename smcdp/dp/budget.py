"""One privacy-budget interface, whatever backs it.

:class:`PrivacyBudget` is a total ``(epsilon, delta)`` budget over one dataset
with a composition rule.  The DP learners (``accountant=``) and the party
runtime use only this interface; two classes implement it:

* :class:`BudgetAccountant` -- in memory, for one process (diffprivlib's
  ``BudgetAccountant`` is the model);
* :class:`smcdp.dp.ledger.LedgerBudget` -- one dataset of the SQLite ledger,
  durable and safe across processes.

Operations
----------
``check(epsilon, delta, rho=None)``
    raise :class:`BudgetExceeded` if the amount does not fit now (advisory: only
    ``spend`` and ``reserve`` decide, atomically).
``spend(epsilon, delta, rho=None, note="")``
    record a charge, or raise :class:`BudgetExceeded` and record nothing.
``reserve(key, epsilon, delta, rho=None, note="")``
    hold the amount under ``key``: it counts as spent for every later fit check
    until it is committed (then it *is* spent) or released (then it is given
    back).  Idempotent: reserving the same key again with the same amount
    returns the existing reservation; a different amount under the same key, or
    a key that was released, is refused (:class:`~smcdp.errors.PreconditionFailed`).
``commit(key)`` / ``release(key, reason)``
    reserved -> charged / reserved -> released.  Repeating the same transition
    returns the entry unchanged; the other transition afterwards is refused
    (a charge is never given back, a released reservation never charged).
``status()`` / ``remaining()`` / ``history()``
    totals (spent, reserved, remaining) and every entry with its state.

Rules
-----
``linear`` -- epsilons and deltas add; amounts are exact decimals (floats by
their shortest repr), so ten spends of 0.1 use up a budget of 1 exactly.
``zcdp`` -- every entry carries a rho (a pure epsilon-DP amount counts
epsilon**2/2; one with delta > 0 must give its rho); the budget holds while the
Canonne-Kamath-Steinke conversion of the total rho at the budget's delta stays
within epsilon.  The entries' own deltas are then informational.

Under both rules open reservations count exactly like charges when a new
amount is checked, which is what makes a reservation a lock on its share.
"""

from __future__ import annotations

import math
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from decimal import Decimal, localcontext
from typing import Any

from smcdp.dp.conversions import rho_capacity, zcdp_epsilon_cks
from smcdp.dp.validation import (
    InvalidParameter,
    check_choice,
    check_delta,
    check_epsilon,
    check_magnitude,
    check_name,
    check_note,
    decimal_amount,
    unfit,
)
from smcdp.errors import PreconditionFailed, SmcdpError

__all__ = [
    "NON_PRIVATE",
    "RULES",
    "STATES",
    "BudgetAccountant",
    "BudgetExceeded",
    "BudgetStatus",
    "Charge",
    "PrivacyBudget",
    "PrivacyCost",
    "charge_amount",
    "charge_on_success",
    "charged_fit",
    "check_budget",
    "check_fits",
    "check_reserve_again",
    "check_transition",
    "fmt_amount",
    "summarize",
    "utc_now",
]

RULES = ("linear", "zcdp")
#: an entry is "reserved" (held), "charged" (spent) or "released" (given back)
STATES = ("reserved", "charged", "released")


class BudgetExceeded(SmcdpError):
    """A spend or reservation does not fit the privacy budget; nothing was recorded.

    Reported as RESOURCE_EXHAUSTED: the request is well formed, the budget is
    what has run out."""

    code = "RESOURCE_EXHAUSTED"


def utc_now() -> str:
    """The current UTC time in ISO 8601 with microseconds: the timestamps of a budget's charges."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


def fmt_amount(d: Decimal | float | None) -> str:
    """Decimals as written (no exponent), floats to 6 significant digits, None as '-'."""
    if d is None:
        return "-"
    if isinstance(d, Decimal):
        return format(d.normalize(), "f") if d != 0 else "0"
    return f"{d:.6g}"


@dataclass(frozen=True)
class Charge:
    """One entry of a budget: a charge, or a reservation and what became of it.

    ``key`` is None for a direct :meth:`PrivacyBudget.spend`.  ``settled_at`` and
    ``reason`` are set when a reservation is committed or released."""

    id: int
    dataset: str | None
    epsilon: Decimal
    delta: Decimal
    rho: Decimal | None
    note: str
    created_at: str
    state: str = "charged"
    key: str | None = None
    reason: str = ""
    settled_at: str | None = None


@dataclass(frozen=True)
class BudgetStatus:
    """Budget, spent, reserved and remaining for one dataset.

    ``remaining = total - spent - reserved``.  Under the ``zcdp`` rule
    ``spent_epsilon`` is the CKS conversion of the rho charged, at the budget's
    delta; ``reserved_epsilon`` is what the open reservations add on top of that
    in the same conversion; ``remaining_rho`` is what can still be reserved or
    charged, and ``remaining_epsilon`` the largest pure-DP amount that fits
    (sqrt(2 remaining_rho)).  Negative remaining values mean the budget was
    overdrawn (only possible through a lowered total, which ``set_budget`` refuses).
    """

    dataset: str | None
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
    reserved_epsilon: Decimal | float = Decimal(0)
    reserved_delta: Decimal = Decimal(0)
    reserved_rho: float | None = None
    n_reserved: int = 0


@dataclass(frozen=True)
class PrivacyCost:
    """What one release (or one learner fit) costs: epsilon, delta and, where the
    mechanism has one, its zCDP rho (None: a pure epsilon-DP cost, rho = eps**2/2)."""

    epsilon: float
    delta: float = 0.0
    rho: float | None = None

    @classmethod
    def pure(cls, epsilon: float) -> PrivacyCost:
        """An epsilon-DP cost (rho = epsilon**2/2); ``inf`` gives :data:`NON_PRIVATE`."""
        return NON_PRIVATE if math.isinf(epsilon) else cls(epsilon, 0.0, epsilon**2 / 2.0)


#: the cost of a non-private computation (no budget admits it)
NON_PRIVATE = PrivacyCost(math.inf, 0.0, math.inf)


# ---------------------------------------------------------------------------
# rule arithmetic shared by every backend
# ---------------------------------------------------------------------------


def _refuse_non_private(epsilon: Any, what: str) -> None:
    if isinstance(epsilon, float | int) and not isinstance(epsilon, bool) and epsilon == math.inf:
        raise BudgetExceeded(f"{what} of epsilon=inf refused: a non-private release never fits a privacy budget")


def charge_amount(
    rule: str, epsilon: Any, delta: Any = 0, rho: Any = None, *, what: str = "charge"
) -> tuple[Decimal, Decimal, Decimal | None]:
    """Validate an amount and fill in its rho under the ``zcdp`` rule.

    Returns exact decimals ``(epsilon, delta, rho)``.  ``epsilon=inf`` (a
    non-private release) raises :class:`BudgetExceeded`: no budget admits it."""
    _refuse_non_private(epsilon, what)
    eps = decimal_amount("epsilon", epsilon, allow_zero=False)
    dlt = decimal_amount("delta", delta, allow_zero=True, upper_one=True)
    r = decimal_amount("rho", rho, allow_zero=False) if rho is not None else None
    if rule == "zcdp" and r is None:
        if dlt > 0:
            raise InvalidParameter("the zcdp rule needs rho for an amount with delta > 0 (rho = Delta^2/(2 sigma^2))")
        with localcontext() as ctx:
            ctx.prec = 50
            r = (eps * eps / 2).normalize()
    return eps, dlt, r


def summarize(
    dataset: str | None, rule: str, epsilon: Decimal, delta: Decimal, entries: Sequence[Charge]
) -> BudgetStatus:
    """The status of a budget from its entries (released ones count for nothing)."""
    charged = [e for e in entries if e.state == "charged"]
    held = [e for e in entries if e.state == "reserved"]
    with localcontext() as ctx:
        ctx.prec = 60
        s_eps = sum((c.epsilon for c in charged), Decimal(0))
        s_dlt = sum((c.delta for c in charged), Decimal(0))
        r_eps = sum((c.epsilon for c in held), Decimal(0))
        r_dlt = sum((c.delta for c in held), Decimal(0))
        if rule == "linear":
            return BudgetStatus(
                dataset=dataset,
                rule=rule,
                epsilon=epsilon,
                delta=delta,
                spent_epsilon=s_eps,
                spent_delta=s_dlt,
                remaining_epsilon=epsilon - s_eps - r_eps,
                remaining_delta=delta - s_dlt - r_dlt,
                spent_rho=None,
                remaining_rho=None,
                n_charges=len(charged),
                reserved_epsilon=r_eps,
                reserved_delta=r_dlt,
                reserved_rho=None,
                n_reserved=len(held),
            )
        s_rho = float(sum((c.rho or Decimal(0) for c in charged), Decimal(0)))
        r_rho = float(sum((c.rho or Decimal(0) for c in held), Decimal(0)))
    cap = rho_capacity(float(epsilon), float(delta))
    spent_eps = zcdp_epsilon_cks(s_rho, float(delta)) if s_rho > 0 else 0.0
    held_eps = (zcdp_epsilon_cks(s_rho + r_rho, float(delta)) - spent_eps) if r_rho > 0 else 0.0
    rem_rho = cap - s_rho - r_rho
    rem_eps = math.sqrt(2 * rem_rho) if rem_rho > 0 else (0.0 if rem_rho == 0 else -1.0)
    return BudgetStatus(
        dataset=dataset,
        rule=rule,
        epsilon=epsilon,
        delta=delta,
        spent_epsilon=spent_eps,
        spent_delta=s_dlt,
        remaining_epsilon=rem_eps,
        remaining_delta=delta,
        spent_rho=s_rho,
        remaining_rho=rem_rho,
        n_charges=len(charged),
        reserved_epsilon=held_eps,
        reserved_delta=r_dlt,
        reserved_rho=r_rho,
        n_reserved=len(held),
    )


def check_zcdp_budget(epsilon: float, delta: float) -> None:
    """A budget under the zcdp rule: delta > 0, and an (epsilon, delta) some rho > 0 converts to within (its status
    is that rho's use: with epsilon = 1e-300, say, no rho could be computed and every status raised)."""
    if delta == 0:
        raise InvalidParameter("the zcdp rule needs a budget delta > 0")
    check_magnitude(epsilon, "epsilon budget (zcdp rule)")
    if not rho_capacity(epsilon, delta) > 0:
        raise InvalidParameter(f"no zCDP rho converts to within epsilon={epsilon!r} at delta={delta!r}")


def check_fits(st: BudgetStatus, eps: Decimal, dlt: Decimal, rho: Decimal | None, *, what: str = "charge") -> None:
    """Raise :class:`BudgetExceeded` unless the amount fits next to what is spent and reserved."""
    where = f" to dataset {st.dataset!r}" if st.dataset is not None else ""
    held = f"; {st.n_reserved} open reservation(s) hold part of it" if st.n_reserved else ""
    if st.rule == "linear":
        if eps > st.remaining_epsilon or dlt > st.remaining_delta:
            raise BudgetExceeded(
                f"{what} of epsilon={fmt_amount(eps)}, delta={fmt_amount(dlt)}{where} refused: "
                f"remaining budget is epsilon={fmt_amount(max(st.remaining_epsilon, Decimal(0)))}, "
                f"delta={fmt_amount(max(st.remaining_delta, Decimal(0)))} "
                f"(of epsilon={fmt_amount(st.epsilon)}, delta={fmt_amount(st.delta)}, rule linear{held})"
            )
        return
    if rho is None or st.spent_rho is None or st.remaining_rho is None:
        raise InvalidParameter("the zcdp rule needs a rho for every amount")
    total = st.spent_rho + (st.reserved_rho or 0.0) + float(rho)
    if zcdp_epsilon_cks(total, float(st.delta)) > float(st.epsilon) * (1 + 1e-12):
        raise BudgetExceeded(
            f"{what} of rho={fmt_amount(rho)} (epsilon={fmt_amount(eps)}){where} refused: "
            f"remaining budget is rho={max(st.remaining_rho, 0.0):.6g} "
            f"(of epsilon={fmt_amount(st.epsilon)} at delta={fmt_amount(st.delta)}, rule zcdp{held})"
        )


def check_reserve_again(existing: Charge, eps: Decimal, dlt: Decimal, rho: Decimal | None) -> Charge:
    """Reserving an existing key: the same amount gets the existing entry back;
    a different amount, or a key already released, is refused."""
    if (existing.epsilon, existing.delta, existing.rho) != (eps, dlt, rho):
        raise PreconditionFailed(
            f"reservation {existing.key!r} already holds epsilon={fmt_amount(existing.epsilon)}, "
            f"delta={fmt_amount(existing.delta)}, rho={fmt_amount(existing.rho)}; "
            f"a different amount (epsilon={fmt_amount(eps)}, delta={fmt_amount(dlt)}, "
            f"rho={fmt_amount(rho)}) cannot be reserved under the same key"
        )
    if existing.state == "released":
        raise PreconditionFailed(
            f"reservation {existing.key!r} was released ({existing.reason or 'no reason given'}); "
            "a key is reserved once, use a new one"
        )
    return existing


def check_transition(existing: Charge | None, key: str, to_state: str) -> bool:
    """Whether ``existing`` may move to ``to_state`` ("charged" or "released").

    Returns False when it already is there (an idempotent repeat: nothing to
    do); raises :class:`~smcdp.errors.PreconditionFailed` for an unknown key or
    the wrong transition."""
    if existing is None:
        raise PreconditionFailed(f"no reservation with key {key!r}")
    if existing.state == to_state:
        return False
    if existing.state != "reserved":
        verb = "commit" if to_state == "charged" else "release"
        raise PreconditionFailed(
            f"cannot {verb} reservation {key!r}: it is already {existing.state}"
            + (" (a charge is never given back)" if existing.state == "charged" else "")
        )
    return True


# ---------------------------------------------------------------------------
# the interface
# ---------------------------------------------------------------------------


class PrivacyBudget(ABC):
    """A privacy budget over one dataset (see the module docstring for the semantics).

    Budgets are shared resources: ``copy.copy`` / ``copy.deepcopy`` return the
    budget itself, so that cloning an estimator (scikit-learn's ``clone``, grid
    search) never duplicates the budget it charges."""

    @property
    @abstractmethod
    def dataset(self) -> str | None:
        """The dataset this budget guards (None for an unnamed in-memory budget)."""

    @abstractmethod
    def status(self) -> BudgetStatus:
        """Budget, spent, reserved and remaining amounts now (a :class:`~smcdp.dp.budget.BudgetStatus`)."""

    @abstractmethod
    def spend(self, epsilon: Any, delta: Any = 0, *, rho: Any = None, note: str = "") -> Charge:
        """Charge a release's cost at once; :class:`~smcdp.dp.budget.BudgetExceeded` if it does not fit (nothing is charged then)."""

    @abstractmethod
    def reserve(self, key: str, epsilon: Any, delta: Any = 0, *, rho: Any = None, note: str = "") -> Charge:
        """Hold a cost under ``key`` until :meth:`commit` or :meth:`release` (idempotent for the same key and amount)."""

    @abstractmethod
    def commit(self, key: str) -> Charge:
        """Turn the reservation ``key`` into a charge (a repeat is a no-op)."""

    @abstractmethod
    def release(self, key: str, reason: str = "") -> Charge:
        """Give the reservation ``key`` back (a charge is never given back)."""

    @abstractmethod
    def reservation(self, key: str) -> Charge | None:
        """The entry reserved under ``key`` (in whatever state), or None."""

    @abstractmethod
    def history(self) -> list[Charge]:
        """Every entry, oldest first, released reservations included."""

    def check(self, epsilon: Any, delta: Any = 0, *, rho: Any = None) -> None:
        """Raise :class:`BudgetExceeded` if the amount does not fit now.

        Advisory: another process may spend in between; ``spend`` and
        ``reserve`` repeat the check atomically with the write."""
        st = self.status()
        eps, dlt, r = charge_amount(st.rule, epsilon, delta, rho)
        check_fits(st, eps, dlt, r)

    def remaining(self) -> dict[str, Any]:
        """What can still be spent: ``epsilon``, ``delta`` (and ``rho`` under the zCDP rule)."""
        st = self.status()
        out: dict[str, Any] = {"epsilon": st.remaining_epsilon, "delta": st.remaining_delta}
        if st.remaining_rho is not None:
            out["rho"] = st.remaining_rho
        return out

    def reservations(self) -> list[Charge]:
        """The open reservations (state "reserved")."""
        return [c for c in self.history() if c.state == "reserved"]

    def __copy__(self) -> PrivacyBudget:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> PrivacyBudget:
        return self


class BudgetAccountant(PrivacyBudget):
    """An in-memory :class:`PrivacyBudget` (thread-safe, one process, not durable).

    ``BudgetAccountant(epsilon, delta=0, rule="linear"|"zcdp", dataset=None)``.
    The persistent implementation is :class:`smcdp.dp.ledger.LedgerBudget`.
    """

    def __init__(self, epsilon: float, delta: float = 0.0, *, rule: str = "linear", dataset: str | None = None):
        self.epsilon = check_epsilon(epsilon, "epsilon budget", allow_inf=False)
        self.delta = check_delta(delta)
        self.rule = check_choice(rule, "rule", RULES)
        if rule == "zcdp":
            check_zcdp_budget(self.epsilon, self.delta)
        self._dataset = None if dataset is None else check_name(dataset)
        self._total = (Decimal(repr(self.epsilon)), Decimal(repr(self.delta)))
        self._entries: list[Charge] = []
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"BudgetAccountant(epsilon={self.epsilon!r}, delta={self.delta!r}, rule={self.rule!r})"

    @property
    def dataset(self) -> str | None:
        return self._dataset

    def status(self) -> BudgetStatus:
        with self._lock:
            return self._status()

    def _status(self) -> BudgetStatus:
        return summarize(self._dataset, self.rule, *self._total, self._entries)

    def _add(self, key: str | None, state: str, epsilon: Any, delta: Any, rho: Any, note: str, what: str) -> Charge:
        eps, dlt, r = charge_amount(self.rule, epsilon, delta, rho, what=what)
        note = check_note(note)
        with self._lock:
            if key is not None:
                existing = self._find(key)
                if existing is not None:
                    return check_reserve_again(existing, eps, dlt, r)
            check_fits(self._status(), eps, dlt, r, what=what)
            entry = Charge(len(self._entries) + 1, self._dataset, eps, dlt, r, note, utc_now(), state, key)
            self._entries.append(entry)
            return entry

    def spend(self, epsilon: Any, delta: Any = 0, *, rho: Any = None, note: str = "") -> Charge:
        return self._add(None, "charged", epsilon, delta, rho, note, "charge")

    def reserve(self, key: str, epsilon: Any, delta: Any = 0, *, rho: Any = None, note: str = "") -> Charge:
        return self._add(check_name(key, "reservation key"), "reserved", epsilon, delta, rho, note, "reservation")

    def _find(self, key: str) -> Charge | None:
        return next((c for c in self._entries if c.key == key), None)

    def _settle(self, key: str, to_state: str, reason: str) -> Charge:
        key = check_name(key, "reservation key")
        reason = check_note(reason, "reason")
        with self._lock:
            entry = self._find(key)
            if not check_transition(entry, key, to_state):
                assert entry is not None  # check_transition raised for a missing key
                return entry
            assert entry is not None
            i = self._entries.index(entry)
            self._entries[i] = replace(entry, state=to_state, reason=reason, settled_at=utc_now())
            return self._entries[i]

    def commit(self, key: str) -> Charge:
        return self._settle(key, "charged", "")

    def release(self, key: str, reason: str = "") -> Charge:
        return self._settle(key, "released", reason)

    def reservation(self, key: str) -> Charge | None:
        key = check_name(key, "reservation key")
        with self._lock:
            return self._find(key)

    def history(self) -> list[Charge]:
        with self._lock:
            return list(self._entries)


# ---------------------------------------------------------------------------
# charging a computation
# ---------------------------------------------------------------------------


def check_budget(budget: Any, name: str = "accountant") -> PrivacyBudget | None:
    """``None`` (no accounting) or a :class:`PrivacyBudget`; anything else is refused."""
    if budget is None or isinstance(budget, PrivacyBudget):
        return budget
    raise InvalidParameter(
        f"{name} must be None or a PrivacyBudget (BudgetAccountant, LedgerBudget), got {type(budget).__name__}"
    )


@contextmanager
def charge_on_success(budget: PrivacyBudget | None, cost: PrivacyCost, *, note: str) -> Iterator[Charge | None]:
    """Reserve ``cost`` before the block, charge it when the block succeeds,
    give it back when the block raises (its result never left it).

    This is check-then-spend made atomic: the reservation is the check, and no
    concurrent spend can take the budget between the check and the spend.
    With ``budget=None`` it does nothing."""
    if budget is None:
        yield None
        return
    key = f"fit-{uuid.uuid4().hex}"
    entry = budget.reserve(key, cost.epsilon, cost.delta, rho=cost.rho, note=note)
    try:
        yield entry
    except BaseException as exc:
        budget.release(key, reason=f"{note}: {type(exc).__name__}")
        raise
    budget.commit(key)


@contextmanager
def charged_fit(estimator: Any, budget: PrivacyBudget | None, cost: PrivacyCost, *, note: str) -> Iterator[None]:
    """A learner's ``fit`` (:func:`charge_on_success` around it): a fit that raises leaves ``estimator``
    unfitted (:func:`~smcdp.dp.validation.unfit`: not half of this fit and half of an earlier one), and so
    does one whose charge cannot be committed -- what was not spent is not released.  A refusal of the
    reservation itself (the budget is spent) leaves an earlier fit as it was."""
    fitted = False
    try:
        with charge_on_success(budget, cost, note=note):
            try:
                yield
            except BaseException:
                unfit(estimator)
                raise
            fitted = True
    except BaseException:
        if fitted:  # the block succeeded and the commit failed
            unfit(estimator)
        raise
