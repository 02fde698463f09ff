"""Failpoints (smcdp.runtime.failpoints): a party process kills itself at the exact round chaos armed."""

import json
import os
import signal
import subprocess
import sys

from smcdp.runtime import failpoints

SCRIPT = """
import sys
from smcdp.runtime import failpoints
hook = failpoints.hook(sys.argv[1])
for r in map(int, sys.argv[2:]):
    hook(r)
    print("reached", r, flush=True)
"""


def _run(tmp_path, session, *rounds):
    env = dict(os.environ, **{failpoints.ENV: str(tmp_path)})
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, session, *map(str, rounds)], env=env, capture_output=True, text=True, timeout=60
    )


def test_without_the_environment_there_is_no_hook(monkeypatch):
    monkeypatch.delenv(failpoints.ENV, raising=False)
    assert failpoints.hook("s") is None


def test_the_process_dies_at_the_armed_round_once(tmp_path):
    failpoints.arm_kill(tmp_path, "charlie.x", 3)
    out = _run(tmp_path, "charlie.x", 1, 2, 3, 4)
    assert out.returncode == -signal.SIGKILL
    assert out.stdout.split("\n")[:2] == ["reached 1", "reached 2"] and "reached 3" not in out.stdout
    assert not (tmp_path / failpoints.KILL_FILE).exists()  # one shot: the restart replays past it
    again = _run(tmp_path, "charlie.x", 1, 2, 3, 4)
    assert again.returncode == 0 and "reached 4" in again.stdout


def test_an_operator_name_without_the_initiator_prefix_matches(tmp_path):
    failpoints.arm_kill(tmp_path, "x", 2)
    assert _run(tmp_path, "charlie.x", 1, 2).returncode == -signal.SIGKILL


def test_another_session_or_an_earlier_round_does_not_die(tmp_path):
    failpoints.arm_kill(tmp_path, "charlie.x", 3)
    assert _run(tmp_path, "charlie.y", 1, 2, 3, 4).returncode == 0
    assert _run(tmp_path, "xcharlie.x", 5).returncode == 0  # a prefix match is not the session
    assert _run(tmp_path, "charlie.x", 1, 2).returncode == 0
    assert (tmp_path / failpoints.KILL_FILE).exists()
    failpoints.disarm(tmp_path)
    assert _run(tmp_path, "charlie.x", 3).returncode == 0


def test_an_armed_stop_stops_the_process_at_its_round_until_continued(tmp_path):
    import time

    failpoints.arm_kill(tmp_path, "trent.x", 2, "stop")
    env = dict(os.environ, **{failpoints.ENV: str(tmp_path)})
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, "trent.x", "1", "2", "3"], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        end = time.monotonic() + 30
        while not failpoints.stopped(tmp_path):
            assert time.monotonic() < end and proc.poll() is None
            time.sleep(0.05)

        # the marker is written just before the process stops itself: wait for the kernel's 'stopped' state
        # (a fixed pause failed if the process was descheduled between the two)
        def state():
            with open(f"/proc/{proc.pid}/stat") as f:
                return f.read().split(") ")[1][0]

        while state() != "T":
            assert time.monotonic() < end and proc.poll() is None, state()
            time.sleep(0.02)
        time.sleep(0.3)
        assert proc.poll() is None and state() == "T"  # stopped, not dead, and it stays stopped
        failpoints.disarm(tmp_path)
        proc.send_signal(signal.SIGCONT)
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0 and out.split() == ["reached", "1", "reached", "2", "reached", "3"]


def test_a_malformed_arming_is_ignored_not_an_error_in_the_role(tmp_path):
    for content in (
        '{"session": "trent.x", "round": "3"}',
        '{"session": "trent.x", "round": 1, "action": ["kill"]}',
        '{"session": 5, "round": 1}',
        "[1, 2]",
        "not json",
    ):
        (tmp_path / failpoints.KILL_FILE).write_text(content)
        out = _run(tmp_path, "trent.x", 1, 2, 3)
        assert out.returncode == 0 and "reached 3" in out.stdout, (content, out.stderr)


def test_chaos_arms_every_partys_first_round_action_at_once(tmp_path):
    """Two parties to be killed "at round 3" are both armed when the chaos starts: armed one after the other,
    the second was armed only once the first had been restarted -- rounds later, or after the session."""
    from types import SimpleNamespace

    from smcdp.runtime.chaos import Chaos, ChaosAction

    cluster = SimpleNamespace(
        configs={"alice": None, "bob": None},
        restarting=set(),
        procs={"alice": SimpleNamespace(poll=lambda: None), "bob": SimpleNamespace(poll=lambda: None)},
        failpoint_dir=lambda party: tmp_path / party,
    )
    actions = [ChaosAction.parse(a) for a in ("kill:alice:round=3", "kill:bob:round=3", "kill:alice:round=9")]
    chaos = Chaos(cluster, actions, "s-1", poll=0.01).start()  # type: ignore[arg-type]
    try:
        armed = {p: json.loads((tmp_path / p / "kill.json").read_text()) for p in ("alice", "bob")}
        assert armed["alice"]["round"] == 3 and armed["bob"]["round"] == 3  # alice's round 9 comes later
        assert cluster.restarting == {"alice", "bob"}
    finally:
        chaos.finish(timeout=5)
    assert not (tmp_path / "alice" / "kill.json").exists()  # disarmed: the moment never came


STEP_SCRIPT = """
import sys
from smcdp.runtime import failpoints
hook = failpoints.hook(sys.argv[1])
for report in sys.argv[2:]:
    r, _, step = report.partition(":")
    hook(int(r), step)
    print("reached", report, flush=True)
"""


def test_an_arming_with_a_step_fires_at_that_step_only(tmp_path):
    failpoints.arm_kill(tmp_path, "trent.x", 0, step="confirmations delivered")
    env = dict(os.environ, **{failpoints.ENV: str(tmp_path)})
    out = subprocess.run(
        [sys.executable, "-c", STEP_SCRIPT, "trent.x", "3:", "5:confirming outputs", "5:confirmations delivered", "6:"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == -signal.SIGKILL
    assert "reached 5:confirming outputs" in out.stdout and "reached 5:confirmations delivered" not in out.stdout
    assert not (tmp_path / failpoints.KILL_FILE).exists()


STOPPING = """
import os, pathlib, signal, sys, time
d = pathlib.Path(sys.argv[1])
while not (d / "kill.json").exists():
    time.sleep(0.01)
(d / "kill.json").unlink()
(d / "stopped").touch()  # what failpoints.hook does before it stops the process ...
time.sleep(1.0)  # ... and a loaded host may run something else in between
os.kill(os.getpid(), signal.SIGSTOP)
(d / "resumed").touch()
"""


def test_a_pause_at_a_round_waits_for_the_party_to_stop_itself(tmp_path):
    """A stop armed at a round is the party's own: it writes ``stopped``, then stops itself.  The chaos runner used
    to send its own SIGSTOP on seeing the file; landing between the two, its SIGCONT came before the party's own
    SIGSTOP, and the party stayed stopped for ever (a fresh-clone run: trent stopped for 11 minutes, three
    session-ending tests failed).  Now the runner waits until the process is stopped, then lets the pause run."""
    from smcdp.runtime.chaos import Chaos, ChaosAction
    from smcdp.runtime.local import LocalCluster

    proc = subprocess.Popen([sys.executable, "-c", STOPPING, str(tmp_path)])

    class Cluster:  # what Chaos uses of a LocalCluster, around one process
        configs = {"p": None}
        procs = {"p": proc}
        restarting: set[str] = set()
        wait_stopped = LocalCluster.wait_stopped

        def failpoint_dir(self, party):
            return tmp_path

        def pause(self, party):
            proc.send_signal(signal.SIGSTOP)

        def cont(self, party):
            proc.send_signal(signal.SIGCONT)

    chaos = Chaos(Cluster(), [ChaosAction.parse("stop:p:round=1,for=0.2")], "s").start()
    try:
        assert proc.wait(timeout=30) == 0  # it resumed after its own stop, and finished
    finally:
        chaos.finish()
        proc.send_signal(signal.SIGCONT)
        proc.kill()
    assert chaos.error is None and [e["done"] for e in chaos.events] == [True]
    assert (tmp_path / "resumed").exists()
