"""``smcdp session list|show|approve|reject`` and ``smcdp audit verify|show`` (docs/governance.md).

The session commands are operator calls on the party's own Control service (the
party's own certificate, from ``--config``).  The audit commands read the party's
data directory directly and need no running party.

Exit status: 0 success; 1 refused or failed (e.g. a proposal that is no longer pending,
a tampered audit log, or one a peer's witnessed head contradicts); 2 invalid arguments or
an unreachable party; ``audit verify`` exits 3 when the only damage is an incomplete last
line (a crash mid-write, repaired by the party when it starts), and with ``--witnesses``
4 when no witnessed head could be checked.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from smcdp.cli.argtypes import nonempty, positive_int
from smcdp.client import PartyClient
from smcdp.errors import InvalidMessage, SmcdpError
from smcdp.net.tls import TlsMaterial
from smcdp.runtime.config import load_config
from smcdp.runtime.governance import audit
from smcdp.runtime.governance.witness import check_log, fetch_witnessed, heads_from_file, verdicts

EXIT_TORN = 3
EXIT_UNWITNESSED = 4


def _fail(exc: BaseException) -> int:
    print(f"error [{getattr(exc, 'code', 'INTERNAL')}]: {exc}", file=sys.stderr)
    return 2 if isinstance(exc, InvalidMessage) or getattr(exc, "code", "") == "UNAVAILABLE" else 1


def _show(v) -> str:
    return json.dumps(v, ensure_ascii=True, sort_keys=True)


def _num(v) -> str:
    return f"{v:g}" if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)


def _readable(info: dict) -> str:
    """What an operator needs to decide, one field a line (strings JSON-escaped)."""
    lines = [
        f"session    {info.get('session_id')}  [{info.get('kind')}: {info.get('state')}]",
        f"protocol   {info.get('protocol')}",
        f"initiator  {info.get('initiator')}",
        f"this party {info.get('role')}",
        f"roles      {_show(info.get('roles'))}",
        f"params     {_show(info.get('params'))}",
        f"epsilon    {_num(info['epsilon']) if info.get('epsilon') is not None else '- (no charge to this party)'}"
        + (f"  delta {_num(info['delta'])}" if info.get("delta") else ""),
    ]
    s = info.get("summary") or {}
    if s:
        lines.append(f"keys       {_show(s.get('key_bits'))}")
        for o in s.get("outputs") or []:
            lines.append(
                f"output     {o['name']} -> roles {', '.join(o['recipients'])}"
                f" ({'differentially private' if o['dp'] else 'exact'})"
            )
    if info.get("seeded"):
        lines.append("seed       YES (the initiator's seed would replace this party's randomness)")
    for k in ("received_at", "expires_at", "decided_at", "reason", "started_at", "finished_at", "error"):
        if info.get(k):
            lines.append(f"{k:<10} {info[k] if isinstance(info[k], str) else _show(info[k])}")
    if info.get("session"):
        lines.append(f"session    {info['session'].get('state')}")
    return "\n".join(lines)


def _cmd_list(args) -> int:
    try:
        items = [i.as_dict() for i in PartyClient.from_config(args.config).sessions(pending_only=args.pending)]
    except SmcdpError as exc:
        return _fail(exc)
    if args.json:
        print(json.dumps(items, indent=2, sort_keys=True))
        return 0
    if not items:
        print("no pending proposals" if args.pending else "no proposals or sessions")
        return 0
    print(f"{'SESSION':<40} {'STATE':<10} {'PROTOCOL':<16} {'INITIATOR':<12} {'ROLE':<10} {'EPSILON':<8} EXPIRES")
    for i in items:
        eps = "-" if i.get("epsilon") is None else _num(i["epsilon"])
        print(
            f"{i['session_id']:<40} {i.get('state')!s:<10} {i.get('protocol')!s:<16} "
            f"{i.get('initiator')!s:<12} {i.get('role')!s:<10} {eps:<8} {i.get('expires_at') or ''}"
        )
    return 0


def _operator_cmd(call, render) -> int:
    try:
        info = call()
    except SmcdpError as exc:
        return _fail(exc)
    print(render(info))
    return 0


def _cmd_show(args) -> int:
    return _operator_cmd(
        lambda: PartyClient.from_config(args.config).show(args.session_id).as_dict(),
        lambda info: json.dumps(info, indent=2, sort_keys=True) if args.json else _readable(info),
    )


def _cmd_approve(args) -> int:
    return _operator_cmd(
        lambda: PartyClient.from_config(args.config).approve(args.session_id).as_dict(),
        lambda info: (
            f"session {info['session_id']}: approved"
            + (f" (epsilon {_num(info['epsilon'])} reserved)" if info.get("epsilon") is not None else "")
        ),
    )


def _cmd_reject(args) -> int:
    return _operator_cmd(
        lambda: PartyClient.from_config(args.config).reject(args.session_id, args.reason).as_dict(),
        lambda info: f"session {info['session_id']}: rejected ({info.get('reason')})",
    )


def register_session_commands(sp) -> None:
    """Add list/show/approve/reject to ``smcdp session``."""
    s = sp.add_parser("list", help="proposals and sessions at this party (--pending: waiting for you)")
    s.add_argument("--config", required=True, help="this party's TOML configuration")
    s.add_argument("--pending", action="store_true", help="only proposals waiting for this operator")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_cmd_list)
    s = sp.add_parser("show", help="what a proposal asks: protocol, roles, parameters, initiator, epsilon")
    s.add_argument("session_id", metavar="ID")
    s.add_argument("--config", required=True)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_cmd_show)
    s = sp.add_parser("approve", help="approve a pending proposal (reserves its privacy cost)")
    s.add_argument("session_id", metavar="ID")
    s.add_argument("--config", required=True)
    s.set_defaults(func=_cmd_approve)
    s = sp.add_parser("reject", help="reject a proposal; the initiator is told the reason")
    s.add_argument("session_id", metavar="ID")
    s.add_argument("--config", required=True)
    s.add_argument("--reason", required=True, help="1-1000 printable characters")
    s.set_defaults(func=_cmd_reject)


# ------------------------------------------------------------------ audit
def _data_dir(args) -> Path:
    if (args.data_dir is None) == (args.config is None):
        raise InvalidMessage("give --data-dir DIR or --config FILE")
    return Path(args.data_dir) if args.data_dir is not None else load_config(args.config).data_dir


def _cmd_verify(args) -> int:
    wanted = args.witnesses or args.witness_file
    try:
        if wanted and args.config is None:
            raise InvalidMessage("--witnesses and --witness-file need --config FILE (the party's name, CA and peers)")
        d = _data_dir(args)
        v = audit.verify_log(d)
        findings, unreachable = _witnessed(args) if wanted else ([], {})
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except SmcdpError as exc:
        return _fail(exc)
    if args.json:
        out = v.as_dict()
        if wanted:
            out["witnesses"] = [vars(f) for f in findings]
            out["by_witness"] = verdicts(findings)
            out["unreachable"] = unreachable
        print(json.dumps(out, indent=2))
    log = d / audit.LOG_NAME
    if not v.ok:
        if not args.json:
            kind = "TORN" if v.torn else "TAMPERED OR DAMAGED"
            print(f"{log}: {kind} at line {v.bad_line}: {v.problem}", file=sys.stderr)
            print(f"the first {v.lines} lines verify (head sha256 {v.head})", file=sys.stderr)
        return EXIT_TORN if v.torn else 1
    if not args.json:
        print(f"{log}: intact, {v.lines} lines, head sha256 {v.head}" + (f" ({v.note})" if v.note else ""))
    if not wanted:
        return 0
    return _report_witnesses(findings, unreachable, quiet=args.json)


def _witnessed(args) -> tuple[list, dict[str, str]]:
    """What peers (``--witnesses``) and files (``--witness-file``) say about this party's log."""
    cfg = load_config(args.config)
    heads: list[Any] = []
    unreachable: dict[str, str] = {}
    if args.witnesses:
        heads, unreachable = asyncio.run(fetch_witnessed(cfg, TlsMaterial.load(cfg.tls.ca, cfg.tls.cert, cfg.tls.key)))
    for path in args.witness_file or []:
        heads += [(f"file {path}", h) for h in heads_from_file(Path(path))]
    return check_log(cfg.data_dir, cfg.name, cfg.tls.ca, heads), unreachable


def _report_witnesses(findings, unreachable: dict[str, str], quiet: bool) -> int:
    """Exit 0: every witness agrees; 1: one contradicts the log; 4: no witness could be checked.

    Counted per witness (a peer, a file), each one's verdict on a line of its own, each distinct finding
    printed once: a witness returning one head 2,003 times is one witness, its copies neither inflate the
    agreement nor flood the report, nor make a contradiction read as 1 head of 2,004."""
    by = verdicts(findings)
    heads = sum(1 for f in findings if f.lines is not None)
    checked = sorted(s for s, v in by.items() if v["verdict"] != "unusable")
    against = sorted(s for s, v in by.items() if v["verdict"] == "contradicts")
    if not quiet:
        repeated = Counter((f.ok, f.lines is not None, f.message) for f in findings)
        for (ok, usable, message), n in repeated.items():
            print(
                f"  {'ok ' if ok else 'BAD' if usable else '?? '} {message}" + (f" (x{n})" if n > 1 else ""),
                file=sys.stdout if ok else sys.stderr,
            )
        for peer, why in sorted(unreachable.items()):
            print(f"  ?? peer {peer} could not be asked: {why}", file=sys.stderr)
        for source, v in sorted(by.items()):
            print(f"  {source}: {v['verdict']} ({v['heads']} head(s))")
    if against:
        if not quiet:
            print(
                f"TAMPERED: {len(against)} of {len(checked)} witness(es) contradict the log ({heads} heads): "
                + ", ".join(against),
                file=sys.stderr,
            )
        return 1
    if not checked:
        if not quiet:
            print(
                "no witnessed head could be checked: the log is intact as far as this disk shows, "
                "unconfirmed by any peer",
                file=sys.stderr,
            )
        return EXIT_UNWITNESSED
    if not quiet:
        print(f"{len(checked)} distinct witness(es) agree with the log ({heads} heads): {', '.join(checked)}")
    return 0


def _cmd_new(args) -> int:
    """Start a new audit log where it is missing (itself the new log's first line)."""
    try:
        cfg = load_config(args.config)
        entry = audit.start_new_log(cfg.data_dir, cfg.name, args.reason, f"{getpass.getuser()} (smcdp audit new)")
    except SmcdpError as exc:
        return _fail(exc)
    prev = entry.get("previous_head")
    print(
        f"{cfg.data_dir / audit.LOG_NAME}: a new audit log, started by {entry['by']}: {args.reason}"
        + (f" (the lost log's head recorded {prev['lines']} lines, sha256 {prev['sha256']})" if prev else "")
    )
    return 0


def _cmd_audit_show(args) -> int:
    try:
        d = _data_dir(args)
        entries = list(audit.read_entries(d))
    except FileNotFoundError:
        print(f"error: {d / audit.LOG_NAME} does not exist", file=sys.stderr)
        return 2
    except SmcdpError as exc:
        return _fail(exc)
    if args.session:
        entries = [e for e in entries if e[1] is not None and e[1].get("session") == args.session]
    if args.tail is not None:
        entries = entries[-args.tail :]
    for n, entry, raw in entries:
        if entry is None:
            print(f"{n:>6} <not a JSON object: {len(raw)} bytes {raw[:60]!r}>")
        elif args.json:
            print(json.dumps(entry, ensure_ascii=True, sort_keys=True))
        else:
            print(audit.format_entry(entry))
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "audit",
        help="verify or show a party's hash-chained audit trail",
        description="The party appends every proposal, decision, reservation, charge, "
        "release and abort to data_dir/audit.jsonl (docs/governance.md).",
    )
    sub = p.add_subparsers(dest="audit_command", metavar="ACTION")
    sub.required = True
    for name, fn, text in (
        (
            "verify",
            _cmd_verify,
            "check the hash chain and head: exit 0 intact, 1 tampered "
            "or damaged (naming the first bad line), 3 torn last line",
        ),
        ("show", _cmd_audit_show, "print the log readably"),
    ):
        s = sub.add_parser(name, help=text)
        g = s.add_mutually_exclusive_group()
        g.add_argument("--data-dir", type=nonempty, help="the party's data directory (holds audit.jsonl)")
        g.add_argument("--config", help="the party's TOML configuration (its party.data_dir)")
        s.add_argument("--json", action="store_true")
        if name == "show":
            s.add_argument("--session", help="only this session's events")
            s.add_argument("--tail", type=positive_int, help="only the last N events")
        else:
            s.add_argument(
                "--witnesses",
                action="store_true",
                help="also check the log against the signed heads every peer holds (asked over "
                "mutual TLS with the party's certificate; needs --config): exit 1 if one "
                "contradicts it, 4 if none could be checked",
            )
            s.add_argument(
                "--witness-file",
                action="append",
                metavar="FILE",
                help="a peer's witness/<this party>.json, handed over by its operator (repeatable)",
            )
        s.set_defaults(func=fn)
    s = sub.add_parser(
        "new",
        help="start a new audit log where it is missing (the party refuses to start "
        "without one); the new log's first line records this",
    )
    s.add_argument("--config", required=True, help="the party's TOML configuration")
    s.add_argument("--reason", required=True, help="why the log is started anew (recorded)")
    s.set_defaults(func=_cmd_new)
