"""The transport's part of a party's configuration, and the TOML helpers every section uses.

A party's configuration is one TOML file, read by
:func:`smcdp.runtime.config.load_config` (the full schema is documented
there and in docs/transport.md).  This module holds what ``smcdp.net`` needs
of it -- :class:`NetConfig`: the party's name, listen address, TLS files,
peers' addresses, timeouts and message limit -- with the parsers of those
sections, and the small validation helpers and TOML writer the other sections
reuse.  Unknown sections and keys are errors everywhere (a typo must not
silently fall back to a default).  The writer is hand-written because the
schema is flat (strings, numbers, booleans, lists and one level of sub-tables)
and a round trip through ``tomllib`` is tested, so a dependency (``tomli_w``)
would buy nothing.
"""

from __future__ import annotations

import ipaddress
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, overload

from smcdp.errors import InvalidMessage
from smcdp.net.limits import ConfigValueError, Limits, finite_number, parse_limits
from smcdp.net.tls import validate_party_name

DEFAULT_CONNECT_SECONDS = 10.0
DEFAULT_SESSION_SECONDS = 3600.0
DEFAULT_RPC_SECONDS = 120.0
#: how long a session waits for a participant that stopped answering before it fails (resumably)
DEFAULT_PEER_GRACE_SECONDS = 30.0

_MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
_KEY_RE = re.compile(r"^[A-Za-z0-9_-]+\Z")


class ConfigError(InvalidMessage):
    """The configuration file is missing, unreadable or has an invalid field."""


@dataclass(frozen=True)
class TlsConfig:
    ca: Path
    cert: Path
    key: Path


@dataclass(frozen=True)
class Timeouts:
    connect_seconds: float = DEFAULT_CONNECT_SECONDS
    session_seconds: float = DEFAULT_SESSION_SECONDS
    rpc_seconds: float = DEFAULT_RPC_SECONDS
    peer_grace_seconds: float = DEFAULT_PEER_GRACE_SECONDS


@dataclass(frozen=True, kw_only=True)
class NetConfig:
    """What the transport needs of a party's configuration: identity, addresses, TLS, timeouts, limits.

    The party's full configuration (:class:`smcdp.runtime.config.PartyConfig`)
    extends it; ``smcdp.net`` sees only these fields.
    """

    name: str
    listen: str
    tls: TlsConfig
    peers: Mapping[str, str] = field(default_factory=dict)
    timeouts: Timeouts = field(default_factory=Timeouts)
    #: what a peer may cost this party ([limits]; smcdp.net.limits)
    limits: Limits = field(default_factory=Limits)
    #: the file this was loaded from (None when built in code)
    source: Path | None = None

    @property
    def max_message_bytes(self) -> int:
        """Largest inbound message (``limits.max_message_mib``)."""
        return self.limits.max_message_bytes

    def address_of(self, party: str) -> str:
        """The configured address of ``party`` (own listen address for self)."""
        if party == self.name:
            return connect_address(self.listen)
        try:
            return self.peers[party]
        except KeyError:
            raise ConfigError(
                f"party {party!r} has no address in the [peers] table of "
                f"{self.source or 'the configuration'} (known peers: {sorted(self.peers)})"
            ) from None

    def with_changes(self, **kw: Any) -> NetConfig:
        return replace(self, **kw)


def parse_address(value: Any, field_name: str) -> tuple[str, int]:
    """``"host:port"`` or ``"[v6]:port"`` -> (host, port); raises naming ``field_name``."""
    if not isinstance(value, str) or not value:
        raise ConfigError(f'{field_name} must be a string "host:port", got {value!r}')
    m = re.match(r"^\[([0-9A-Fa-f:.]+)\]:(\d+)\Z", value) or re.match(r"^([^:\[\]\s]+):(\d+)\Z", value)
    if not m:
        raise ConfigError(f'{field_name} = {value!r} is not "host:port" (IPv6: "[addr]:port")')
    host, port = m.group(1), int(m.group(2))
    if not 1 <= port <= 65535:
        raise ConfigError(f"{field_name} = {value!r}: port must be 1..65535")
    if value.startswith("["):
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ConfigError(f"{field_name} = {value!r}: {host!r} is not an IPv6 address") from None
    return host, port


def connect_address(listen: str) -> str:
    """An address to reach a server listening on ``listen`` from the same host."""
    host, port = parse_address(listen, "party.listen")
    if host in ("0.0.0.0", "::", "*"):
        return f"127.0.0.1:{port}"
    return listen


def check_keys(table: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise ConfigError(f"unknown key(s) in {where}: {', '.join(unknown)} (allowed: {', '.join(sorted(allowed))})")


def table(data: Mapping[str, Any], key: str, required: bool) -> Mapping[str, Any]:
    if key not in data:
        if required:
            raise ConfigError(f"missing section [{key}]")
        return {}
    v = data[key]
    if not isinstance(v, dict):
        raise ConfigError(f"[{key}] must be a table")
    return v


@overload
def string(
    table: Mapping[str, Any], key: str, where: str, required: Literal[True] = True, default: str | None = None
) -> str: ...
@overload
def string(table: Mapping[str, Any], key: str, where: str, required: bool, default: str) -> str: ...
@overload
def string(
    table: Mapping[str, Any], key: str, where: str, required: bool = True, default: str | None = None
) -> str | None: ...
def string(
    table: Mapping[str, Any], key: str, where: str, required: bool = True, default: str | None = None
) -> str | None:
    if key not in table:
        if required:
            raise ConfigError(f"missing {where}.{key}")
        return default
    v = table[key]
    if not isinstance(v, str) or not v:
        raise ConfigError(f"{where}.{key} must be a non-empty string, got {v!r}")
    return v


def path_value(base: Path, table: Mapping[str, Any], key: str, where: str) -> Path:
    s = string(table, key, where)
    if "\x00" in s:
        raise ConfigError(f"{where}.{key} must not hold a NUL character, got {s!r}")
    p = Path(os.path.expanduser(s))
    return Path(os.path.normpath(p if p.is_absolute() else (base / p)))


def positive_number(table: Mapping[str, Any], key: str, where: str, default: float) -> float:
    if key not in table:
        return default
    v = table[key]
    if not finite_number(v) or v <= 0:
        raise ConfigError(f"{where}.{key} must be a positive number of seconds, got {v!r}")
    return float(v)


# ------------------------------------------------------------------ writer
def _toml_key(k: str) -> str:
    return k if _KEY_RE.match(k) else json.dumps(k, ensure_ascii=False)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError("TOML writer: only finite floats")
        return repr(v)
    if isinstance(v, (str, Path)):
        # JSON string escapes (\" \\ \n \t \uXXXX for control characters) are
        # all valid TOML basic-string escapes; ensure_ascii=False avoids
        # surrogate pairs, which TOML forbids.
        return json.dumps(str(v), ensure_ascii=False)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, Mapping):  # an inline table: a third level ([policy.<protocol>] min_hiding = { ... })
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise ValueError(f"TOML writer: unsupported value {v!r}")


def relative_path(p: Path, base: Path | None) -> str:
    if base is None:
        return str(p)
    try:
        return os.path.relpath(p, base)
    except ValueError:
        return str(p)


def dumps_toml(doc: Mapping[str, Any]) -> str:
    """Write a document of tables (values: scalars / lists) and one level of sub-tables; deeper tables are
    written inline."""
    lines: list[str] = []
    for section, table in doc.items():
        if not isinstance(table, Mapping):
            raise ValueError("TOML writer: top level must hold tables only")
        scalars = {k: v for k, v in table.items() if not isinstance(v, Mapping)}
        subs = {k: v for k, v in table.items() if isinstance(v, Mapping)}
        if scalars or not subs:
            lines.append(f"[{_toml_key(section)}]")
            lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in scalars.items()]
            lines.append("")
        for sub, st in subs.items():
            lines.append(f"[{_toml_key(section)}.{_toml_key(sub)}]")
            for k, v in st.items():
                lines.append(f"{_toml_key(k)} = {_toml_value(v)}")
            lines.append("")
    return "\n".join(lines)


# ------------------------------------------------------------------ transport sections
def parse_tls(tls_t: Mapping[str, Any], base: Path) -> TlsConfig:
    check_keys(tls_t, {"ca", "cert", "key"}, "[tls]")
    return TlsConfig(*(path_value(base, tls_t, k, "tls") for k in ("ca", "cert", "key")))


def parse_peers(peers_t: Mapping[str, Any], name: str) -> dict[str, str]:
    peers: dict[str, str] = {}
    for peer, addr in peers_t.items():
        try:
            validate_party_name(peer, "peer name in [peers]")
        except InvalidMessage as exc:
            raise ConfigError(str(exc)) from None
        if peer == name:
            raise ConfigError(f"[peers] must not list the party itself ({name!r})")
        parse_address(addr, f"peers.{peer}")
        peers[peer] = addr
    return peers


def parse_timeouts(to_t: Mapping[str, Any]) -> Timeouts:
    check_keys(to_t, {"connect_seconds", "session_seconds", "rpc_seconds", "peer_grace_seconds"}, "[timeouts]")
    return Timeouts(
        positive_number(to_t, "connect_seconds", "timeouts", DEFAULT_CONNECT_SECONDS),
        positive_number(to_t, "session_seconds", "timeouts", DEFAULT_SESSION_SECONDS),
        positive_number(to_t, "rpc_seconds", "timeouts", DEFAULT_RPC_SECONDS),
        positive_number(to_t, "peer_grace_seconds", "timeouts", DEFAULT_PEER_GRACE_SECONDS),
    )


def parse_limits_section(limits_t: Mapping[str, Any], party: Mapping[str, Any]) -> Limits:
    """``[limits]``, plus ``party.max_message_mib`` (the older place of limits.max_message_mib)."""
    legacy = None
    if "max_message_mib" in party:
        legacy = party["max_message_mib"]
        if isinstance(legacy, bool) or not isinstance(legacy, int) or not 1 <= legacy <= 16384:
            raise ConfigError(f"party.max_message_mib must be an integer 1..16384, got {legacy!r}")
    try:
        return parse_limits(limits_t, legacy)
    except ConfigValueError as exc:
        raise ConfigError(str(exc)) from None


def net_sections_to_dict(cfg: NetConfig, base: Path | None) -> dict[str, Any]:
    """The [tls], [peers], [timeouts] and [limits] tables of ``cfg`` (paths relative to ``base``)."""
    return {
        "tls": {k: relative_path(getattr(cfg.tls, k), base) for k in ("ca", "cert", "key")},
        "peers": dict(cfg.peers),
        "timeouts": {
            "connect_seconds": cfg.timeouts.connect_seconds,
            "session_seconds": cfg.timeouts.session_seconds,
            "rpc_seconds": cfg.timeouts.rpc_seconds,
            "peer_grace_seconds": cfg.timeouts.peer_grace_seconds,
        },
        "limits": cfg.limits.to_dict(),
    }
