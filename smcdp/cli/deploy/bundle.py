"""Writing bundles: ``deploy init`` (CA, keys, certificates, configs, compose files), ``add``, ``rotate``."""

import datetime as _dt
import json
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from smcdp._files import atomic_write
from smcdp.cli.deploy.compose import (
    compose_document,
    dump_yaml,
    validate_compose_document,
)
from smcdp.cli.deploy.governance import bundle_governance
from smcdp.cli.deploy.hosts import (
    CONTAINER_UID,
    DEFAULT_IMAGE,
    IMAGE_RE,
    MANIFEST,
    MANIFEST_VERSION,
    RESTART_POLICIES,
    DeployError,
    HostSpec,
    parse_host_spec,
    parse_hosts,
)
from smcdp.errors import SmcdpError
from smcdp.net.config import Timeouts, TlsConfig, parse_address
from smcdp.net.tls import (
    DEFAULT_PARTY_DAYS,
    create_ca,
    issue_party_certificate,
    load_certificate,
    load_private_key,
    validate_host,
    write_certificate,
    write_private_key,
)
from smcdp.runtime.config import PartyConfig, dump_config, load_config
from smcdp.runtime.governance.charges import BudgetConfig
from smcdp.runtime.governance.policy import Policy


def _write_key_and_cert(certs_dir: Path, name: str, key, cert) -> None:
    """Replace ``name.key`` (0600) and ``name.crt`` atomically (key first: never a mismatch window
    that lasts longer than one rename)."""
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
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
What the party joins, with whom and within which privacy budget is its [policy] and
[budget] in party.toml: review them (docs/governance.md); the audit trail of every
proposal and decision is data/audit.jsonl (check it with `smcdp audit verify --config
party.toml`).
Session records and outputs appear under data/.  See deploy/README.md in the smcdp
source for the whole walk-through (sessions, results, certificate rotation).
"""


def _env_file(image: str) -> str:
    return (
        f"# docker-compose reads this file.  The container runs as this uid/gid (never root):\n"
        f"# it must be able to read certs/ (the key is mode 0600) and write data/.  Either\n"
        f"#   sudo chown -R {CONTAINER_UID}:{CONTAINER_UID} certs data inputs\n"
        f"# or set SMCDP_UID/SMCDP_GID to the (non-root) uid/gid that owns this bundle.\n"
        f"SMCDP_IMAGE={image}\nSMCDP_UID={CONTAINER_UID}\nSMCDP_GID={CONTAINER_UID}\n"
    )


def load_manifest(out: Path) -> tuple[dict, list[HostSpec]]:
    path = out / MANIFEST
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DeployError(
            f"{out} is not a deployment directory made by `smcdp deploy init` ({MANIFEST} is missing)"
        ) from None
    except (OSError, ValueError) as exc:
        raise DeployError(f"cannot read {path}: {exc}") from None
    if not isinstance(doc, dict) or doc.get("version") != MANIFEST_VERSION:
        raise DeployError(
            f"{path}: unsupported manifest version {doc.get('version') if isinstance(doc, dict) else doc!r}"
        )
    try:
        specs = [HostSpec(p["name"], p["host"], int(p["port"])) for p in doc["parties"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise DeployError(f"{path}: malformed parties list ({exc})") from None
    parse_hosts([f"{s.name}={s.address}" for s in specs])  # re-validate
    return doc, specs


# ============================================================================ init
def init_deployment(
    out: str | os.PathLike,
    hosts: str | Sequence[str] | Sequence[HostSpec],
    *,
    inputs: Mapping[str, Mapping[str, Mapping[str, str | os.PathLike]]] | None = None,
    listen_host: str = "0.0.0.0",
    image: str = DEFAULT_IMAGE,
    allow_insecure_keys: bool = False,
    connect_seconds: float | None = None,
    session_seconds: float | None = None,
    rpc_seconds: float | None = None,
    days: int | None = None,
    restart: str = "unless-stopped",
    plugins: Sequence[str] = (),
    peer_grace_seconds: float | None = None,
    layouts: Mapping[str, Sequence[Mapping[str, str]]] | None = None,
    initiators: Mapping[str, Sequence[str]] | None = None,
    approval: str = "auto",
    budget: float | None = None,
    budget_delta: float | None = None,
) -> dict[str, Path]:
    """Write the CA and one bundle per party into ``out`` (which must be new or empty).

    ``layouts`` (protocol -> [role -> party]), ``initiators``, ``approval``, ``budget``,
    ``budget_delta``: the sessions the deployment runs, from which every bundle's
    ``[policy]`` and ``[budget]`` are made (:mod:`smcdp.cli.deploy.governance`).
    Returns party name -> bundle directory.
    """

    if not isinstance(hosts, str) and hosts and all(isinstance(h, HostSpec) for h in hosts):
        specs = parse_hosts([f"{h.name}={h.address}" for h in hosts])  # type: ignore[union-attr]
    else:
        specs = parse_hosts(hosts)  # type: ignore[arg-type]
    names = [s.name for s in specs]
    try:
        validate_host(listen_host)  # an IP address or a DNS name (the address regex alone let 100k characters by)
    except SmcdpError as exc:
        raise DeployError(f"--listen-host: {exc}") from None
    parse_address(f"{listen_host}:1" if ":" not in listen_host else f"[{listen_host}]:1", "--listen-host")
    if not IMAGE_RE.match(image):
        raise DeployError(f"--image {image!r} is not an image reference")
    if restart not in RESTART_POLICIES:
        raise DeployError(f"--restart must be one of {', '.join(RESTART_POLICIES)}")
    plugins = tuple(dict.fromkeys(plugins))
    for m in plugins:
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z", m):
            raise DeployError(f"--plugin {m!r} is not a Python module name")
    paths = {p: {pr: {k: Path(v) for k, v in t.items()} for pr, t in d.items()} for p, d in (inputs or {}).items()}
    for p, tables in paths.items():
        if p not in names:
            raise DeployError(f"inputs given for {p!r}, which is not in --hosts")
        for proto, table in tables.items():
            names_seen: dict[str, str] = {}
            for k, src in table.items():
                if not src.is_file():
                    raise DeployError(f"input {p}:{proto}:{k} = {src} is not a readable file")
                if src.name in names_seen:
                    raise DeployError(
                        f"inputs {p}:{proto}:{names_seen[src.name]} and {k} share the file name {src.name}; rename one"
                    )
                names_seen[src.name] = k
    timeouts = Timeouts()
    timeouts = Timeouts(
        connect_seconds or timeouts.connect_seconds,
        session_seconds or timeouts.session_seconds,
        rpc_seconds or timeouts.rpc_seconds,
        peer_grace_seconds or timeouts.peer_grace_seconds,
    )
    for what, v in (
        ("connect", timeouts.connect_seconds),
        ("session", timeouts.session_seconds),
        ("rpc", timeouts.rpc_seconds),
        ("peer-grace", timeouts.peer_grace_seconds),
    ):
        if not v > 0:
            raise DeployError(f"--{what}-seconds must be positive")
    days = DEFAULT_PARTY_DAYS if days is None else days
    if days <= 0:
        raise DeployError("--days must be positive")
    gov_kw = {k: v for k, v in (("budget", budget), ("budget_delta", budget_delta)) if v is not None}
    policies, budgets = bundle_governance(
        names,
        {k: [dict(x) for x in v] for k, v in (layouts or {}).items()},
        {k: list(v) for k, v in (initiators or {}).items()},
        approval=approval,
        allow_insecure_keys=allow_insecure_keys,
        plugins=plugins,
        **gov_kw,
    )

    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise DeployError(
            f"{out} already exists and is not an empty directory; choose a new --out "
            "(to renew certificates of an existing deployment use `smcdp deploy rotate`)"
        )
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        return _write_deployment(
            out,
            specs,
            paths,
            listen_host,
            image,
            allow_insecure_keys,
            timeouts,
            days,
            restart,
            plugins,
            policies,
            budgets,
        )
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


def _write_bundle(
    out: Path,
    spec: HostSpec,
    specs: Sequence[HostSpec],
    ca_key,
    ca_cert,
    inputs: Mapping[str, Mapping[str, Path]],
    st: _Settings,
    policy: Policy,
    budget: BudgetConfig | None,
) -> Path:
    """Create ``out/<spec.name>/`` (must not exist) for ``spec`` with every other spec as a peer."""

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
        tls=TlsConfig(
            ca=(certs / "ca.crt").resolve(),
            cert=(certs / f"{spec.name}.crt").resolve(),
            key=(certs / f"{spec.name}.key").resolve(),
        ),
        peers={s.name: s.address for s in specs if s.name != spec.name},
        inputs=bundle_inputs,
        plugins=st.plugins,
        allow_insecure_keys=st.allow_insecure_keys,
        timeouts=st.timeouts,
        policy=policy,
        budget=budget,
    )
    dump_config(cfg, b / "party.toml")
    atomic_write(
        b / "docker-compose.yml",
        (
            f"# smcdp party {spec.name} on {spec.host} -- generated by `smcdp deploy`.\n"
            f"# Start with `docker-compose up -d` in this directory; see README.txt.\n"
            + dump_yaml(compose_document(spec, restart=st.restart))
        ).encode("utf-8"),
    )
    atomic_write(b / ".env", _env_file(st.image).encode("utf-8"))
    atomic_write(b / "README.txt", _bundle_readme(spec, specs).encode("utf-8"))
    problems = validate_compose_document(compose_document(spec, restart=st.restart), b, spec.name)
    if problems:  # a bug here, never the user's input
        raise SmcdpError(f"generated bundle {b} is inconsistent: {'; '.join(problems)}")
    return b


def _write_manifest(out: Path, specs: Sequence[HostSpec], st: _Settings, created: str | None = None) -> None:
    manifest = {
        "version": MANIFEST_VERSION,
        "created": created or _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "parties": [{"name": s.name, "host": s.host, "port": s.port} for s in specs],
        "listen_host": st.listen_host,
        "image": st.image,
        "restart": st.restart,
        "allow_insecure_keys": st.allow_insecure_keys,
        "certificate_days": st.days,
        "plugins": list(st.plugins),
        "timeouts": {
            "connect_seconds": st.timeouts.connect_seconds,
            "session_seconds": st.timeouts.session_seconds,
            "rpc_seconds": st.timeouts.rpc_seconds,
            "peer_grace_seconds": st.timeouts.peer_grace_seconds,
        },
    }
    atomic_write(out / MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode("utf-8"))


def _write_deployment(
    out: Path,
    specs: list[HostSpec],
    inputs,
    listen_host: str,
    image: str,
    allow_insecure_keys: bool,
    timeouts,
    days: int,
    restart: str,
    plugins: tuple[str, ...],
    policies: Mapping[str, Policy],
    budgets: Mapping[str, BudgetConfig],
) -> dict[str, Path]:
    st = _Settings(listen_host, image, restart, allow_insecure_keys, timeouts, days, plugins)
    ca_dir = out / "ca"
    ca_dir.mkdir(mode=0o700)
    ca_key, ca_cert = create_ca()
    write_private_key(ca_dir / "ca.key", ca_key)
    write_certificate(ca_dir / "ca.crt", ca_cert)
    bundles = {
        spec.name: _write_bundle(
            out,
            spec,
            specs,
            ca_key,
            ca_cert,
            inputs.get(spec.name, {}),
            st,
            policies[spec.name],
            budgets.get(spec.name),
        )
        for spec in specs
    }
    _write_manifest(out, specs, st)
    return bundles


# ============================================================================ add
def add_parties(
    out: str | os.PathLike,
    hosts: str | Sequence[str],
    *,
    inputs: Mapping[str, Mapping[str, Mapping[str, str | os.PathLike]]] | None = None,
) -> tuple[dict[str, Path], dict[str, list[str]]]:
    """Add parties to an existing deployment: a bundle for each (same CA and settings), and the
    new peers in the coordinator's copy of every existing bundle's ``party.toml``.

    Returns (new party -> bundle, existing party -> ``[peers]`` lines its operator must add).
    """

    out = Path(out)
    manifest, specs = load_manifest(out)
    items = [i for i in (hosts.split(",") if isinstance(hosts, str) else hosts) if i.strip()]
    new = [parse_host_spec(i) for i in items]
    if not new:
        raise DeployError("--hosts names no party to add")
    clash = sorted({s.name for s in new} & {s.name for s in specs})
    if clash:
        raise DeployError(
            f"already in the deployment: {', '.join(clash)} (use `smcdp deploy rotate` to renew a party's certificate)"
        )
    every = parse_hosts([f"{s.name}={s.address}" for s in [*specs, *new]])  # duplicates, addresses
    for s in new:
        if (out / s.name).exists():
            raise DeployError(f"{out / s.name} already exists")
    paths = {p: {pr: {k: Path(v) for k, v in t.items()} for pr, t in d.items()} for p, d in (inputs or {}).items()}
    for p in paths:
        if p not in {s.name for s in new}:
            raise DeployError(f"inputs given for {p!r}, which is not one of the parties being added")
    t = manifest.get("timeouts") or {}
    st = _Settings(
        manifest.get("listen_host", "0.0.0.0"),
        manifest.get("image", DEFAULT_IMAGE),
        manifest.get("restart", "unless-stopped"),
        bool(manifest.get("allow_insecure_keys")),
        Timeouts(**t) if t else Timeouts(),
        int(manifest.get("certificate_days", 825)),
        tuple(manifest.get("plugins", ())),
    )
    ca_key = load_private_key(out / "ca" / "ca.key")
    ca_cert = load_certificate(out / "ca" / "ca.crt")
    bundles: dict[str, Path] = {}
    try:
        for s in new:
            # a party that joins later joins no protocol until its operator writes [policy.<protocol>]
            bundles[s.name] = _write_bundle(out, s, every, ca_key, ca_cert, paths.get(s.name, {}), st, Policy(), None)
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
            dump_config(
                cfg.with_changes(peers={**cfg.peers, **{n.name: n.address for n in new}}),  # type: ignore[arg-type]  # with_changes is replace(): a PartyConfig here; smcdp/net/config.py annotates it NetConfig
                cfg_path,
            )
            atomic_write(out / s.name / "README.txt", _bundle_readme(s, every).encode("utf-8"))
    _write_manifest(out, every, st, created=manifest.get("created"))
    return bundles, todo


# ============================================================================ rotate
def rotate_certificates(
    out: str | os.PathLike, parties: Sequence[str] | None = None, *, new_ca: bool = False, days: int | None = None
) -> dict[str, str]:
    """Issue new keys and certificates into the bundles under ``out``.

    Without ``new_ca``: new key + certificate for each of ``parties`` under the
    existing CA; nothing changes for the others (they trust the CA, not the
    certificate).  With ``new_ca``: a new CA and new keys/certificates for
    every party, and the new ``ca.crt`` in every bundle -- every party must
    then be updated and restarted together.  Returns party -> new certificate
    summary (serial, expiry, SHA-256 fingerprint).
    """
    out = Path(out)
    manifest, specs = load_manifest(out)
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
        stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%S")
        for f in ("ca.crt", "ca.key"):
            if (ca_dir / f).exists():
                os.replace(ca_dir / f, ca_dir / f"{f}.replaced-{stamp}")
        ca_key, ca_cert = create_ca()
        write_private_key(ca_dir / "ca.key", ca_key)
        write_certificate(ca_dir / "ca.crt", ca_cert)
    else:
        loaded = load_private_key(ca_dir / "ca.key")
        ca_cert = load_certificate(ca_dir / "ca.crt")
        if not isinstance(loaded, ec.EllipticCurvePrivateKey):
            raise DeployError(f"{ca_dir / 'ca.key'} is not the EC key of a smcdp CA")
        ca_key = loaded
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
        summary[name] = (
            f"serial {cert.serial_number:x}, valid until "
            f"{cert.not_valid_after_utc:%Y-%m-%d}, SHA-256 {cert.fingerprint(hashes.SHA256()).hex()}"
        )
    return summary


# ============================================================================ check
