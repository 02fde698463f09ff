"""Failpoints: a party process that kills itself at an exact point of a session (fault-injection tests).

:mod:`smcdp.runtime.chaos` kills a party from outside once its status reports a round.  A round that
lasts a few milliseconds (dp-aggregate's Charlie decrypts one short vector in its stage 3) is over
before the next status poll, and the fault never happens.  So a :class:`~smcdp.runtime.local.LocalCluster`
gives each of its party processes a directory (``SMCDP_FAILPOINTS``); the chaos runner *arms* a kill by
writing ``kill.json`` there ({"session": ID, "round": R, "action": "kill"}), and the party, when one of
its sessions reports round R or later, removes the file (one shot: the restarted process does not find
it again) and sends itself SIGKILL -- the same death as from outside, at the exact point.  A pause
("action": "stop") is the same with SIGSTOP, after the party wrote ``stopped`` beside it: the chaos
runner sees that file, waits until the process is stopped (``LocalCluster.wait_stopped``), waits the pause's
length and sends SIGCONT.  An arming may also name a ``step``
(``arm_kill(..., step="outputs delivered")``): then it fires at the first report of that step at round R or
later (the session's ending reports its steps at the last round: docs/fault-tolerance.md).

Only processes started with ``SMCDP_FAILPOINTS`` in their environment look (a loopback cluster's; never a
deployed party's configuration); reading the file is the only cost, once per reported round.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path

ENV = "SMCDP_FAILPOINTS"
KILL_FILE = "kill.json"
STOPPED_FILE = "stopped"
ACTIONS = {"kill": signal.SIGKILL, "stop": signal.SIGSTOP}


def arm_kill(directory: Path, session_id: str, round: int, action: str = "kill", step: str | None = None) -> Path:
    """Arm a one-shot ``action`` (kill or stop) of the process that owns ``directory`` at ``round`` of
    ``session_id`` (and at ``step``, if given)."""
    if action not in ACTIONS:
        raise ValueError(f"a failpoint's action is one of {sorted(ACTIONS)}")
    directory.mkdir(parents=True, exist_ok=True)
    (directory / STOPPED_FILE).unlink(missing_ok=True)
    path = directory / KILL_FILE
    tmp = path.with_suffix(".tmp")
    armed: dict = {"session": session_id, "round": int(round), "action": action}
    if step is not None:
        armed["step"] = step
    tmp.write_text(json.dumps(armed), encoding="utf-8")
    os.replace(tmp, path)
    return path


def stopped(directory: Path) -> bool:
    """True once the process stopped itself at an armed ``stop``."""
    return (directory / STOPPED_FILE).exists()


def disarm(directory: Path) -> None:
    (directory / KILL_FILE).unlink(missing_ok=True)
    (directory / STOPPED_FILE).unlink(missing_ok=True)


def _same_session(armed: str, session_id: str) -> bool:
    # the operator may name a session without the initiator's prefix its id carries ('<party>.<name>')
    return session_id == armed or session_id.endswith("." + armed)


def hook(session_id: str) -> Callable[[int, str], None] | None:
    """The progress hook of a session in this process: None unless failpoints are enabled here."""
    directory = os.environ.get(ENV)
    if not directory:
        return None
    path = Path(directory) / KILL_FILE

    def reached(round: int, step: str = "") -> None:
        try:
            armed = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        # only a well-formed arming counts: anything else in the file is ignored, never an error in the
        # role that reported its round
        if (
            not isinstance(armed, dict)
            or not isinstance(armed.get("session"), str)
            or not _same_session(armed["session"], session_id)
        ):
            return
        at, action = armed.get("round"), armed.get("action", "kill")
        if isinstance(at, bool) or not isinstance(at, int) or action not in ("kill", "stop"):
            return
        if "step" in armed and armed["step"] != step:
            return
        if round >= at:
            sig = ACTIONS[action]
            try:
                path.unlink()  # one shot: the restarted process must not die here again
            except FileNotFoundError:
                return  # another session of this process took it
            if sig == signal.SIGSTOP:
                (path.parent / STOPPED_FILE).touch()
            # to this very thread: a signal sent to the process may be taken by another of its threads (gRPC's),
            # and this one ran on meanwhile -- a stop "before the confirmations leave" let them leave first
            signal.pthread_kill(threading.get_ident(), sig)

    return reached


__all__ = ["ENV", "KILL_FILE", "STOPPED_FILE", "arm_kill", "disarm", "hook", "stopped"]
