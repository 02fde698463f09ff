"""The ``smcdp`` command.

Each area registers its own subcommands (``register(subparsers)``), so this
module only wires them together and turns errors into clear messages and
exit codes.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from smcdp import __version__
from smcdp.errors import SmcdpError

#: modules that contribute subcommands, in help order
SUBCOMMAND_MODULES = (
    "smcdp.cli.party",  # certs, party, session, health
    "smcdp.cli.governance",  # audit (and session list|show|approve|reject, via cli.party)
    "smcdp.cli.demo",  # demo power-iteration | dp-aggregate | keyword
    "smcdp.cli.speech",  # speech train
    "smcdp.cli.dp",  # account, budget
    "smcdp.cli.keys",  # keys generate | list
    "smcdp.cli.deploy",  # deploy init
    "smcdp.cli.bench",  # bench paillier
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="smcdp",
        description="Secure multiparty computation with differentially private release.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # that area is not part of this build
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except SmcdpError as exc:
        print(f"smcdp {args.command}: error [{exc.code}]: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the last resort: a file the command cannot read or write (its message names it)
        print(f"smcdp {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
