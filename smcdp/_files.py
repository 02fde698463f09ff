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
import zipfile
import zlib
from pathlib import Path
from typing import Any

#: numpy parses a .npy header -- also each member of an .npz, read when the member is indexed -- with
#: ``ast.literal_eval``, and CPython 3.11's AST constructor is not thread-safe: two sessions' threads reading
#: arrays at once raised "SystemError: AST constructor recursion depth mismatch" (python/cpython#106905).  Every
#: ``np.load`` of the package, and every .npz member read, holds this lock; the data's copy may follow outside it.
NUMPY_HEADERS = threading.Lock()


def atomic_write(
    path: str | os.PathLike,
    data: bytes,
    mode: int = 0o644,
    *,
    replace: bool = True,
    sync_dir: bool = True,
    parents: bool = True,
) -> Path:
    """Write ``path`` whole or not at all.  ``replace`` False: raise FileExistsError if it exists (also if
    another writer created it meanwhile: the first one wins, whole).  ``sync_dir`` False: the caller makes
    the directory's entries durable itself (one ``fsync`` of it after several files).  ``parents`` False: a
    missing directory is FileNotFoundError, not made (a file whose directory was deleted under it -- a
    checkpoint's -- must not come back alone, in a directory of the umask's mode)."""
    path = Path(path)
    if parents:
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


def json_loads(data: str | bytes) -> Any:
    """``json.loads``, but a document nested past the interpreter's recursion limit is a ``json.JSONDecodeError``
    like any other malformed JSON, not a RecursionError (a state or key file nested 50,000 deep stopped a party's
    restart: found by tests/unit/test_file_fuzz.py)."""
    try:
        return json.loads(data)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", data if isinstance(data, str) else "", 0) from None


def npy_rows(path: str | os.PathLike) -> int:
    """The number of rows of a .npy array, from its header alone (memory-mapped, under ``NUMPY_HEADERS``)."""
    import numpy as np  # deferred: this module is imported by layers that need no numpy

    with NUMPY_HEADERS:
        return int(np.load(os.fspath(path), mmap_mode="r", allow_pickle=False).shape[0])


#: what reading a damaged .npy or .npz raises besides ValueError and OSError (numpy passes these through): every array
#: reader of the package catches :data:`ARRAY_ERRORS` and reports the file
ARRAY_ERRORS: tuple[type[BaseException], ...] = (
    ValueError,
    OSError,
    EOFError,
    zipfile.BadZipFile,
    zlib.error,
    KeyError,
)

#: deflate expands at most about 1,032-fold: an .npz member declaring more bytes than that many times its compressed
#: size cannot hold them (a damaged or hostile header), and is refused before numpy allocates what it declares
_MAX_DEFLATE_RATIO = 1100


def check_array_sizes(path: str | os.PathLike) -> None:
    """Refuse (``ValueError``, naming the file and the array) an .npy file, or an .npz member, whose header declares
    more data than the file can hold -- before ``np.load`` allocates it: a 200-byte file declaring 10^12 elements
    made numpy ask for 7 TiB (a MemoryError, which the session reported as this machine's own failure).  Object
    arrays are refused too (never unpickled).  A file that is neither is left to ``np.load``'s own checks."""
    from numpy.lib import format as npf  # deferred: this module is imported by layers that need no numpy

    def declared(f, name: str) -> int:
        version = npf.read_magic(f)
        if version == (1, 0):
            shape, _fortran, dtype = npf.read_array_header_1_0(f, max_header_size=10_000)
        elif version in ((2, 0), (3, 0)):
            shape, _fortran, dtype = npf.read_array_header_2_0(f, max_header_size=10_000)
        else:
            raise ValueError(f"{name}: unknown .npy format version {version}")
        if dtype.hasobject:
            raise ValueError(f"{name}: an object array (it would need unpickling)")
        count = 1
        for n in shape:
            count *= int(n)
        return count * dtype.itemsize

    p = os.fspath(path)
    with NUMPY_HEADERS, open(p, "rb") as f:
        magic = f.read(6)
        f.seek(0)
        if magic == b"\x93NUMPY":
            need = declared(f, p)
            have = os.fstat(f.fileno()).st_size - f.tell()
            if need > have:
                raise ValueError(f"{p}: its header declares {need} bytes of data, the file holds {have}")
            return
    if not zipfile.is_zipfile(p):
        return
    with NUMPY_HEADERS, zipfile.ZipFile(p) as z:
        for info in z.infolist():
            name = f"{p}: {info.filename}"
            with z.open(info) as m:
                if m.read(6) != b"\x93NUMPY":
                    continue  # not an array: np.load ignores it unless asked for it
            with z.open(info) as m:
                need = declared(m, name)
                header = m.tell() if m.seekable() else 0
            bound = info.compress_size * (1 if info.compress_type == zipfile.ZIP_STORED else _MAX_DEFLATE_RATIO)
            if need > info.file_size - header or need > bound:
                raise ValueError(
                    f"{name}: its header declares {need} bytes of data, the archive holds {info.file_size} "
                    f"({info.compress_size} compressed)"
                )
