"""Faults as they happen in the field (issue 26), between real party processes on loopback.

* a dead or silent initiator surfaces at its operator's CLI within ``peer_grace_seconds``, named;
* a damaged ``checkpoint.json`` fails its session, not the party, and is reported by
  ``smcdp session status`` and the console;
* the culprit is whoever's state failed: a deleted checkpoint directory, a damaged journal
  record (resumable: ``session resume`` repairs it and ends with the undisturbed result), a
  flipped bit in ``root.key``;
* a full disk (a small tmpfs under a party's data directory) at a data party and at the
  coordinator: "no space left at X" at every party, resumable once space is back.

Each party here is killed with SIGKILL, its files damaged while it is down, and started
again from its configuration, as an operator's restore or a failing disk would leave it.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from smcdp.net.server import namespaced, new_session_id
from smcdp.protocols.power_iteration import plaintext_reference
from smcdp.runtime import client
from smcdp.runtime.console.config import ConsoleConfig
from smcdp.runtime.durability import journal
from smcdp.runtime.durability.integrity import KEY_FILE, Mac
from smcdp.runtime.local import LocalCluster, free_tcp_port
from tests.unit.protocols.test_power_iteration import blocks_with_gap

ROLES = {"trent": "trent", "party1": "alice", "party2": "bob"}
PARAMS = {"n_parties": 2, "key_bits": 512, "p": 0.9, "tol": 1e-10, "max_iterations": 400}
ENDLESS = dict(PARAMS, max_iterations=100000, tol=1e-15)  # never converges on its own
REPO = Path(__file__).resolve().parents[3]


def _sid() -> str:
    """A fresh id of a session trent initiates (ids live in their initiator's namespace, issue 24)."""
    return namespaced("trent", new_session_id("power-iteration"))


def _blocks():
    return blocks_with_gap(np.random.default_rng(3), 6, (5, 7), gap=0.45)


def _parties(tmp: Path) -> dict:
    parties = {"trent": {}}
    for name, A in zip(("alice", "bob"), _blocks()):
        np.save(tmp / f"{name}.npy", A)
        parties[name] = {"power-iteration": {"data": tmp / f"{name}.npy"}}
    return parties


def _round(cluster: LocalCluster, party: str, sid: str) -> int:
    try:
        return int(client.get_status(cluster.configs[party], sid, timeout=2.0).get("round") or 0)
    except Exception:  # noqa: BLE001 - not proposed yet, or restarting
        return -1


def _wait_round(cluster: LocalCluster, party: str, sid: str, at: int, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while _round(cluster, party, sid) < at:
        assert time.monotonic() < end, f"{party} never reached round {at} of {sid}"
        time.sleep(0.1)


def _start(cluster: LocalCluster, sid: str, params=PARAMS) -> tuple[threading.Thread, dict]:
    out: dict = {}
    th = threading.Thread(
        target=lambda: out.update(
            cluster.run("power-iteration", ROLES, params, initiator="trent", session_id=sid, timeout=300)
        ),
        daemon=True,
    )
    th.start()
    return th, out


def _kill_damage_restart(cluster: LocalCluster, party: str, sid: str, at_round: int, damage) -> dict:
    """Run a session; at ``at_round`` SIGKILL ``party``, apply ``damage(checkpoint dir)``, start it again."""
    th, out = _start(cluster, sid)
    _wait_round(cluster, party, sid, at_round)
    cluster.kill(party, restart=True)
    damage(cluster.data_dir(party) / "sessions" / f"{sid}.d")
    cluster.restart(party)
    th.join(300)
    assert not th.is_alive()
    return out


def _flip(path: Path, offset: int, bit: int = 0x01) -> None:
    raw = bytearray(path.read_bytes())
    raw[offset] ^= bit
    path.write_bytes(bytes(raw))


def _names(records: dict, culprit: str, code: str) -> None:
    for p, r in records.items():
        assert r["state"] == "failed", (p, r)
        assert r["error"]["origin"] == culprit, (p, r["error"])
        assert r["error"]["code"] == code, (p, r["error"])


def _check_result(record: dict) -> None:
    _, x_ref = plaintext_reference(_blocks())
    assert abs(np.dot(record["result"]["x"], x_ref)) >= 0.9999


# ---------------------------------------------------------------- a dead or silent initiator at its CLI
@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """Grace 5 s: how fast the CLI notices its party is gone."""
    tmp = tmp_path_factory.mktemp("cli")
    with LocalCluster(
        _parties(tmp), allow_insecure_keys=True, workdir=tmp / "run", peer_grace_seconds=5.0, open_policy=True
    ) as c:
        yield c


def _cli_start(cluster: LocalCluster, sid: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    args = [
        sys.executable,
        "-m",
        "smcdp",
        "session",
        "start",
        "--config",
        str(cluster.configs["trent"]),
        "--protocol",
        "power-iteration",
        "--session-id",
        sid,
        "--timeout",
        "3000",
        "--params",
        json.dumps(ENDLESS),
    ] + [a for r, p in ROLES.items() for a in ("--role", f"{r}={p}")]
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("fault", ["kill", "stop"])
def test_a_dead_or_silent_initiator_surfaces_at_its_cli_within_the_grace(quick, fault):
    cluster = quick
    sid = _sid()
    cli = _cli_start(cluster, sid)
    try:
        _wait_round(cluster, "trent", sid, 2)
        proc = cluster.procs["trent"]
        if fault == "kill":
            cluster.kill("trent")
        else:
            proc.send_signal(signal.SIGSTOP)
        t0 = time.monotonic()
        _, err = cli.communicate(timeout=60)  # before: about an hour (session_seconds + connect + 30)
        waited = time.monotonic() - t0
    finally:
        if cli.poll() is None:
            cli.kill()
        if fault == "stop":
            cluster.procs["trent"].send_signal(signal.SIGCONT)
        else:
            cluster.restart("trent")
    assert cli.returncode == 1, err
    assert waited < 5.0 + 15.0, (waited, err)
    assert "error [UNAVAILABLE]" in err and "party 'trent'" in err and "has not answered" in err, err
    # the wait said what bounds it before it began
    assert "gives up if party 'trent' does not answer for 5 s (peer_grace_seconds)" in err, err


# ---------------------------------------------------------------- damaged or missing state, each named
@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Grace 30 s: a party killed, damaged and restarted is back well within it."""
    tmp = tmp_path_factory.mktemp("faults")
    consoles = {"bob": ConsoleConfig(listen=f"127.0.0.1:{free_tcp_port()}", refresh_seconds=2, probe_seconds=5)}
    with LocalCluster(
        _parties(tmp),
        allow_insecure_keys=True,
        workdir=tmp / "run",
        peer_grace_seconds=30.0,
        consoles=consoles,
        open_policy=True,
    ) as c:
        yield c


def test_a_damaged_checkpoint_fails_its_session_not_the_party(cluster):
    sid = _sid()

    def damage(d: Path) -> None:
        text = (d / "checkpoint.json").read_text()
        (d / "checkpoint.json").write_text(text.replace('"running"', '"runninG"'))  # still JSON

    records = _kill_damage_restart(cluster, "bob", sid, 3, damage)
    _names(records, "bob", "FAILED_PRECONDITION")  # every party names bob
    assert cluster.procs["bob"].poll() is None  # bob runs (before: exit 2)
    st = client.get_status(cluster.configs["bob"], sid)
    assert st["state"] == "failed" and not st["resumable"]
    where = str(cluster.data_dir("bob") / "sessions" / f"{sid}.d" / "checkpoint.json")
    assert where in st["error"]["message"] and "party bob" in st["error"]["message"], st["error"]
    with urllib.request.urlopen(f"http://{cluster.consoles['bob'].listen}/", timeout=10) as r:
        page = r.read().decode()
    assert sid in page  # the console lists it
    # bob serves everything else: the next session succeeds
    again = cluster.run("power-iteration", ROLES, PARAMS, initiator="trent", timeout=300)
    assert {r["state"] for r in again.values()} == {"succeeded"}, again
    _check_result(again["trent"])


@pytest.mark.parametrize("party", ["alice", "trent"])
def test_a_deleted_checkpoint_directory_names_its_party(cluster, party):
    """The others' messages to it are refused ("no session"): the refusal names the refuser, not the
    sender (which used to record itself as the culprit)."""
    sid = _sid()
    records = _kill_damage_restart(cluster, party, sid, 3, lambda d: shutil.rmtree(d))
    assert records[party]["state"] == "unknown"  # it no longer knows the session ...
    for p in set(records) - {party}:  # ... and the others name it, not themselves
        assert records[p]["state"] == "failed" and records[p]["error"]["origin"] == party, (p, records[p])


def test_a_flipped_bit_in_root_key_is_named_not_replayed(cluster):
    sid = _sid()
    records = _kill_damage_restart(cluster, "alice", sid, 3, lambda d: _flip(d / "root.key", 9))
    _names(records, "alice", "FAILED_PRECONDITION")
    assert "root.key of party alice is damaged" in records["alice"]["error"]["message"], records["alice"]
    sessions = cluster.data_dir("alice") / "sessions"
    assert (sessions / f"{sid}.damaged").is_dir() and not (sessions / f"{sid}.d").exists()  # kept aside


def test_a_damaged_journal_record_fails_resumably_and_resume_repairs_it(cluster):
    sid = _sid()

    def damage(d: Path) -> None:  # the header of a message alice received from trent
        raw = (d / "journal.log").read_bytes()
        at = raw.find(b'"t":"reply/1"')
        assert at > 0
        _flip(d / "journal.log", at + 6)

    records = _kill_damage_restart(cluster, "alice", sid, 4, damage)
    _names(records, "alice", "DATA_LOSS")
    assert all(r["resumable"] for r in records.values()), records
    msg = records["alice"]["error"]["message"]
    assert "journal.log of party alice is damaged" in msg and "does not verify" in msg, msg
    assert "alice" in records["bob"]["error"]["message"]  # the others are told why
    rec = client.resume_session(cluster.configs["trent"], sid, timeout=300)
    assert rec["state"] == "succeeded"
    _check_result(rec)
    for p in ("alice", "bob"):
        assert cluster._record(p, sid, time.monotonic() + 60)["state"] == "succeeded"


def _journal_records(d: Path, sid: str) -> list:
    """The records of a party's journal, read with its durability key (as the party reads them)."""
    key = (d.parent / KEY_FILE).read_bytes()
    return journal.scan((d / "journal.log").read_bytes(), Mac(key, "journal", sid)).records


def test_a_journal_cut_short_behind_its_head_is_damage_and_resume_repairs_it(cluster):
    """A truncation at a record boundary used to be taken for a torn tail: the lost messages had been
    acknowledged, so the session hung until its deadline or failed with "sent a second, different message".
    Here alice's journal is cut, while she is down, before the last contribution she sent and trent
    acknowledged (with the message she received before it and whatever followed): the
    session fails resumably with DATA_LOSS naming her journal and the loss, and a resume completes it:
    her peers send again what she had received, and trent takes her recomputed contribution -- the same
    up to its encryption randomness -- for a duplicate of the one he holds."""
    sid = _sid()

    def damage(d: Path) -> None:
        recs = _journal_records(d, sid)
        # what the last sync covered (after it a cut is a torn tail, rightly dropped)
        _, _, durable = journal.HEAD.unpack((d / "journal.log.head").read_bytes()[: journal.HEAD.size])
        # from the last message she received before a contribution trent acknowledged on: she lost
        # records of both directions, and her replay's contribution has new encryption randomness
        acked = {r.tag for r in recs if r.kind == journal.DELIVERED}
        sent = [i for i, r in enumerate(recs) if r.kind == journal.OUT and r.tag in acked]
        sent = [i for i in sent if recs[i].offset + recs[i].length <= durable]
        cut = [r for r in recs[: sent[-1]] if r.kind == journal.IN][-1]
        raw = (d / "journal.log").read_bytes()
        start = raw.rfind(journal.REC_MAGIC, 0, cut.offset)
        (d / "journal.log").write_bytes(raw[:start])

    records = _kill_damage_restart(cluster, "alice", sid, 4, damage)
    _names(records, "alice", "DATA_LOSS")
    assert all(r["resumable"] for r in records.values()), records
    msg = records["alice"]["error"]["message"]
    assert "journal.log of party alice is damaged" in msg and "not a torn tail" in msg, msg
    rec = client.resume_session(cluster.configs["trent"], sid, timeout=300)
    assert rec["state"] == "succeeded", rec
    _check_result(rec)


def test_a_deleted_journal_is_named_not_recreated_empty(cluster):
    """Before, a deleted journal.log was silently recreated empty and the session lost what it held."""
    sid = _sid()
    records = _kill_damage_restart(cluster, "bob", sid, 3, lambda d: (d / "journal.log").unlink())
    _names(records, "bob", "DATA_LOSS")
    msg = records["bob"]["error"]["message"]
    assert "journal.log of party bob is damaged" in msg and "the journal is missing" in msg, msg
    assert not (cluster.data_dir("bob") / "sessions" / f"{sid}.d" / "journal.log").exists()


# ---------------------------------------------------------------- a full disk
def _mount_tmpfs(where: Path, size: str) -> None:
    where.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)],
            check=True,
            capture_output=True,
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {exc}")


def _fill(where: Path) -> Path:
    """Take every free byte of ``where``'s file system.  Unbuffered: with a buffered file, whether the ENOSPC
    of the last write was raised inside the loop or again when the ``with`` closed the file depended on how
    much space was left (on an 8-MiB tmpfs: with 1 or 4,096 bytes taken before, the close raised it; with
    5,000, not), and a fresh-clone run failed on it."""
    filler = where / "filler"
    fd = os.open(filler, os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        chunk = b"\0" * 65536
        while True:
            os.write(fd, chunk)  # a short write, then ENOSPC
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)
    return filler


@pytest.mark.parametrize("party", ["alice", "trent"])
def test_a_full_disk_is_named_at_every_party_and_resumable_once_space_is_back(tmp_path, party):
    root = tmp_path / "state"
    _mount_tmpfs(root / party, "8m")
    try:
        with LocalCluster(
            _parties(tmp_path),
            allow_insecure_keys=True,
            workdir=tmp_path / "run",
            data_root=root,
            peer_grace_seconds=30.0,
            open_policy=True,
        ) as c:
            sid = _sid()
            th, out = _start(c, sid)
            _wait_round(c, party, sid, 3)
            filler = _fill(root / party)
            th.join(300)
            records = out
            _names(records, party, "UNAVAILABLE")
            for p, r in records.items():
                assert f"no space left at {party}" in r["error"]["message"], (p, r["error"])
                assert r["resumable"], (p, r)
            filler.unlink()  # space is back
            rec = client.resume_session(c.configs["trent"], sid, timeout=300)
            assert rec["state"] == "succeeded"
            _check_result(rec)
    finally:
        subprocess.run(["umount", "-l", str(root / party)], capture_output=True)
