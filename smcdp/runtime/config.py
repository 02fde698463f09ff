"""A party's configuration: one TOML file (read with the standard library's ``tomllib``).

Example (all relative paths are resolved against the config file's directory)::

    [party]
    name = "alice"                 # must equal the CN of tls.cert
    listen = "0.0.0.0:50051"
    data_dir = "state/alice"
    allow_insecure_keys = false
    plugins = []                   # extra protocol modules to import

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

    [policy]                       # what this party joins, with whom (smcdp.runtime.governance.policy)
    approval = "auto"
    [policy.power-iteration]
    roles = ["party*"]
    initiators = ["trent"]
    coordinators = ["trent"]
    release_to = ["trent", "bob"]
    allow_non_dp = true

    [budget]                       # the privacy budget of its data (smcdp.runtime.governance.charges)
    dataset = "alice"
    epsilon = 10.0

    [limits]                       # optional: what a peer may cost this party
    pending_per_peer = 4           # (every key and its default: smcdp.net.limits,
    max_message_mib = 256          #  docs/security.md)

    [logging]                      # optional
    format = "text"                # or "json": one JSON object per line
    level = "INFO"

    [compute]                      # optional: where a data party's compute runs
    engine = "dask"                # "local" (default) or "dask"; all keys: smcdp.compute.config
    scheduler = "local"
    workers = 2

    [console]                      # optional: read-only web console + /metrics
    listen = "127.0.0.1:9464"      # loopback unless [console.tls] or insecure_bind (all keys:
                                   #   smcdp.runtime.console.config, docs/operations.md)

An input may name a ``.npy`` file, a folder of ``.npy`` shards or a Zarr array directory.

The transport's sections ([tls], [peers], [timeouts], [limits] and the transport
keys of [party]) are parsed by :mod:`smcdp.net.config`; this module adds the
party's own (data directory, inputs, plug-ins, logging, policy, budget, compute)
and is the only reader and writer of the file.  Unknown sections and keys are errors.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from smcdp._files import atomic_write
from smcdp._optional import require
from smcdp.compute.config import ComputeConfig, ComputeConfigError
from smcdp.errors import InvalidMessage
from smcdp.net.config import (
    ConfigError,
    NetConfig,
    check_keys,
    dumps_toml,
    net_sections_to_dict,
    parse_address,
    parse_limits_section,
    parse_peers,
    parse_timeouts,
    parse_tls,
    path_value,
    relative_path,
    string,
    table,
)
from smcdp.net.tls import validate_party_name
from smcdp.runtime.console.config import ConsoleConfig, console_to_dict, parse_console
from smcdp.runtime.governance.charges import BudgetConfig, budget_to_dict, parse_budget
from smcdp.runtime.governance.policy import Policy, parse_policy

_MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
_KEY_RE = re.compile(r"^[A-Za-z0-9_-]+\Z")
LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


@dataclass(frozen=True)
class LoggingConfig:
    """``[logging]``: ``format`` "text" (one line per record) or "json" (one JSON object per line)."""

    format: str = "text"
    level: str = "INFO"


def _parse_logging(t: Mapping[str, Any]) -> LoggingConfig:
    check_keys(t, {"format", "level"}, "[logging]")
    fmt = t.get("format", "text")
    if fmt not in LOG_FORMATS:
        raise ConfigError(f"logging.format must be one of {', '.join(LOG_FORMATS)}, got {fmt!r}")
    level = t.get("level", "INFO")
    if not isinstance(level, str) or level.upper() not in LOG_LEVELS:
        raise ConfigError(f"logging.level must be one of {', '.join(LOG_LEVELS)}, got {level!r}")
    return LoggingConfig(fmt, level.upper())


@dataclass(frozen=True, kw_only=True)
class PartyConfig(NetConfig):
    """Everything a party process is configured with (the transport's part is :class:`NetConfig`)."""

    data_dir: Path
    inputs: Mapping[str, Mapping[str, Path]] = field(default_factory=dict)
    plugins: tuple[str, ...] = ()
    allow_insecure_keys: bool = False
    policy: Policy | None = None  # None: no [policy] (see docs/governance.md)
    budget: BudgetConfig | None = None  # None: no [budget]
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    compute: ComputeConfig = field(default_factory=ComputeConfig)  # [compute]
    console: ConsoleConfig = field(default_factory=ConsoleConfig)  # [console]

    @property
    def proposers(self) -> frozenset[str]:
        """The peers whose proposals the policy may admit (none without ``[policy]``): ``pending_total`` and
        ``pending_approvals_total`` are shared among them (docs/security.md, "Fair admission")."""
        return frozenset() if self.policy is None else self.policy.proposers(self.peers)


def _parse_inputs(inputs_t: Mapping[str, Any], base: Path) -> dict[str, dict[str, Path]]:
    inputs: dict[str, dict[str, Path]] = {}
    for proto, tbl in inputs_t.items():
        if not isinstance(tbl, dict):
            raise ConfigError(f'inputs.{proto} must be a table of name = "path"')
        entries = {}
        for k in tbl:
            if not _KEY_RE.match(k):
                raise ConfigError(f"inputs.{proto}.{k}: input names use letters, digits, '_' and '-'")
            entries[k] = path_value(base, tbl, k, f"inputs.{proto}")
        inputs[proto] = entries
    return inputs


def parse_config(data: Mapping[str, Any], base_dir: str | os.PathLike, source: Path | None = None) -> PartyConfig:
    """Validate a parsed TOML document; relative paths are resolved against ``base_dir``."""
    base = Path(base_dir)
    check_keys(
        data,
        {"party", "tls", "peers", "inputs", "timeouts", "limits", "logging", "policy", "budget", "compute", "console"},
        "the top level",
    )

    party = table(data, "party", True)
    check_keys(party, {"name", "listen", "data_dir", "allow_insecure_keys", "plugins", "max_message_mib"}, "[party]")
    name = string(party, "name", "party")
    try:
        validate_party_name(name, "party.name")
    except InvalidMessage as exc:
        raise ConfigError(str(exc)) from None
    listen = string(party, "listen", "party")
    parse_address(listen, "party.listen")
    data_dir = path_value(base, party, "data_dir", "party")
    insecure = party.get("allow_insecure_keys", False)
    if not isinstance(insecure, bool):
        raise ConfigError(f"party.allow_insecure_keys must be true or false, got {insecure!r}")
    plugins = party.get("plugins", [])
    if not isinstance(plugins, list) or not all(isinstance(p, str) and _MODULE_RE.match(p) for p in plugins):
        raise ConfigError(f"party.plugins must be a list of Python module names, got {plugins!r}")
    peers = parse_peers(table(data, "peers", False), name)
    cfg = PartyConfig(
        name=name,
        listen=listen,
        data_dir=data_dir,
        tls=parse_tls(table(data, "tls", True), base),
        peers=parse_peers(table(data, "peers", False), name),
        inputs=_parse_inputs(table(data, "inputs", False), base),
        plugins=tuple(plugins),
        allow_insecure_keys=insecure,
        timeouts=parse_timeouts(table(data, "timeouts", False)),
        limits=parse_limits_section(table(data, "limits", False), party),
        logging=_parse_logging(table(data, "logging", False)),
        source=source,
        policy=parse_policy(table(data, "policy", False), name, peers) if "policy" in data else None,
        budget=parse_budget(table(data, "budget", False), base) if "budget" in data else None,
        compute=_parse_compute(table(data, "compute", False), base),
        console=parse_console(table(data, "console", False), base),
    )
    _check_shares(cfg)
    return cfg


def _check_shares(cfg: PartyConfig) -> None:
    """Every peer the policy may admit gets at least one place in the shared admission queues: a total
    smaller than the number of such peers would let some of them fill it (docs/security.md, "Fair
    admission"); refused at start-up, naming the keys."""
    n, lim = len(cfg.proposers), cfg.limits
    for key, total in (("pending_total", lim.pending_total), ("pending_approvals_total", lim.pending_approvals_total)):
        if total < n:
            raise ConfigError(
                f"limits.{key} ({total}) is smaller than the {n} peers whose proposals [policy] may admit: each of "
                f"them must get a share of at least one (raise limits.{key} to {n} or more, or admit fewer peers)"
            )


def _parse_compute(tbl: Mapping[str, Any], base: Path) -> ComputeConfig:
    """[compute]; the checks live with the engines in smcdp.compute.config."""
    try:
        return ComputeConfig.from_mapping(tbl, base)
    except ComputeConfigError as exc:
        raise ConfigError(str(exc)) from None


def optional_parts(cfg: PartyConfig) -> list[tuple[str, str]]:
    """The optional parts (:mod:`smcdp._optional`) ``cfg`` asks for, each with the setting that asks."""
    parts = []
    if cfg.compute.engine == "dask":
        parts.append(("dask", f'party {cfg.name}: [compute] engine = "dask"'))
    if cfg.console.enabled:
        parts.append(("console", f"party {cfg.name}: [console]"))
    return parts


def require_optional_parts(cfg: PartyConfig) -> None:
    """Refuse, naming the package and its ``pip install`` line, a configuration whose optional parts
    are not installed here (at start-up, before the party serves, not when a session needs them)."""
    for part, needed_by in optional_parts(cfg):
        require(part, needed_by)


#: the longest unix-socket path used (``sun_path`` holds 108 bytes with its NUL; a margin below that)
_UNIX_PATH_MAX = 100
_PLAIN_PATH = re.compile(r"[A-Za-z0-9_./+@=,~-]+")


def operator_socket(config: PartyConfig) -> Path | None:
    """``data_dir/operator.sock``: the party's second listener, for its operator on the same host (docs/security.md,
    a connection flood): the TCP port's connection cap does not cover it, and only this party's OS user can
    open it (the data directory is 0700, the socket its owner's only).  None where the path is too long for a unix socket
    (the operator then uses the TCP address)."""
    path = Path(config.data_dir).absolute() / "operator.sock"
    # gRPC reads a "unix:" target as a URI on the client's side only: a path with "?", "#", "%" or a space
    # would name another file there, so such a data directory keeps the operator on the TCP address
    if len(str(path).encode()) > _UNIX_PATH_MAX or not _PLAIN_PATH.fullmatch(str(path)):
        return None
    return path


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
    except RecursionError:  # tomllib recurses into nested arrays and tables
        raise ConfigError(f"{p} is not valid TOML: nested too deeply") from None
    try:
        return parse_config(data, p.resolve().parent, source=p.resolve())
    except ConfigError as exc:
        raise ConfigError(f"{p}: {exc}") from None


def config_to_dict(cfg: PartyConfig, relative_to: str | os.PathLike | None = None) -> dict:
    """The TOML document of ``cfg`` as nested dicts (paths relative to ``relative_to``)."""
    base = Path(relative_to) if relative_to is not None else None
    net = net_sections_to_dict(cfg, base)
    doc = {
        "party": {
            "name": cfg.name,
            "listen": cfg.listen,
            "data_dir": relative_path(cfg.data_dir, base),
            "allow_insecure_keys": cfg.allow_insecure_keys,
            "plugins": list(cfg.plugins),
        },
        "tls": net["tls"],
        "peers": net["peers"],
        "inputs": {proto: {k: relative_path(v, base) for k, v in t.items()} for proto, t in cfg.inputs.items()},
        "timeouts": net["timeouts"],
        "limits": net["limits"],
        "logging": {"format": cfg.logging.format, "level": cfg.logging.level},
    }
    if cfg.policy is not None:
        doc["policy"] = cfg.policy.as_dict()
    if cfg.budget is not None:
        doc["budget"] = budget_to_dict(cfg.budget, base)
    compute = cfg.compute.to_dict(lambda p: relative_path(p, base))  # [compute]
    if compute:
        doc["compute"] = compute
    console = console_to_dict(cfg.console, base)  # [console]
    if console:
        doc["console"] = console
    return doc


def dump_config(cfg: PartyConfig, path: str | os.PathLike) -> Path:
    """Write ``cfg`` as TOML to ``path`` with paths relative to the file's directory."""
    path = Path(path)
    text = dumps_toml(config_to_dict(cfg, relative_to=path.resolve().parent))
    return atomic_write(path, text.encode("utf-8"), 0o644)
