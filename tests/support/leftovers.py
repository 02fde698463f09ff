"""No process outlives the test run that started it.

Tests start party processes, Dask clusters and commands; their fixtures stop them.  A run cut short
(Ctrl-C, a worker stopped by pytest-xdist, a teardown that was itself interrupted) skips those
teardowns, and party processes -- some of them SIGSTOP-ped by a chaos test -- would go on holding
ports and CPU on a shared machine.  When a test process ends (``pytest_unconfigure``: a plain run or
an xdist worker, not the xdist controller, whose children are the workers), this kills every child
process it still has, continuing stopped ones first, and names them on stderr.  Linux only (it reads
/proc); elsewhere it does nothing.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest


def children(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of the live child processes of ``pid``."""
    out = []
    proc = Path("/proc")
    if not proc.is_dir():
        return out
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            # pid (comm) state ppid ...: comm may hold spaces and parentheses
            state, ppid = stat[stat.rindex(")") + 2 :].split()[:2]
            if int(ppid) != pid or state == "Z":
                continue
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, ValueError):
            continue
        out.append((int(entry.name), cmd))
    return out


def reap() -> list[tuple[int, str]]:
    """Kill this process's remaining children; returns what was killed."""
    left = children(os.getpid())
    for pid, _ in left:
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                break
    for pid, _ in left:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    return left


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_sessionfinish(session):
    # the innermost wrapper: after the session's fixtures were torn down (or their teardown was
    # interrupted), before an xdist worker reports that it finished (the controller may stop it then)
    try:
        return (yield)
    finally:
        config = session.config
        if not (getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput")):
            for pid, cmd in reap():  # not in the xdist controller: its children are the workers
                sys.stderr.write(
                    f"tests/support/leftovers.py: killed process {pid} that the tests left running: {cmd[:200]}\n"
                )
