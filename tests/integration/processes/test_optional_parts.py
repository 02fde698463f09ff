"""Optional parts that are missing say so before anything starts (issue 29).

Each test runs a command in a subprocess in which the optional packages are not importable
(tests/support/blocked_imports.py: a finder that refuses them, inherited by every process the
command starts) and checks the command stops at once with the part, the package and the
``pip install`` line -- no party process started, no session, nothing written.
"""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest
from scipy.io import wavfile

from smcdp.compute import ComputeConfig
from smcdp.runtime.console.config import ConsoleConfig
from smcdp.runtime.local import free_tcp_port, write_local_deployment
from tests.support.blocked_imports import run_without
from tests.support.paths import KEYWORD_DATA, REPO

DASK = ("dask", "distributed", "zarr")
PI_DATA = REPO / "examples" / "data" / "power_iteration"


def _error(res) -> str:
    return res.stdout + res.stderr


def test_the_blocker_really_hides_the_packages(tmp_path):
    # the simulation these tests rely on: the packages cannot be imported nor found, in the process
    # and in the processes it starts
    code = (
        "import importlib.util, subprocess, sys\n"
        "for m in ('dask', 'distributed', 'zarr'):\n"
        "    try:\n"
        "        importlib.util.find_spec(m); print('found', m)\n"
        "    except ModuleNotFoundError:\n"
        "        print('missing', m)\n"
        "sys.exit(subprocess.call([sys.executable, '-c', 'import dask']))\n"
    )
    res = run_without(tmp_path, DASK, ["-c", code])
    assert res.stdout.split("\n")[:3] == ["missing dask", "missing distributed", "missing zarr"], _error(res)
    assert res.returncode == 1 and "No module named 'dask'" in res.stderr


def test_demo_compute_dask_without_dask_says_pip_install_before_any_party_starts(tmp_path):
    keep = tmp_path / "keep"
    res = run_without(
        tmp_path,
        DASK,
        [
            "-m",
            "smcdp",
            "demo",
            "power-iteration",
            "--data",
            str(PI_DATA / "hospital_a.npy"),
            "--data",
            str(PI_DATA / "hospital_b.npy"),
            "--key-bits",
            "512",
            "--compute",
            "dask",
            "--keep-dir",
            str(keep),
            "--out",
            str(tmp_path / "pi.json"),
        ],
    )
    assert res.returncode == 2, _error(res)
    assert (
        "smcdp demo: error [FAILED_PRECONDITION]: --compute dask needs the Dask compute engine, but the "
        "Python packages 'dask', 'distributed' are not installed here: pip install 'smcdp[dask]'"
    ) in res.stderr
    assert "party processes up" not in _error(res) and "internal error" not in _error(res)
    assert not keep.exists() and not (tmp_path / "pi.json").exists()


def _deployment(tmp_path, **kw):
    return write_local_deployment(tmp_path / "d", ["alice", "bob"], allow_insecure_keys=True, **kw)


def test_a_party_configured_for_dask_refuses_to_start_without_it(tmp_path):
    cfgs = _deployment(tmp_path, compute={"alice": ComputeConfig(engine="dask", workers=2)})
    ready = tmp_path / "ready.json"
    res = run_without(
        tmp_path, DASK, ["-m", "smcdp", "party", "--config", str(cfgs["alice"]), "--ready-file", str(ready)], timeout=60
    )
    assert res.returncode == 1, _error(res)  # smcdp party's exit status for an error
    assert (
        'error [FAILED_PRECONDITION]: party alice: [compute] engine = "dask" needs the Dask compute engine, but the Python packages '
        "'dask', 'distributed' are not installed here: pip install 'smcdp[dask]'"
    ) in res.stderr
    assert not ready.exists()  # it never served


def test_a_party_with_a_console_refuses_to_start_without_aiohttp(tmp_path):
    cfgs = _deployment(tmp_path, consoles={"alice": ConsoleConfig(listen=f"127.0.0.1:{free_tcp_port()}")})
    ready = tmp_path / "ready.json"
    res = run_without(
        tmp_path,
        ("aiohttp",),
        ["-m", "smcdp", "party", "--config", str(cfgs["alice"]), "--ready-file", str(ready)],
        timeout=60,
    )
    assert res.returncode == 1, _error(res)
    assert (
        "error [FAILED_PRECONDITION]: party alice: [console] needs the web console, but the Python package 'aiohttp' is not installed "
        "here: pip install 'aiohttp>=3.9' 'prometheus-client>=0.20'"
    ) in res.stderr
    assert not ready.exists()


def test_a_local_cluster_names_the_missing_engine_before_it_spawns_a_party(tmp_path):
    code = textwrap.dedent(f"""
        import json, sys
        from smcdp._optional import MissingDependency
        from smcdp.compute import ComputeConfig, make_engine
        from smcdp.runtime.local import LocalCluster
        out = {{}}
        cluster = LocalCluster({{"trent": {{}}, "alice": {{}}}}, allow_insecure_keys=True,
                               workdir={str(tmp_path / "run")!r}, compute={{"alice": ComputeConfig(engine="dask")}})
        try:
            cluster.start()
        except MissingDependency as exc:
            out["cluster"] = [str(exc), sorted(cluster.procs)]
        finally:
            cluster.stop()
        try:
            make_engine(ComputeConfig(engine="dask"))   # what a role would call
        except MissingDependency as exc:
            out["engine"] = str(exc)
        print(json.dumps(out))
        """)
    res = run_without(tmp_path, DASK, ["-c", code])
    assert res.returncode == 0, _error(res)
    out = json.loads(res.stdout.strip().splitlines()[-1])
    message, spawned = out["cluster"]
    assert message.startswith('party alice: [compute] engine = "dask" needs the Dask compute engine')
    assert spawned == []  # no party process was started
    assert out["engine"].startswith('[compute] engine = "dask" needs the Dask compute engine')
    assert out["engine"].endswith("pip install 'smcdp[dask]'")


def test_demo_keyword_wav_without_the_feature_package_says_so_before_alice_starts(tmp_path):
    wav = tmp_path / "u.wav"
    wavfile.write(wav, 16000, (np.random.default_rng(0).normal(size=16000) * 3000).astype(np.int16))
    res = run_without(
        tmp_path,
        ("python_speech_features",),
        [
            "-m",
            "smcdp",
            "demo",
            "keyword",
            "--wav",
            str(wav),
            "--models",
            str(KEYWORD_DATA / "models.npz"),
            "--key-bits",
            "512",
            "--keep-dir",
            str(tmp_path / "keep"),
            "--out",
            str(tmp_path / "kw.json"),
        ],
    )
    assert res.returncode == 2, _error(res)
    assert (
        "smcdp demo: error [FAILED_PRECONDITION]: --wav needs speech features from WAV audio, but the Python "
        "package 'python_speech_features' is not installed here: pip install 'python-speech-features>=0.6'"
    ) in res.stderr
    assert not (tmp_path / "keep").exists()


def test_speech_train_without_hmmlearn_says_so_before_reading_anything(tmp_path):
    res = run_without(
        tmp_path,
        ("hmmlearn",),
        [
            "-m",
            "smcdp",
            "speech",
            "train",
            "--word",
            f"yes={tmp_path}",
            "--word",
            f"no={tmp_path}",
            "--out",
            str(tmp_path / "m.npz"),
        ],
    )
    assert res.returncode == 2, _error(res)
    assert (
        "smcdp speech: error [FAILED_PRECONDITION]: smcdp speech train needs HMM training from recordings, "
        "but the Python package 'hmmlearn' is not installed here: pip install 'hmmlearn"
    ) in res.stderr
    assert not (tmp_path / "m.npz").exists()


@pytest.mark.parametrize("script", ["exp_all.py", "exp_003_synthetic.py"])
def test_the_experiments_without_matplotlib_say_so_before_they_run(tmp_path, script):
    out = tmp_path / "exp"
    res = run_without(tmp_path, ("matplotlib",), [str(REPO / "examples" / script), "--tiny", "--out", str(out)])
    assert res.returncode == 1, _error(res)
    assert (
        f"error: examples/{script} needs the experiments' plots, but the Python package 'matplotlib' is not "
        "installed here: pip install 'smcdp[dev]'"
    ) in res.stderr
    assert not out.exists() or not list(out.iterdir())
