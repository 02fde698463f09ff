"""``smcdp deploy``: per-host bundles for a deployment across machines.

``smcdp deploy init --hosts alice=HOST:PORT,bob=HOST:PORT,... --out DIR`` writes::

    DIR/
      deployment.json          what was generated (parties, addresses, image); read by `rotate`
      ca/ca.crt  ca/ca.key     the deployment CA -- keep ca.key OFFLINE, it is in no bundle
      <party>/                 one self-contained bundle per party, copied to that party's host
        party.toml             its configuration: listen address, peers' addresses, TLS files
        certs/ca.crt           the CA certificate (public)
        certs/<party>.crt      its certificate (CN = party name; SANs = <party>.party.smcdp.invalid, name, host)
        certs/<party>.key      its private key, mode 0600 -- only in this bundle
        data/                  durable state: session records, outputs (mode 0700)
        inputs/                its private input files (copied here by --inputs)
        docker-compose.yml     runs the party image with ports, volumes, restart, health check
        .env                   image name and the uid/gid the container runs as
        README.txt             what to do with the bundle on its host

Every path in ``party.toml`` is relative to the bundle, so the same bundle runs
natively (``smcdp party --config <party>/party.toml``) and in the container, where
docker-compose mounts the bundle's files under ``/etc/smcdp`` (config, certs and
inputs read-only, data read-write).

``smcdp deploy rotate`` issues new party keys/certificates under the same CA (or
a new CA for every party) into the bundles; ``smcdp deploy add`` makes bundles
for parties that join later and adds them to the others' ``[peers]``;
``smcdp deploy check`` validates a bundle on its host before start (config,
key/certificate/CA match, expiry, file modes, foreign keys, inputs).

The compose file is written by a small YAML emitter here (block mappings and
sequences, every string JSON-quoted, which YAML accepts as double-quoted
scalars): the documents are tiny and fixed in shape, and the party image should
not need a YAML library at run time.  Tests check the output against
``docker-compose config`` and, where PyYAML is installed, parse it back.
"""

import argparse
import sys
from pathlib import Path

from smcdp.cli.argtypes import certificate_days, nonempty, positive_float
from smcdp.cli.deploy.bundle import (
    add_parties,
    init_deployment,
    load_manifest,
    rotate_certificates,
)
from smcdp.cli.deploy.check import check_bundle
from smcdp.cli.deploy.compose import (
    compose_document,
    dump_yaml,
    validate_compose_document,
)
from smcdp.cli.deploy.governance import DEFAULT_BUDGET, DEFAULT_BUDGET_DELTA, parse_initiators, parse_layouts
from smcdp.cli.deploy.hosts import (
    CONTAINER_CONFIG,
    CONTAINER_DIR,
    CONTAINER_UID,
    DEFAULT_IMAGE,
    RESTART_POLICIES,
    DeployError,
    HostSpec,
    parse_host_spec,
    parse_hosts,
    parse_input_specs,
)
from smcdp.errors import SmcdpError

__all__ = [
    "CONTAINER_CONFIG",
    "CONTAINER_DIR",
    "CONTAINER_UID",
    "DEFAULT_IMAGE",
    "DeployError",
    "HostSpec",
    "add_parties",
    "check_bundle",
    "compose_document",
    "dump_yaml",
    "init_deployment",
    "parse_host_spec",
    "parse_hosts",
    "parse_input_specs",
    "register",
    "rotate_certificates",
    "validate_compose_document",
]


def _cmd_init(args: argparse.Namespace) -> int:
    try:
        specs = parse_hosts(args.hosts)
        inputs = parse_input_specs(args.inputs or (), [s.name for s in specs])
        layouts = parse_layouts(args.roles or (), [s.name for s in specs], args.plugin or ())
        initiators = parse_initiators(args.initiator or (), layouts)
        if args.allow_insecure_keys:
            print(
                "WARNING: --allow-insecure-keys lets sessions use Paillier keys below 2048 bits; for tests only",
                file=sys.stderr,
            )
        bundles = init_deployment(
            args.out,
            specs,
            inputs=inputs,
            listen_host=args.listen_host,
            image=args.image,
            allow_insecure_keys=args.allow_insecure_keys,
            connect_seconds=args.connect_seconds,
            session_seconds=args.session_seconds,
            rpc_seconds=args.rpc_seconds,
            days=args.days,
            restart=args.restart,
            plugins=args.plugin or (),
            peer_grace_seconds=args.peer_grace_seconds,
            layouts=layouts,
            initiators=initiators,
            approval=args.approval,
            budget=args.budget,
            budget_delta=args.budget_delta,
        )
    except SmcdpError as exc:
        print(f"smcdp deploy init: error [{exc.code}]: {exc}", file=sys.stderr)
        return 2
    if not layouts:
        print(
            "note: no --roles given: every party's [policy] joins no protocol until its operator adds "
            "[policy.<protocol>] tables (docs/governance.md)",
            file=sys.stderr,
        )
    out = Path(args.out)
    print(f"deployment written to {out}")
    print(
        f"  CA: {out / 'ca' / 'ca.crt'} -- move {out / 'ca' / 'ca.key'} OFFLINE (needed only by "
        "`smcdp deploy rotate`; it is in no bundle)"
    )
    for spec in specs:
        print(f"  {spec.name:<12} {spec.address:<28} bundle {bundles[spec.name]}/  -> copy to {spec.host}")
    return 0


def _cmd_add(args: argparse.Namespace) -> int:
    try:
        specs = [parse_host_spec(i) for i in args.hosts.split(",") if i.strip()]
        inputs = parse_input_specs(args.inputs or (), [s.name for s in specs])
        bundles, todo = add_parties(args.dir, args.hosts, inputs=inputs)
    except SmcdpError as exc:
        print(f"smcdp deploy add: error [{exc.code}]: {exc}", file=sys.stderr)
        return 2
    for s in specs:
        print(f"  {s.name:<12} {s.address:<28} bundle {bundles[s.name]}/  -> copy to {s.host}")
    print(
        "Every existing party must learn the new address(es): add to the [peers] table of its "
        "party.toml (the copies under --dir are updated) and restart it:"
    )
    for name, lines in todo.items():
        print(f"  {name}: " + "; ".join(lines))
    return 0


def _cmd_rotate(args: argparse.Namespace) -> int:
    try:
        if args.all and args.party:
            raise DeployError("give --party or --all, not both")
        parties = None
        if args.all:
            _, specs = load_manifest(Path(args.dir))
            parties = [s.name for s in specs]
        elif args.party:
            parties = args.party
        summary = rotate_certificates(args.dir, parties, new_ca=args.new_ca, days=args.days)
    except SmcdpError as exc:
        print(f"smcdp deploy rotate: error [{exc.code}]: {exc}", file=sys.stderr)
        return 2
    for name, text in summary.items():
        print(f"{name}: new key and certificate in {Path(args.dir) / name / 'certs'} ({text})")
    if args.new_ca:
        print(
            "NEW CA: copy certs/ of EVERY bundle to its host and restart every party; until all "
            "have restarted, old and new parties cannot talk."
        )
    else:
        print(
            "Copy certs/<party>.crt and certs/<party>.key of each rotated bundle to its host and "
            "restart that party (docker-compose restart); the other parties need no change."
        )
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    problems, notes = check_bundle(args.bundle, warn_days=args.warn_days)
    for n in notes:
        print(f"ok: {n}")
    for p in problems:
        print(f"PROBLEM: {p}")
    print("bundle looks good" if not problems else f"{len(problems)} problem(s)")
    return 0 if not problems else 1


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "deploy",
        help="bundles for running parties on several hosts",
        description="Generate and maintain per-host party bundles (config, TLS files, docker-compose.yml).",
    )
    sub = p.add_subparsers(dest="deploy_command", metavar="ACTION")
    sub.required = True

    i = sub.add_parser(
        "init",
        help="create a CA and one self-contained bundle per party",
        description="Write DIR/ca (the CA; keep ca.key offline) and DIR/<party>/ for every "
        "party: party.toml, certs/ (CA cert, own key 0600 and cert), data/, inputs/, "
        "docker-compose.yml, .env, README.txt.",
    )
    i.add_argument(
        "--hosts",
        required=True,
        metavar="NAME=HOST:PORT,...",
        help="every party with the address the OTHER parties reach it at, e.g. "
        "alice=10.0.0.1:50051,bob=bob.example.org:50051,trent=10.0.0.3:50051",
    )
    i.add_argument("--out", required=True, type=nonempty, metavar="DIR", help="new or empty output directory")
    i.add_argument(
        "--inputs",
        action="append",
        metavar="PARTY:PROTOCOL:NAME=PATH",
        help="copy a private input file into that party's bundle and configure it "
        "(repeat), e.g. alice:power-iteration:data=A.npy",
    )
    i.add_argument("--listen-host", default="0.0.0.0", help="address each party binds to on its host (default 0.0.0.0)")
    i.add_argument("--image", default=DEFAULT_IMAGE, help=f"container image (default {DEFAULT_IMAGE})")
    i.add_argument(
        "--restart",
        default="unless-stopped",
        choices=RESTART_POLICIES,
        help="docker-compose restart policy (default unless-stopped)",
    )
    i.add_argument("--days", type=certificate_days, help="party certificate validity in days (default 825)")
    i.add_argument("--connect-seconds", type=positive_float, help="[timeouts] connect_seconds")
    i.add_argument("--session-seconds", type=positive_float, help="[timeouts] session_seconds (default deadline)")
    i.add_argument("--rpc-seconds", type=positive_float, help="[timeouts] rpc_seconds")
    i.add_argument(
        "--peer-grace-seconds",
        type=positive_float,
        help="[timeouts] peer_grace_seconds: how long a session waits for a silent participant "
        "before it fails resumably (default 30)",
    )
    i.add_argument(
        "--plugin",
        action="append",
        metavar="MODULE",
        help="extra protocol module every party imports (party.plugins; repeat)",
    )
    i.add_argument(
        "--allow-insecure-keys", action="store_true", help="TESTS ONLY: let sessions use Paillier keys below 2048 bits"
    )
    i.add_argument(
        "--roles",
        action="append",
        metavar="PROTOCOL:ROLE=PARTY,...",
        help="a session layout this deployment runs (repeat); every party's [policy] admits exactly "
        "these, e.g. power-iteration:trent=trent,party1=alice,party2=bob",
    )
    i.add_argument(
        "--initiator",
        action="append",
        metavar="PROTOCOL=PARTY",
        help="who may start sessions of PROTOCOL (repeat; default: the party holding its first "
        "coordinating role -- trent, charlie -- or, for a protocol without one, every participant)",
    )
    i.add_argument(
        "--approval",
        choices=("auto", "operator"),
        default="auto",
        help="operator: every party's operator approves each proposal (smcdp session approve)",
    )
    i.add_argument(
        "--budget",
        type=positive_float,
        metavar="EPS",
        help=f"total epsilon of every data party's data set (default {DEFAULT_BUDGET:g})",
    )
    i.add_argument(
        "--budget-delta",
        type=float,
        metavar="DELTA",
        help=f"total delta of every data party's data set (default {DEFAULT_BUDGET_DELTA:g})",
    )
    i.set_defaults(func=_cmd_init)

    a = sub.add_parser(
        "add",
        help="add parties to a deployment made by `deploy init`",
        description="Bundles for new parties under the same CA and settings; the "
        "existing bundles' [peers] (copies under --dir) learn the new addresses.",
    )
    a.add_argument("--dir", required=True, help="the directory made by `smcdp deploy init`")
    a.add_argument("--hosts", required=True, metavar="NAME=HOST:PORT,...", help="the new parties")
    a.add_argument(
        "--inputs",
        action="append",
        metavar="PARTY:PROTOCOL:NAME=PATH",
        help="copy a private input file into a new party's bundle (repeat)",
    )
    a.set_defaults(func=_cmd_add)

    r = sub.add_parser(
        "rotate",
        help="issue new party keys/certificates into existing bundles",
        description="New key + certificate under the deployment CA for the named parties "
        "(others unchanged), or --new-ca: a new CA and new certificates for every party.",
    )
    r.add_argument("--dir", required=True, help="the directory made by `smcdp deploy init`")
    r.add_argument("--party", action="append", help="party to rotate (repeat)")
    r.add_argument("--all", action="store_true", help="rotate every party under the same CA")
    r.add_argument(
        "--new-ca", action="store_true", help="replace the CA too (every party must be updated and restarted together)"
    )
    r.add_argument("--days", type=certificate_days, help="validity of the new certificates in days")
    r.set_defaults(func=_cmd_rotate)

    c = sub.add_parser("check", help="validate a bundle on its host before starting the party")
    c.add_argument("bundle", help="the bundle directory (holds party.toml)")
    c.add_argument(
        "--warn-days",
        type=int,
        default=30,
        help="treat a certificate expiring within this many days as a problem (default 30)",
    )
    c.set_defaults(func=_cmd_check)
