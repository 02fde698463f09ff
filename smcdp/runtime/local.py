"""A throw-away deployment on loopback: one OS process per party, mutual TLS.

Used by the ``smcdp demo`` commands and by the multi-process tests.  It
creates a CA and one certificate per party in a work directory, writes each
party's TOML configuration (addresses on 127.0.0.1 with free ports), starts
``python -m smcdp party --config …`` for every party, waits until each answers
``grpc.health.v1``, runs sessions through the initiator's operator interface
and finally stops every process with SIGTERM (SIGKILL after a grace period).
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import smcdp
from smcdp.compute.config import ComputeConfig
from smcdp.errors import SmcdpError, Unavailable
from smcdp.net.config import Timeouts, TlsConfig
from smcdp.net.limits import Limits
from smcdp.net.server import namespaced, new_session_id
from smcdp.net.tls import generate_deployment
from smcdp.runtime import failpoints
from smcdp.runtime.client import get_result, start_session, wait_healthy
from smcdp.runtime.config import PartyConfig, dump_config, load_config, require_optional_parts
from smcdp.runtime.console.config import ConsoleConfig
from smcdp.runtime.governance.charges import BudgetConfig
from smcdp.runtime.governance.policy import Policy
from smcdp.states import SessionState

log = logging.getLogger("smcdp.local")

#: how often a cluster starts again on fresh ports when one was taken before its party could bind it
PORT_ATTEMPTS = 3


class LocalCluster:
    """Start ``parties`` (name -> {protocol: {input name: path}}) as separate processes.

    Besides starting and stopping the whole cluster it can kill, pause and
    restart single parties (chaos tests, ``smcdp demo --chaos``): a restarted
    party is the same configuration, certificate and data directory, so it
    reopens its sessions from their checkpoints.
    """

    def __init__(
        self,
        parties: Mapping[str, Mapping[str, Mapping[str, str | os.PathLike]]],
        *,
        allow_insecure_keys: bool = False,
        workdir: str | os.PathLike | None = None,
        plugins: tuple[str, ...] = (),
        keep: bool = False,
        session_seconds: float = 3600.0,
        peer_grace_seconds: float | None = None,
        allow_seeded: bool = False,
        policies: Mapping[str, Policy] | None = None,
        budgets: Mapping[str, BudgetConfig] | None = None,
        data_root: str | os.PathLike | None = None,
        compute: Mapping[str, ComputeConfig] | None = None,
        extra_env: Mapping[str, str] | None = None,
        limits: Limits | None = None,
        consoles: Mapping[str, ConsoleConfig] | None = None,
        open_policy: bool = False,
    ) -> None:
        self.limits = limits
        self.open_policy = open_policy  # parties without a policy: [policy] open = true
        self.consoles = dict(consoles or {})  # party -> its [console]
        self.parties = {name: dict(inputs) for name, inputs in parties.items()}
        self.compute = dict(compute or {})  # party -> its [compute]
        self.extra_env = dict(extra_env or {})
        self.allow_insecure_keys = allow_insecure_keys
        self.allow_seeded = allow_seeded
        self.policies = dict(policies or {})
        self.budgets = dict(budgets or {})
        self.data_root = data_root
        self.plugins = tuple(plugins)
        self.keep = keep or workdir is not None
        self.session_seconds = session_seconds
        self.peer_grace_seconds = peer_grace_seconds
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="smcdp-local-"))
        self.configs: dict[str, Path] = {}
        self.procs: dict[str, subprocess.Popen] = {}
        #: parties killed on purpose and not restarted (their records cannot be fetched)
        self.down: set[str] = set()
        #: killed parties that chaos will start again: their records are waited for, not "unknown"
        self.restarting: set[str] = set()

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> LocalCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def write_configs(self) -> None:
        timeouts = Timeouts(
            session_seconds=self.session_seconds,
            **({"peer_grace_seconds": self.peer_grace_seconds} if self.peer_grace_seconds is not None else {}),
        )
        self.configs = write_local_deployment(
            self.workdir,
            list(self.parties),
            inputs=self.parties,
            plugins=self.plugins,
            allow_insecure_keys=self.allow_insecure_keys,
            timeouts=timeouts,
            allow_seeded=self.allow_seeded,
            policies=self.policies,
            budgets=self.budgets,
            data_root=self.data_root,
            compute=self.compute,
            limits=self.limits,
            consoles=self.consoles,
            open_policy=self.open_policy,
        )

    def console_url(self, party: str) -> str:
        """The base URL of ``party``'s console (it must have a [console])."""
        listen = self.consoles[party].listen
        scheme = "https" if self.consoles[party].tls is not None else "http"
        return f"{scheme}://{listen}/"

    def start(self) -> None:
        """Write the deployment and start every party.  Ports are picked free just before the parties bind
        them, so another process may take one meanwhile: then every party is stopped and the cluster starts
        again on fresh ports (at most :data:`PORT_ATTEMPTS` times), rather than fail a demo or a test on
        "Address already in use"."""
        for attempt in range(1, PORT_ATTEMPTS + 1):
            self.write_configs()
            for p in self.configs:  # a missing optional package is named before any party starts
                require_optional_parts(load_config(self.configs[p]))
            for p in self.configs:
                self._spawn(p)
            # every process imports and starts at once: on a few cores that takes time in proportion to
            # their number (≈ 1.5 CPU-s each), so the deadline grows with it (34 processes on 2
            # loaded cores needed more than a fixed 60 s)
            end = time.monotonic() + 60.0 + 10.0 * len(self.configs)
            try:
                for p in self.configs:
                    self._wait_up(p, timeout=max(5.0, end - time.monotonic()))
                return
            except Unavailable:
                taken = [p for p in self.configs if self._port_taken(p)]
                if not taken or attempt == PORT_ATTEMPTS:
                    raise
            log.warning(
                "the port of %s was taken before it could bind it; starting again on fresh ports (attempt %d of %d)",
                ", ".join(taken),
                attempt + 1,
                PORT_ATTEMPTS,
            )
            self._stop_processes()
            for generated in ("certs", "config"):  # written anew with the fresh ports
                shutil.rmtree(self.workdir / generated, ignore_errors=True)

    def _port_taken(self, party: str) -> bool:
        """``party``'s process ended because its address was in use."""
        proc = self.procs.get(party)
        if proc is None or proc.poll() is None:
            return False
        text = self.log(party)
        return "cannot listen on" in text or "Address already in use" in text

    def _stop_processes(self, grace: float = 20.0) -> None:
        for p, proc in self.procs.items():
            if p in self.down:
                continue
            try:
                proc.send_signal(signal.SIGCONT)  # a paused party cannot shut down
            except ProcessLookupError:
                pass
            stop_party(proc, timeout=grace)

    def _spawn(self, party: str) -> None:
        log_file = open(self.workdir / f"{party}.log", "ab")  # noqa: SIM115 - owned by the child's lifetime
        # each process looks for kills armed in its own directory (smcdp.runtime.failpoints; chaos arms them)
        env = {failpoints.ENV: str(self.failpoint_dir(party)), **self.extra_env}
        self.procs[party] = spawn_party(self.configs[party], log_file=log_file, extra_env=env)

    def failpoint_dir(self, party: str) -> Path:
        """Where ``party``'s process finds the kills armed for it (:mod:`smcdp.runtime.failpoints`)."""
        return self.workdir / "failpoints" / party

    def _wait_up(self, party: str, timeout: float = 60.0) -> None:
        """Until ``party`` answers its health check; at once if its process ended (a port taken, a bad
        configuration) rather than at the deadline."""
        end = time.monotonic() + timeout
        while True:
            try:
                wait_healthy(self.configs[party], timeout=max(0.5, min(2.0, end - time.monotonic())))
                return
            except SmcdpError:
                proc = self.procs.get(party)
                if time.monotonic() >= end or (proc is not None and proc.poll() is not None):
                    raise Unavailable(f"party process {party} did not come up; its log:\n{self.log(party)}") from None

    def log(self, party: str) -> str:
        try:
            return (self.workdir / f"{party}.log").read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self, grace: float = 20.0) -> None:
        self._stop_processes(grace)
        if not self.keep:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # ------------------------------------------------------------------ chaos
    def kill(self, party: str, *, restart: bool = False) -> None:
        """SIGKILL ``party``'s process: no shutdown, no abort sent, nothing written.

        ``restart``: it will be started again (by :meth:`restart`), so :meth:`run` waits for
        its record rather than reporting it unknown -- the others may finish first when it was
        killed after its last message.
        """
        proc = self.procs[party]
        if restart:
            self.restarting.add(party)
        proc.kill()
        proc.wait(10)
        self.down.add(party)

    def restart(self, party: str) -> None:
        """Start ``party`` again from its configuration (it reopens its sessions from checkpoints)."""
        old = self.procs.get(party)
        if old is not None and old.poll() is None:
            raise RuntimeError(f"party {party} is still running")
        try:
            self._spawn(party)
            self.down.discard(party)
            self._wait_up(party)
        finally:
            self.restarting.discard(party)

    def pause(self, party: str) -> None:
        self.procs[party].send_signal(signal.SIGSTOP)

    def cont(self, party: str) -> None:
        self.procs[party].send_signal(signal.SIGCONT)

    def wait_stopped(self, party: str, timeout: float = 30.0) -> bool:
        """Until ``party``'s process is stopped (state T in /proc: it took its SIGSTOP); False if it exited, if
        /proc cannot tell, or after ``timeout``."""
        proc = self.procs[party]
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if proc.poll() is not None:
                return False
            try:
                state = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                return False
            if state in ("T", "t"):
                return True
            time.sleep(0.01)
        return False

    # ------------------------------------------------------------------ sessions
    def data_dir(self, party: str) -> Path:
        """The data directory of ``party`` (records, outputs, audit.jsonl, ledger)."""
        return (Path(self.data_root) if self.data_root is not None else self.workdir / "state") / party

    def run(
        self,
        protocol: str,
        roles: Mapping[str, str],
        params: Mapping[str, Any],
        *,
        initiator: str,
        seed: int | None = None,
        timeout: float | None = None,
        session_id: str | None = None,
    ) -> dict[str, dict]:
        """Run one session; returns party name -> that party's session record.

        A party killed and not restarted meanwhile gets ``{"state": "unknown"}``;
        the others' records say how the session ended for them.
        """
        sid = namespaced(initiator, session_id or new_session_id(protocol))  # the id it will have
        wait = (timeout or self.session_seconds) + 60.0
        outcome: dict[str, Any] = {}

        def initiate() -> None:
            try:
                outcome["record"] = start_session(
                    self.configs[initiator], protocol, roles, params, session_id=sid, seed=seed, timeout=timeout
                )
            except BaseException as exc:  # noqa: BLE001 - reported through the records below
                outcome["error"] = exc

        th = threading.Thread(target=initiate, daemon=True, name=f"initiate-{sid}")
        th.start()
        end = time.monotonic() + wait
        while th.is_alive() and time.monotonic() < end:
            if (
                initiator in self.down
                and initiator not in self.restarting
                and self._settled(roles, sid, exclude={initiator})
            ):
                break  # the initiator is gone for good: the others' records tell how it ended
            th.join(0.2)
        records: dict[str, dict] = {}
        for p in dict.fromkeys(roles.values()):
            records[p] = self._record(p, sid, end)
        err = outcome.get("error")
        if err is not None and records[initiator].get("state") == SessionState.UNKNOWN:
            if isinstance(err, SmcdpError) and getattr(err, "code", "") != "UNAVAILABLE":
                # refused before the initiator registered the session (its own limits or policy):
                # the start call's error is the only account of it
                records[initiator] = {
                    "state": SessionState.FAILED.value,
                    "session_id": sid,
                    "error": {"code": err.code, "message": str(err), "origin": initiator},
                }
            else:
                # the start call was lost (or the initiator lost the session): how it stands there is not
                # known, but the call's own error is kept beside it -- "no session" at every party alone
                # would hide the cause
                records[initiator]["start_error"] = {
                    "code": getattr(err, "code", "") or type(err).__name__,
                    "message": str(err),
                }
        return records

    def _record(self, party: str, sid: str, end: float) -> dict:
        while party in self.restarting and time.monotonic() < end:
            time.sleep(0.2)  # killed, to be started again: its record comes after the replay
        if party in self.down:
            return {
                "state": SessionState.UNKNOWN.value,
                "session_id": sid,
                "error": {"code": "UNAVAILABLE", "message": f"party {party} was killed", "origin": party},
            }
        last: dict = {"state": SessionState.UNKNOWN.value, "session_id": sid}
        pause = 0.01  # a participant often ends a round trip after the initiator: ask again soon
        while True:
            try:
                r = get_result(self.configs[party], sid)
            except SmcdpError as exc:  # e.g. the proposal never reached it
                r = {
                    "state": SessionState.UNKNOWN.value,
                    "session_id": sid,
                    "error": {"code": exc.code, "message": str(exc), "origin": party},
                }
                if not isinstance(exc, Unavailable):
                    return r
            if SessionState(r.get("state")).ended:
                return r
            last = r
            if time.monotonic() > end:
                return last
            time.sleep(pause)
            pause = min(0.2, pause * 2)

    def _settled(self, roles: Mapping[str, str], sid: str, exclude: set[str]) -> bool:
        for p in set(roles.values()) - exclude - self.down:
            try:
                if not SessionState(get_result(self.configs[p], sid, timeout=5).get("state")).ended:
                    return False
            except SmcdpError:
                return False
        return True


def bytes_sent(records: Mapping[str, dict]) -> dict[str, int]:
    return {p: int((r.get("stats") or {}).get("bytes_sent", 0)) for p, r in records.items()}


#: the lowest port :func:`free_tcp_port` draws from (below the kernel's ephemeral range, above the usual services)
FREE_PORT_FLOOR = 20000
#: how long a port :func:`free_tcp_port` returned stays reserved against other processes on the host
PORT_RESERVATION_SECONDS = 600.0
_PORTS = random.Random(int.from_bytes(os.urandom(8), "big"))  # not the tests' seeded global generator


def _ephemeral_low() -> int:
    """The lowest port the kernel hands out by itself (to bind(0) and to outgoing connections)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _reservations() -> Path | None:
    """This user's directory of port reservations, or None if another user owns that name (nothing is reserved
    then: the ports are drawn and checked as before)."""
    path = Path(tempfile.gettempdir()) / f"smcdp-ports-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    return path if path.lstat().st_uid == os.getuid() and path.is_dir() and not path.is_symlink() else None


def _reserve(port: int) -> bool:
    """Claim ``port`` against every other process of this user that asks :func:`free_tcp_port` on this host (a
    file made with O_EXCL; one older than PORT_RESERVATION_SECONDS is taken over: its deployment started long
    ago).  False if another process holds it."""
    where = _reservations()
    if where is None:
        return True
    path = where / str(port)
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            try:
                if time.time() - path.stat().st_mtime < PORT_RESERVATION_SECONDS:
                    return False
                path.unlink()  # stale: one of the racers unlinks it, one O_EXCL create wins
            except FileNotFoundError:
                pass
            continue
        os.close(fd)
        return True
    return False


def free_tcp_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago, and stays reserved for this process for a while.

    Drawn at random **below the kernel's ephemeral range** (where the kernel never picks one for another
    process's bind(0) or outgoing connection: those took the OS-picked ports of test deployments before their
    parties bound them -- a .ci/run failed so), **reserved** against the other processes that draw from the same
    range (a file per port, for PORT_RESERVATION_SECONDS: two test workers drew the same port and one party
    could not bind it -- another .ci/run failed so), and checked by binding it.  Where the range leaves no room,
    the OS picks one.  :meth:`LocalCluster.start` still starts again on fresh ports if one is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    top = _ephemeral_low() - 1
    if top - FREE_PORT_FLOOR >= 1024:
        for _ in range(256):
            port = _PORTS.randint(FREE_PORT_FLOOR, top)
            if not _reserve(port):
                continue
            with socket.socket(family, socket.SOCK_STREAM) as s:
                try:
                    s.bind((host, port))
                except OSError:
                    continue
                return port
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def write_local_deployment(
    root: str | os.PathLike,
    parties: Sequence[str],
    *,
    inputs: Mapping[str, Mapping[str, Mapping[str, str | os.PathLike]]] | None = None,
    plugins: Sequence[str] = (),
    allow_insecure_keys: bool = False,
    timeouts: Timeouts | None = None,
    host: str = "127.0.0.1",
    ports: Mapping[str, int] | None = None,
    allow_seeded: bool = False,
    policies: Mapping[str, Policy] | None = None,
    budgets: Mapping[str, BudgetConfig] | None = None,
    data_root: str | os.PathLike | None = None,
    limits: Limits | None = None,
    compute: Mapping[str, ComputeConfig] | None = None,
    consoles: Mapping[str, ConsoleConfig] | None = None,
    open_policy: bool = False,
) -> dict[str, Path]:
    """Certificates (``root/certs``) and one config per party (``root/config/<name>.toml``)
    for parties on one host; returns party -> config path.

    ``inputs`` is party -> protocol -> input name -> path; ports are picked with
    :func:`free_tcp_port` unless given; state goes to ``data_root/<name>`` (default
    ``root/state/<name>``).  ``policies`` / ``budgets``: party -> its ``[policy]`` /
    ``[budget]`` (none by default: a party without ``[policy]`` refuses every peer's
    proposal); ``open_policy`` gives every party without an entry in ``policies``
    ``[policy] open = true`` (test deployments; the party warns); ``allow_seeded`` sets
    ``[policy] allow_seeded`` on every party (tests and demos that pass a seed need it;
    alone it opens nothing).  ``compute`` is party -> its
    ``[compute]`` section (default: the local engine); ``consoles`` party -> its ``[console]``
    (default: none).
    """
    root = Path(root)
    certs = root / "certs"
    generate_deployment(certs, parties)
    ports = dict(ports or {})
    for p in parties:
        ports.setdefault(p, free_tcp_port(host))
    fmt = (lambda p: f"[{host}]:{ports[p]}") if ":" in host else (lambda p: f"{host}:{ports[p]}")
    paths = {}
    data_root = Path(data_root) if data_root is not None else root / "state"
    for p in parties:
        policy = (policies or {}).get(p)
        if policy is None and open_policy:
            policy = Policy(open=True)
        if allow_seeded:
            policy = replace(policy or Policy(), allow_seeded=True)
        cfg = PartyConfig(
            name=p,
            listen=fmt(p),
            data_dir=data_root / p,
            tls=TlsConfig(certs / "ca.crt", certs / f"{p}.crt", certs / f"{p}.key"),
            peers={q: fmt(q) for q in parties if q != p},
            inputs={
                proto: {k: Path(v).resolve() for k, v in table.items()}
                for proto, table in (inputs or {}).get(p, {}).items()
            },
            plugins=tuple(plugins),
            allow_insecure_keys=allow_insecure_keys,
            timeouts=timeouts or Timeouts(),
            policy=policy,
            budget=(budgets or {}).get(p),
            limits=limits or Limits(),
            compute=(compute or {}).get(p, ComputeConfig()),
            console=(consoles or {}).get(p, ConsoleConfig()),
        )
        paths[p] = dump_config(cfg, root / "config" / f"{p}.toml")
    return paths


def spawn_party(config_path: str | os.PathLike, *, log_file=None, extra_env: Mapping[str, str] | None = None):
    """Start ``python -m smcdp party --config FILE`` as a separate OS process.

    ``log_file``: an open binary file for its stdout/stderr (default: inherit).
    Returns the ``subprocess.Popen``; stop it with :func:`stop_party`.
    """
    src = str(Path(smcdp.__file__).resolve().parents[1])
    env = dict(os.environ, **(extra_env or {}))
    # -P and the working directory last: the party runs this smcdp even when started from another checkout's
    # directory (which `python -m` puts first: a benchmark of two trees ran the one in the cwd twice), and
    # plug-in modules in the working directory are still found
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH"), os.getcwd()) if p)
    return subprocess.Popen(
        [sys.executable, "-P", "-m", "smcdp", "party", "--config", str(config_path)],
        env=env,
        stdout=log_file,
        stderr=subprocess.STDOUT if log_file else None,
    )


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
