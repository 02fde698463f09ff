"""``deploy check``: validate a bundle on its host before the party starts."""

import datetime as _dt
import os
from pathlib import Path

from smcdp.errors import SmcdpError
from smcdp.net.config import ConfigError
from smcdp.net.tls import TlsMaterial, load_certificate
from smcdp.runtime.config import load_config

#: the protocols whose sessions test a party's data against a bound the proposer chooses, and what (their
#: plug-ins' SessionSummary.data_bounds: docs/governance.md, "Bounds on a party's data")
BOUNDED = {"dp-aggregate": "records bound", "power-iteration": "max_samples", "speaker-identify": "max_speakers"}


def check_bundle(bundle: str | os.PathLike, warn_days: int = 30) -> tuple[list[str], list[str]]:
    """(problems, notes) for a bundle on its host: config, TLS files, modes, compose file."""

    bundle = Path(bundle)
    problems: list[str] = []
    notes: list[str] = []
    try:
        cfg = load_config(bundle / "party.toml")
    except ConfigError as exc:
        return [str(exc)], notes
    notes.append(
        f"party {cfg.name}, listen {cfg.listen}, peers: " + ", ".join(f"{p}={a}" for p, a in sorted(cfg.peers.items()))
    )
    try:
        tls = TlsMaterial.load(cfg.tls.ca, cfg.tls.cert, cfg.tls.key)
        if tls.name != cfg.name:
            problems.append(f"certificate {cfg.tls.cert} is for {tls.name!r}, not {cfg.name!r}")

        cert = load_certificate(cfg.tls.cert)
        left = cert.not_valid_after_utc - _dt.datetime.now(_dt.UTC)
        msg = f"certificate valid until {cert.not_valid_after_utc:%Y-%m-%d} ({left.days} days)"
        (problems if left.days < warn_days else notes).append(
            msg + (" -- rotate it: smcdp deploy rotate" if left.days < warn_days else "")
        )
    except SmcdpError as exc:
        problems.append(str(exc))
    try:
        mode = cfg.tls.key.stat().st_mode & 0o777
        if mode & 0o077:
            problems.append(f"{cfg.tls.key} has mode {mode:o}; a private key must be 0600 (chmod 600)")
    except OSError as exc:
        problems.append(f"cannot stat {cfg.tls.key}: {exc}")
    foreign = sorted(p.name for p in (bundle / "certs").glob("*.key") if p.resolve() != cfg.tls.key.resolve())
    if foreign:
        problems.append(f"certs/ holds other private keys ({', '.join(foreign)}); a bundle carries only its own")
    for proto, table in cfg.inputs.items():
        for k, path in table.items():
            if not Path(path).is_file():
                problems.append(f"input {proto}.{k} = {path} does not exist")
    pol = cfg.policy  # governance (docs/governance.md): a bundle states what its party joins
    if pol is None or pol.open:
        problems.append(
            "party.toml has "
            + ("no [policy]" if pol is None else "[policy] open = true")
            + ": any peer may start any session with this party's data (docs/governance.md)"
        )
    else:
        notes.append(
            "policy: joins "
            + (", ".join(sorted(pol.protocols)) or "no protocol")
            + f"; approval {pol.approval}"
            + (f"; budget {cfg.budget.dataset!r}" if cfg.budget is not None else "; no budget")
        )
        for proto in sorted(set(pol.protocols) & set(cfg.inputs) & set(BOUNDED)):
            if pol.protocols[proto].data_bounds is None:
                notes.append(
                    f"policy.{proto} states no data_bounds: a session asking its data for more than the "
                    f"protocol's default {BOUNDED[proto]} is refused (docs/governance.md, \"Bounds on a party's data\")"
                )
    if pol is not None and pol.allow_seeded:
        problems.append(
            "[policy] allow_seeded = true lets the initiator's seed replace this party's randomness, "
            "DP noise included (tests only)"
        )
    if not (bundle / "docker-compose.yml").is_file():
        notes.append("no docker-compose.yml (fine for a native run)")
    return problems, notes


# ============================================================================ CLI
