"""The CLI subcommands registered by smcdp.cli.party (driven through argparse in-process)."""

from __future__ import annotations

import argparse
import json
import stat
import time

import pytest

from smcdp.cli import party as party_cli
from tests.support.deployment import make_deployment


def run(argv):
    ap = argparse.ArgumentParser(prog="smcdp")
    sub = ap.add_subparsers(dest="cmd", required=True)
    party_cli.register(sub)
    args = ap.parse_args(argv)
    return args.func(args)


def test_certs_command(tmp_path, capsys):
    out = tmp_path / "certs"
    assert (
        run(["certs", "--out", str(out), "--parties", "alice,bob,trent", "--localhost", "--hosts", "trent=10.1.2.3"])
        == 0
    )
    for p in ("alice", "bob", "trent", "ca"):
        assert stat.S_IMODE((out / f"{p}.key").stat().st_mode) == 0o600
        assert (out / f"{p}.crt").exists()
    assert "trent:" in capsys.readouterr().out
    assert run(["certs", "--out", str(out), "--parties", "alice"]) == 2
    assert "refusing to overwrite" in capsys.readouterr().err
    assert run(["certs", "--out", str(tmp_path / "x"), "--parties", "alice,alice"]) == 2
    assert "unique" in capsys.readouterr().err
    assert run(["certs", "--out", str(tmp_path / "x"), "--parties", "alice", "--hosts", "bob=1.2.3.4"]) == 2
    assert run(["certs", "--out", str(out), "--parties", "dave", "--reuse-ca"]) == 0


def test_certs_refuses_a_host_list_that_puts_one_partys_name_in_anothers_certificate(tmp_path, capsys):
    out = tmp_path / "certs"
    assert run(["certs", "--out", str(out), "--parties", "alice,bob", "--hosts", "alice=bob"]) == 2
    assert "host 'bob' of party 'alice' is the name of party 'bob'" in capsys.readouterr().err
    assert run(["certs", "--out", str(out), "--parties", "alice,localhost", "--localhost"]) == 2
    assert "is the name of party 'localhost'" in capsys.readouterr().err
    assert not out.exists()


def test_session_and_health_commands(tmp_path, in_thread, capsys):
    cfgs = make_deployment(tmp_path, ["alice", "bob"])
    in_thread.start(cfgs["alice"])
    in_thread.start(cfgs["bob"])
    assert run(["health", "--config", str(cfgs["alice"]), "--peer", "bob", "--wait", "10"]) == 0
    assert capsys.readouterr().out.strip() == "SERVING"
    assert (
        run(
            [
                "session",
                "start",
                "--config",
                str(cfgs["alice"]),
                "--protocol",
                "net-echo",
                "--role",
                "a=alice",
                "--role",
                "b=bob",
                "--params",
                '{"n": 2}',
                "--session-id",
                "cli-1",
                "--timeout",
                "30",
            ]
        )
        == 0
    )
    rec = json.loads(capsys.readouterr().out)
    assert rec["state"] == "succeeded" and rec["result"]["y"] == [1.0, 3.0]
    out = tmp_path / "bob.json"
    deadline = time.monotonic() + 10
    while True:
        assert run(["session", "result", "--config", str(cfgs["bob"]), "--session-id", "cli-1", "--out", str(out)]) == 0
        if json.loads(out.read_text())["state"] == "succeeded":
            break
        assert time.monotonic() < deadline
    assert json.loads(out.read_text())["result"]["received"] == [0.5, 1.5]
    # failures: exit status and a message with the status code
    assert (
        run(
            [
                "session",
                "start",
                "--config",
                str(cfgs["alice"]),
                "--protocol",
                "net-echo",
                "--role",
                "a=alice",
                "--role",
                "b=bob",
                "--params",
                '{"fail_role": "a"}',
                "--timeout",
                "30",
            ]
        )
        == 2
    )
    failed = capsys.readouterr()
    assert "[INVALID_ARGUMENT]" in failed.err
    # and the failed session's record on stdout, as for a success: who failed, whether it can be resumed,
    # which participants never confirmed their output (issue 41: the JSON tells the operator)
    record = json.loads(failed.out)
    assert record["state"] == "failed" and record["error"]["code"] == "INVALID_ARGUMENT"
    assert record["error"]["origin"] == "alice" and "unconfirmed" in record and "resumable" in record
    assert run(["session", "start", "--config", str(cfgs["alice"]), "--protocol", "net-echo", "--role", "a-alice"]) == 2
    assert "ROLE=PARTY" in capsys.readouterr().err
    assert run(["session", "result", "--config", str(cfgs["alice"]), "--session-id", "nope"]) == 1
    assert "[NOT_FOUND]" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["health", "--config", "x.toml", "--wait", "0"],
        ["session", "start", "--config", "x", "--protocol", "p", "--timeout", "-1"],
    ],
)
def test_argument_validation(argv):
    with pytest.raises(SystemExit) as ei:
        run(argv)
    assert ei.value.code == 2
