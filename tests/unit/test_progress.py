"""smcdp.progress: plain lines when the stream is not a terminal, a rich bar with rate and ETA on one."""

from __future__ import annotations

import io
import os
import pty
import re
import subprocess
import sys
import threading
import time

import pytest
from rich.console import Console

from smcdp import progress
from smcdp.progress import resolve_mode, task, track
from tests.support.paths import REPO

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def test_not_a_terminal_gives_plain_lines_at_a_modest_rate():
    buf = io.StringIO()
    assert resolve_mode(None, buf) == "plain"
    items = list(track(range(40), "crunch", stream=buf, interval=0.1, unit="item"))
    assert items == list(range(40))
    lines = buf.getvalue().splitlines()
    assert lines and "\x1b" not in buf.getvalue()  # no escape codes, no carriage returns
    assert "\r" not in buf.getvalue()
    assert lines[-1].startswith("crunch: 40/40 item (100%) done, ") and "item/s" in lines[-1]
    assert len(lines) <= 3  # 40 quick items, interval 0.1 s: a line per interval at most, plus the last


def test_plain_lines_report_rate_and_eta_while_running_and_a_heartbeat_when_nothing_moves():
    buf = io.StringIO()
    with task("slow", total=4, unit="step", stream=buf, mode="plain", interval=0.1) as t:
        for _ in range(3):
            time.sleep(0.12)
            t.advance()
        time.sleep(0.35)  # nothing moves: the heartbeat still prints
    lines = buf.getvalue().splitlines()
    running = [ln for ln in lines if "done" not in ln]
    assert running, lines
    assert any(
        re.search(r"slow: [123]/4 step \(\d+%\), [\d.]+ step/s, elapsed 0:00:0\d, ETA 0:00:0\d", ln) for ln in running
    ), lines
    assert lines[-1].startswith("slow: 3/4 step (75%) done")


def test_unknown_total_shows_count_and_rate_without_eta():
    buf = io.StringIO()
    with task("session s", total=None, unit="round", stream=buf, mode="plain", interval=0.05) as t:
        t.update(completed=7, description="session s (running, combine)")
    assert buf.getvalue().splitlines()[-1].startswith("session s (running, combine): 7 round done, ")
    assert "ETA" not in buf.getvalue()


def test_a_terminal_shows_a_bar_with_rate_and_eta():
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=140)
    with task("keygen", total=10, unit="prime", console=console) as t:
        for i in range(10):
            time.sleep(0.04)
            t.advance()
            if i == 4:  # half-way, the display's own refresh (a thread, 4 a second) shows the ETA: wait for it
                deadline = time.monotonic() + 20
                while "ETA 0:00:0" not in ANSI.sub("", buf.getvalue()) and time.monotonic() < deadline:
                    time.sleep(0.02)
    text = ANSI.sub("", buf.getvalue())
    assert "keygen" in text and "10/10 prime" in text
    assert re.search(r"[\d.]+ prime/s", text)
    assert "ETA 0:00:0" in text  # shown while it ran
    assert "━" in text  # the bar


def test_nested_tasks_share_one_display():
    buf = io.StringIO()
    with task("outer", total=2, stream=buf, mode="plain", interval=60) as outer:
        for i in range(2):
            for _ in track(range(3), f"inner {i}"):
                pass
            outer.advance()
    lines = buf.getvalue().splitlines()
    assert [ln.split(":")[0] for ln in lines] == ["inner 0", "inner 1", "outer"]
    assert progress._active is None


def test_off_prints_nothing_and_bad_modes_are_refused(monkeypatch):
    buf = io.StringIO()
    with task("quiet", total=3, stream=buf, mode="off") as t:
        t.advance(3)
    assert buf.getvalue() == ""
    monkeypatch.setenv(progress.MODE_ENV, "plain")
    assert resolve_mode(None, io.StringIO()) == "plain"
    monkeypatch.setenv(progress.MODE_ENV, "sparkles")
    with pytest.raises(ValueError, match="SMCDP_PROGRESS"):
        resolve_mode(None, io.StringIO())


def test_concurrent_advances_are_all_counted():
    buf = io.StringIO()
    with task("threads", total=800, stream=buf, mode="plain", interval=60) as t:
        ths = [threading.Thread(target=lambda: [t.advance() for _ in range(100)]) for _ in range(8)]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
    assert "800/800" in buf.getvalue()


@pytest.mark.skipif(not hasattr(pty, "openpty"), reason="needs a pseudo-terminal")
def test_a_real_pty_gets_the_bar_and_a_pipe_gets_lines():
    code = (
        "import time\nfrom smcdp.progress import track\n"
        "for _ in track(range(8), 'pty work', unit='it'):\n    time.sleep(0.05)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != progress.MODE_ENV} | {"TERM": "xterm", "COLUMNS": "120"}
    # stderr on a pseudo-terminal: the rich bar
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=slave,
        cwd=REPO,
        env=env,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(30)
    os.close(master)
    tty_text = ANSI.sub("", b"".join(chunks).decode("utf-8", "replace"))
    assert "pty work" in tty_text and "8/8 it" in tty_text and "it/s" in tty_text and "━" in tty_text
    # stderr into a pipe: plain lines only
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env, timeout=30)
    assert r.returncode == 0
    assert r.stderr.splitlines()[-1].startswith("pty work: 8/8 it (100%) done, ")
    assert "\x1b" not in r.stderr
