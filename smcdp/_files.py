"""Durable file writes shared by every layer (imports nothing from smcdp).

``atomic_write`` creates a temporary file in the target's directory with the
final mode already set (so a private key is never readable by others, not
even for an instant), writes, fsyncs, renames over the target and fsyncs the
directory: after a crash either the old or the new file is there, never a
mixture or a truncated one.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

#: numpy parses a .npy header -- also each member of an .npz, read when the member is indexed -- with
#: ``ast.literal_eval``, and CPython 3.11's AST constructor is not thread-safe: two sessions' threads reading
#: arrays at once raised "SystemError: AST constructor recursion depth mismatch" (python/cpython#106905).  Every
#: ``np.load`` of the package, and every .npz member read, holds this lock; the data's copy may follow outside it.
NUMPY_HEADERS = threading.Lock()


def atomic_write(
    path: str | os.PathLike, data: bytes, mode: int = 0o644, *, replace: bool = True, sync_dir: bool = True
) -> Path:
    """Write ``path`` whole or not at all.  ``replace`` False: raise FileExistsError if it exists (also if
    another writer created it meanwhile: the first one wins, whole).  ``sync_dir`` False: the caller makes
    the directory's entries durable itself (one ``fsync`` of it after several files)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
            os.unlink(tmp)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    if sync_dir:
        fsync_dir(path.parent)
    return path


def fsync_dir(directory: str | os.PathLike) -> None:
    """Make the entries of ``directory`` (a file created, renamed or removed in it) durable."""
    dfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def atomic_write_json(path: str | os.PathLike, obj: Any, mode: int = 0o644, **dumps_kw) -> Path:
    dumps_kw.setdefault("indent", 2)
    return atomic_write(path, (json.dumps(obj, **dumps_kw) + "\n").encode("utf-8"), mode)


def npy_rows(path: str | os.PathLike) -> int:
    """The number of rows of a .npy array, from its header alone (memory-mapped, under ``NUMPY_HEADERS``)."""
    import numpy as np  # deferred: this module is imported by layers that need no numpy

    with NUMPY_HEADERS:
        return int(np.load(os.fspath(path), mmap_mode="r", allow_pickle=False).shape[0])
