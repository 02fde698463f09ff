"""Faults on purpose: kill or pause party processes of a :class:`~smcdp.runtime.local.LocalCluster`
while a session runs (``smcdp demo … --chaos``, the fault-tolerance tests).

An action is written ``ACTION:PARTY:WHEN[,restart=no][,for=SECONDS]``:

* ``ACTION`` -- ``kill`` (SIGKILL; the party is started again from its
  configuration after ``restart_delay`` seconds unless ``restart=no``) or
  ``stop`` (SIGSTOP, then SIGCONT after ``for=SECONDS``, default 10);
* ``PARTY`` -- a party of the cluster;
* ``WHEN`` -- ``round=R``: once the party's session reports round ≥ R (the action is armed in the
  party process itself, :mod:`smcdp.runtime.failpoints`, so that it happens at that exact point), or
  ``after=SECONDS`` after the session started.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from smcdp.errors import InvalidMessage
from smcdp.runtime import failpoints
from smcdp.runtime.local import LocalCluster

ACTIONS = ("kill", "stop")
_SPEC_RE = re.compile(
    r"^(?P<action>[a-z]+):(?P<party>[A-Za-z0-9][A-Za-z0-9._-]*):(?P<when>round|after)="
    r"(?P<value>[0-9]+(\.[0-9]+)?)(?P<opts>(,[a-z]+=[A-Za-z0-9.]+)*)$"
)


@dataclass(frozen=True)
class ChaosAction:
    action: str
    party: str
    round: int | None = None
    after: float | None = None
    restart: bool = True
    duration: float = 10.0
    #: with ``round``: only at this step of the session (a step the session reports, e.g. its ending's
    #: "confirming outputs", :mod:`smcdp.runtime.ending`); tests build such an action directly
    step: str | None = None

    @classmethod
    def parse(cls, text: str) -> ChaosAction:
        m = _SPEC_RE.match(text.strip())
        if not m:
            raise InvalidMessage(
                f"--chaos {text!r} is not ACTION:PARTY:round=R or ACTION:PARTY:after=SECONDS "
                "[,restart=no][,for=SECONDS]"
            )
        action = m["action"]
        if action not in ACTIONS:
            raise InvalidMessage(f"--chaos action {action!r} is not one of {', '.join(ACTIONS)}")
        kw: dict = {}
        if m["when"] == "round":
            if "." in m["value"]:
                raise InvalidMessage(f"--chaos {text!r}: round must be a whole number")
            kw["round"] = int(m["value"])
        else:
            kw["after"] = float(m["value"])
        for opt in filter(None, m["opts"].split(",")):
            key, value = opt.split("=", 1)
            if key == "restart" and value in ("no", "yes"):
                kw["restart"] = value == "yes"
            elif key == "for":
                try:
                    kw["duration"] = float(value)
                except ValueError:
                    raise InvalidMessage(f"--chaos {text!r}: for= needs a number of seconds") from None
                if not 0 < kw["duration"] <= 3600:
                    raise InvalidMessage(f"--chaos {text!r}: for= must lie in (0, 3600] seconds")
            else:
                raise InvalidMessage(f"--chaos {text!r}: unknown option {opt!r} (restart=no, for=SECONDS)")
        if action == "stop" and "restart" in kw:
            raise InvalidMessage(f"--chaos {text!r}: restart= applies to kill, not stop")
        return cls(action, m["party"], **kw)

    def describe(self) -> str:
        when = f"round {self.round}" if self.round is not None else f"{self.after:g} s"
        if self.step is not None:
            when += f", step {self.step!r}"
        tail = (" (no restart)" if not self.restart else "") if self.action == "kill" else f" for {self.duration:g} s"
        return f"{self.action} {self.party} at {when}{tail}"


@dataclass
class Chaos:
    """Carry out ``actions`` against ``cluster`` during session ``session_id`` (in a background thread)."""

    cluster: LocalCluster
    actions: Sequence[ChaosAction]
    session_id: str
    restart_delay: float = 1.0
    poll: float = 0.05
    restarts: int = 0
    events: list[dict] = field(default_factory=list)
    error: BaseException | None = None
    _thread: threading.Thread | None = None
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        for a in self.actions:
            if a.party not in self.cluster.configs:
                raise InvalidMessage(
                    f"--chaos names {a.party!r}, which is not a party of this demo "
                    f"({', '.join(sorted(self.cluster.configs))})"
                )

    def start(self) -> Chaos:
        self._t0 = time.monotonic()
        # each party's first action at a round is armed now, every party's at once: two parties killed
        # "at round 3" must both die there (armed one after the other, the second was armed only once the
        # first had been restarted -- rounds later, or never)
        self._armed: set[int] = set()
        #: set once each action's moment came (before it is carried out): a caller that must act during a
        #: pause waits on it (the failpoint's ``stopped`` file is gone once the pause is handled)
        self.reached = [threading.Event() for _ in self.actions]
        for i, a in enumerate(self.actions):
            if a.round is not None and not any(self.actions[j].party == a.party for j in self._armed):
                self._arm(a)
                self._armed.add(i)
        self._thread = threading.Thread(target=self._main, daemon=True, name="chaos")
        self._thread.start()
        return self

    def finish(self, timeout: float = 120.0) -> None:
        """Stop waiting for triggers that never came; finish any pause or restart under way."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _arm(self, a: ChaosAction) -> None:
        assert a.round is not None
        if a.action == "kill" and a.restart:
            self.cluster.restarting.add(a.party)  # run() waits for its record, not "unknown"
        failpoints.arm_kill(self.cluster.failpoint_dir(a.party), self.session_id, a.round, a.action, step=a.step)

    def _wait(self, i: int, a: ChaosAction) -> bool:
        """Until ``a``'s moment: its time, or its round -- an action at a round is armed in the party
        itself (:mod:`smcdp.runtime.failpoints`: a round of a few milliseconds is over before a status
        poll sees it), so its moment is the process's death or self-stop."""
        armed = a.round is not None
        where = self.cluster.failpoint_dir(a.party)
        if a.round is not None and i not in self._armed:  # a party's later action: armed now
            self._arm(a)
        while not self._stop.is_set():
            if armed and (self.cluster.procs[a.party].poll() is not None or failpoints.stopped(where)):
                return True
            if a.after is not None and time.monotonic() - self._t0 >= a.after:
                return True
            # (an armed action is the party's own to take: acting from outside as well could stop it
            # twice -- the second time after its SIGCONT, for ever)
            time.sleep(self.poll)
        if armed:
            failpoints.disarm(where)
            self.cluster.restarting.discard(a.party)
        return False

    def _main(self) -> None:
        try:
            for i, a in enumerate(self.actions):
                if not self._wait(i, a):
                    self.events.append({"action": a.describe(), "done": False})
                    continue
                self.reached[i].set()
                at = time.monotonic() - self._t0
                if a.action == "kill":
                    self.cluster.kill(a.party, restart=a.restart)  # (already dead if its failpoint fired)
                    failpoints.disarm(self.cluster.failpoint_dir(a.party))  # the new process must not die again
                    if a.restart:
                        time.sleep(self.restart_delay)
                        self.cluster.restart(a.party)
                        self.restarts += 1
                else:
                    if a.round is None:
                        self.cluster.pause(a.party)
                    elif not self.cluster.wait_stopped(a.party):
                        # an armed stop is the party's own: it writes 'stopped', then stops itself.  A SIGSTOP
                        # from here as well (as before) could land between the two, and the party's own then
                        # came after our SIGCONT -- stopped for ever (a fresh-clone run's session hung 11 min)
                        self.cluster.pause(a.party)
                    failpoints.disarm(self.cluster.failpoint_dir(a.party))
                    time.sleep(a.duration)
                    self.cluster.cont(a.party)
                self.events.append({"action": a.describe(), "done": True, "at_seconds": round(at, 2)})
        except BaseException as exc:  # noqa: BLE001 - reported by the demo
            self.error = exc
