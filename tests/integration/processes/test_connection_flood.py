"""A flood of connections against a party process (docs/security.md).

Anyone who can reach a party's port can open TCP connections -- no certificate is needed to begin a TLS
handshake.  1,500 connections that never sent a byte held the party's file descriptors (gRPC waited two
minutes for each handshake): every file it opened failed with EMFILE ("Too many open files") -- its witness
files, its session records, its journals -- while the flood lasted.  The server now holds at most what the
open-file limit leaves after a reserve for the party's own files and channels (``connection_cap``), and a
handshake that does not complete within 10 s is dropped.  Here the parties run with an open-file limit of
512 (a soft limit like a shell's 1,024 and a hard limit the party cannot raise), and the flood has 700
connections, reopened as the party closes them.
"""

from __future__ import annotations

import resource
import socket
import subprocess
import threading

import pytest

import smcdp.runtime.local as local
from smcdp.runtime import client
from smcdp.runtime.config import load_config
from tests.support.deployment import ECHO_PLUGIN

OPEN_FILES = 512
FLOOD = 700


class _LimitedPopen(subprocess.Popen):
    """A process whose open-file limit (soft and hard) is :data:`OPEN_FILES`: the party processes here."""

    def __init__(self, *args, **kw) -> None:
        super().__init__(
            *args, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILES, OPEN_FILES)), **kw
        )


class Flood(threading.Thread):
    """Keeps ``n`` connections to ``address`` open that never send a byte, reopening (at most ~200 a second)
    each one the party closes."""

    def __init__(self, address: str, n: int) -> None:
        super().__init__(daemon=True)
        host, port = address.rsplit(":", 1)
        self.target, self.n = (host, int(port)), n
        self.halt = threading.Event()
        self.opened = 0

    def _open(self) -> socket.socket | None:
        try:
            s = socket.create_connection(self.target, timeout=2)
        except OSError:
            return None
        self.opened += 1
        return s

    def run(self) -> None:
        socks = [s for s in (self._open() for _ in range(self.n)) if s is not None]
        try:
            while not self.halt.is_set():
                for i, s in enumerate(socks):
                    s.setblocking(False)
                    try:
                        closed = s.recv(1) == b""
                    except BlockingIOError:
                        closed = False
                    except OSError:
                        closed = True
                    if closed:
                        s.close()
                        socks[i] = self._open() or s
                        self.halt.wait(0.005)
                self.halt.wait(0.2)
        finally:
            for s in socks:
                s.close()


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < FLOOD + 200:  # this test process holds the flood's sockets
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    monkeypatch.setattr(subprocess, "Popen", _LimitedPopen)  # local.spawn_party's processes
    with local.LocalCluster(
        {"alice": {}, "bob": {}},
        allow_insecure_keys=True,
        open_policy=True,
        plugins=(ECHO_PLUGIN,),
        workdir=tmp_path / "run",
    ) as c:
        yield c
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_connection_flood_fills_the_cap_not_the_partys_descriptors(cluster):
    cfgs = cluster.configs
    roles = {"a": "bob", "b": "alice"}
    assert client.start_session(cfgs["bob"], "net-echo", roles, {"n": 2}, timeout=30)["state"] == "succeeded"
    out: dict = {}

    def run() -> None:
        out["rec"] = client.start_session(cfgs["bob"], "net-echo", roles, {"n": 3, "block_seconds": 6.0}, timeout=60)

    session = threading.Thread(target=run, daemon=True)
    session.start()
    flood = Flood(load_config(cfgs["alice"]).address_of("alice"), FLOOD)
    flood.start()
    try:
        session.join(90)
        assert not session.is_alive(), "the session did not end"
    finally:
        flood.halt.set()
        flood.join(30)
    assert flood.opened >= FLOOD  # the flood reached the party (and every connection past the cap was closed)
    # the session ran through the flood, ending (its record, its witness exchange) while it lasted
    assert out["rec"]["state"] == "succeeded", out["rec"].get("error")
    log = cluster.log("alice")
    assert "Too many open files" not in log, log[-3000:]
    assert not list((cluster.data_dir("alice") / "witness").glob("*.unreadable-*"))
    # the flood over, the party serves at once
    client.wait_healthy(cfgs["alice"], timeout=30)
    assert client.get_result(cfgs["alice"], out["rec"]["session_id"])["state"] == "succeeded"
    assert client.start_session(cfgs["bob"], "net-echo", roles, {"n": 2}, timeout=30)["state"] == "succeeded"
