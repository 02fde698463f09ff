"""A throw-away deployment on loopback: one OS process per party, mutual TLS.

Used by the ``smcdp demo`` commands and by the multi-process tests.  It
creates a CA and one certificate per party in a work directory, writes each
party's TOML configuration (addresses on 127.0.0.1 with free ports), starts
``python -m smcdp.party --config …`` for every party, waits until each answers
``grpc.health.v1``, runs sessions through the initiator's operator interface
and finally stops every process with SIGTERM (SIGKILL after a grace period).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping

from smcdp._files import atomic_write
from smcdp.errors import SmcdpError, Unavailable


class LocalCluster:
    """Start ``parties`` (name -> {protocol: {input name: path}}) as separate processes."""

    def __init__(self, parties: Mapping[str, Mapping[str, Mapping[str, str | os.PathLike]]], *,
                 allow_insecure_keys: bool = False, workdir: str | os.PathLike | None = None,
                 plugins: tuple[str, ...] = (), keep: bool = False,
                 session_seconds: float = 3600.0) -> None:
        self.parties = {name: dict(inputs) for name, inputs in parties.items()}
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
        from smcdp.net.config import Timeouts
        from smcdp.party import write_local_deployment

        self.configs = write_local_deployment(
            self.workdir, list(self.parties), inputs=self.parties, plugins=self.plugins,
            allow_insecure_keys=self.allow_insecure_keys, timeouts=Timeouts(session_seconds=self.session_seconds))

    def start(self) -> None:
        from smcdp.party import spawn_party, wait_healthy

        self.write_configs()
        for p, cfg in self.configs.items():
            log = open(self.workdir / f"{p}.log", "ab")
            self.procs[p] = spawn_party(cfg, log_file=log)
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
        from smcdp.party import stop_party

        for proc in self.procs.values():
            stop_party(proc, timeout=grace)
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
    atomic_write(path, (text + "\n").encode("utf-8"))
