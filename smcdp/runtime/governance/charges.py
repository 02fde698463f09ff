"""A party's ``[budget]`` and the privacy charges of its sessions (docs/governance.md).

::

    [budget]
    dataset = "alice-patients"     # the dataset this party's inputs belong to (ledger name)
    ledger = "ledger.sqlite"       # default: <data_dir>/ledger.sqlite
    epsilon = 10.0                 # total; written to the ledger at start-up (omit to use the
    delta = 1e-6                   #   budget already set there with `smcdp budget set`)
    rule = "linear"                # or "zcdp"

A DP release over the party's data is charged through the one budget interface
(:class:`smcdp.dp.budget.PrivacyBudget`, backed by the SQLite ledger):

* on admission, ``reserve(session id, epsilon, delta)`` -- one transaction; the
  reservation is the lock, so concurrent proposals never overspend;
* at the protocol's release point (the plug-in's release gate) ``commit``: from
  then on the cost stays charged, whatever happens to the session;
* when the session ends: success commits (if the release point did not already),
  failure releases what is still only reserved -- the gate commits *before* the
  release message is sent, so a reservation still open at the end means nothing
  noisy has left the party;
* after a restart, an open reservation of this party whose session no longer runs
  is released for the same reason (a pending, approved proposal keeps its own);
* a session that fails *resumably* releases its reservation too (a peer's
  Abort UNAVAILABLE must not hold a budget for ever); a resume is admitted again and
  reserves anew.  A ledger key is reserved once, so a session's later reservations are
  keyed ``<session id>/resume-<n>`` (``/`` never occurs in a session id).

Every step is written to the audit trail by the caller (:mod:`smcdp.runtime.governance.gate`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from smcdp.dp.budget import RULES, Charge, fmt_amount
from smcdp.dp.ledger import Ledger, LedgerBudget
from smcdp.errors import PreconditionFailed, SmcdpError
from smcdp.net.config import ConfigError, check_keys, path_value, relative_path
from smcdp.net.limits import finite_number
from smcdp.plugins.base import SessionSummary

log = logging.getLogger("smcdp.budget")

DEFAULT_LEDGER = "ledger.sqlite"
#: separates a session id from the number of a later reservation of it
RESUME_KEY = "/resume-"


def _sqlite_file(path: Path) -> bool:
    """``path`` is a file that begins as every SQLite database does (opening anything else may rewrite it)."""
    try:
        with open(path, "rb") as f:
            return f.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


@dataclass(frozen=True)
class BudgetConfig:
    """A party's ``[budget]``: which ledger dataset guards its data, and optionally its total."""

    dataset: str
    ledger: Path | None = None  # None: <data_dir>/ledger.sqlite
    epsilon: float | None = None  # None: the ledger already holds the budget
    delta: float = 0.0
    rule: str = "linear"

    def ledger_path(self, data_dir: Path) -> Path:
        return self.ledger if self.ledger is not None else data_dir / DEFAULT_LEDGER


def parse_budget(t: Mapping[str, Any], base: Path) -> BudgetConfig:
    check_keys(t, {"dataset", "ledger", "epsilon", "delta", "rule"}, "[budget]")
    dataset = t.get("dataset")
    if (
        not isinstance(dataset, str)
        or not dataset
        or len(dataset) > 200
        or not dataset.isprintable()
        or dataset != dataset.strip()
    ):
        raise ConfigError(f"budget.dataset must be a name of 1-200 printable characters, got {dataset!r}")
    ledger = path_value(base, t, "ledger", "budget") if "ledger" in t else None
    eps = t.get("epsilon")
    if eps is not None and (not finite_number(eps) or not eps > 0):
        raise ConfigError(f"budget.epsilon must be a positive finite number, got {eps!r}")
    delta = t.get("delta", 0.0)
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0 <= delta < 1:
        raise ConfigError(f"budget.delta must be a number in [0, 1), got {delta!r}")
    rule = t.get("rule", "linear")
    if rule not in RULES:
        raise ConfigError(f"budget.rule must be one of {', '.join(RULES)}, got {rule!r}")
    if eps is None and ("delta" in t or "rule" in t):
        raise ConfigError(
            "budget.delta and budget.rule need budget.epsilon (without it the ledger's "
            "budget, set with `smcdp budget set`, is used as it is)"
        )
    return BudgetConfig(dataset, ledger, None if eps is None else float(eps), float(delta), rule)


def budget_to_dict(b: BudgetConfig, base: Path | None) -> dict:
    out: dict[str, Any] = {"dataset": b.dataset}
    if b.ledger is not None:
        out["ledger"] = relative_path(b.ledger, base)
    if b.epsilon is not None:
        out.update(epsilon=b.epsilon, delta=b.delta, rule=b.rule)
    return out


def _same(a: Decimal, b: float) -> bool:
    return a == Decimal(repr(float(b)))  # the ledger keeps floats by their shortest repr


class SessionCharges:
    """The ledger budget of one party and the reservations its sessions hold.

    Reservations are keyed by session id; their note starts with ``party <name>: session``
    so that a restart can tell this party's reservations from an operator's own.
    """

    def __init__(self, config: BudgetConfig, data_dir: Path, party: str) -> None:
        self.config = config
        self.party = party
        self.path = config.ledger_path(data_dir)
        self.budget: LedgerBudget | None = None
        self._marker = f"party {party}: session "

    @property
    def dataset(self) -> str:
        return self.config.dataset

    @property
    def _opened(self) -> LedgerBudget:
        """The budget :meth:`open` set (the gate opens the ledger before it serves any session)."""
        assert self.budget is not None, "SessionCharges.open() first"
        return self.budget

    def open(self, used_before: str | None = None) -> tuple[Any, Any] | None:
        """Open the ledger; write the configured total.  Returns (old, new) epsilon if it changed.

        ``used_before``: how this party's audit trail shows the dataset's ledger in use before (its budget set, a
        charge or a reservation).  Then a missing or empty ledger, or one without the dataset, is a lost ledger,
        refused (PreconditionFailed): made anew, it would hand the whole budget back (what was spent and reserved
        forgotten).  Its operator restores it, or starts a new audit trail explicitly (``smcdp audit new``)."""
        if used_before is not None and not _sqlite_file(self.path):
            raise self._lost(used_before, "is missing, empty or not an SQLite file")  # not opened: left as it is
        ledger = Ledger(self.path)
        try:
            os.chmod(self.path, 0o600)
        except OSError:  # pragma: no cover - e.g. a read-only mount; the ledger is still usable
            pass
        cfg = self.config
        known = cfg.dataset in ledger.datasets()
        if used_before is not None and not known:
            raise self._lost(used_before, f"has no dataset {cfg.dataset!r}")
        changed = None
        if cfg.epsilon is not None:
            before = ledger.status(cfg.dataset) if known else None
            if before is None or not (
                _same(before.epsilon, cfg.epsilon) and _same(before.delta, cfg.delta) and before.rule == cfg.rule
            ):
                try:
                    ledger.set_budget(cfg.dataset, cfg.epsilon, cfg.delta, rule=cfg.rule)
                except SmcdpError as exc:
                    raise ConfigError(f"[budget] of dataset {cfg.dataset!r} in {self.path}: {exc}") from None
                changed = (
                    None if before is None else fmt_amount(before.epsilon),
                    fmt_amount(Decimal(repr(cfg.epsilon))),
                )
        elif not known:
            raise ConfigError(
                f"[budget]: dataset {cfg.dataset!r} has no budget in {self.path}; give "
                "budget.epsilon or run `smcdp budget set` first"
            )
        self.budget = ledger.budget(cfg.dataset)
        return changed

    def _lost(self, used_before: str, what: str) -> PreconditionFailed:
        return PreconditionFailed(
            f"privacy ledger {self.path} {what}, although this party's audit trail shows dataset "
            f"{self.config.dataset!r} charged against it before ({used_before}). It is not made anew silently (that "
            "would forget what was spent): restore it from a backup, or start a new audit trail explicitly with "
            "'smcdp audit new --config FILE --reason TEXT'"
        )

    def status(self) -> dict:
        st = self._opened.status()
        return {
            "dataset": st.dataset,
            "rule": st.rule,
            "epsilon": fmt_amount(st.epsilon),
            "delta": fmt_amount(st.delta),
            "spent_epsilon": fmt_amount(st.spent_epsilon),
            "reserved_epsilon": fmt_amount(st.reserved_epsilon),
            "remaining_epsilon": fmt_amount(st.remaining_epsilon),
            "open_reservations": st.n_reserved,
        }

    # ------------------------------------------------------------------ per session
    def reserve(self, key: str, summary: SessionSummary, initiator: str) -> Charge:
        """Hold the session's cost under ``key`` (raises BudgetExceeded; idempotent for the same key)."""
        sid = key.split(RESUME_KEY)[0]
        note = f"{self._marker}{sid} ({summary.protocol}, initiated by {initiator})"
        return self._opened.reserve(key, summary.epsilon, summary.delta, rho=summary.rho, note=note)

    def held(self, key: str) -> Charge | None:
        """This party's reservation ``key`` if it is still open."""
        c = self._opened.reservation(key)
        if c is None or c.state != "reserved" or not c.note.startswith(self._marker):
            return None
        return c

    def commit(self, key: str) -> Charge | None:
        """reserved -> charged; None when there is nothing open (idempotent)."""
        if self.held(key) is None:
            return None
        return self._opened.commit(key)

    def release(self, key: str, reason: str) -> Charge | None:
        """reserved -> released; None when there is nothing open.  Never releases a charge."""
        if self.held(key) is None:
            return None
        try:
            return self._opened.release(key, reason[:1000])
        except PreconditionFailed:  # committed in between (the release point): it stays charged
            return None

    def entries(self, session_id: str) -> list[Charge]:
        """Every entry of this party for ``session_id`` (its first key and its resumes'), oldest first."""
        return [
            c
            for c in self._opened.history()
            if c.key is not None
            and c.note.startswith(self._marker)
            and (c.key == session_id or c.key.startswith(session_id + RESUME_KEY))
        ]

    def next_key(self, session_id: str) -> str:
        """The key of a new reservation for ``session_id`` (its first, or the next resume's)."""
        n = len(self.entries(session_id))
        return session_id if n == 0 else f"{session_id}{RESUME_KEY}{n}"

    def orphans(self, keep: Iterable[str]) -> list[Charge]:
        """Open reservations of this party whose keys are not in ``keep``."""
        keep = set(keep)
        return [c for c in self._opened.reservations() if c.note.startswith(self._marker) and c.key not in keep]
