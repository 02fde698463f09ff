#!/usr/bin/env python3
"""Launch the party process of alice: `python parties/alice.py --config deploy/local/alice.toml`.

A thin launcher of `smcdp party`; it refuses a configuration for another party.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from smcdp.cli.party import run_party  # noqa: E402

if __name__ == "__main__":
    sys.exit(run_party(expect_name="alice"))
