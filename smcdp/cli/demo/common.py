"""What every ``smcdp demo`` command shares: party names, progress, key-size warnings, result checks.

Every demo starts one OS process per party on loopback with fresh
certificates (mutual TLS) in a temporary directory, runs one session, stops
the processes and writes a JSON result.  Progress and a readable summary go
to stderr; the JSON (a contract, see each command's help) goes to ``--out``
or stdout.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any, Callable

from smcdp._files import atomic_write
from smcdp.errors import InvalidMessage
from smcdp.plugins.base import SessionSummary
from smcdp.plugins.registry import get_plugin
from smcdp.runtime.policy import Policy, rules_for_layout

DATA_PARTY_NAMES = ("alice", "bob", "carol", "erin", "frank", "grace", "heidi", "ivan", "judy", "mallory")


def data_party_names(n: int) -> list[str]:
    return [DATA_PARTY_NAMES[i] if i < len(DATA_PARTY_NAMES) else f"party{i + 1}" for i in range(n)]


def governed(protocol: str, roles: dict[str, str], params: dict, *, initiator: str,
             seed: int | None) -> tuple[dict, SessionSummary]:
    """LocalCluster options giving every party an explicit [policy] that admits exactly this
    session layout (initiator, roles, where outputs go), and ``allow_seeded`` only when the demo
    was given a seed; and the session's summary."""
    plugin = get_plugin(protocol)
    summary = plugin.summary(plugin.validate_params(params, roles), roles)
    rules = rules_for_layout(roles, initiators=[initiator], coordinating_roles=plugin.coordinating_roles,
                             summary=summary)
    if seed is not None:
        say("WARNING: --seed makes every party accept the initiator's seed ([policy] allow_seeded = true): "
            "protocol randomness and DP noise become reproducible. Experiments only.")
    return ({"policies": {party: Policy(protocols={protocol: r}) for party, r in rules.items()},
             "allow_seeded": seed is not None}, summary)


def say(msg: str) -> None:
    print(f"[smcdp demo] {msg}", file=sys.stderr, flush=True)


def check_key_bits_arg(bits: int) -> bool:
    """True if insecure keys must be allowed; warns on stderr."""
    if bits < 256:
        raise InvalidMessage("--key-bits must be at least 256 (and 2048 for real use)")
    if bits < 2048:
        say(f"WARNING: {bits}-bit Paillier keys are INSECURE; allowed here for quick runs only")
        return True
    return False


def with_progress(label: str, fn: Callable[[], Any], every: float = 5.0) -> Any:
    """Run ``fn`` while printing elapsed time to stderr."""
    done = threading.Event()
    t0 = time.monotonic()

    def ticker():
        while not done.wait(every):
            say(f"{label}: {time.monotonic() - t0:.0f} s …")

    th = threading.Thread(target=ticker, daemon=True)
    th.start()
    try:
        return fn()
    finally:
        done.set()


def require_success(records: dict[str, dict]) -> None:
    failed = {p: r for p, r in records.items() if r.get("state") != "succeeded"}
    if failed:
        p, r = next(iter(failed.items()))
        err = r.get("error") or {}
        raise InvalidMessage(f"session failed at {p}: [{err.get('code')}] {err.get('message')}")


def dump_json(obj: Any, path: str | os.PathLike | None) -> None:
    text = json.dumps(obj, indent=2)
    if path is None or str(path) == "-":
        print(text)
        return
    atomic_write(path, (text + "\n").encode("utf-8"))
