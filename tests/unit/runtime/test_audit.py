"""The hash-chained audit trail: appends, verification, tampering, torn tails, the CLI."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from smcdp.cli import main as cli_main
from smcdp.runtime.governance.audit import GENESIS, HEAD_NAME, LOG_NAME, AuditError, AuditLog, read_entries, verify_log
from tests.support.paths import REPO


def _log(tmp_path, n=6):
    a = AuditLog(tmp_path, "alice")
    assert a.open() is None
    for i in range(n):
        a.append("proposal", session=f"s{i}", peer="bob", params={"epsilon": 1.0, "i": i})
    a.close()
    return tmp_path / LOG_NAME


def _lines(path):
    return path.read_bytes().split(b"\n")[:-1]


def _write(path, lines, newline=True):
    path.write_bytes(b"\n".join(lines) + (b"\n" if newline else b""))


def test_chain_verifies_and_links_every_line(tmp_path):
    path = _log(tmp_path)
    v = verify_log(tmp_path)
    assert v.ok and v.lines == 6 and v.bad_line is None
    entries = [json.loads(line) for line in _lines(path)]
    assert entries[0]["prev"] == GENESIS
    import hashlib

    for prev, _line, entry in zip(_lines(path), _lines(path)[1:], entries[1:]):
        assert entry["prev"] == hashlib.sha256(prev).hexdigest()
    assert [e["seq"] for e in entries] == [1, 2, 3, 4, 5, 6]
    assert json.loads((tmp_path / HEAD_NAME).read_text()) == {"lines": 6, "sha256": v.head}
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    # a reopened log continues the chain
    a = AuditLog(tmp_path, "alice")
    a.open()
    a.append("stop")
    a.close()
    assert verify_log(tmp_path).lines == 7


def _tamper_cases():
    def change(lines, i):
        lines[i] = lines[i].replace(b'"peer":"bob"', b'"peer":"eve"')
        return lines

    return {
        "change first": (lambda ls: change(ls, 0), 1),
        "change middle": (lambda ls: change(ls, 2), 3),
        "change last": (lambda ls: change(ls, 5), 6),
        "reformat a line": (lambda ls: [ls[0].replace(b",", b", ", 1)] + ls[1:], 1),
        "delete first": (lambda ls: ls[1:], 1),
        "delete middle": (lambda ls: ls[:3] + ls[4:], 4),
        "delete last": (lambda ls: ls[:5], 6),
        "delete last two": (lambda ls: ls[:4], 5),
        "reorder": (lambda ls: [ls[0], ls[2], ls[1]] + ls[3:], 2),
        "swap last two": (lambda ls: ls[:4] + [ls[5], ls[4]], 5),
        "insert": (lambda ls: ls[:2] + [ls[2]] + ls[2:], 4),
        "append a copied line": (lambda ls: ls + [ls[5]], 7),
    }


@pytest.mark.parametrize("name", list(_tamper_cases()))
def test_tampering_is_detected_at_the_first_bad_line(tmp_path, name):
    path = _log(tmp_path)
    fn, bad = _tamper_cases()[name]
    _write(path, fn(_lines(path)))
    v = verify_log(tmp_path)
    assert not v.ok and not v.torn
    assert v.bad_line == bad, v
    # the CLI says so, naming the line, and exits non-zero; the party refuses to append to it
    assert cli_main(["audit", "verify", "--data-dir", str(tmp_path)]) == 1
    with pytest.raises(AuditError, match=f"fails verification at line {bad}"):
        AuditLog(tmp_path, "alice").open()


def test_truncation_inside_verified_history_is_tampering_not_a_crash(tmp_path):
    path = _log(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: data.rfind(b"\n", 0, len(data) - 1) + 20])  # cut into line 6
    v = verify_log(tmp_path)
    assert not v.ok and not v.torn and v.bad_line == 6 and "truncated" in v.problem
    path.write_bytes(b"")
    v = verify_log(tmp_path)
    assert not v.ok and v.bad_line == 1
    (tmp_path / HEAD_NAME).unlink()
    _log(tmp_path / "x", 3)
    (tmp_path / "x" / HEAD_NAME).unlink()
    assert verify_log(tmp_path / "x").problem.startswith("audit.head is missing")


def test_a_torn_last_line_is_reported_then_repaired_at_open_without_losing_history(tmp_path, capsys):
    path = _log(tmp_path)
    before = path.read_bytes()
    with open(path, "ab") as f:  # a crash in the middle of the 7th write
        f.write(b'{"event":"reserved","party":"alice","pr')
    v = verify_log(tmp_path)
    assert not v.ok and v.torn and v.bad_line == 7 and v.lines == 6
    assert cli_main(["audit", "verify", "--data-dir", str(tmp_path)]) == 3
    assert "TORN at line 7" in capsys.readouterr().err
    a = AuditLog(tmp_path, "alice")
    repaired = a.open()
    a.append("start")
    a.close()
    assert repaired["event"] == "torn-tail-repaired" and repaired["line"] == 7 and repaired["bytes"] == 39
    saved = tmp_path / repaired["saved_as"]
    assert saved.read_bytes() == b'{"event":"reserved","party":"alice","pr'  # kept, not dropped
    assert path.read_bytes().startswith(before)  # history untouched
    v = verify_log(tmp_path)
    assert v.ok and v.lines == 8
    assert cli_main(["audit", "verify", "--data-dir", str(tmp_path)]) == 0


def test_a_head_one_line_behind_is_a_crash_between_line_and_head(tmp_path):
    path = _log(tmp_path)
    lines = _lines(path)
    import hashlib

    (tmp_path / HEAD_NAME).write_text(json.dumps({"lines": 5, "sha256": hashlib.sha256(lines[4]).hexdigest()}))
    v = verify_log(tmp_path)
    assert v.ok and "one line behind" in v.note
    a = AuditLog(tmp_path, "alice")
    a.open()
    a.close()
    assert json.loads((tmp_path / HEAD_NAME).read_text())["lines"] == 6


def test_peer_strings_cannot_inject_lines_or_terminal_codes(tmp_path, capsys):
    a = AuditLog(tmp_path, "alice")
    a.open()
    evil = 'x"}\n{"seq":2,"event":"charged"}\r\u2028\x1b[2J\u00e9'
    a.append("abort", session="s", message=evil, peer="bob")
    a.append("stop")
    a.close()
    raw = (tmp_path / LOG_NAME).read_bytes()
    assert raw.count(b"\n") == 2 and all(b < 0x80 for b in raw)  # ASCII, one line per event
    entries = [e for _, e, _ in read_entries(tmp_path)]
    assert entries[0]["message"] == evil and entries[1]["event"] == "stop"
    assert cli_main(["audit", "show", "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\\u001b[2J" in out and out.count("\n") == 2


def test_concurrent_appends_from_threads_keep_one_chain(tmp_path):
    a = AuditLog(tmp_path, "alice")
    a.open()

    def work(k):
        for i in range(25):
            a.append("proposal", session=f"t{k}-{i}")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    a.close()
    v = verify_log(tmp_path)
    assert v.ok and v.lines == 100


_APPENDER = """
import sys
from pathlib import Path
from smcdp.runtime.governance.audit import AuditLog
a = AuditLog(Path(sys.argv[1]), "alice")
a.open()
print("ready", flush=True)
i = 0
while True:
    a.append("proposal", session=f"s{i}", params={"pad": "x" * 3000})
    i += 1
"""


def test_kill_minus_nine_while_appending_loses_no_verified_line(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    for attempt in range(3):
        d = tmp_path / f"run{attempt}"
        proc = subprocess.Popen([sys.executable, "-c", _APPENDER, str(d)], env=env, stdout=subprocess.PIPE)
        assert proc.stdout.readline().strip() == b"ready"
        time.sleep(0.3 + 0.1 * attempt)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        v = verify_log(d)
        assert v.ok or v.torn, v  # never damage inside verified history
        n = v.lines
        a = AuditLog(d, "alice")
        a.open()  # repairs a torn tail if there is one
        a.append("start")
        a.close()
        v2 = verify_log(d)
        assert v2.ok and v2.lines >= n + 1


def test_show_filters_and_the_cli_needs_a_directory(tmp_path, capsys):
    _log(tmp_path)
    assert cli_main(["audit", "show", "--data-dir", str(tmp_path), "--session", "s2", "--json"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and json.loads(out[0])["session"] == "s2"
    assert cli_main(["audit", "show", "--data-dir", str(tmp_path), "--tail", "2"]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 2
    assert cli_main(["audit", "verify", "--data-dir", str(tmp_path / "nowhere")]) == 2
    assert cli_main(["audit", "verify"]) == 2


def test_lines_appended_behind_the_heads_back_are_detected(tmp_path):
    """Well-chained lines added without the party's head: one is a crash artefact, two are not."""
    _log(tmp_path)
    head = (tmp_path / HEAD_NAME).read_bytes()
    a = AuditLog(tmp_path, "mallory")
    a.open()
    a.append("charged", session="s1")
    a.append("charged", session="s2")
    a.close()
    (tmp_path / HEAD_NAME).write_bytes(head)
    v = verify_log(tmp_path)
    assert not v.ok and v.bad_line == 8 and "without the party recording them" in v.problem


def test_a_missing_log_is_not_restarted_silently(tmp_path):
    """Issue 24: a deleted log used to be restarted without a word; now only on purpose, on the record."""
    from smcdp.runtime.governance.audit import start_new_log

    log = AuditLog(tmp_path, "alice")
    log.open()  # a fresh data directory: a log starts
    for i in range(3):
        log.append("x", i=i)
    log.close()
    head = json.loads((tmp_path / HEAD_NAME).read_text())
    (tmp_path / LOG_NAME).unlink()
    with pytest.raises(
        AuditError, match=re.escape("missing although this party kept one before (audit.head is still there)")
    ):
        AuditLog(tmp_path, "alice").open()
    (tmp_path / HEAD_NAME).unlink()
    with pytest.raises(AuditError, match="proposals/ exists"):
        AuditLog(tmp_path, "alice").open(used_before="proposals/ exists")
    AuditLog(tmp_path / "fresh", "alice").open(used_before=None)  # nothing says it was used: a first start
    (tmp_path / HEAD_NAME).write_text(json.dumps(head))
    entry = start_new_log(tmp_path, "alice", "disk replaced", "ops")
    assert entry["event"] == "log-started" and entry["seq"] == 1 and entry["previous_head"] == head
    assert verify_log(tmp_path).ok and verify_log(tmp_path).lines == 1
    with pytest.raises(AuditError, match="exists"):
        start_new_log(tmp_path, "alice", "again", "ops")
    again = AuditLog(tmp_path, "alice")
    again.open(used_before="proposals/ exists")  # the new log is there: the party starts
    assert again.state()[1] == 1
    again.close()
