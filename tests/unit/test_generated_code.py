"""The committed protobuf/gRPC code must be what `make proto` generates from protos/."""

import filecmp
import subprocess
import sys

import pytest

from tests.support.paths import REPO as _REPO

ROOT = _REPO


def test_generated_code_is_fresh(tmp_path):
    pytest.importorskip("grpc_tools")
    protos = sorted((ROOT / "protos" / "smcdp" / "v1").glob("*.proto"))
    assert protos, "no .proto files found"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{ROOT / 'protos'}",
            f"--python_out={tmp_path}",
            f"--pyi_out={tmp_path}",
            f"--grpc_python_out={tmp_path}",
            *map(str, protos),
        ],
        check=True,
    )
    generated = sorted(p for p in (tmp_path / "smcdp" / "v1").iterdir() if p.is_file())
    assert generated
    stale = []
    for g in generated:
        committed = ROOT / "smcdp" / "v1" / g.name
        if not committed.exists() or not filecmp.cmp(g, committed, shallow=False):
            stale.append(g.name)
    assert not stale, f"generated code is stale; run `make proto` and commit: {stale}"
