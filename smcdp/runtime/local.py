"""A throw-away deployment on loopback: one OS process per party, mutual TLS.

Used by the ``smcdp demo`` commands and by the multi-process tests.  It
creates a CA and one certificate per party in a work directory, writes each
party's TOML configuration (addresses on 127.0.0.1 with free ports), starts
``python -m smcdp.runtime.party --config …`` for every party, waits until each answers
``grpc.health.v1``, runs sessions through the initiator's operator interface
and finally stops every process with SIGTERM (SIGKILL after a grace period).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import smcdp
from smcdp.compute.config import ComputeConfig
from smcdp.errors import SmcdpError, Unavailable
from smcdp.net.config import Timeouts, TlsConfig
from smcdp.net.tls import generate_deployment
from smcdp.runtime.client import get_result, start_session, wait_healthy
from smcdp.runtime.config import PartyConfig, dump_config
from smcdp.runtime.session import new_session_id

log = logging.getLogger("smcdp.local")


class LocalCluster:
    """Start ``parties`` (name -> {protocol: {input name: path}}) as separate processes."""

    def __init__(self, parties: Mapping[str, Mapping[str, Mapping[str, str | os.PathLike]]], *,
                 allow_insecure_keys: bool = False, workdir: str | os.PathLike | None = None,
                 plugins: tuple[str, ...] = (), keep: bool = False,
                 session_seconds: float = 3600.0,
                 compute: Mapping[str, ComputeConfig] | None = None,
                 extra_env: Mapping[str, str] | None = None) -> None:
        self.parties = {name: dict(inputs) for name, inputs in parties.items()}
        self.compute = dict(compute or {})          # party -> its [compute] (issue 17)
        self.extra_env = dict(extra_env or {})
        self.allow_insecure_keys = allow_insecure_keys
        self.plugins = tuple(plugins)
        self.keep = keep or workdir is not None
        self.session_seconds = session_seconds
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="smcdp-local-"))
        self.configs: dict[str, Path] = {}
        self.procs: dict[str, subprocess.Popen] = {}

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> "LocalCluster":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def write_configs(self) -> None:
        self.configs = write_local_deployment(
            self.workdir, list(self.parties), inputs=self.parties, plugins=self.plugins,
            allow_insecure_keys=self.allow_insecure_keys, timeouts=Timeouts(session_seconds=self.session_seconds),
            compute=self.compute)

    def start(self) -> None:
        self.write_configs()
        for p, cfg in self.configs.items():
            log = open(self.workdir / f"{p}.log", "ab")
            self.procs[p] = spawn_party(cfg, log_file=log, extra_env=self.extra_env)
        for p, cfg in self.configs.items():
            try:
                wait_healthy(cfg, timeout=60)
            except SmcdpError:
                raise Unavailable(f"party process {p} did not come up; its log:\n{self.log(p)}") from None

    def log(self, party: str) -> str:
        try:
            return (self.workdir / f"{party}.log").read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self, grace: float = 20.0) -> None:
        for proc in self.procs.values():
            stop_party(proc, timeout=grace)
        if not self.keep:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # ------------------------------------------------------------------ sessions
    def run(self, protocol: str, roles: Mapping[str, str], params: Mapping[str, Any], *,
            initiator: str, seed: int | None = None, timeout: float | None = None) -> dict[str, dict]:
        """Run one session; returns party name -> that party's session record."""
        sid = new_session_id(protocol)
        try:
            rec = start_session(self.configs[initiator], protocol, roles, params, session_id=sid, seed=seed,
                                timeout=timeout)
        except SmcdpError:
            # the session failed: every participant still has a record saying how
            rec = get_result(self.configs[initiator], sid)
        records = {initiator: rec}
        for p in set(roles.values()) - {initiator}:
            # every participant writes its own record; wait until it has finished
            end = time.monotonic() + 60
            while True:
                try:
                    r = get_result(self.configs[p], sid)
                except SmcdpError as exc:  # e.g. the proposal never reached it
                    r = {"state": "unknown", "error": {"code": exc.code, "message": str(exc)}}
                    break
                if r.get("state") in ("succeeded", "failed") or time.monotonic() > end:
                    break
                time.sleep(0.1)
            records[p] = r
        return records


def bytes_sent(records: Mapping[str, dict]) -> dict[str, int]:
    return {p: int((r.get("stats") or {}).get("bytes_sent", 0)) for p, r in records.items()}


def free_tcp_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (the OS picks it; a race is possible but rare)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def write_local_deployment(root: str | os.PathLike, parties: Sequence[str], *,
                           inputs: Mapping[str, Mapping[str, Mapping[str, str | os.PathLike]]] | None = None,
                           plugins: Sequence[str] = (), allow_insecure_keys: bool = False,
                           timeouts: Timeouts | None = None, host: str = "127.0.0.1",
                           ports: Mapping[str, int] | None = None,
                           compute: Mapping[str, ComputeConfig] | None = None) -> dict[str, Path]:
    """Certificates (``root/certs``) and one config per party (``root/config/<name>.toml``)
    for parties on one host; returns party -> config path.

    ``inputs`` is party -> protocol -> input name -> path; ``compute`` is party -> its [compute]
    section (default: the local engine); ports are picked with
    :func:`free_tcp_port` unless given; state goes to ``root/state/<name>``.
    """
    root = Path(root)
    certs = root / "certs"
    generate_deployment(certs, parties)
    ports = dict(ports or {})
    for p in parties:
        ports.setdefault(p, free_tcp_port(host))
    fmt = (lambda p: f"[{host}]:{ports[p]}") if ":" in host else (lambda p: f"{host}:{ports[p]}")
    paths = {}
    for p in parties:
        cfg = PartyConfig(
            name=p, listen=fmt(p), data_dir=root / "state" / p,
            tls=TlsConfig(certs / "ca.crt", certs / f"{p}.crt", certs / f"{p}.key"),
            peers={q: fmt(q) for q in parties if q != p},
            inputs={proto: {k: Path(v).resolve() for k, v in table.items()}
                    for proto, table in (inputs or {}).get(p, {}).items()},
            plugins=tuple(plugins), allow_insecure_keys=allow_insecure_keys,
            timeouts=timeouts or Timeouts(), compute=(compute or {}).get(p, ComputeConfig()))
        paths[p] = dump_config(cfg, root / "config" / f"{p}.toml")
    return paths


def spawn_party(config_path: str | os.PathLike, *, log_file=None,
                extra_env: Mapping[str, str] | None = None):
    """Start ``python -m smcdp.runtime.party --config FILE`` as a separate OS process.

    ``log_file``: an open binary file for its stdout/stderr (default: inherit).
    Returns the ``subprocess.Popen``; stop it with :func:`stop_party`.
    """
    src = str(Path(smcdp.__file__).resolve().parents[1])
    env = dict(os.environ, **(extra_env or {}))
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.Popen([sys.executable, "-m", "smcdp.runtime.party", "--config", str(config_path)],
                            env=env, stdout=log_file, stderr=subprocess.STDOUT if log_file else None)


def stop_party(proc, timeout: float = 20.0) -> int:
    """SIGTERM, wait up to ``timeout`` for the clean shutdown, SIGKILL if it does not come."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
        log.error("party process %d did not stop within %.0f s and was killed", proc.pid, timeout)
        return proc.returncode
