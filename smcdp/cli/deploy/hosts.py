"""Who runs where: host specs (party=HOST:PORT), input specs, deployment constants."""

import ipaddress
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from smcdp.errors import InvalidMessage
from smcdp.net.config import parse_address
from smcdp.net.tls import check_hosts_name_no_other_party, validate_host, validate_party_name

#: where the container image expects a bundle's pieces (see deploy/Dockerfile)
CONTAINER_DIR = "/etc/smcdp"
CONTAINER_CONFIG = f"{CONTAINER_DIR}/party.toml"
#: uid/gid of the non-root user in deploy/Dockerfile (overridable per host in .env)
CONTAINER_UID = 10001
DEFAULT_IMAGE = "smcdp:latest"
MANIFEST = "deployment.json"
MANIFEST_VERSION = 1
#: a party must come back by itself after a crash or a host reboot, so "no" is not offered
RESTART_POLICIES = ("always", "on-failure", "unless-stopped")
_INPUT_NAME_RE = re.compile(r"^[A-Za-z0-9_-]+\Z")
_PROTOCOL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
IMAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}\Z")


class DeployError(InvalidMessage):
    """A deploy argument, bundle or deployment directory is not acceptable."""


# ============================================================================ host specs
@dataclass(frozen=True)
class HostSpec:
    """Where one party runs: its name, the host others reach it at, and its port."""

    name: str
    host: str
    port: int

    @property
    def address(self) -> str:
        """``host:port`` as peers write it (IPv6 in brackets)."""
        try:
            if ipaddress.ip_address(self.host).version == 6:
                return f"[{self.host}]:{self.port}"
        except ValueError:
            pass
        return f"{self.host}:{self.port}"


def parse_host_spec(item: str) -> HostSpec:
    """``alice=10.0.0.1:50051`` / ``bob=bob.example.org:50051`` / ``carol=[2001:db8::1]:50051``."""

    item = item.strip()
    if "=" not in item:
        raise DeployError(f"--hosts entry {item!r} must look like PARTY=HOST:PORT, e.g. alice=alice.example.org:50051")
    name, addr = (s.strip() for s in item.split("=", 1))
    try:
        validate_party_name(name, f"party name in --hosts entry {item!r}:")
        host, port = parse_address(addr, f"address of {name} in --hosts")
        validate_host(host)
    except InvalidMessage as exc:
        raise DeployError(str(exc)) from None
    if host in ("0.0.0.0", "::") or host == "*":
        raise DeployError(
            f"--hosts entry {item!r}: {host} is a listen-everywhere address; give the "
            "address or DNS name the OTHER parties use to reach this party"
        )
    return HostSpec(name, host, port)


def parse_hosts(text: str | Sequence[str]) -> list[HostSpec]:
    """Comma-separated (or a list of) host specs; validated, unique names and addresses."""
    items = text.split(",") if isinstance(text, str) else list(text)
    specs = [parse_host_spec(i) for i in items if i.strip()]
    if len(specs) < 2:
        raise DeployError(
            "--hosts needs at least two parties, e.g. alice=10.0.0.1:50051,bob=10.0.0.2:50051,trent=10.0.0.3:50051"
        )
    names = [s.name for s in specs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise DeployError(f"--hosts names a party more than once: {', '.join(dup)}")
    seen: dict[tuple[str, int], str] = {}
    for s in specs:
        key = (s.host.lower(), s.port)
        if key in seen:
            raise DeployError(
                f"parties {seen[key]} and {s.name} would both listen on {s.address}; "
                "give parties on the same host different ports"
            )
        seen[key] = s.name
    try:  # a party's certificate carries its host: never another party's name (smcdp.net.tls)
        check_hosts_name_no_other_party({s.name: [s.host] for s in specs}, names)
    except InvalidMessage as exc:
        raise DeployError(str(exc)) from None
    return specs


def parse_input_specs(items: Iterable[str], parties: Sequence[str]) -> dict[str, dict[str, dict[str, Path]]]:
    """``--inputs alice:power-iteration:data=/srv/A.npy`` -> {party: {protocol: {name: path}}}."""
    out: dict[str, dict[str, dict[str, Path]]] = {}
    for item in items or ():
        m = re.match(r"^([^:=]+):([^:=]+):([^:=]+)=(.+)\Z", item.strip())
        if not m:
            raise DeployError(
                f"--inputs {item!r} must look like PARTY:PROTOCOL:NAME=PATH, e.g. "
                "alice:power-iteration:data=/srv/alice/A.npy"
            )
        party, protocol, name, path = (g.strip() for g in m.groups())
        if party not in parties:
            raise DeployError(
                f"--inputs {item!r} names party {party!r}, which is not in --hosts ({', '.join(parties)})"
            )
        if not _PROTOCOL_RE.match(protocol):
            raise DeployError(f"--inputs {item!r}: {protocol!r} is not a protocol name")
        if not _INPUT_NAME_RE.match(name):
            raise DeployError(f"--inputs {item!r}: input names use letters, digits, '_' and '-'")
        p = Path(os.path.expanduser(path))
        if not p.is_file():
            raise DeployError(f"--inputs {item!r}: {p} is not a readable file")
        table = out.setdefault(party, {}).setdefault(protocol, {})
        if name in table:
            raise DeployError(f"--inputs gives {party}:{protocol}:{name} twice")
        table[name] = p
    return out


# ============================================================================ YAML writer
