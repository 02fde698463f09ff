"""A throw-away deployment on loopback: one OS process per party, mutual TLS.

Used by the ``smcdp demo`` commands and by the multi-process tests.  It
creates a CA and one certificate per party in a work directory, writes each
party's TOML configuration (addresses on 127.0.0.1 with free ports), starts
``python -m smcdp party --config …`` for every party, waits until each answers
``grpc.health.v1``, runs sessions through the initiator's operator interface
and finally stops every process with SIGTERM (SIGKILL after a grace period).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping

from smcdp.errors import SmcdpError, Unavailable


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalCluster:
    """Start ``parties`` (name -> {protocol: {input name: path}}) as separate processes."""

    def __init__(self, parties: Mapping[str, Mapping[str, Mapping[str, str | os.PathLike]]], *,
                 allow_insecure_keys: bool = False, workdir: str | os.PathLike | None = None,
                 plugins: tuple[str, ...] = (), log_level: str = "WARNING", keep: bool = False,
                 session_seconds: float = 3600.0) -> None:
        self.parties = {name: dict(inputs) for name, inputs in parties.items()}
        self.allow_insecure_keys = allow_insecure_keys
        self.plugins = tuple(plugins)
        self.log_level = log_level
        self.keep = keep or workdir is not None
        self.session_seconds = session_seconds
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="smcdp-local-"))
        self.configs: dict[str, Path] = {}
        self.procs: dict[str, subprocess.Popen] = {}
        self.ports: dict[str, int] = {}

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
        from smcdp.net.config import PartyConfig, Timeouts, TlsConfig, dump_config
        from smcdp.net.tls import generate_deployment

        certs = self.workdir / "certs"
        files = generate_deployment(certs, list(self.parties), hosts={p: ["localhost", "127.0.0.1"] for p in self.parties})
        self.ports = {p: free_port() for p in self.parties}
        for p, inputs in self.parties.items():
            cfg = PartyConfig(
                name=p,
                listen=f"127.0.0.1:{self.ports[p]}",
                data_dir=(self.workdir / "state" / p).resolve(),
                tls=TlsConfig(ca=(certs / "ca.crt").resolve(), cert=Path(files[p].cert).resolve(),
                              key=Path(files[p].key).resolve()),
                peers={q: f"127.0.0.1:{self.ports[q]}" for q in self.parties if q != p},
                inputs={proto: {k: Path(v).resolve() for k, v in kv.items()} for proto, kv in inputs.items()},
                plugins=self.plugins,
                allow_insecure_keys=self.allow_insecure_keys,
                timeouts=Timeouts(session_seconds=self.session_seconds),
            )
            self.configs[p] = dump_config(cfg, self.workdir / f"{p}.toml")

    def start(self) -> None:
        from smcdp.party import wait_healthy

        self.write_configs()
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        for p, cfg in self.configs.items():
            log = open(self.workdir / f"{p}.log", "ab")
            self.procs[p] = subprocess.Popen(
                [sys.executable, "-m", "smcdp", "party", "--config", str(cfg), "--log-level", self.log_level],
                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
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

    def stop(self, grace: float = 10.0) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        end = time.monotonic() + grace
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if not self.keep:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # ------------------------------------------------------------------ sessions
    def run(self, protocol: str, roles: Mapping[str, str], params: Mapping[str, Any], *,
            initiator: str, seed: int | None = None, timeout: float | None = None) -> dict[str, dict]:
        """Run one session; returns party name -> that party's session record."""
        from smcdp.party import get_result, new_session_id, start_session

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


def dump_json(obj: Any, path: str | os.PathLike | None) -> None:
    text = json.dumps(obj, indent=2)
    if path is None or str(path) == "-":
        print(text)
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text + "\n")
    os.replace(tmp, path)
