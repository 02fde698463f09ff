"""``smcdp account`` and ``smcdp budget ...`` subcommands.

``register(subparsers)`` adds the parsers; each handler returns the exit status:
0 on success, 1 when a budget charge or reservation is refused (RESOURCE_EXHAUSTED),
a dataset or reservation is unknown or a transition is not allowed
(FAILED_PRECONDITION), 2 for invalid arguments.  Messages for failures go to stderr.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
from collections.abc import Sequence
from typing import Any

from smcdp.dp.accountants import CONVERSIONS, METHODS, account
from smcdp.dp.budget import RULES, BudgetExceeded, Charge, fmt_amount
from smcdp.dp.ledger import Ledger, default_ledger_path
from smcdp.dp.validation import check_delta, decimal_amount
from smcdp.errors import InvalidMessage, PreconditionFailed, SmcdpError

__all__ = ["parse_step", "register"]

#: the most releases one step may count (float arithmetic of the accountants is exact below 2^53)
MAX_COUNT = 1 << 53


def parse_step(text: str, what: str) -> tuple[float, int]:
    """Parse ``VALUE:COUNT`` (or ``VALUE``, count 1) with VALUE > 0 and COUNT >= 1."""
    parts = text.split(":")
    if len(parts) > 2 or not parts[0]:
        raise argparse.ArgumentTypeError(f"{what} must look like VALUE:COUNT, got {text!r}")
    try:
        value = float(parts[0])
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what}: {parts[0]!r} is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{what}: value must be positive and finite, got {parts[0]!r}")
    count = 1
    if len(parts) == 2:
        try:
            count = int(parts[1])
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what}: count {parts[1]!r} is not an integer") from None
        if not 1 <= count <= MAX_COUNT:
            raise argparse.ArgumentTypeError(f"{what}: count must be between 1 and 2^53, got {parts[1]!r}")
    return value, count


def _gaussian_step(text: str) -> tuple[float, int]:
    return parse_step(text, "--gaussian SIGMA:COUNT")


def _laplace_step(text: str) -> tuple[float, int]:
    return parse_step(text, "--laplace B:COUNT")


def _arg_type(check: Any) -> Any:
    """An argparse type from a validation function: its InvalidMessage becomes a usage error."""

    def parse(text: str) -> Any:
        try:
            return check(text)
        except InvalidMessage as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def _float_delta(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InvalidMessage(f"delta must be a number, got {text!r}") from None
    return check_delta(value)


_delta_arg = _arg_type(_float_delta)
_positive_decimal = _arg_type(lambda t: decimal_amount("value", t, allow_zero=False))
_delta_decimal = _arg_type(lambda t: decimal_amount("delta", t, allow_zero=True, upper_one=True))


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return "inf" if obj > 0 else ("-inf" if obj < 0 else "nan")
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    return obj


def _err(prog: str, msg: str) -> None:
    print(f"{prog}: error: {msg}", file=sys.stderr)


# ---------------------------------------------------------------------------
# handlers
# ---------------------------------------------------------------------------


def _cmd_account(args: argparse.Namespace) -> int:
    try:
        if args.method in ("advanced", "zcdp", "rdp") and args.delta == 0:
            raise InvalidMessage(f"--method {args.method} needs --delta > 0")
        if args.gaussian and args.delta == 0:
            raise InvalidMessage("Gaussian steps have no pure-DP guarantee: give --delta > 0")
        out = account(
            args.method,
            args.delta,
            gaussian=args.gaussian or [],
            laplace=args.laplace or [],
            conversion=args.conversion,
        )
    except SmcdpError as exc:
        _err("smcdp account", str(exc))
        return 2
    print(json.dumps(_jsonable(out), indent=2, sort_keys=False))
    return 0


def _ledger(args: argparse.Namespace, *, create: bool = False) -> Ledger:
    """The ledger a budget command names; only ``budget set`` makes a new one."""
    return Ledger(args.ledger, create=create)


def _budget_command(prog: str):
    """Exit codes of the budget commands: 1 for a refused charge or reservation
    (BudgetExceeded, RESOURCE_EXHAUSTED) or an unknown budget / reservation or a refused
    transition (FAILED_PRECONDITION), 2 for invalid input; the message goes to stderr."""

    def wrap(handler):
        @functools.wraps(handler)
        def run(args: argparse.Namespace) -> int:
            try:
                return handler(args)
            except BudgetExceeded as exc:
                _err(prog, f"refused: {exc}")
                return 1
            except InvalidMessage as exc:
                _err(prog, str(exc))
                return 2
            except PreconditionFailed as exc:
                _err(prog, str(exc))
                return 1

        return run

    return wrap


@_budget_command("smcdp budget set")
def _cmd_set(args: argparse.Namespace) -> int:
    st = _ledger(args, create=True).set_budget(args.dataset, args.epsilon, args.delta, rule=args.rule)
    print(
        f"budget for {st.dataset!r}: epsilon={fmt_amount(st.epsilon)}, delta={fmt_amount(st.delta)}, rule={st.rule} "
        f"(remaining epsilon={fmt_amount(st.remaining_epsilon)}, delta={fmt_amount(st.remaining_delta)})"
    )
    return 0


@_budget_command("smcdp budget charge")
def _cmd_charge(args: argparse.Namespace) -> int:
    ledger = _ledger(args)
    ch = ledger.charge(args.dataset, args.epsilon, args.delta, rho=args.rho, note=args.note)
    st = ledger.status(args.dataset)
    extra = f", rho={fmt_amount(ch.rho)}" if ch.rho is not None else ""
    print(
        f"charged {st.dataset!r}: epsilon={fmt_amount(ch.epsilon)}, delta={fmt_amount(ch.delta)}{extra} (charge #{ch.id}); "
        f"remaining epsilon={fmt_amount(st.remaining_epsilon)}, delta={fmt_amount(st.remaining_delta)}"
    )
    return 0


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [len(h) for h in headers]
    for r in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, r)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
    sep = "  ".join("-" * w for w in widths)
    body = ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join([line, sep, *body])


@_budget_command("smcdp budget show")
def _cmd_show(args: argparse.Namespace) -> int:
    ledger = _ledger(args)
    names = [args.dataset] if args.dataset is not None else ledger.datasets()
    statuses = [ledger.status(n) for n in names]
    headers = [
        "dataset",
        "rule",
        "epsilon",
        "spent_eps",
        "reserved_eps",
        "remaining_eps",
        "delta",
        "spent_delta",
        "reserved_delta",
        "remaining_delta",
        "spent_rho",
        "reserved_rho",
        "remaining_rho",
        "charges",
        "reservations",
    ]
    rows = [
        [
            st.dataset or "-",
            st.rule,
            fmt_amount(st.epsilon),
            fmt_amount(st.spent_epsilon),
            fmt_amount(st.reserved_epsilon),
            fmt_amount(st.remaining_epsilon),
            fmt_amount(st.delta),
            fmt_amount(st.spent_delta),
            fmt_amount(st.reserved_delta),
            fmt_amount(st.remaining_delta),
            fmt_amount(st.spent_rho),
            fmt_amount(st.reserved_rho),
            fmt_amount(st.remaining_rho),
            str(st.n_charges),
            str(st.n_reserved),
        ]
        for st in statuses
    ]
    if not rows:
        print(f"no budgets in {ledger.path}")
        return 0
    print(_table(headers, rows))
    return 0


@_budget_command("smcdp budget history")
def _cmd_history(args: argparse.Namespace) -> int:
    ledger = _ledger(args)
    charges = ledger.history(args.dataset)
    st = ledger.status(args.dataset)
    print(
        f"dataset {st.dataset!r}: budget epsilon={fmt_amount(st.epsilon)}, delta={fmt_amount(st.delta)}, rule={st.rule}"
    )
    rows = [
        [
            str(c.id),
            c.created_at,
            c.state,
            c.key or "-",
            fmt_amount(c.epsilon),
            fmt_amount(c.delta),
            fmt_amount(c.rho),
            c.note,
            c.reason,
        ]
        for c in charges
    ]
    if rows:
        print(_table(["id", "time (UTC)", "state", "key", "epsilon", "delta", "rho", "note", "reason"], rows))
    else:
        print("no charges")
    reserved = (
        f"; reserved epsilon={fmt_amount(st.reserved_epsilon)}, delta={fmt_amount(st.reserved_delta)} "
        f"by {st.n_reserved} open reservation(s)"
        if st.n_reserved
        else ""
    )
    print(f"remaining epsilon={fmt_amount(st.remaining_epsilon)}, delta={fmt_amount(st.remaining_delta)}{reserved}")
    return 0


def _describe(verb: str, c: Charge) -> str:
    rho = f", rho={fmt_amount(c.rho)}" if c.rho is not None else ""
    return (
        f"{verb} {c.dataset!r} key {c.key!r}: epsilon={fmt_amount(c.epsilon)}, delta={fmt_amount(c.delta)}{rho} "
        f"(entry #{c.id}, {c.state})"
    )


@_budget_command("smcdp budget reserve")
def _cmd_reserve(args: argparse.Namespace) -> int:
    c = _ledger(args).reserve(args.dataset, args.key, args.epsilon, args.delta, rho=args.rho, note=args.note)
    print(_describe("reserved", c))
    return 0


@_budget_command("smcdp budget commit")
def _cmd_commit(args: argparse.Namespace) -> int:
    print(_describe("committed", _ledger(args).commit(args.dataset, args.key)))
    return 0


@_budget_command("smcdp budget release")
def _cmd_release(args: argparse.Namespace) -> int:
    print(_describe("released", _ledger(args).release(args.dataset, args.key, args.reason)))
    return 0


# ---------------------------------------------------------------------------
# registration
# ---------------------------------------------------------------------------


def _add_ledger_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--ledger",
        metavar="PATH",
        default=None,
        help=f"SQLite ledger file (default: $SMCDP_LEDGER or {default_ledger_path()})",
    )


def register(subparsers: Any) -> None:
    """Add ``account`` and ``budget`` to an argparse subparsers object."""
    p = subparsers.add_parser(
        "account",
        help="compose Gaussian / Laplace steps and print the (epsilon, delta) guarantee as JSON",
        description="Compose noise steps with one accounting method and print JSON with epsilon, delta "
        "(and rho for zcdp).  SIGMA is the Gaussian noise multiplier sigma / L2 sensitivity; B is the "
        "Laplace scale / L1 sensitivity (each Laplace step is 1/B-DP).",
    )
    p.add_argument(
        "--method",
        required=True,
        choices=list(METHODS),
        help="rdp is the moments accountant (real orders)",
    )
    p.add_argument("--delta", required=True, type=_delta_arg, metavar="D", help="total delta")
    p.add_argument(
        "--gaussian",
        action="append",
        type=_gaussian_step,
        metavar="SIGMA:COUNT",
        default=[],
    )
    p.add_argument("--laplace", action="append", type=_laplace_step, metavar="B:COUNT", default=[])
    p.add_argument(
        "--conversion",
        choices=list(CONVERSIONS),
        default="cks",
        help="zCDP/RDP to (eps, delta) conversion: Canonne-Kamath-Steinke (default) or the classic bound",
    )
    p.set_defaults(func=_cmd_account)

    b = subparsers.add_parser(
        "budget",
        help="privacy-budget ledger (SQLite)",
        description="Per-dataset privacy budgets; every release is charged first.",
    )
    bs = b.add_subparsers(dest="budget_command", metavar="{set,charge,show,history,reserve,commit,release}")
    bs.required = True

    s = bs.add_parser("set", help="create or change a dataset's budget")
    s.add_argument("dataset")
    s.add_argument("--epsilon", required=True, type=_positive_decimal, metavar="E")
    s.add_argument("--delta", required=True, type=_delta_decimal, metavar="D")
    s.add_argument(
        "--rule",
        choices=list(RULES),
        default="linear",
        help="composition rule (default linear)",
    )
    _add_ledger_arg(s)
    s.set_defaults(func=_cmd_set)

    def amount_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--epsilon", required=True, type=_positive_decimal, metavar="E")
        p.add_argument("--delta", type=_delta_decimal, default="0", metavar="D")
        p.add_argument(
            "--rho",
            type=_positive_decimal,
            default=None,
            metavar="RHO",
            help="zCDP cost (needed under the zcdp rule when delta > 0)",
        )
        p.add_argument("--note", default="", metavar="TEXT")
        _add_ledger_arg(p)

    c = bs.add_parser("charge", help="record a release; exit 1 if it would exceed the budget")
    c.add_argument("dataset")
    amount_args(c)
    c.set_defaults(func=_cmd_charge)

    sh = bs.add_parser("show", help="table of budgets, spent and remaining")
    sh.add_argument("dataset", nargs="?")
    _add_ledger_arg(sh)
    sh.set_defaults(func=_cmd_show)

    h = bs.add_parser("history", help="all charges of a dataset")
    h.add_argument("dataset")
    _add_ledger_arg(h)
    h.set_defaults(func=_cmd_history)

    r = bs.add_parser(
        "reserve",
        help="hold an amount under KEY until it is committed or released; exit 1 if it does not fit",
    )
    r.add_argument("dataset")
    r.add_argument("key")
    amount_args(r)
    r.set_defaults(func=_cmd_reserve)

    cm = bs.add_parser("commit", help="turn the reservation KEY into a charge")
    cm.add_argument("dataset")
    cm.add_argument("key")
    _add_ledger_arg(cm)
    cm.set_defaults(func=_cmd_commit)

    rl = bs.add_parser("release", help="give the reservation KEY back (nothing was released with it)")
    rl.add_argument("dataset")
    rl.add_argument("key")
    rl.add_argument("--reason", default="", metavar="TEXT")
    _add_ledger_arg(rl)
    rl.set_defaults(func=_cmd_release)
