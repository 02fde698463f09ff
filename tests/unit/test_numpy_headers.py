"""Every array file the package reads in a session's thread parses its header under one lock.

numpy parses a .npy header (and each .npz member's, as the member is read) with ``ast.literal_eval``, and
CPython 3.11's AST constructor is not thread-safe: twenty concurrent sessions' reads raised "SystemError: AST
constructor recursion depth mismatch" at a party in a .ci/run (python/cpython#106905).  The test makes each
parse slow and counts how many run at once while every reader runs in many threads."""

from __future__ import annotations

import ast
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from smcdp._files import npy_rows
from smcdp.compute.sources import open_matrix
from smcdp.errors import InvalidMessage
from smcdp.plugins.dp_aggregate import load_dataset
from smcdp.plugins.keyword import load_utterance
from smcdp.speech.features import load_features
from smcdp.speech.models import KeywordModels
from smcdp.speech.speaker import UBM


def test_every_array_reader_parses_headers_one_at_a_time(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    np.save(tmp_path / "m.npy", rng.normal(size=(256, 16)))
    np.save(tmp_path / "f.npy", rng.normal(size=(20, 39)))
    X = rng.normal(size=(30, 4))
    np.savez(tmp_path / "d.npz", X=X / (1 + np.linalg.norm(X, axis=1, keepdims=True)), y=np.sign(X[:, 0]))
    np.savez(tmp_path / "junk.npz", a=np.zeros(3), b=np.ones(2))  # read whole, then refused as a model
    src = open_matrix(tmp_path / "m.npy", block_values=256 * 4)

    def refused_model(load):
        def read():
            with pytest.raises(InvalidMessage):
                load(tmp_path / "junk.npz")

        return read

    readers = [
        lambda: src.load(src.blocks[0]).copy(),
        lambda: npy_rows(tmp_path / "f.npy"),
        lambda: load_features(tmp_path / "f.npy"),
        lambda: load_utterance(str(tmp_path / "f.npy")),
        lambda: load_dataset(tmp_path / "d.npz"),
        refused_model(KeywordModels.load),
        refused_model(UBM.load),
    ]

    inside, most, parses = [0], [0], [0]
    guard = threading.Lock()
    real = ast.literal_eval

    def slow_parse(text):
        if sys._getframe(1).f_code.co_name != "_read_array_header":  # e.g. numpy.ma's import-time signatures
            return real(text)
        with guard:
            inside[0] += 1
            parses[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.005)  # the window two threads' parses would overlap in
        try:
            return real(text)
        finally:
            with guard:
                inside[0] -= 1

    monkeypatch.setattr(ast, "literal_eval", slow_parse)
    with ThreadPoolExecutor(8) as pool:
        for f in [pool.submit(r) for r in readers * 4]:
            f.result()
    assert parses[0] >= 4 * len(readers) and most[0] == 1, (parses[0], most[0])


def test_a_party_process_imports_numpy_ma_before_its_session_threads():
    """numpy imports numpy.ma on first use, and that import parses builtin signatures with ast: in a session
    thread it would race with another thread's header parse.  A party process has it loaded at start."""
    import subprocess

    probe = "import sys, smcdp.runtime.party; print('numpy.ma' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "True"


def test_array_files_declaring_more_than_they_hold_are_refused_before_numpy_allocates(tmp_path):
    """check_array_sizes: a .npy header, or an .npz member's, that declares more data than the file (or, compressed,
    1,100 times its compressed size) can hold is refused naming the file; valid files pass.  A 200-byte file
    declaring 10^12 elements made np.load ask for 7 TiB (found by tests/unit/test_file_fuzz.py)."""
    import zipfile

    import numpy as np
    import pytest

    from smcdp._files import check_array_sizes

    np.save(tmp_path / "a.npy", np.arange(12.0).reshape(3, 4))
    np.savez(tmp_path / "b.npz", X=np.ones((3, 4)), y=np.arange(3))
    np.savez_compressed(tmp_path / "c.npz", X=np.zeros((300, 400)))  # 960 kB that deflate makes ~1 kB
    for name in ("a.npy", "b.npz", "c.npz"):
        check_array_sizes(tmp_path / name)
    raw = (tmp_path / "a.npy").read_bytes().replace(b"(3, 4)", b"(1000000,)")
    (tmp_path / "big.npy").write_bytes(raw)
    with pytest.raises(ValueError, match=r"big\.npy: its header declares 8000000 bytes of data"):
        check_array_sizes(tmp_path / "big.npy")
    # an .npz member whose header declares 10^12 float64s: stored, and compressed
    member = raw.replace(b"(1000000,)", b"(1000000000000,)")
    for kind in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        with zipfile.ZipFile(tmp_path / "m.npz", "w", kind) as z:
            z.writestr("X.npy", member)
        with pytest.raises(ValueError, match=r"m\.npz: X\.npy: its header declares 8000000000000 bytes"):
            check_array_sizes(tmp_path / "m.npz")
    obj = tmp_path / "o.npy"
    np.save(obj, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="object array"):
        check_array_sizes(obj)
