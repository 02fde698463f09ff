"""Fixtures for transport tests: certificates, configs, parties in-process or as processes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest

from smcdp.net.config import Timeouts
from smcdp.net.grpc_channel import channel_options
from smcdp.net.tls import party_identity_name
from tests.support.paths import REPO  # noqa: E402

ECHO_PLUGIN = "tests.support.echo_plugin"


def free_port() -> int:
    from smcdp.runtime.local import free_tcp_port

    return free_tcp_port()


def make_deployment(
    root: Path,
    parties,
    *,
    timeouts: Timeouts | None = None,
    inputs=None,
    limits=None,
    allow_seeded: bool = False,
    policies=None,
    budgets=None,
    open_policy: bool = True,
) -> dict[str, Path]:
    """Certificates + one TOML config per party under ``root``; returns name -> config path.

    A test deployment: small keys are allowed; every party without an entry in ``policies``
    is written with ``[policy] open = true`` (``open_policy=False``: no ``[policy]``, which
    refuses every peer's proposal); experiment seeds only with ``allow_seeded`` (secure by
    default, as a real party); ``limits``: a :class:`smcdp.net.limits.Limits`.
    """
    from smcdp.runtime.local import write_local_deployment

    return write_local_deployment(
        root,
        parties,
        inputs=inputs,
        plugins=(ECHO_PLUGIN,),
        allow_insecure_keys=True,
        timeouts=timeouts or Timeouts(connect_seconds=3, session_seconds=60, rpc_seconds=30),
        allow_seeded=allow_seeded,
        policies=policies,
        budgets=budgets,
        limits=limits,
        open_policy=open_policy,
    )


class PartiesInThread:
    """Party objects served from one background event loop (the test thread stays free)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.parties = {}

    def run(self, coro, timeout: float = 30):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self, config_path: Path):
        from smcdp.runtime.config import load_config
        from smcdp.runtime.party import Party

        async def go():
            party = Party(load_config(config_path))
            await party.start()
            return party

        party = self.run(go())
        self.parties[party.name] = party
        return party

    def stop(self, name: str) -> None:
        self.run(self.parties.pop(name).stop(grace=5), timeout=30)

    def close(self) -> None:
        for name in list(self.parties):
            self.stop(name)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@pytest.fixture
def in_thread():
    runner = PartiesInThread()
    try:
        yield runner
    finally:
        runner.close()


def raw_channel(certs: Path, as_party: str | None, address: str, target: str, ca: Path | None = None) -> grpc.Channel:
    """A blocking channel presenting ``as_party``'s certificate (None: no client certificate) that accepts the server
    as party ``target`` as the parties do: by ``target``'s identity name (:func:`smcdp.net.tls.party_identity_name`)."""
    root = (ca or certs / "ca.crt").read_bytes()
    if as_party is None:
        creds = grpc.ssl_channel_credentials(root)
    else:
        creds = grpc.ssl_channel_credentials(
            root, (certs / f"{as_party}.key").read_bytes(), (certs / f"{as_party}.crt").read_bytes()
        )
    return grpc.secure_channel(
        address, creds, options=channel_options() + [("grpc.ssl_target_name_override", party_identity_name(target))]
    )


class PartyProcess:
    def __init__(self, name: str, config: Path, log_dir: Path, use_launcher: bool = True) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self.log = open(self.log_path, "wb")  # noqa: SIM115 - the party's stdout, closed when it stops
        if use_launcher:  # python parties/<name>.py --config FILE
            env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
            self.proc = subprocess.Popen(
                [sys.executable, str(REPO / "parties" / f"{name}.py"), "--config", str(config)],
                cwd=REPO,
                env=env,
                stdout=self.log,
                stderr=subprocess.STDOUT,
            )
        else:  # python -m smcdp party --config FILE, through the library helper
            from smcdp.runtime.local import spawn_party

            self.proc = spawn_party(config, log_file=self.log, extra_env={"PYTHONPATH": str(REPO)})

    def terminate(self, timeout: float = 20) -> int:
        from smcdp.runtime.local import stop_party

        try:
            return stop_party(self.proc, timeout)
        finally:
            self.log.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        self.log.close()

    def output(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return self.log_path.read_text(errors="replace")


@pytest.fixture
def processes(tmp_path):
    started: list[PartyProcess] = []

    def start(name: str, config: Path, **kw) -> PartyProcess:
        p = PartyProcess(name, config, tmp_path, **kw)
        started.append(p)
        return p

    yield start
    for p in started:
        p.kill()


@contextlib.contextmanager
def timer():
    t = {"start": time.monotonic()}
    yield t
    t["seconds"] = time.monotonic() - t["start"]
