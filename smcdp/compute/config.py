"""``[compute]`` of a party's configuration: which engine computes for this party's data.

::

    [compute]                    # optional; without it: engine = "local"
    engine = "dask"              # "local" (block threads + crypto threads, in the party process) or "dask"
    scheduler = "local"          # dask: "local" starts a LocalCluster (TLS on loopback) in the party
                                 # process; "tls://host:port" joins the party's own existing cluster
    workers = 2                  # local: block and crypto threads (default: the host's cores); dask "local": workers
    threads_per_worker = 1       # dask "local" only
    memory_limit = "4GiB"        # dask "local" only: per worker
    block_values = 4194304       # canonical block size in matrix values (part of the data's identity)
    tls_ca = "dask/ca.pem"       # dask "tls://…": the cluster's own CA and this party's client pair
    tls_cert = "dask/client.pem"
    tls_key = "dask/client-key.pem"
    local_directory = "/scratch/smcdp-dask"   # dask "local": worker scratch (no spilling is configured)
    allow_plaintext = false      # dask "tcp://…" off loopback: refused unless true (then it warns)

Parsed by :mod:`smcdp.runtime.config` (paths resolved against the configuration file).  Every check of
the values is here, so a bad section fails when the party starts, not in the middle of a session.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from smcdp._hosts import is_loopback
from smcdp.compute.sources import DEFAULT_BLOCK_VALUES, MIN_BLOCK_VALUES
from smcdp.errors import InvalidMessage

ENGINES = ("local", "dask")
_MEMORY_RE = re.compile(r"^(auto|\d+(\.\d+)?\s*(B|[kKMGT]i?B)?)\Z")
_PATH_KEYS = ("tls_ca", "tls_cert", "tls_key", "local_directory")


class ComputeConfigError(InvalidMessage):
    """``[compute]`` is not valid."""


@dataclass(frozen=True)
class ComputeConfig:
    engine: str = "local"
    scheduler: str = "local"
    workers: int | None = None
    threads_per_worker: int = 1
    memory_limit: str = "auto"
    block_values: int = DEFAULT_BLOCK_VALUES
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    local_directory: Path | None = None
    allow_plaintext: bool = False

    # ------------------------------------------------------------------ parsing
    @classmethod
    def from_mapping(cls, table: Mapping[str, Any], base: Path | None = None) -> ComputeConfig:
        """Validate a ``[compute]`` table; relative paths are resolved against ``base``."""
        if not isinstance(table, Mapping):
            raise ComputeConfigError("[compute] must be a table")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(table) - known)
        if unknown:
            raise ComputeConfigError(
                f"[compute]: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})"
            )
        values = dict(table)
        for key in _PATH_KEYS:
            if key in values:
                v = values[key]
                if not isinstance(v, str) or not v or "\x00" in v:
                    raise ComputeConfigError(f"compute.{key} must be a non-empty path string")
                p = Path(os.path.expanduser(v))  # an unknown ~user stays as written (Path raised RuntimeError)
                values[key] = p if p.is_absolute() or base is None else (base / p)
        return cls(**values).validate()

    def validate(self) -> ComputeConfig:
        def bad(msg: str):
            raise ComputeConfigError(f"compute.{msg}")

        if self.engine not in ENGINES:
            bad(f"engine must be one of {', '.join(map(repr, ENGINES))}, got {self.engine!r}")
        if self.workers is not None and (
            not isinstance(self.workers, int) or isinstance(self.workers, bool) or not 1 <= self.workers <= 4096
        ):
            bad(f"workers must be an integer in [1, 4096], got {self.workers!r}")
        if (
            not isinstance(self.threads_per_worker, int)
            or isinstance(self.threads_per_worker, bool)
            or not 1 <= self.threads_per_worker <= 256
        ):
            bad(f"threads_per_worker must be an integer in [1, 256], got {self.threads_per_worker!r}")
        if not isinstance(self.memory_limit, str) or not _MEMORY_RE.match(self.memory_limit.strip()):
            bad(f'memory_limit must be "auto" or a size such as "4GiB", got {self.memory_limit!r}')
        if (
            not isinstance(self.block_values, int)
            or isinstance(self.block_values, bool)
            or not MIN_BLOCK_VALUES <= self.block_values <= 1 << 34
        ):
            bad(f"block_values must be an integer in [{MIN_BLOCK_VALUES}, 2^34], got {self.block_values!r}")
        if not isinstance(self.allow_plaintext, bool):
            bad(f"allow_plaintext must be true or false, got {self.allow_plaintext!r}")
        if not isinstance(self.scheduler, str) or not self.scheduler:
            bad('scheduler must be "local" or an address such as "tls://host:8786"')
        tls = [self.tls_ca, self.tls_cert, self.tls_key]
        if self.engine == "local":
            extra = [k for k in ("tls_ca", "tls_cert", "tls_key", "local_directory") if getattr(self, k)]
            if self.scheduler != "local" or extra or self.memory_limit != "auto" or self.threads_per_worker != 1:
                bad(
                    "scheduler, threads_per_worker, memory_limit, tls_* and local_directory apply to "
                    'engine = "dask" only'
                )
            return self
        if self.scheduler == "local":
            if any(tls):
                bad(
                    'tls_ca/tls_cert/tls_key are for an existing cluster; scheduler = "local" makes '
                    "its own TLS credentials"
                )
            return self
        if (
            self.workers is not None
            or self.memory_limit != "auto"
            or self.threads_per_worker != 1
            or self.local_directory is not None
        ):
            bad(
                "workers, threads_per_worker, memory_limit and local_directory configure a cluster this "
                'party starts (scheduler = "local"); an existing cluster is configured where it runs'
            )
        scheme, host = scheduler_scheme_host(self.scheduler)
        if scheme == "tls":
            if not all(tls):
                bad(
                    "tls_ca, tls_cert and tls_key are all required for a tls:// scheduler (the cluster's "
                    "own CA and this party's client certificate and key)"
                )
        elif scheme == "tcp":
            if any(tls):
                bad("tls_* files were given but the scheduler address is plain tcp://; use tls://")
            if not is_loopback(host) and not self.allow_plaintext:
                bad(
                    f"scheduler {self.scheduler!r} is plain TCP to another host: the session key and the "
                    "data would cross the network unencrypted.  Use tls:// (docs/deployment.md), or set "
                    "allow_plaintext = true for a network you trust"
                )
        else:
            bad(f'scheduler must be "local", "tls://host:port" or "tcp://host:port", got {self.scheduler!r}')
        return self

    # ------------------------------------------------------------------ writing back
    def to_dict(self, relative=None) -> dict:
        """The TOML table (defaults left out; ``relative(path)`` renders paths)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if v == f.default:
                continue
            if isinstance(v, Path):
                v = relative(v) if relative is not None else str(v)
            out[f.name] = v
        return out

    @property
    def plaintext_scheduler(self) -> bool:
        """True if this engine talks to a remote scheduler without TLS (warn about it)."""
        if self.engine != "dask" or self.scheduler == "local":
            return False
        scheme, host = scheduler_scheme_host(self.scheduler)
        return scheme == "tcp" and not is_loopback(host)


def scheduler_scheme_host(address: str) -> tuple[str, str]:
    parts = urlsplit(address)
    if parts.scheme not in ("tls", "tcp") or not parts.hostname or parts.path not in ("", "/"):
        raise ComputeConfigError(f"compute.scheduler {address!r} is not an address such as tls://host:8786")
    try:
        _ = parts.port  # urlsplit parses the port lazily: an invalid one raises here
    except ValueError:
        raise ComputeConfigError(f"compute.scheduler {address!r} has an invalid port") from None
    return parts.scheme, parts.hostname
