"""A late participant made on purpose, between real party processes (docs/fault-tolerance.md, "Bringing a late
participant to the end"): a participant that confirmed holding its output and then failed on its own after
the others succeeded.

The split is made at exact points with link proxies (:mod:`tests.support.link_proxy`) and failpoints
(:mod:`smcdp.runtime.failpoints`): a link to the late participant that carries nothing but a confirmation is
cut from the start, so it never hears that peer confirm; it stops itself at a step of its session's ending;
the others, holding every confirmation, succeed; then every link from it carries nothing either and it wakes:
it cannot learn that they succeeded, and after the grace it fails, resumably.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from smcdp.net.server import namespaced, new_session_id
from smcdp.runtime import client, failpoints
from tests.support.link_proxy import ProxiedCluster


def wait_for(what: str, cond: Callable[[], bool], seconds: float = 120.0) -> None:
    end = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < end, f"never: {what}"
        time.sleep(0.05)


def state(cluster: ProxiedCluster, party: str, sid: str) -> str:
    """``party``'s state of session ``sid`` ("unknown" while it has none)."""
    try:
        return str(client.get_result(cluster.configs[party], sid, timeout=5).get("state"))
    except Exception:  # noqa: BLE001 - not there yet
        return "unknown"


def succeeded(cluster: ProxiedCluster, parties, sid: str) -> Callable[[], bool]:
    return lambda: {state(cluster, p, sid) for p in parties} == {"succeeded"}


def restore_links(cluster: ProxiedCluster) -> None:
    """Every proxied link carries everything again, both ways."""
    for proxy in cluster.proxies.values():
        for direction in ("up", "down"):
            proxy.set_fault(direction, None)


def cut_off(cluster: ProxiedCluster, party: str) -> None:
    """Nothing ``party`` sends over its proxied links arrives any more (messages, heartbeats)."""
    for (src, _dst), proxy in cluster.proxies.items():
        if src == party:
            proxy.set_fault("up", "drop")


class Split:
    """One session started on a thread, with ``stops`` (party -> step of its session's ending at which it
    stops itself) armed and the ``silent`` links' "up" direction carrying nothing from the start."""

    def __init__(
        self,
        cluster: ProxiedCluster,
        protocol: str,
        roles: Mapping[str, str],
        params: Mapping[str, Any],
        initiator: str,
        *,
        stops: Mapping[str, str],
        silent: list[tuple[str, str]],
        seed: int | None = None,
        timeout: float = 300,
    ) -> None:
        self.cluster = cluster
        sid = new_session_id(protocol)
        self.sid = namespaced(initiator, sid)
        self.failpoints: dict[str, Path] = {}
        for party, step in stops.items():
            self.failpoints[party] = cluster.failpoint_dir(party)
            failpoints.arm_kill(self.failpoints[party], sid, 0, action="stop", step=step)
        for link in silent:
            cluster.proxies[link].set_fault("up", "drop")
        self.out: dict[str, Any] = {}
        self.thread = threading.Thread(
            target=lambda: self.out.update(
                recs=cluster.run(
                    protocol, roles, params, initiator=initiator, session_id=sid, seed=seed, timeout=timeout
                )
            ),
            daemon=True,
        )
        self.thread.start()

    def stopped(self, party: str) -> None:
        """Until ``party`` stopped itself at its armed step."""
        fp = self.failpoints[party]
        wait_for(f"{party} stopped itself at its step", lambda: failpoints.stopped(fp) or not self.thread.is_alive())
        assert failpoints.stopped(fp), f"the session ended before {party} stopped: {self.out.get('recs')}"
        # it writes the file, then stops: a wake() between the two would come before its SIGSTOP
        assert self.cluster.wait_stopped(party), f"{party} wrote 'stopped' but did not stop"

    def running(self, party: str) -> None:
        """Until the session runs at ``party`` (it was begun there)."""
        wait_for(f"{party} runs the session", lambda: state(self.cluster, party, self.sid) == "running")

    def wake(self, party: str, then: str | None = None) -> None:
        """``party`` goes on (armed to stop itself again at step ``then``, if given)."""
        failpoints.disarm(self.failpoints[party])
        if then is not None:
            failpoints.arm_kill(self.failpoints[party], self.sid, 0, action="stop", step=then)
        self.cluster.cont(party)

    def records(self, seconds: float) -> dict[str, dict]:
        """Every party's record once the session ended everywhere."""
        self.thread.join(seconds)
        assert not self.thread.is_alive(), "the session did not end"
        return self.out["recs"]

    def finish(self) -> None:
        """Whatever happened: no party left stopped, nothing left armed."""
        for party in self.failpoints:
            self.wake(party)

    def resume_late(self, initiator: str, late: str) -> dict:
        """``session resume`` at the succeeded ``initiator`` brings ``late`` to the same end: its record."""
        rec = client.resume_session(self.cluster.configs[initiator], self.sid, timeout=300)
        assert rec["state"] == "succeeded" and rec.get("brought_to_end") == {late: "succeeded"}, rec
        after = self.cluster._record(late, self.sid, time.monotonic() + 90)
        assert after["state"] == "succeeded" and after["unconfirmed"] == [], after
        return after
