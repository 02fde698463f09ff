"""Party configuration in TOML (read with the standard library's ``tomllib``).

Example (all relative paths are resolved against the config file's directory)::

    [party]
    name = "alice"                 # must equal the CN of tls.cert
    listen = "0.0.0.0:50051"
    data_dir = "state/alice"
    allow_insecure_keys = false
    plugins = []                   # extra protocol modules to import
    max_message_mib = 512          # optional: largest inbound message

    [tls]
    ca = "certs/ca.crt"
    cert = "certs/alice.crt"
    key = "certs/alice.key"

    [peers]
    bob = "127.0.0.1:50052"
    trent = "127.0.0.1:50053"

    [inputs.power-iteration]
    data = "A.npy"

    [timeouts]                     # optional
    connect_seconds = 10
    session_seconds = 3600
    rpc_seconds = 120

Unknown sections and keys are errors (a typo must not silently fall back to a
default).  :func:`dump_config` writes the same schema back; it is a small
hand-written writer because the schema is flat (strings, numbers, booleans,
lists of strings and one level of tables) and a round trip through
``tomllib`` is tested, so a dependency (``tomli_w``) would buy nothing.
"""

from __future__ import annotations

import ipaddress
import json
import math
import os
import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from smcdp._files import atomic_write
from smcdp.errors import InvalidMessage
from smcdp.net.tls import validate_party_name

DEFAULT_CONNECT_SECONDS = 10.0
DEFAULT_SESSION_SECONDS = 3600.0
DEFAULT_RPC_SECONDS = 120.0
DEFAULT_MAX_MESSAGE_MIB = 512

_MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_KEY_RE = re.compile(r"^[A-Za-z0-9_-]+$")


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


@dataclass(frozen=True)
class PartyConfig:
    name: str
    listen: str
    data_dir: Path
    tls: TlsConfig
    peers: Mapping[str, str] = field(default_factory=dict)
    inputs: Mapping[str, Mapping[str, Path]] = field(default_factory=dict)
    plugins: tuple[str, ...] = ()
    allow_insecure_keys: bool = False
    timeouts: Timeouts = field(default_factory=Timeouts)
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_MIB * 1024 * 1024
    #: the file this was loaded from (None when built in code)
    source: Path | None = None

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

    def with_changes(self, **kw) -> "PartyConfig":
        return replace(self, **kw)


def parse_address(value: Any, field_name: str) -> tuple[str, int]:
    """``"host:port"`` or ``"[v6]:port"`` -> (host, port); raises naming ``field_name``."""
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{field_name} must be a string \"host:port\", got {value!r}")
    m = re.match(r"^\[([0-9A-Fa-f:.]+)\]:(\d+)$", value) or re.match(r"^([^:\[\]\s]+):(\d+)$", value)
    if not m:
        raise ConfigError(f"{field_name} = {value!r} is not \"host:port\" (IPv6: \"[addr]:port\")")
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


def _check_keys(table: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise ConfigError(f"unknown key(s) in {where}: {', '.join(unknown)} "
                          f"(allowed: {', '.join(sorted(allowed))})")


def _table(data: Mapping[str, Any], key: str, required: bool) -> Mapping[str, Any]:
    if key not in data:
        if required:
            raise ConfigError(f"missing section [{key}]")
        return {}
    v = data[key]
    if not isinstance(v, dict):
        raise ConfigError(f"[{key}] must be a table")
    return v


def _str(table: Mapping[str, Any], key: str, where: str, required: bool = True,
         default: str | None = None) -> str | None:
    if key not in table:
        if required:
            raise ConfigError(f"missing {where}.{key}")
        return default
    v = table[key]
    if not isinstance(v, str) or not v:
        raise ConfigError(f"{where}.{key} must be a non-empty string, got {v!r}")
    return v


def _path(base: Path, table: Mapping[str, Any], key: str, where: str) -> Path:
    s = _str(table, key, where)
    p = Path(os.path.expanduser(s))
    return Path(os.path.normpath(p if p.is_absolute() else (base / p)))


def _positive(table: Mapping[str, Any], key: str, where: str, default: float) -> float:
    if key not in table:
        return default
    v = table[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise ConfigError(f"{where}.{key} must be a positive number of seconds, got {v!r}")
    return float(v)


def parse_config(data: Mapping[str, Any], base_dir: str | os.PathLike,
                 source: Path | None = None) -> PartyConfig:
    """Validate a parsed TOML document; relative paths are resolved against ``base_dir``."""
    base = Path(base_dir)
    _check_keys(data, {"party", "tls", "peers", "inputs", "timeouts"}, "the top level")

    party = _table(data, "party", True)
    _check_keys(party, {"name", "listen", "data_dir", "allow_insecure_keys", "plugins",
                        "max_message_mib"}, "[party]")
    name = _str(party, "name", "party")
    try:
        validate_party_name(name, "party.name")
    except InvalidMessage as exc:
        raise ConfigError(str(exc)) from None
    listen = _str(party, "listen", "party")
    parse_address(listen, "party.listen")
    data_dir = _path(base, party, "data_dir", "party")
    insecure = party.get("allow_insecure_keys", False)
    if not isinstance(insecure, bool):
        raise ConfigError(f"party.allow_insecure_keys must be true or false, got {insecure!r}")
    plugins = party.get("plugins", [])
    if not isinstance(plugins, list) or not all(isinstance(p, str) and _MODULE_RE.match(p)
                                                for p in plugins):
        raise ConfigError(f"party.plugins must be a list of Python module names, got {plugins!r}")
    mib = party.get("max_message_mib", DEFAULT_MAX_MESSAGE_MIB)
    if isinstance(mib, bool) or not isinstance(mib, int) or not 1 <= mib <= 16384:
        raise ConfigError(f"party.max_message_mib must be an integer 1..16384, got {mib!r}")

    tls_t = _table(data, "tls", True)
    _check_keys(tls_t, {"ca", "cert", "key"}, "[tls]")
    tls = TlsConfig(*(_path(base, tls_t, k, "tls") for k in ("ca", "cert", "key")))

    peers_t = _table(data, "peers", False)
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

    inputs_t = _table(data, "inputs", False)
    inputs: dict[str, dict[str, Path]] = {}
    for proto, table in inputs_t.items():
        if not isinstance(table, dict):
            raise ConfigError(f"inputs.{proto} must be a table of name = \"path\"")
        entries = {}
        for k in table:
            if not _KEY_RE.match(k):
                raise ConfigError(f"inputs.{proto}.{k}: input names use letters, digits, '_' and '-'")
            entries[k] = _path(base, table, k, f"inputs.{proto}")
        inputs[proto] = entries

    to_t = _table(data, "timeouts", False)
    _check_keys(to_t, {"connect_seconds", "session_seconds", "rpc_seconds"}, "[timeouts]")
    timeouts = Timeouts(
        _positive(to_t, "connect_seconds", "timeouts", DEFAULT_CONNECT_SECONDS),
        _positive(to_t, "session_seconds", "timeouts", DEFAULT_SESSION_SECONDS),
        _positive(to_t, "rpc_seconds", "timeouts", DEFAULT_RPC_SECONDS),
    )
    return PartyConfig(name=name, listen=listen, data_dir=data_dir, tls=tls, peers=peers,
                       inputs=inputs, plugins=tuple(plugins), allow_insecure_keys=insecure,
                       timeouts=timeouts, max_message_bytes=mib * 1024 * 1024, source=source)


def load_config(path: str | os.PathLike) -> PartyConfig:
    """Read and validate a party's TOML configuration."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"configuration file {p} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"cannot read configuration file {p}: {exc}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p} is not valid TOML: {exc}") from None
    try:
        return parse_config(data, p.resolve().parent, source=p.resolve())
    except ConfigError as exc:
        raise ConfigError(f"{p}: {exc}") from None


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
    raise ValueError(f"TOML writer: unsupported value {v!r}")


def _rel(p: Path, base: Path | None) -> str:
    if base is None:
        return str(p)
    try:
        return os.path.relpath(p, base)
    except ValueError:
        return str(p)


def config_to_dict(cfg: PartyConfig, relative_to: str | os.PathLike | None = None) -> dict:
    """The TOML document of ``cfg`` as nested dicts (paths relative to ``relative_to``)."""
    base = Path(relative_to) if relative_to is not None else None
    doc: dict[str, Any] = {
        "party": {
            "name": cfg.name, "listen": cfg.listen, "data_dir": _rel(cfg.data_dir, base),
            "allow_insecure_keys": cfg.allow_insecure_keys, "plugins": list(cfg.plugins),
            "max_message_mib": cfg.max_message_bytes // (1024 * 1024),
        },
        "tls": {k: _rel(getattr(cfg.tls, k), base) for k in ("ca", "cert", "key")},
        "peers": dict(cfg.peers),
        "inputs": {proto: {k: _rel(v, base) for k, v in t.items()} for proto, t in cfg.inputs.items()},
        "timeouts": {"connect_seconds": cfg.timeouts.connect_seconds,
                     "session_seconds": cfg.timeouts.session_seconds,
                     "rpc_seconds": cfg.timeouts.rpc_seconds},
    }
    return doc


def dumps_toml(doc: Mapping[str, Any]) -> str:
    """Write a document of tables (values: scalars / lists) and one level of sub-tables."""
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
                if isinstance(v, Mapping):
                    raise ValueError("TOML writer: nesting deeper than two tables is not supported")
                lines.append(f"{_toml_key(k)} = {_toml_value(v)}")
            lines.append("")
    return "\n".join(lines)


def dump_config(cfg: PartyConfig, path: str | os.PathLike) -> Path:
    """Write ``cfg`` as TOML to ``path`` with paths relative to the file's directory."""
    path = Path(path)
    text = dumps_toml(config_to_dict(cfg, relative_to=path.resolve().parent))
    return atomic_write(path, text.encode("utf-8"), 0o644)
