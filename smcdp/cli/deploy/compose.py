"""The docker-compose document of a bundle: written by a small YAML emitter, validated on read.

The documents are tiny and fixed in shape and the party image should not need a
YAML library at run time, so they are emitted here (block mappings and sequences,
every string JSON-quoted, which YAML accepts as double-quoted scalars).  Tests
check the output against ``docker-compose config`` and parse it back with PyYAML.
"""

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from smcdp.cli.deploy.hosts import (
    CONTAINER_CONFIG,
    CONTAINER_DIR,
    CONTAINER_UID,
    DEFAULT_IMAGE,
    RESTART_POLICIES,
    DeployError,
    HostSpec,
)
from smcdp.net.config import ConfigError, parse_address
from smcdp.runtime.config import load_config


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
        if not isinstance(key, str) or not re.match(r"^[A-Za-z0-9_.-]+\Z", key):
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
                "user": f"${{SMCDP_UID:-{CONTAINER_UID}}}:${{SMCDP_GID:-{CONTAINER_UID}}}",
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
                "logging": {"driver": "json-file", "options": {"max-size": "20m", "max-file": "5"}},
            }
        },
    }


def validate_compose_document(doc: Any, bundle: str | os.PathLike, party: str | None = None) -> list[str]:
    """Structural checks of a bundle's compose document against the bundle itself.

    Returns a list of problems (empty = fine).  Independent of Docker: it checks
    what the party needs -- one service, an image, the published port equals
    the port in party.toml, the four mounts point at existing bundle paths and
    at the container paths the config resolves to, a restart policy, a non-root
    user, and a grpc.health.v1 health check with this bundle's config.
    """

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
    if "version" in doc and not (isinstance(doc["version"], str) and re.match(r"^3(\.\d+)?\Z", doc["version"])):
        problems.append(f'version must be a "3.x" string, got {doc["version"]!r}')
    services = doc.get("services")
    if not isinstance(services, Mapping) or list(services) != [party]:
        return problems + [
            f"services must hold exactly one service named {party!r}, got "
            f"{list(services) if isinstance(services, Mapping) else services!r}"
        ]
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
            m = re.match(r"^(?:[0-9.]+:)?(\d+):(\d+)(?:/tcp)?\Z", str(p))
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
        if src.startswith("./") and not (bundle / src[2:]).exists():
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
        "tls.ca": cfg.tls.ca,
        "tls.cert": cfg.tls.cert,
        "tls.key": cfg.tls.key,
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
        if not (
            isinstance(test, list)
            and test[:3] == ["CMD", "smcdp", "health"]
            and "--config" in test
            and test[test.index("--config") + 1 :][:1] == [CONTAINER_CONFIG]
        ):
            problems.append(f"healthcheck.test must run `smcdp health --config {CONTAINER_CONFIG}`, got {test!r}")
        for k in ("interval", "timeout"):
            if not re.match(r"^\d+(ms|s|m|h)\Z", str(hc.get(k, ""))):
                problems.append(f"healthcheck.{k} must be a duration like 30s, got {hc.get(k)!r}")
        if not isinstance(hc.get("retries"), int) or hc["retries"] < 1:
            problems.append("healthcheck.retries must be a positive integer")
    return problems


# ============================================================================ files
