"""``[console]``: the party's read-only web console and Prometheus metrics (docs/operations.md).

::

    [console]
    listen = "127.0.0.1:9464"      # off unless given; loopback unless tls or insecure_bind says otherwise
    refresh_seconds = 5            # pages reload themselves this often (0: never)
    probe_seconds = 15             # how often the peers are probed (health, round trip, certificate)
    insecure_bind = false          # true: allow plain HTTP on a non-loopback address (warned at start-up)
    token_file = "console.token"   # clients must send "Authorization: Bearer <the file's token>" (0600)
    [console.tls]                  # HTTPS with a certificate issued by the federation's CA ([tls] ca)
    cert = "certs/alice-console.crt"
    key = "certs/alice-console.key"
    client_ca = "certs/operators-ca.crt"   # clients must present a certificate from this CA

With ``[console.tls]`` the console may listen beyond loopback, so a client must
authenticate: a certificate issued by ``client_ca`` (if that is the federation's own CA,
it must be this party's own certificate: any member holds one from that CA), or the
bearer token of ``token_file``; at least one of the two is required.  Without authentication a client gets only
``/healthz`` and the stylesheet.

The console shows what an operator may see of this party -- sessions, peers, budgets, the audit
log -- and nothing a peer entrusted to it or that protects its data: no keys, no inputs, no
outputs, no seeds or randomness roots (docs/operations.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from smcdp._hosts import is_loopback
from smcdp.net.config import ConfigError, check_keys, parse_address, path_value, relative_path, string


@dataclass(frozen=True)
class ConsoleTls:
    cert: Path
    key: Path
    client_ca: Path | None = None  # clients present a certificate issued by this CA


@dataclass(frozen=True)
class ConsoleConfig:
    """``[console]``; ``listen`` None means the console is off."""

    listen: str | None = None
    tls: ConsoleTls | None = None
    insecure_bind: bool = False
    token_file: Path | None = None  # clients send this file's bearer token
    refresh_seconds: float = 5.0
    probe_seconds: float = 15.0

    @property
    def enabled(self) -> bool:
        return self.listen is not None

    @property
    def loopback(self) -> bool:
        return self.listen is None or is_loopback(parse_address(self.listen, "console.listen")[0])


def _seconds(t: Mapping[str, Any], key: str, default: float, allow_zero: bool) -> float:
    v = t.get(key, default)
    if (
        isinstance(v, bool)
        or not isinstance(v, (int, float))
        or v != v
        or v < 0
        or (v == 0 and not allow_zero)
        or v > 86400
    ):
        raise ConfigError(
            f"console.{key} must be a number of seconds in {'[0' if allow_zero else '(0'}, 86400], got {v!r}"
        )
    return float(v)


def parse_console(t: Mapping[str, Any], base: Path) -> ConsoleConfig:
    """Validate ``[console]`` (an empty table: the console stays off)."""
    check_keys(t, {"listen", "tls", "insecure_bind", "refresh_seconds", "probe_seconds", "token_file"}, "[console]")
    if not t:
        return ConsoleConfig()
    listen = string(t, "listen", "console")
    host, _port = parse_address(listen, "console.listen")
    insecure = t.get("insecure_bind", False)
    if not isinstance(insecure, bool):
        raise ConfigError(f"console.insecure_bind must be true or false, got {insecure!r}")
    tls = None
    if "tls" in t:
        tt = t["tls"]
        if not isinstance(tt, dict):
            raise ConfigError("[console.tls] must be a table with cert and key")
        check_keys(tt, {"cert", "key", "client_ca"}, "[console.tls]")
        tls = ConsoleTls(
            path_value(base, tt, "cert", "console.tls"),
            path_value(base, tt, "key", "console.tls"),
            path_value(base, tt, "client_ca", "console.tls") if "client_ca" in tt else None,
        )
    token = path_value(base, t, "token_file", "console") if "token_file" in t else None
    if tls is not None and tls.client_ca is None and token is None:
        raise ConfigError(
            "[console.tls] needs client_ca (clients present a certificate from that CA) or console.token_file "
            "(clients send its bearer token): without either any client that reaches the port reads this "
            "party's sessions, peers, budgets and audit log"
        )
    if not is_loopback(host) and tls is None and not insecure:
        raise ConfigError(
            f"console.listen = {listen!r} is not a loopback address: the console would serve this party's "
            "sessions, peers and budgets in plain HTTP to the network. Give [console.tls] (a certificate "
            "from the federation's CA) or, knowingly, console.insecure_bind = true"
        )
    return ConsoleConfig(
        listen=listen,
        tls=tls,
        insecure_bind=insecure,
        token_file=token,
        refresh_seconds=_seconds(t, "refresh_seconds", 5.0, True),
        probe_seconds=_seconds(t, "probe_seconds", 15.0, False),
    )


def console_to_dict(c: ConsoleConfig, base: Path | None) -> dict:
    """The ``[console]`` table of ``c`` (empty when the console is off)."""
    if not c.enabled:
        return {}
    d: dict[str, Any] = {"listen": c.listen, "refresh_seconds": c.refresh_seconds, "probe_seconds": c.probe_seconds}
    if c.insecure_bind:
        d["insecure_bind"] = True
    if c.token_file is not None:
        d["token_file"] = relative_path(c.token_file, base)
    if c.tls is not None:
        d["tls"] = {"cert": relative_path(c.tls.cert, base), "key": relative_path(c.tls.key, base)}
        if c.tls.client_ca is not None:
            d["tls"]["client_ca"] = relative_path(c.tls.client_ca, base)
    return d
