"""CLI subcommands for certificates, party processes, sessions and health.

``register(subparsers)`` adds ``certs``, ``party``, ``session`` (``start``,
``result``; ``list``, ``show``, ``approve``, ``reject`` from :mod:`smcdp.cli.governance`)
and ``health`` to the ``smcdp`` command.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from smcdp._files import json_loads
from smcdp.cli.argtypes import certificate_days, nonempty, positive_float, session_seed
from smcdp.cli.governance import register_session_commands
from smcdp.client import PartyClient, SessionHandle, SessionState, SessionStatus
from smcdp.errors import InvalidMessage, SmcdpError, Unavailable
from smcdp.net import tls
from smcdp.progress import task
from smcdp.runtime import process
from smcdp.runtime.logs import configure_logging


def _fail(exc: BaseException) -> int:
    code = getattr(exc, "code", "INTERNAL")
    print(f"error [{code}]: {exc}", file=sys.stderr)
    return 2 if isinstance(exc, InvalidMessage) else 1


# ------------------------------------------------------------------ certs
def _cmd_certs(args: argparse.Namespace) -> int:
    try:
        parties = tls.parse_party_list(args.parties)
        hosts = tls.parse_hosts(args.hosts, parties)
        if args.localhost:
            for p in parties:
                hosts[p] += ["localhost", "127.0.0.1", "::1"]
        files = tls.generate_deployment(
            args.out, parties, hosts, days=args.days, reuse_ca=args.reuse_ca, overwrite=args.force
        )
    except SmcdpError as exc:
        return _fail(exc)
    out = Path(args.out)
    print(
        f"CA: {out / tls.CA_CERT_FILE}"
        + ("" if args.reuse_ca else f" (key {out / tls.CA_KEY_FILE}, keep it offline; parties need only ca.crt)")
    )
    for p, f in files.items():
        print(f"{p}: {f.cert} {f.key}")
    return 0


# ------------------------------------------------------------------ party
def _cmd_party(args: argparse.Namespace, expect_name: str | None = None) -> int:
    configure_logging("text", args.log_level or "INFO")  # until the configuration's [logging] is read
    try:
        return process.serve(args.config, expect_name, ready_file=args.ready_file, log_level=args.log_level)
    except SmcdpError as exc:
        return _fail(exc)


def _party_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--config", required=True, help="the party's TOML configuration")
    ap.add_argument("--ready-file", help="write {party, port, pid} JSON here once serving")
    ap.add_argument(
        "--log-level",
        default=None,
        type=str.upper,
        choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
        metavar="LEVEL",
        help="overrides [logging] level: DEBUG, INFO, WARNING, ERROR or CRITICAL",
    )


def run_party(argv: list[str] | None = None, expect_name: str | None = None) -> int:
    """Entry point of the launchers ``parties/<name>.py``: ``smcdp party`` for one named party, refusing
    a configuration of another."""
    ap = argparse.ArgumentParser(
        prog=f"parties/{expect_name}.py" if expect_name else "smcdp-party",
        description="Run a smcdp party process until SIGTERM/SIGINT.",
    )
    _party_arguments(ap)
    return _cmd_party(ap.parse_args(argv), expect_name)


# ---------------------------------------------------------------- session
def _parse_roles(items: list[str]) -> dict[str, str]:
    roles: dict[str, str] = {}
    for item in items or []:
        if "=" not in item:
            raise InvalidMessage(f"--role {item!r} must look like ROLE=PARTY")
        role, party = (s.strip() for s in item.split("=", 1))
        if role in roles:
            raise InvalidMessage(f"--role {role} given twice")
        roles[role] = party
    if not roles:
        raise InvalidMessage("give at least one --role ROLE=PARTY")
    return roles


def _cmd_session_start(args: argparse.Namespace) -> int:
    pc, handle = None, None
    try:
        roles = _parse_roles(args.role)
        if args.params and args.params_file:
            raise InvalidMessage("give --params or --params-file, not both")
        text = Path(args.params_file).read_text() if args.params_file else (args.params or "{}")
        try:
            params = json_loads(text)
        except ValueError as exc:
            raise InvalidMessage(f"--params is not valid JSON: {exc}") from None
        if not isinstance(params, dict):
            raise InvalidMessage("--params must be a JSON object")
        pc = PartyClient.from_config(args.config)
        handle = pc.start_session(
            args.protocol, roles, params, wait=False, session_id=args.session_id, timeout=args.timeout, seed=args.seed
        )
        assert isinstance(handle, SessionHandle)
        record = wait_watched(handle).as_dict()
    except (SmcdpError, OSError) as exc:
        if pc is not None and handle is not None:
            _emit_failed(pc, handle.session_id, exc, args.out)
        return _fail(exc)
    _emit(record, args.out)
    return 0


def _emit_failed(pc: PartyClient, session_id: str, exc: BaseException, out: str | None) -> None:
    """A session that failed: its record as well as the error, when the party can give it -- the JSON says
    which participants never confirmed their output (``unconfirmed``), whether it is ``resumable``, and who
    failed (``error.origin``).  Not when the operator's own party is what failed (down, paused, cut off: the
    wait said so), and never for long."""
    if getattr(exc, "origin", None) == pc.name and isinstance(exc, Unavailable):
        return
    try:
        res = pc.result(session_id, timeout=5.0)
    except SmcdpError:
        return
    if res.state is SessionState.FAILED:
        _emit(res.as_dict(), out)


def wait_watched(handle: SessionHandle, unit: str = "round"):
    """Wait for a session with a progress display on stderr (rounds done, their rate, the current step),
    after saying what bounds the wait.  ``unit``: what the protocol's rounds are (the key ceremony's
    are batches of candidates)."""
    label = f"session {handle.session_id}"
    print(f"{label}: this {handle.bound}", file=sys.stderr)
    with task(label, total=None, unit=unit) as t:

        def show(st: SessionStatus) -> None:
            what = (
                st.state.value
                + (f", {st.step}" if st.step else "")
                + (f", waiting for approval at {st.waiting_for}" if st.waiting_for else "")
            )
            # an unknown round (None: an ended session recorded before rounds were kept) keeps the last one
            t.update(completed=None if st.round is None else max(0, st.round), description=f"{label} ({what})")

        return handle.wait(on_status=show, poll=1.0)


def _cmd_session_result(args: argparse.Namespace) -> int:
    try:
        res = PartyClient.from_config(args.config).result(args.session_id)
    except SmcdpError as exc:
        return _fail(exc)
    _emit(res.as_dict(), args.out)
    return 1 if res.state is SessionState.FAILED else 0


def _cmd_session_status(args: argparse.Namespace) -> int:
    try:
        status = PartyClient.from_config(args.config).status(args.session_id)
    except SmcdpError as exc:
        return _fail(exc)
    print(json.dumps(status.as_dict(), indent=2, sort_keys=True))
    if status.waiting_for:  # the session waits for an operator's approval
        print(f"session {status.session_id}: waiting for approval at {status.waiting_for}", file=sys.stderr)
    return 0


def _cmd_session_resume(args: argparse.Namespace) -> int:
    pc, handle = None, None
    try:
        pc = PartyClient.from_config(args.config)
        handle = pc.resume(args.session_id, timeout=args.timeout, wait=False)
        assert isinstance(handle, SessionHandle)
        record = wait_watched(handle).as_dict()
    except SmcdpError as exc:
        if pc is not None and handle is not None:
            _emit_failed(pc, handle.session_id, exc, args.out)
        return _fail(exc)
    _emit(record, args.out)
    return 0


def _emit(record: dict, out: str | None) -> None:
    text = json.dumps(record, indent=2, sort_keys=True)
    if out:
        Path(out).write_text(text + "\n")
        print(f"session {record['session_id']}: {record['state']} (record in {out})", file=sys.stderr)
    else:
        print(text)


# ----------------------------------------------------------------- health
def _cmd_health(args: argparse.Namespace) -> int:
    try:
        pc = PartyClient.from_config(args.config)
        if args.wait:
            print(f"waiting at most {args.wait:g} s for {args.peer or pc.name} to answer SERVING", file=sys.stderr)
            pc.wait_healthy(args.peer, timeout=args.wait)
            status = "SERVING"
        else:
            status = pc.health(args.peer)
    except SmcdpError as exc:
        return _fail(exc)
    print(status)
    return 0 if status == "SERVING" else 1


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "certs",
        help="create a CA and one key/certificate per party",
        description="Create ca.crt/ca.key and <party>.crt/<party>.key (ECDSA P-256; keys mode 0600) in --out.",
    )
    p.add_argument("--out", required=True, type=nonempty, help="output directory")
    p.add_argument("--parties", required=True, help="comma-separated party names, e.g. alice,bob,trent")
    p.add_argument("--hosts", help="extra subjectAltNames, e.g. alice=10.0.0.1,bob=bob.example.org")
    p.add_argument("--localhost", action="store_true", help="add localhost, 127.0.0.1 and ::1 to every certificate")
    p.add_argument("--days", type=certificate_days, default=825, help="party certificate validity (default 825)")
    p.add_argument(
        "--reuse-ca",
        action="store_true",
        help="issue under the existing ca.crt/ca.key in --out (add or rotate parties)",
    )
    p.add_argument("--force", action="store_true", help="replace existing files")
    p.set_defaults(func=_cmd_certs)

    p = subparsers.add_parser("party", help="run a party process until SIGTERM/SIGINT")
    _party_arguments(p)
    p.set_defaults(func=_cmd_party)

    p = subparsers.add_parser("session", help="start sessions, fetch results, approve or reject proposals")
    sp = p.add_subparsers(dest="session_command", required=True)
    s = sp.add_parser("start", help="run a session with this party as initiator")
    s.add_argument("--config", required=True, help="the initiating party's TOML configuration")
    s.add_argument("--protocol", required=True)
    s.add_argument("--role", action="append", metavar="ROLE=PARTY", help="repeat for every role")
    s.add_argument("--params", help="protocol parameters as a JSON object")
    s.add_argument("--params-file", type=nonempty, help="protocol parameters from a JSON file")
    s.add_argument("--session-id")
    s.add_argument("--timeout", type=positive_float, help="session deadline in seconds")
    s.add_argument(
        "--seed",
        type=session_seed,
        help="explicit seed (experiments only; every participant must have [policy] allow_seeded = true)",
    )
    s.add_argument("--out", help="write the record JSON here instead of stdout")
    s.set_defaults(func=_cmd_session_start)
    s = sp.add_parser("result", help="the record of a session at this party")
    s.add_argument("--config", required=True)
    s.add_argument("--session-id", required=True)
    s.add_argument("--out")
    s.set_defaults(func=_cmd_session_result)
    s = sp.add_parser("status", help="how a session stands now at this party (round, restarts, peers' liveness)")
    s.add_argument("session_id", metavar="ID")
    s.add_argument("--config", required=True, help="this party's TOML configuration")
    s.set_defaults(func=_cmd_session_status)
    s = sp.add_parser(
        "resume",
        help="continue a session this party initiated that failed resumably "
        "(a participant was unreachable or shut down): every participant replays "
        "its role from its checkpoint",
    )
    s.add_argument("session_id", metavar="ID")
    s.add_argument("--config", required=True, help="the initiating party's TOML configuration")
    s.add_argument("--timeout", type=positive_float, help="how long to wait for the session (default: its own)")
    s.add_argument("--out", help="write the record JSON here instead of stdout")
    s.set_defaults(func=_cmd_session_resume)
    register_session_commands(sp)

    p = subparsers.add_parser("health", help="grpc.health.v1 status of this party or a peer")
    p.add_argument("--config", required=True)
    p.add_argument("--peer", type=nonempty, help="a party named in [peers] (default: this party)")
    p.add_argument("--wait", type=positive_float, metavar="SECONDS", help="wait up to SECONDS for SERVING")
    p.set_defaults(func=_cmd_health)
