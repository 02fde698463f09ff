"""The ``smcdp account`` and ``smcdp budget`` command contracts."""

from __future__ import annotations

import argparse
import json

import pytest

from smcdp.cli.dp import register


def _run(argv, capsys):
    parser = argparse.ArgumentParser(prog="smcdp")
    sub = parser.add_subparsers(dest="cmd", required=True)
    register(sub)
    args = parser.parse_args(argv)
    rc = args.func(args)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_budget_flow(tmp_path, capsys):
    L = ["--ledger", str(tmp_path / "cli.sqlite")]
    rc, out, _ = _run(["budget", "set", "adult", "--epsilon", "1", "--delta", "1e-5", *L], capsys)
    assert rc == 0 and "adult" in out
    rc, out, _ = _run(
        [
            "budget",
            "charge",
            "adult",
            "--epsilon",
            "0.75",
            "--delta",
            "1e-6",
            "--note",
            "mean age",
            *L,
        ],
        capsys,
    )
    assert rc == 0 and "remaining epsilon=0.25" in out
    rc, out, err = _run(["budget", "charge", "adult", "--epsilon", "0.5", *L], capsys)
    assert rc != 0 and "refused" in err and "remaining budget is epsilon=0.25" in err
    rc, out, _ = _run(["budget", "show", *L], capsys)
    assert rc == 0 and "adult" in out and "remaining_eps" in out and "0.25" in out
    rc, out, _ = _run(["budget", "show", "adult", *L], capsys)
    assert rc == 0 and "adult" in out
    rc, out, _ = _run(["budget", "history", "adult", *L], capsys)
    assert rc == 0 and "mean age" in out and "0.75" in out
    rc, _, err = _run(["budget", "history", "nobody", *L], capsys)
    assert rc != 0 and "no privacy budget" in err
    rc, _, err = _run(["budget", "charge", "nobody", "--epsilon", "0.1", *L], capsys)
    assert rc != 0 and "no privacy budget" in err


def test_cli_account(capsys):
    rc, out, _ = _run(
        [
            "account",
            "--method",
            "zcdp",
            "--delta",
            "1e-5",
            "--gaussian",
            "2:10",
            "--laplace",
            "4:8",
        ],
        capsys,
    )
    d = json.loads(out)
    assert rc == 0 and {"epsilon", "delta", "rho"} <= d.keys()
    assert d["rho"] == pytest.approx(10 / 8 + 8 / 32)
    for m in ("linear", "advanced", "rdp"):
        rc, out, _ = _run(
            [
                "account",
                "--method",
                m,
                "--delta",
                "1e-5",
                "--gaussian",
                "3:4",
                "--laplace",
                "10:2",
            ],
            capsys,
        )
        d = json.loads(out)
        assert rc == 0 and d["epsilon"] > 0 and d["delta"] == 1e-5
    rc, _, err = _run(["account", "--method", "rdp", "--delta", "1e-5"], capsys)
    assert rc != 0 and "nothing to account" in err
    with pytest.raises(SystemExit):
        _run(
            ["account", "--method", "rdp", "--delta", "1e-5", "--gaussian", "0:3"],
            capsys,
        )
    with pytest.raises(SystemExit):
        _run(["account", "--method", "rdp", "--delta", "2", "--laplace", "1:1"], capsys)


def test_cli_reservations(tmp_path, capsys):
    L = ["--ledger", str(tmp_path / "cli.sqlite")]
    assert _run(["budget", "set", "adult", "--epsilon", "1", "--delta", "1e-5", *L], capsys)[0] == 0
    rc, out, _ = _run(["budget", "reserve", "adult", "s1", "--epsilon", "0.6", "--note", "dp-aggregate", *L], capsys)
    assert rc == 0 and "reserved 'adult' key 's1'" in out and "(entry #1, reserved)" in out
    rc, _, err = _run(["budget", "reserve", "adult", "s2", "--epsilon", "0.5", *L], capsys)
    assert rc == 1 and "refused" in err and "open reservation" in err
    rc, out, _ = _run(["budget", "show", "adult", *L], capsys)
    header, _, row = out.splitlines()
    cols = dict(zip(header.split(), row.split()))
    assert cols["reserved_eps"] == "0.6" and cols["remaining_eps"] == "0.4" and cols["reservations"] == "1"
    rc, out, _ = _run(["budget", "history", "adult", *L], capsys)
    assert rc == 0 and "reserved" in out and "s1" in out and "by 1 open reservation(s)" in out
    rc, out, _ = _run(["budget", "commit", "adult", "s1", *L], capsys)
    assert rc == 0 and "(entry #1, charged)" in out
    rc, _, err = _run(["budget", "release", "adult", "s1", "--reason", "late", *L], capsys)
    assert rc == 1 and "already charged" in err
    _run(["budget", "reserve", "adult", "s3", "--epsilon", "0.2", *L], capsys)
    rc, out, _ = _run(["budget", "release", "adult", "s3", "--reason", "aborted", *L], capsys)
    assert rc == 0 and "released" in out
    rc, out, _ = _run(["budget", "history", "adult", *L], capsys)
    lines = out.splitlines()
    assert any("charged" in ln and "s1" in ln for ln in lines)
    assert any("released" in ln and "s3" in ln and "aborted" in ln for ln in lines)
    assert "remaining epsilon=0.4, delta=0.00001" in lines[-1]
    rc, _, err = _run(["budget", "commit", "adult", "nope", *L], capsys)
    assert rc == 1 and "no reservation" in err
    rc, _, err = _run(["budget", "reserve", "adult", " bad", "--epsilon", "0.1", *L], capsys)
    assert rc == 2 and "reservation key" in err
