"""A party process started by smcdp.runtime.local.spawn_party runs the smcdp that started it, whatever the
working directory holds: ``python -m`` puts the working directory first on sys.path, and a benchmark that
compared two checkouts from one checkout's directory ran that checkout's parties for both."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import smcdp
import smcdp.runtime.local as local


def test_the_party_imports_this_smcdp_even_from_another_checkouts_directory(tmp_path, monkeypatch):
    other = tmp_path / "other-checkout"
    (other / "smcdp").mkdir(parents=True)
    (other / "smcdp" / "__init__.py").write_text("raise SystemExit('the wrong smcdp')\n")
    (other / "smcdp" / "__main__.py").write_text("raise SystemExit('the wrong smcdp')\n")
    (other / "cwd_plugin.py").write_text("")  # a plug-in module of the working directory's
    seen = {}

    class Popen:
        def __init__(self, args, env, **kw):
            seen["args"], seen["env"] = args, env

    monkeypatch.chdir(other)
    real = subprocess.Popen
    monkeypatch.setattr(local.subprocess, "Popen", Popen)
    local.spawn_party(tmp_path / "alice.toml")
    monkeypatch.setattr(local.subprocess, "Popen", real)
    args, env = seen["args"], seen["env"]
    assert args[:4] == [sys.executable, "-P", "-m", "smcdp"]
    # what that interpreter would import, asked of it the same way (-P, the same PYTHONPATH and directory)
    probe = subprocess.run(
        [sys.executable, "-P", "-c", "import smcdp, cwd_plugin; print(smcdp.__file__)"],
        env=env,
        cwd=other,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert probe.returncode == 0, probe.stderr
    assert Path(probe.stdout.strip()).resolve() == Path(smcdp.__file__).resolve()
    assert env["PYTHONPATH"].split(os.pathsep)[-1] == str(other)
