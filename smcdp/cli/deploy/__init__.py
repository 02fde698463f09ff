"""``smcdp deploy``: per-host bundles for a deployment across machines.

``smcdp deploy init --hosts alice=HOST:PORT,bob=HOST:PORT,... --out DIR`` writes::

    DIR/
      deployment.json          what was generated (parties, addresses, image); read by `rotate`
      ca/ca.crt  ca/ca.key     the deployment CA -- keep ca.key OFFLINE, it is in no bundle
      <party>/                 one self-contained bundle per party, copied to that party's host
        party.toml             its configuration: listen address, peers' addresses, TLS files
        certs/ca.crt           the CA certificate (public)
        certs/<party>.crt      its certificate (CN = party name, SANs = name + host)
        certs/<party>.key      its private key, mode 0600 -- only in this bundle
        data/                  durable state: session records, outputs (mode 0700)
        inputs/                its private input files (copied here by --inputs)
        docker-compose.yml     runs the party image with ports, volumes, restart, health check
        .env                   image name and the uid/gid the container runs as
        README.txt             what to do with the bundle on its host

Every path in ``party.toml`` is relative to the bundle, so the same bundle runs
natively (``smcdp party --config <party>/party.toml``) and in the container, where
docker-compose mounts the bundle's files under ``/etc/smcdp`` (config, certs and
inputs read-only, data read-write).

``smcdp deploy rotate`` issues new party keys/certificates under the same CA (or
a new CA for every party) into the bundles; ``smcdp deploy add`` makes bundles
for parties that join later and adds them to the others' ``[peers]``;
``smcdp deploy check`` validates a bundle on its host before start (config,
key/certificate/CA match, expiry, file modes, foreign keys, inputs).

The compose file is written by a small YAML emitter here (block mappings and
sequences, every string JSON-quoted, which YAML accepts as double-quoted
scalars): the documents are tiny and fixed in shape, and the party image should
not need a YAML library at run time.  Tests check the output against
``docker-compose config`` and, where PyYAML is installed, parse it back.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import ipaddress
import json
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from smcdp._files import atomic_write
from smcdp.errors import InvalidMessage, SmcdpError
from smcdp.party_cli import positive_float

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
_INPUT_NAME_RE = re.compile(r"^[A-Za-z0-9_-]+$")
_PROTOCOL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_IMAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}$")


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
    from smcdp.net.config import parse_address
    from smcdp.net.tls import validate_host, validate_party_name

    item = item.strip()
    if "=" not in item:
        raise DeployError(f"--hosts entry {item!r} must look like PARTY=HOST:PORT, "
                          "e.g. alice=alice.example.org:50051")
    name, addr = (s.strip() for s in item.split("=", 1))
    try:
        validate_party_name(name, f"party name in --hosts entry {item!r}:")
        host, port = parse_address(addr, f"address of {name} in --hosts")
        validate_host(host)
    except InvalidMessage as exc:
        raise DeployError(str(exc)) from None
    if host in ("0.0.0.0", "::") or host == "*":
        raise DeployError(f"--hosts entry {item!r}: {host} is a listen-everywhere address; give the "
                          "address or DNS name the OTHER parties use to reach this party")
    return HostSpec(name, host, port)


def parse_hosts(text: str | Sequence[str]) -> list[HostSpec]:
    """Comma-separated (or a list of) host specs; validated, unique names and addresses."""
    items = text.split(",") if isinstance(text, str) else list(text)
    specs = [parse_host_spec(i) for i in items if i.strip()]
    if len(specs) < 2:
        raise DeployError("--hosts needs at least two parties, e.g. "
                          "alice=10.0.0.1:50051,bob=10.0.0.2:50051,trent=10.0.0.3:50051")
    names = [s.name for s in specs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise DeployError(f"--hosts names a party more than once: {', '.join(dup)}")
    seen: dict[tuple[str, int], str] = {}
    for s in specs:
        key = (s.host.lower(), s.port)
        if key in seen:
            raise DeployError(f"parties {seen[key]} and {s.name} would both listen on {s.address}; "
                              "give parties on the same host different ports")
        seen[key] = s.name
    return specs


def parse_input_specs(items: Iterable[str], parties: Sequence[str]
                      ) -> dict[str, dict[str, dict[str, Path]]]:
    """``--inputs alice:power-iteration:data=/srv/A.npy`` -> {party: {protocol: {name: path}}}."""
    out: dict[str, dict[str, dict[str, Path]]] = {}
    for item in items or ():
        m = re.match(r"^([^:=]+):([^:=]+):([^:=]+)=(.+)$", item.strip())
        if not m:
            raise DeployError(f"--inputs {item!r} must look like PARTY:PROTOCOL:NAME=PATH, e.g. "
                              "alice:power-iteration:data=/srv/alice/A.npy")
        party, protocol, name, path = (g.strip() for g in m.groups())
        if party not in parties:
            raise DeployError(f"--inputs {item!r} names party {party!r}, which is not in --hosts "
                              f"({', '.join(parties)})")
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
def _yaml_scalar(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        # A JSON string is a valid YAML double-quoted scalar (same escapes; non-ASCII kept).
        return json.dumps(v, ensure_ascii=False)
    raise ValueError(f"YAML writer: unsupported value {v!r}")


def dump_yaml(doc: Mapping[str, Any], indent: int = 0) -> str:
    """Block-style YAML for nested mappings / sequences of scalars, strings always quoted."""
    lines: list[str] = []
    pad = " " * indent
    for key, value in doc.items():
        if not isinstance(key, str) or not re.match(r"^[A-Za-z0-9_.-]+$", key):
            raise ValueError(f"YAML writer: unsupported key {key!r}")
        if isinstance(value, Mapping):
            if not value:
                lines.append(f"{pad}{key}: {{}}")
            else:
                lines.append(f"{pad}{key}:")
                lines.append(dump_yaml(value, indent + 2).rstrip("\n"))
        elif isinstance(value, (list, tuple)):
            if not value:
                lines.append(f"{pad}{key}: []")
            else:
                lines.append(f"{pad}{key}:")
                for item in value:
                    if isinstance(item, (Mapping, list, tuple)):
                        raise ValueError("YAML writer: sequences hold scalars only")
                    lines.append(f"{pad}  - {_yaml_scalar(item)}")
        else:
            lines.append(f"{pad}{key}: {_yaml_scalar(value)}")
    return "\n".join(lines) + "\n"


# ============================================================================ compose
def compose_document(spec: HostSpec, *, restart: str = "unless-stopped") -> dict:
    """The docker-compose document that runs ``spec.name`` on its host.

    The image, uid and gid come from the bundle's ``.env`` (with defaults here),
    so an operator changes them without editing the file.
    """
    if restart not in RESTART_POLICIES:
        raise DeployError(f"restart policy must be one of {', '.join(RESTART_POLICIES)}")
    name = spec.name
    return {
        "version": "3.8",
        "services": {
            name: {
                "image": "${SMCDP_IMAGE:-" + DEFAULT_IMAGE + "}",
                "container_name": f"smcdp-{name}",
                "hostname": name,
                "restart": restart,
                "user": "${SMCDP_UID:-%d}:${SMCDP_GID:-%d}" % (CONTAINER_UID, CONTAINER_UID),
                # the same port inside and outside: peers dial HOST:PORT from party.toml
                "ports": [f"{spec.port}:{spec.port}/tcp"],
                "volumes": [
                    f"./party.toml:{CONTAINER_CONFIG}:ro",
                    f"./certs:{CONTAINER_DIR}/certs:ro",
                    f"./inputs:{CONTAINER_DIR}/inputs:ro",
                    f"./data:{CONTAINER_DIR}/data",
                ],
                "environment": {"PYTHONUNBUFFERED": "1"},
                "read_only": True,
                "tmpfs": ["/tmp"],
                "security_opt": ["no-new-privileges:true"],
                "cap_drop": ["ALL"],
                "healthcheck": {
                    "test": ["CMD", "smcdp", "health", "--config", CONTAINER_CONFIG],
                    "interval": "30s",
                    "timeout": "10s",
                    "retries": 3,
                    "start_period": "20s",
                },
                # party.stop() aborts running sessions and tells the peers: give it time
                "stop_grace_period": "30s",
                "logging": {"driver": "json-file",
                            "options": {"max-size": "20m", "max-file": "5"}},
            }
        },
    }


def validate_compose_document(doc: Any, bundle: str | os.PathLike, party: str | None = None
                              ) -> list[str]:
    """Structural checks of a bundle's compose document against the bundle itself.

    Returns a list of problems (empty = fine).  Independent of Docker: it checks
    what the party needs -- one service, an image, the published port equals
    the port in party.toml, the four mounts point at existing bundle paths and
    at the container paths the config resolves to, a restart policy, a non-root
    user, and a grpc.health.v1 health check with this bundle's config.
    """
    from smcdp.net.config import ConfigError, load_config, parse_address

    problems: list[str] = []
    bundle = Path(bundle)
    try:
        cfg = load_config(bundle / "party.toml")
    except ConfigError as exc:
        return [f"party.toml: {exc}"]
    party = party or cfg.name
    if cfg.name != party:
        problems.append(f"party.toml configures {cfg.name!r}, expected {party!r}")
    if not isinstance(doc, Mapping):
        return problems + ["the compose document is not a mapping"]
    unknown_top = set(doc) - {"version", "services", "volumes", "networks", "secrets", "configs"}
    if unknown_top:
        problems.append(f"unknown top-level keys: {sorted(unknown_top)}")
    if "version" in doc and not (isinstance(doc["version"], str) and re.match(r"^3(\.\d+)?$", doc["version"])):
        problems.append(f"version must be a \"3.x\" string, got {doc['version']!r}")
    services = doc.get("services")
    if not isinstance(services, Mapping) or list(services) != [party]:
        return problems + [f"services must hold exactly one service named {party!r}, got "
                           f"{list(services) if isinstance(services, Mapping) else services!r}"]
    svc = services[party]
    if not isinstance(svc, Mapping):
        return problems + [f"services.{party} is not a mapping"]
    image = svc.get("image")
    if not isinstance(image, str) or not image:
        problems.append("the service has no image")
    if svc.get("restart") not in RESTART_POLICIES:
        problems.append(f"restart must be one of always/on-failure/unless-stopped, got {svc.get('restart')!r}")
    user = svc.get("user")
    if not isinstance(user, str) or re.match(r"^(0|root)(:|$)", user) or user.startswith("${SMCDP_UID:-0}"):
        problems.append(f"user must be a non-root uid:gid, got {user!r}")
    _, port = parse_address(cfg.listen, "party.listen")
    ports = svc.get("ports")
    if not isinstance(ports, list) or not ports:
        problems.append("ports: the party's gRPC port is not published")
    else:
        published = []
        for p in ports:
            m = re.match(r"^(?:[0-9.]+:)?(\d+):(\d+)(?:/tcp)?$", str(p))
            if not m:
                problems.append(f"ports entry {p!r} is not HOST_PORT:CONTAINER_PORT[/tcp]")
                continue
            published.append((int(m.group(1)), int(m.group(2))))
        if published and not any(c == port for _, c in published):
            problems.append(f"ports {ports!r} do not publish the listen port {port} of party.toml")
    vols = svc.get("volumes")
    mounts: dict[str, tuple[str, str]] = {}
    if not isinstance(vols, list):
        problems.append("volumes must be a list of HOST:CONTAINER[:MODE]")
        vols = []
    for v in vols:
        parts = str(v).split(":")
        if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
            problems.append(f"volume {v!r} is not HOST:CONTAINER[:ro|rw]")
            continue
        src, dst = parts[0], parts[1]
        mode = parts[2] if len(parts) == 3 else "rw"
        if src.startswith("./"):
            if not (bundle / src[2:]).exists():
                problems.append(f"volume {v!r}: {src} does not exist in the bundle {bundle}")
        mounts[dst] = (src, mode)
    want = {
        CONTAINER_CONFIG: ("./party.toml", "ro"),
        f"{CONTAINER_DIR}/certs": ("./certs", "ro"),
        f"{CONTAINER_DIR}/data": ("./data", "rw"),
    }
    for dst, (src, mode) in want.items():
        if mounts.get(dst) != (src, mode):
            problems.append(f"volumes must mount {src} at {dst} ({mode}); got {mounts.get(dst)}")
    # what party.toml resolves to inside the container must lie under a mount
    in_container = {
        "tls.ca": cfg.tls.ca, "tls.cert": cfg.tls.cert, "tls.key": cfg.tls.key,
        "party.data_dir": cfg.data_dir,
        **{f"inputs.{pr}.{k}": v for pr, t in cfg.inputs.items() for k, v in t.items()},
    }
    root = (bundle / "party.toml").resolve().parent
    for what, path in in_container.items():
        try:
            rel = Path(path).resolve().relative_to(root)
        except ValueError:
            problems.append(f"{what} = {path} lies outside the bundle; the container cannot see it")
            continue
        target = f"{CONTAINER_DIR}/{rel.as_posix()}"
        if not any(target == d or target.startswith(d.rstrip("/") + "/") for d in mounts):
            problems.append(f"{what} -> {target} in the container is not under any mounted volume")
        if what == "party.data_dir" and mounts.get(f"{CONTAINER_DIR}/{rel.as_posix()}", ("", ""))[1] != "rw":
            problems.append(f"the data directory {target} must be mounted read-write")
    hc = svc.get("healthcheck")
    if not isinstance(hc, Mapping):
        problems.append("no healthcheck")
    else:
        test = hc.get("test")
        if not (isinstance(test, list) and test[:3] == ["CMD", "smcdp", "health"]
                and "--config" in test and test[test.index("--config") + 1:][:1] == [CONTAINER_CONFIG]):
            problems.append(f"healthcheck.test must run `smcdp health --config {CONTAINER_CONFIG}`, got {test!r}")
        for k in ("interval", "timeout"):
            if not re.match(r"^\d+(ms|s|m|h)$", str(hc.get(k, ""))):
                problems.append(f"healthcheck.{k} must be a duration like 30s, got {hc.get(k)!r}")
        if not isinstance(hc.get("retries"), int) or hc["retries"] < 1:
            problems.append("healthcheck.retries must be a positive integer")
    return problems


# ============================================================================ files
def _write_key_and_cert(certs_dir: Path, name: str, key, cert) -> None:
    """Replace ``name.key`` (0600) and ``name.crt`` atomically (key first: never a mismatch window
    that lasts longer than one rename)."""
    from cryptography.hazmat.primitives import serialization

    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    atomic_write(certs_dir / f"{name}.key", key_pem, 0o600)
    atomic_write(certs_dir / f"{name}.crt", cert.public_bytes(serialization.Encoding.PEM), 0o644)


def _bundle_readme(spec: HostSpec, specs: Sequence[HostSpec]) -> str:
    peers = "\n".join(f"  {s.name:<12} {s.address}" for s in specs if s.name != spec.name)
    return f"""smcdp party bundle: {spec.name}
================================

This directory is everything party {spec.name!r} needs on its host ({spec.host}).
It holds {spec.name}'s PRIVATE KEY (certs/{spec.name}.key): copy it only to that host
(e.g. `scp -r {spec.name}/ {spec.host}:/opt/smcdp/{spec.name}`), readable by its operator only.

The party listens on port {spec.port}/tcp; allow inbound TCP {spec.port} from these peers
and outbound TCP to them:
{peers}

Start (Docker):   docker-compose up -d        (image from .env: SMCDP_IMAGE)
Start (native):   smcdp party --config party.toml
Check:            smcdp deploy check .   |   docker-compose ps  (health: grpc.health.v1)
Put private input files under inputs/ and list them in party.toml, e.g.
  [inputs.power-iteration]
  data = "inputs/power-iteration/A.npy"
Session records and outputs appear under data/.  See deploy/README.md in the smcdp
source for the whole walk-through (sessions, results, certificate rotation).
"""


def _env_file(image: str) -> str:
    return (f"# docker-compose reads this file.  The container runs as this uid/gid (never root):\n"
            f"# it must be able to read certs/ (the key is mode 0600) and write data/.  Either\n"
            f"#   sudo chown -R {CONTAINER_UID}:{CONTAINER_UID} certs data inputs\n"
            f"# or set SMCDP_UID/SMCDP_GID to the (non-root) uid/gid that owns this bundle.\n"
            f"SMCDP_IMAGE={image}\nSMCDP_UID={CONTAINER_UID}\nSMCDP_GID={CONTAINER_UID}\n")


def _load_manifest(out: Path) -> tuple[dict, list[HostSpec]]:
    path = out / MANIFEST
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DeployError(f"{out} is not a deployment directory made by `smcdp deploy init` "
                          f"({MANIFEST} is missing)") from None
    except (OSError, ValueError) as exc:
        raise DeployError(f"cannot read {path}: {exc}") from None
    if not isinstance(doc, dict) or doc.get("version") != MANIFEST_VERSION:
        raise DeployError(f"{path}: unsupported manifest version {doc.get('version') if isinstance(doc, dict) else doc!r}")
    try:
        specs = [HostSpec(p["name"], p["host"], int(p["port"])) for p in doc["parties"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise DeployError(f"{path}: malformed parties list ({exc})") from None
    parse_hosts([f"{s.name}={s.address}" for s in specs])  # re-validate
    return doc, specs


# ============================================================================ init
def init_deployment(out: str | os.PathLike, hosts: str | Sequence[str] | Sequence[HostSpec], *,
                    inputs: Mapping[str, Mapping[str, Mapping[str, str | os.PathLike]]] | None = None,
                    listen_host: str = "0.0.0.0", image: str = DEFAULT_IMAGE,
                    allow_insecure_keys: bool = False, connect_seconds: float | None = None,
                    session_seconds: float | None = None, rpc_seconds: float | None = None,
                    days: int | None = None, restart: str = "unless-stopped",
                    plugins: Sequence[str] = ()) -> dict[str, Path]:
    """Write the CA and one bundle per party into ``out`` (which must be new or empty).

    Returns party name -> bundle directory.
    """
    from smcdp.net.config import Timeouts, parse_address
    from smcdp.net.tls import DEFAULT_PARTY_DAYS

    if not isinstance(hosts, str) and hosts and all(isinstance(h, HostSpec) for h in hosts):
        specs = parse_hosts([f"{h.name}={h.address}" for h in hosts])  # type: ignore[union-attr]
    else:
        specs = parse_hosts(hosts)  # type: ignore[arg-type]
    names = [s.name for s in specs]
    parse_address(f"{listen_host}:1" if ":" not in listen_host else f"[{listen_host}]:1", "--listen-host")
    if not _IMAGE_RE.match(image):
        raise DeployError(f"--image {image!r} is not an image reference")
    if restart not in RESTART_POLICIES:
        raise DeployError(f"--restart must be one of {', '.join(RESTART_POLICIES)}")
    plugins = tuple(dict.fromkeys(plugins))
    for m in plugins:
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$", m):
            raise DeployError(f"--plugin {m!r} is not a Python module name")
    inputs = {p: {pr: {k: Path(v) for k, v in t.items()} for pr, t in d.items()}
              for p, d in (inputs or {}).items()}
    for p, tables in inputs.items():
        if p not in names:
            raise DeployError(f"inputs given for {p!r}, which is not in --hosts")
        for proto, table in tables.items():
            names_seen: dict[str, str] = {}
            for k, src in table.items():
                if not src.is_file():
                    raise DeployError(f"input {p}:{proto}:{k} = {src} is not a readable file")
                if src.name in names_seen:
                    raise DeployError(f"inputs {p}:{proto}:{names_seen[src.name]} and {k} share the file "
                                      f"name {src.name}; rename one")
                names_seen[src.name] = k
    timeouts = Timeouts()
    timeouts = Timeouts(connect_seconds or timeouts.connect_seconds,
                        session_seconds or timeouts.session_seconds,
                        rpc_seconds or timeouts.rpc_seconds)
    for what, v in (("connect", timeouts.connect_seconds), ("session", timeouts.session_seconds),
                    ("rpc", timeouts.rpc_seconds)):
        if not v > 0:
            raise DeployError(f"--{what}-seconds must be positive")
    days = DEFAULT_PARTY_DAYS if days is None else days
    if days <= 0:
        raise DeployError("--days must be positive")

    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise DeployError(f"{out} already exists and is not an empty directory; choose a new --out "
                          "(to renew certificates of an existing deployment use `smcdp deploy rotate`)")
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        return _write_deployment(out, specs, inputs, listen_host, image, allow_insecure_keys, timeouts,
                                 days, restart, plugins)
    except BaseException:
        # never leave half a deployment behind (a re-run would refuse the non-empty directory)
        if created:
            shutil.rmtree(out, ignore_errors=True)
        else:
            for child in out.iterdir():
                shutil.rmtree(child, ignore_errors=True) if child.is_dir() else child.unlink()
        raise


@dataclass(frozen=True)
class _Settings:
    """Deployment-wide settings every bundle shares (kept in deployment.json)."""

    listen_host: str
    image: str
    restart: str
    allow_insecure_keys: bool
    timeouts: Any
    days: int
    plugins: tuple[str, ...]


def _write_bundle(out: Path, spec: HostSpec, specs: Sequence[HostSpec], ca_key, ca_cert,
                  inputs: Mapping[str, Mapping[str, Path]], st: _Settings) -> Path:
    """Create ``out/<spec.name>/`` (must not exist) for ``spec`` with every other spec as a peer."""
    from smcdp.net.config import PartyConfig, TlsConfig, dump_config
    from smcdp.net.tls import issue_party_certificate

    b = out / spec.name
    certs = b / "certs"
    certs.mkdir(parents=True)
    (b / "data").mkdir(mode=0o700)
    (b / "inputs").mkdir()
    shutil.copyfile(out / "ca" / "ca.crt", certs / "ca.crt")
    key, cert = issue_party_certificate(ca_key, ca_cert, spec.name, [spec.host], st.days)
    _write_key_and_cert(certs, spec.name, key, cert)
    bundle_inputs: dict[str, dict[str, Path]] = {}
    for proto, table in inputs.items():
        for k, src in table.items():
            dst = b / "inputs" / proto / Path(src).name
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
            os.chmod(dst, 0o640)
            bundle_inputs.setdefault(proto, {})[k] = dst.resolve()
    lh = st.listen_host
    cfg = PartyConfig(
        name=spec.name,
        listen=(f"[{lh}]:{spec.port}" if ":" in lh else f"{lh}:{spec.port}"),
        data_dir=(b / "data").resolve(),
        tls=TlsConfig(ca=(certs / "ca.crt").resolve(), cert=(certs / f"{spec.name}.crt").resolve(),
                      key=(certs / f"{spec.name}.key").resolve()),
        peers={s.name: s.address for s in specs if s.name != spec.name},
        inputs=bundle_inputs,
        plugins=st.plugins,
        allow_insecure_keys=st.allow_insecure_keys,
        timeouts=st.timeouts,
    )
    dump_config(cfg, b / "party.toml")
    atomic_write(b / "docker-compose.yml",
                  (f"# smcdp party {spec.name} on {spec.host} -- generated by `smcdp deploy`.\n"
                   f"# Start with `docker-compose up -d` in this directory; see README.txt.\n"
                   + dump_yaml(compose_document(spec, restart=st.restart))).encode("utf-8"))
    atomic_write(b / ".env", _env_file(st.image).encode("utf-8"))
    atomic_write(b / "README.txt", _bundle_readme(spec, specs).encode("utf-8"))
    problems = validate_compose_document(compose_document(spec, restart=st.restart), b, spec.name)
    if problems:  # a bug here, never the user's input
        raise SmcdpError(f"generated bundle {b} is inconsistent: {'; '.join(problems)}")
    return b


def _write_manifest(out: Path, specs: Sequence[HostSpec], st: _Settings, created: str | None = None) -> None:
    manifest = {
        "version": MANIFEST_VERSION,
        "created": created or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "parties": [{"name": s.name, "host": s.host, "port": s.port} for s in specs],
        "listen_host": st.listen_host, "image": st.image, "restart": st.restart,
        "allow_insecure_keys": st.allow_insecure_keys, "certificate_days": st.days,
        "plugins": list(st.plugins),
        "timeouts": {"connect_seconds": st.timeouts.connect_seconds,
                     "session_seconds": st.timeouts.session_seconds,
                     "rpc_seconds": st.timeouts.rpc_seconds},
    }
    atomic_write(out / MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode("utf-8"))


def _write_deployment(out: Path, specs: list[HostSpec], inputs, listen_host: str, image: str,
                      allow_insecure_keys: bool, timeouts, days: int, restart: str,
                      plugins: tuple[str, ...]) -> dict[str, Path]:
    from smcdp.net.tls import create_ca, write_certificate, write_private_key

    st = _Settings(listen_host, image, restart, allow_insecure_keys, timeouts, days, plugins)
    ca_dir = out / "ca"
    ca_dir.mkdir(mode=0o700)
    ca_key, ca_cert = create_ca()
    write_private_key(ca_dir / "ca.key", ca_key)
    write_certificate(ca_dir / "ca.crt", ca_cert)
    bundles = {spec.name: _write_bundle(out, spec, specs, ca_key, ca_cert, inputs.get(spec.name, {}), st)
               for spec in specs}
    _write_manifest(out, specs, st)
    return bundles


# ============================================================================ add
def add_parties(out: str | os.PathLike, hosts: str | Sequence[str], *,
                inputs: Mapping[str, Mapping[str, Mapping[str, str | os.PathLike]]] | None = None
                ) -> tuple[dict[str, Path], dict[str, list[str]]]:
    """Add parties to an existing deployment: a bundle for each (same CA and settings), and the
    new peers in the coordinator's copy of every existing bundle's ``party.toml``.

    Returns (new party -> bundle, existing party -> ``[peers]`` lines its operator must add).
    """
    from smcdp.net.config import Timeouts, dump_config, load_config
    from smcdp.net.tls import load_certificate, load_private_key

    out = Path(out)
    manifest, specs = _load_manifest(out)
    items = [i for i in (hosts.split(",") if isinstance(hosts, str) else hosts) if i.strip()]
    new = [parse_host_spec(i) for i in items]
    if not new:
        raise DeployError("--hosts names no party to add")
    clash = sorted({s.name for s in new} & {s.name for s in specs})
    if clash:
        raise DeployError(f"already in the deployment: {', '.join(clash)} (use `smcdp deploy rotate` "
                          "to renew a party's certificate)")
    every = parse_hosts([f"{s.name}={s.address}" for s in [*specs, *new]])  # duplicates, addresses
    for s in new:
        if (out / s.name).exists():
            raise DeployError(f"{out / s.name} already exists")
    inputs = {p: {pr: {k: Path(v) for k, v in t.items()} for pr, t in d.items()}
              for p, d in (inputs or {}).items()}
    for p in inputs:
        if p not in {s.name for s in new}:
            raise DeployError(f"inputs given for {p!r}, which is not one of the parties being added")
    t = manifest.get("timeouts") or {}
    st = _Settings(manifest.get("listen_host", "0.0.0.0"), manifest.get("image", DEFAULT_IMAGE),
                   manifest.get("restart", "unless-stopped"), bool(manifest.get("allow_insecure_keys")),
                   Timeouts(**t) if t else Timeouts(), int(manifest.get("certificate_days", 825)),
                   tuple(manifest.get("plugins", ())))
    ca_key = load_private_key(out / "ca" / "ca.key")
    ca_cert = load_certificate(out / "ca" / "ca.crt")
    bundles: dict[str, Path] = {}
    try:
        for s in new:
            bundles[s.name] = _write_bundle(out, s, every, ca_key, ca_cert, inputs.get(s.name, {}), st)
    except BaseException:
        for s in new:  # none of these directories existed before (checked above)
            shutil.rmtree(out / s.name, ignore_errors=True)
        raise
    lines = [f'{s.name} = "{s.address}"' for s in new]
    todo: dict[str, list[str]] = {}
    for s in specs:
        todo[s.name] = lines
        cfg_path = out / s.name / "party.toml"
        if cfg_path.is_file():
            cfg = load_config(cfg_path)
            dump_config(cfg.with_changes(peers={**cfg.peers, **{n.name: n.address for n in new}}), cfg_path)
            atomic_write(out / s.name / "README.txt", _bundle_readme(s, every).encode("utf-8"))
    _write_manifest(out, every, st, created=manifest.get("created"))
    return bundles, todo


# ============================================================================ rotate
def rotate_certificates(out: str | os.PathLike, parties: Sequence[str] | None = None, *,
                        new_ca: bool = False, days: int | None = None) -> dict[str, str]:
    """Issue new keys and certificates into the bundles under ``out``.

    Without ``new_ca``: new key + certificate for each of ``parties`` under the
    existing CA; nothing changes for the others (they trust the CA, not the
    certificate).  With ``new_ca``: a new CA and new keys/certificates for
    every party, and the new ``ca.crt`` in every bundle -- every party must
    then be updated and restarted together.  Returns party -> new certificate
    summary (serial, expiry, SHA-256 fingerprint).
    """
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    from smcdp.net.tls import (DEFAULT_PARTY_DAYS, create_ca, issue_party_certificate,
                               load_certificate, load_private_key, write_certificate,
                               write_private_key)

    out = Path(out)
    manifest, specs = _load_manifest(out)
    by_name = {s.name: s for s in specs}
    if new_ca:
        if parties and set(parties) != set(by_name):
            raise DeployError("--new-ca re-issues every party's certificate; do not combine it with --party")
        targets = list(by_name)
    else:
        if not parties:
            raise DeployError("name the parties to rotate with --party NAME (repeat), or use --all / --new-ca")
        unknown = [p for p in parties if p not in by_name]
        if unknown:
            raise DeployError(f"not in this deployment: {', '.join(unknown)} (parties: {', '.join(by_name)})")
        targets = list(dict.fromkeys(parties))
    days = int(manifest.get("certificate_days", DEFAULT_PARTY_DAYS)) if days is None else days
    if days <= 0:
        raise DeployError("--days must be positive")
    ca_dir = out / "ca"
    if new_ca:
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
        for f in ("ca.crt", "ca.key"):
            if (ca_dir / f).exists():
                os.replace(ca_dir / f, ca_dir / f"{f}.replaced-{stamp}")
        ca_key, ca_cert = create_ca()
        write_private_key(ca_dir / "ca.key", ca_key)
        write_certificate(ca_dir / "ca.crt", ca_cert)
    else:
        ca_key = load_private_key(ca_dir / "ca.key")
        ca_cert = load_certificate(ca_dir / "ca.crt")
        if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
            raise DeployError(f"{ca_dir / 'ca.key'} is not the EC key of a smcdp CA")
    summary = {}
    for name in targets:
        b = out / name
        certs = b / "certs"
        if not certs.is_dir():
            raise DeployError(f"bundle {b} has no certs/ directory")
        key, cert = issue_party_certificate(ca_key, ca_cert, name, [by_name[name].host], days)
        if new_ca:
            atomic_write(certs / "ca.crt", (ca_dir / "ca.crt").read_bytes(), 0o644)
        _write_key_and_cert(certs, name, key, cert)
        summary[name] = (f"serial {cert.serial_number:x}, valid until "
                         f"{cert.not_valid_after_utc:%Y-%m-%d}, SHA-256 {cert.fingerprint(hashes.SHA256()).hex()}")
    return summary


# ============================================================================ check
def check_bundle(bundle: str | os.PathLike, warn_days: int = 30) -> tuple[list[str], list[str]]:
    """(problems, notes) for a bundle on its host: config, TLS files, modes, compose file."""
    from smcdp.net.config import ConfigError, load_config
    from smcdp.net.tls import TlsMaterial

    bundle = Path(bundle)
    problems: list[str] = []
    notes: list[str] = []
    try:
        cfg = load_config(bundle / "party.toml")
    except ConfigError as exc:
        return [str(exc)], notes
    notes.append(f"party {cfg.name}, listen {cfg.listen}, peers: "
                 + ", ".join(f"{p}={a}" for p, a in sorted(cfg.peers.items())))
    try:
        tls = TlsMaterial.load(cfg.tls.ca, cfg.tls.cert, cfg.tls.key)
        if tls.name != cfg.name:
            problems.append(f"certificate {cfg.tls.cert} is for {tls.name!r}, not {cfg.name!r}")
        from smcdp.net.tls import load_certificate

        cert = load_certificate(cfg.tls.cert)
        left = cert.not_valid_after_utc - _dt.datetime.now(_dt.timezone.utc)
        msg = f"certificate valid until {cert.not_valid_after_utc:%Y-%m-%d} ({left.days} days)"
        (problems if left.days < warn_days else notes).append(
            msg + (" -- rotate it: smcdp deploy rotate" if left.days < warn_days else ""))
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
    if not (bundle / "docker-compose.yml").is_file():
        notes.append("no docker-compose.yml (fine for a native run)")
    return problems, notes


# ============================================================================ CLI
def _cmd_init(args: argparse.Namespace) -> int:
    try:
        specs = parse_hosts(args.hosts)
        inputs = parse_input_specs(args.inputs or (), [s.name for s in specs])
        if args.allow_insecure_keys:
            print("WARNING: --allow-insecure-keys lets sessions use Paillier keys below 2048 bits; "
                  "for tests only", file=sys.stderr)
        bundles = init_deployment(args.out, specs, inputs=inputs, listen_host=args.listen_host,
                                  image=args.image, allow_insecure_keys=args.allow_insecure_keys,
                                  connect_seconds=args.connect_seconds,
                                  session_seconds=args.session_seconds, rpc_seconds=args.rpc_seconds,
                                  days=args.days, restart=args.restart, plugins=args.plugin or ())
    except SmcdpError as exc:
        print(f"smcdp deploy init: error [{exc.code}]: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    print(f"deployment written to {out}")
    print(f"  CA: {out / 'ca' / 'ca.crt'} -- move {out / 'ca' / 'ca.key'} OFFLINE (needed only by "
          "`smcdp deploy rotate`; it is in no bundle)")
    for spec in specs:
        print(f"  {spec.name:<12} {spec.address:<28} bundle {bundles[spec.name]}/  -> copy to {spec.host}")
    return 0


def _cmd_add(args: argparse.Namespace) -> int:
    try:
        specs = [parse_host_spec(i) for i in args.hosts.split(",") if i.strip()]
        inputs = parse_input_specs(args.inputs or (), [s.name for s in specs])
        bundles, todo = add_parties(args.dir, args.hosts, inputs=inputs)
    except SmcdpError as exc:
        print(f"smcdp deploy add: error [{exc.code}]: {exc}", file=sys.stderr)
        return 2
    for s in specs:
        print(f"  {s.name:<12} {s.address:<28} bundle {bundles[s.name]}/  -> copy to {s.host}")
    print("Every existing party must learn the new address(es): add to the [peers] table of its "
          "party.toml (the copies under --dir are updated) and restart it:")
    for name, lines in todo.items():
        print(f"  {name}: " + "; ".join(lines))
    return 0


def _cmd_rotate(args: argparse.Namespace) -> int:
    try:
        if args.all and args.party:
            raise DeployError("give --party or --all, not both")
        parties = None
        if args.all:
            _, specs = _load_manifest(Path(args.dir))
            parties = [s.name for s in specs]
        elif args.party:
            parties = args.party
        summary = rotate_certificates(args.dir, parties, new_ca=args.new_ca, days=args.days)
    except SmcdpError as exc:
        print(f"smcdp deploy rotate: error [{exc.code}]: {exc}", file=sys.stderr)
        return 2
    for name, text in summary.items():
        print(f"{name}: new key and certificate in {Path(args.dir) / name / 'certs'} ({text})")
    if args.new_ca:
        print("NEW CA: copy certs/ of EVERY bundle to its host and restart every party; until all "
              "have restarted, old and new parties cannot talk.")
    else:
        print("Copy certs/<party>.crt and certs/<party>.key of each rotated bundle to its host and "
              "restart that party (docker-compose restart); the other parties need no change.")
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    problems, notes = check_bundle(args.bundle, warn_days=args.warn_days)
    for n in notes:
        print(f"ok: {n}")
    for p in problems:
        print(f"PROBLEM: {p}")
    print("bundle looks good" if not problems else f"{len(problems)} problem(s)")
    return 0 if not problems else 1


def register(subparsers) -> None:
    p = subparsers.add_parser("deploy", help="bundles for running parties on several hosts",
                              description="Generate and maintain per-host party bundles "
                              "(config, TLS files, docker-compose.yml).")
    sub = p.add_subparsers(dest="deploy_command", metavar="ACTION")
    sub.required = True

    i = sub.add_parser("init", help="create a CA and one self-contained bundle per party",
                       description="Write DIR/ca (the CA; keep ca.key offline) and DIR/<party>/ for every "
                       "party: party.toml, certs/ (CA cert, own key 0600 and cert), data/, inputs/, "
                       "docker-compose.yml, .env, README.txt.")
    i.add_argument("--hosts", required=True, metavar="NAME=HOST:PORT,...",
                   help="every party with the address the OTHER parties reach it at, e.g. "
                   "alice=10.0.0.1:50051,bob=bob.example.org:50051,trent=10.0.0.3:50051")
    i.add_argument("--out", required=True, metavar="DIR", help="new or empty output directory")
    i.add_argument("--inputs", action="append", metavar="PARTY:PROTOCOL:NAME=PATH",
                   help="copy a private input file into that party's bundle and configure it "
                   "(repeat), e.g. alice:power-iteration:data=A.npy")
    i.add_argument("--listen-host", default="0.0.0.0",
                   help="address each party binds to on its host (default 0.0.0.0)")
    i.add_argument("--image", default=DEFAULT_IMAGE, help=f"container image (default {DEFAULT_IMAGE})")
    i.add_argument("--restart", default="unless-stopped", choices=RESTART_POLICIES,
                   help="docker-compose restart policy (default unless-stopped)")
    i.add_argument("--days", type=int, help="party certificate validity in days (default 825)")
    i.add_argument("--connect-seconds", type=positive_float, help="[timeouts] connect_seconds")
    i.add_argument("--session-seconds", type=positive_float, help="[timeouts] session_seconds (default deadline)")
    i.add_argument("--rpc-seconds", type=positive_float, help="[timeouts] rpc_seconds")
    i.add_argument("--plugin", action="append", metavar="MODULE",
                   help="extra protocol module every party imports (party.plugins; repeat)")
    i.add_argument("--allow-insecure-keys", action="store_true",
                   help="TESTS ONLY: let sessions use Paillier keys below 2048 bits")
    i.set_defaults(func=_cmd_init)

    a = sub.add_parser("add", help="add parties to a deployment made by `deploy init`",
                       description="Bundles for new parties under the same CA and settings; the "
                       "existing bundles' [peers] (copies under --dir) learn the new addresses.")
    a.add_argument("--dir", required=True, help="the directory made by `smcdp deploy init`")
    a.add_argument("--hosts", required=True, metavar="NAME=HOST:PORT,...", help="the new parties")
    a.add_argument("--inputs", action="append", metavar="PARTY:PROTOCOL:NAME=PATH",
                   help="copy a private input file into a new party's bundle (repeat)")
    a.set_defaults(func=_cmd_add)

    r = sub.add_parser("rotate", help="issue new party keys/certificates into existing bundles",
                       description="New key + certificate under the deployment CA for the named parties "
                       "(others unchanged), or --new-ca: a new CA and new certificates for every party.")
    r.add_argument("--dir", required=True, help="the directory made by `smcdp deploy init`")
    r.add_argument("--party", action="append", help="party to rotate (repeat)")
    r.add_argument("--all", action="store_true", help="rotate every party under the same CA")
    r.add_argument("--new-ca", action="store_true",
                   help="replace the CA too (every party must be updated and restarted together)")
    r.add_argument("--days", type=int, help="validity of the new certificates in days")
    r.set_defaults(func=_cmd_rotate)

    c = sub.add_parser("check", help="validate a bundle on its host before starting the party")
    c.add_argument("bundle", help="the bundle directory (holds party.toml)")
    c.add_argument("--warn-days", type=int, default=30,
                   help="treat a certificate expiring within this many days as a problem (default 30)")
    c.set_defaults(func=_cmd_check)
