"""Names, ids and keys checked against a pattern refuse a trailing newline; params_json refuses numbers beyond float64.

Python's ``$`` also matches before a final ``\\n``, so ``re.match(r"^[a-z]+$", "alice\\n")`` succeeds: a session id
``alice.x\\n`` was proposed and kept as a file name, a certificate named ``alice\\n`` was served as a party, a message
type ``smcdp.v1.Floats\\n`` was stored (found by tests/integration/grpc/test_rpc_fuzz.py).  Every anchored pattern in
the package ends in ``\\Z`` instead, which this file checks for each validation pattern and, as a rule, for the
source: no ``re`` pattern in smcdp/ ends with ``$"``."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

SMCDP = Path(__file__).resolve().parents[2] / "smcdp"

#: (module, pattern attribute, a string it accepts)
PATTERNS = [
    ("smcdp.net.server", "SESSION_ID_RE", "alice.x-1"),
    ("smcdp.net.server", "TYPE_NAME_RE", "smcdp.v1.Floats"),
    ("smcdp.net.server", "ROLE_RE", "party1"),
    ("smcdp.net.tls", "PARTY_NAME_RE", "alice"),
    ("smcdp.net.config", "_MODULE_RE", "smcdp.plugins.keyword"),
    ("smcdp.net.config", "_KEY_RE", "max_frames"),
    ("smcdp.runtime.config", "_MODULE_RE", "smcdp.plugins.keyword"),
    ("smcdp.runtime.config", "_KEY_RE", "max_frames"),
    ("smcdp.runtime.governance.policy", "_PROTOCOL_RE", "power-iteration"),
    ("smcdp.runtime.governance.policy", "_ROLE_PATTERN_RE", "party*"),
    ("smcdp.runtime.governance.policy", "_REVEAL_RE", "ubm"),
    ("smcdp.compute.config", "_MEMORY_RE", "2GiB"),
    ("smcdp.speech.speaker", "NAME_RE", "spk01"),
    ("smcdp.speech.training", "_WORD_RE", "yes"),
    ("smcdp.cli.deploy.hosts", "_INPUT_NAME_RE", "features"),
    ("smcdp.cli.deploy.hosts", "_PROTOCOL_RE", "keyword"),
    ("smcdp.cli.deploy.hosts", "IMAGE_RE", "smcdp/party:0.1"),
    ("smcdp.cli.deploy.governance", "_PROTOCOL_RE", "keyword"),
]


@pytest.mark.parametrize(("module", "name", "good"), PATTERNS, ids=[f"{m}.{n}" for m, n, _ in PATTERNS])
def test_a_pattern_refuses_a_trailing_newline(module, name, good):
    pattern = getattr(importlib.import_module(module), name)
    assert pattern.match(good), (name, good)
    for bad in (good + "\n", good + "\r\n", good + "\n\n", "\n" + good):
        assert not pattern.match(bad), (name, bad)


def test_the_config_address_refuses_a_trailing_newline():
    from smcdp.errors import SmcdpError
    from smcdp.net.config import parse_address

    assert parse_address("localhost:50051", "address") == ("localhost", 50051)
    for bad in ("localhost:50051\n", "[::1]:50051\n"):
        with pytest.raises(SmcdpError, match="host:port"):
            parse_address(bad, "address")


def test_no_pattern_in_the_package_ends_in_a_dollar():
    """``$`` lets a final newline through; an anchored pattern ends in ``\\Z`` (a deny-pattern may keep ``$``, where
    letting more through is the safe side: mark it ``# $: deny``)."""
    found = []
    for path in sorted(SMCDP.rglob("*.py")):
        if path.name.endswith("_pb2.py") or path.name.endswith("_pb2_grpc.py"):
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"""\br?["'][^"']*\$["']""", line) and "re." in line and "# $: deny" not in line:
                found.append(f"{path.relative_to(SMCDP.parent)}:{i}: {line.strip()}")
    assert not found, "patterns ending in '$' (use '\\Z'):\n  " + "\n  ".join(found)


def test_params_json_refuses_a_number_beyond_float64():
    """``1e400`` parses to inf in Python's json; the boundary refuses it as it refuses ``Infinity`` and ``NaN``."""
    from smcdp.errors import InvalidMessage
    from smcdp.net.limits import bounded_json_object

    assert bounded_json_object('{"x": 1e300, "n": 10}') == {"x": 1e300, "n": 10}
    for bad, where in [('{"x": 1e400}', "x"), ('{"x": -1e400}', "x"), ('{"a": {"x": [1, 2e999]}}', r"a\.x\[1\]")]:
        with pytest.raises(InvalidMessage, match=f"params_json: {where} is a number beyond the range of a float"):
            bounded_json_object(bad)
    for bad in ('{"x": NaN}', '{"x": Infinity}'):
        with pytest.raises(InvalidMessage, match="not valid JSON"):
            bounded_json_object(bad)
