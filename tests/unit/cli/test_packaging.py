"""What the wheel test (tests/packaging/wheel_test.sh) relies on, checked in the tree: the bundled demo
data, the version the entry point prints and the version the wheel is built with (issue 39)."""

import tomllib
from pathlib import Path

import numpy as np
import pytest

import smcdp
from smcdp.cli.app import build_parser
from smcdp.cli.demo.power_iteration import bundled_data

REPO = Path(__file__).resolve().parents[3]


def test_bundled_power_iteration_data_is_the_examples_data():
    paths = bundled_data()
    assert [Path(p).name for p in paths] == ["hospital_a.npy", "hospital_b.npy"]
    for p in paths:
        shipped = np.load(p)
        assert shipped.shape[0] == 30
        np.testing.assert_array_equal(shipped, np.load(REPO / "examples" / "data" / "power_iteration" / Path(p).name))


def test_version_flag_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"smcdp {smcdp.__version__}"


def test_package_version_matches_pyproject():
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert meta["project"]["version"] == smcdp.__version__
