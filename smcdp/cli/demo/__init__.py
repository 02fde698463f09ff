"""``smcdp demo …``: run a protocol end to end between separate party processes.

Every demo starts one OS process per party on loopback with fresh
certificates (mutual TLS) in a temporary directory, runs one session, stops
the processes and writes a JSON result.  Progress and a readable summary go
to stderr; the JSON (a contract, see each command's help) goes to ``--out``
or stdout.  One module per protocol.
"""

from __future__ import annotations

from smcdp.cli.demo import dp_aggregate, keyword, power_iteration, speaker


def register(subparsers) -> None:
    p = subparsers.add_parser("demo", help="run a protocol end to end between separate party processes")
    sub = p.add_subparsers(dest="demo_command", metavar="PROTOCOL")
    sub.required = True
    for module in (power_iteration, dp_aggregate, keyword, speaker):
        module.register(sub)
