"""The ``smcdp`` command: the top layer, wiring every other package together.

``smcdp.cli.app`` builds the parser from the modules that contribute
subcommands (party, demo, dp, deploy, bench, …); nothing below ``smcdp.cli``
imports from here.
"""

from smcdp.cli.app import build_parser, main

__all__ = ["build_parser", "main"]
