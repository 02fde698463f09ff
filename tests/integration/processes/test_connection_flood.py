"""A flood of connections against a party process (docs/security.md).

Anyone who can reach a party's port can open TCP connections -- no certificate is needed to begin a TLS
handshake.  1,500 connections that never sent a byte held the party's file descriptors (gRPC waited two
minutes for each handshake): every file it opened failed with EMFILE ("Too many open files") -- its session
checkpoints (a Propose answered INTERNAL), its witness files (moved aside as "unreadable"), its records --
while the flood lasted.  The server now holds at most what the open-file limit leaves after a reserve for
the party's own files and channels (``connection_cap``), and a handshake not done within 20 s is dropped.
Here the parties run with an open-file limit of 512 (soft and hard: the party cannot raise it), and the
flood keeps 700 connections open, reopening at once every one the party closes.

What a flood still does (docs/security.md): connections past the cap are refused, so no peer can open a *new*
connection to the party while it lasts (a peer starting a session).  Its operator still reaches it, through
the unix socket in its data directory.  A session whose connections are up carries on and ends, writing
its files.
"""

from __future__ import annotations

import os
import resource
import selectors
import socket
import stat
import subprocess
import threading

import pytest

import smcdp.runtime.local as local
from smcdp.runtime import client
from smcdp.runtime.config import load_config, operator_socket
from tests.support.deployment import ECHO_PLUGIN
from tests.support.late import wait_for

OPEN_FILES = 512
FLOOD = 700


class _LimitedPopen(subprocess.Popen):
    """A process whose open-file limit (soft and hard) is :data:`OPEN_FILES`: the party processes here."""

    def __init__(self, *args, **kw) -> None:
        super().__init__(
            *args, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILES, OPEN_FILES)), **kw
        )


class Flood(threading.Thread):
    """Keeps ``n`` connections to ``address`` open that never send a byte, reopening each one the party closes
    at once (up to 1,000 a second); ``closed`` counts those (a full cap closes every connection past it as it
    comes)."""

    def __init__(self, address: str, n: int) -> None:
        super().__init__(daemon=True)
        host, port = address.rsplit(":", 1)
        self.target, self.n = (host, int(port)), n
        self.halt = threading.Event()
        self.closed = 0

    def _open(self) -> socket.socket | None:
        try:
            s = socket.create_connection(self.target, timeout=2)
        except OSError:
            return None
        s.setblocking(False)
        return s

    def run(self) -> None:
        sel = selectors.DefaultSelector()  # wakes on the connections the party closed, not a poll of all
        missing = 0
        for _ in range(self.n):
            s = self._open()
            if s is None:
                missing += 1
            else:
                sel.register(s, selectors.EVENT_READ)
        try:
            while not self.halt.is_set():
                for key, _ in sel.select(timeout=0.1):
                    s = key.fileobj
                    try:
                        if s.recv(1) != b"":
                            continue
                    except BlockingIOError:
                        continue
                    except OSError:
                        pass
                    sel.unregister(s)
                    s.close()
                    self.closed += 1
                    missing += 1
                for _ in range(min(missing, 100)):  # reopened at once, up to 1,000 a second
                    s = self._open()
                    if s is not None:
                        sel.register(s, selectors.EVENT_READ)
                        missing -= 1
        finally:
            for key in list(sel.get_map().values()):
                key.fileobj.close()
            sel.close()


@pytest.fixture
def cluster(monkeypatch):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < FLOOD + 200:  # this test process holds the flood's sockets
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    monkeypatch.setattr(subprocess, "Popen", _LimitedPopen)  # local.spawn_party's processes
    with local.LocalCluster(
        {"alice": {}, "bob": {}},
        allow_insecure_keys=True,
        open_policy=True,
        plugins=(ECHO_PLUGIN,),
        # a short working directory (/tmp/smcdp-local-*), not pytest's: the operator socket's path must stay
        # within a unix socket's ~100 bytes (under xdist, pytest's was 101 and the party made no socket)
    ) as c:
        yield c
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_connection_flood_fills_the_cap_not_the_partys_descriptors(cluster):
    cfgs = cluster.configs
    roles = {"a": "bob", "b": "alice"}
    assert client.start_session(cfgs["bob"], "net-echo", roles, {"n": 2}, timeout=30)["state"] == "succeeded"
    out: dict = {}

    def run() -> None:
        try:
            out["rec"] = client.start_session(
                cfgs["bob"], "net-echo", roles, {"n": 3, "block_seconds": 8.0}, session_id="flooded", timeout=60
            )
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            out["error"] = exc

    session = threading.Thread(target=run, daemon=True)
    session.start()
    wait_for("alice to hold her role (its connections are up)", lambda: _step(cfgs["alice"]) == "blocked", 60)
    flood = Flood(load_config(cfgs["alice"]).address_of("alice"), FLOOD)
    flood.start()
    try:
        # the operator reaches its own party through its unix socket, outside the TCP port's cap -- only its
        # own OS user may open it
        sock = operator_socket(load_config(cfgs["alice"]))
        assert sock is not None  # the cluster's short working directory keeps the path within a socket's limit
        assert stat.S_ISSOCK(os.stat(sock).st_mode) and stat.S_IMODE(os.stat(sock).st_mode) & 0o077 == 0
        wait_for("the flood to fill the cap", lambda: flood.closed > 0, 30)
        assert client.check_health(cfgs["alice"], timeout=10) == "SERVING"
        assert client.get_status(cfgs["alice"], "bob.flooded")["state"] == "running"
        session.join(90)
        assert not session.is_alive(), "the session did not end"
        closed_during = flood.closed
    finally:
        flood.halt.set()
        flood.join(30)
    # the session ran through the flood and ended while it lasted (its record, checkpoint, witness exchange)
    log = cluster.log("alice")
    assert "Too many open files" not in log, log[-3000:]
    assert "error" not in out, out.get("error")
    assert out["rec"]["state"] == "succeeded", out["rec"].get("error")
    assert closed_during > 0  # the cap was full: connections past it were closed as they came
    assert not list((cluster.data_dir("alice") / "witness").glob("*.unreadable-*"))
    # the flood over, the party serves at once
    client.wait_healthy(cfgs["alice"], timeout=30)
    assert client.get_result(cfgs["alice"], out["rec"]["session_id"])["state"] == "succeeded"
    assert client.start_session(cfgs["bob"], "net-echo", roles, {"n": 2}, timeout=30)["state"] == "succeeded"


def _step(cfg) -> str | None:
    try:
        return client.get_status(cfg, "bob.flooded").get("step")
    except Exception:  # noqa: BLE001 - not there yet
        return None
