"""A data party's matrix where it is stored: a ``.npy`` file, a folder of ``.npy`` shards or a Zarr array.

A source never loads the whole matrix.  It describes the matrix (shape, dtype, size on disk) and a
**canonical block grid**: column blocks that depend only on the files and on ``block_values``, never on
the engine or the number of workers.  Every engine computes the same per-block partial results and sums
them in the same tree (:mod:`smcdp.compute.kernels`), so local and Dask results are bit-identical.

* ``.npy``: memory-mapped for the duration of one block's copy, then unmapped, so the file's pages
  leave the process's resident memory.  A Fortran-order file gives contiguous column blocks; a C-order
  one works too (k strided segments per block).
* a folder of ``.npy`` files: column blocks concatenated in file-name order.  Every shard must be a
  2-D numeric array with the same number of rows and the same dtype; pickled (object) arrays are
  refused.  A block never straddles two files.
* a Zarr array (a directory with ``zarr.json`` or ``.zarray``): blocks are whole Zarr chunks along the
  columns, so rechunk upstream to (k, c) for efficient reads.

A source pickles as its paths and grid only, so a Dask task that receives it reads its own columns on
the worker.  **Immutability**: every file's size and modification time is recorded when the source is
opened; :meth:`MatrixSource.load` checks the stamp of the file it reads and :meth:`verify` checks all of
them, so data that changes during a session fails the session (FAILED_PRECONDITION) instead of
silently mixing two versions.
"""

from __future__ import annotations

import hashlib
import math
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from smcdp._files import ARRAY_ERRORS, NUMPY_HEADERS, check_array_sizes
from smcdp._optional import require
from smcdp.errors import InputRejected, InvalidMessage, PreconditionFailed, local_failure

#: default canonical block size in matrix values (16 MB of float32 data, 32 MB as float64 in a kernel)
DEFAULT_BLOCK_VALUES = 4 << 20
#: smallest accepted block size (values)
MIN_BLOCK_VALUES = 1024

__all__ = [
    "DEFAULT_BLOCK_VALUES",
    "ArraySource",
    "Block",
    "DataChanged",
    "MatrixSource",
    "NpySource",
    "ShardSource",
    "ZarrSource",
    "open_matrix",
]


class DataChanged(PreconditionFailed):
    """A data file was modified, replaced or removed while a session was using it.

    Peers are told only that this party's data changed (``public_message``), never the path."""

    public_message = "the party's data changed during the session"


@dataclass(frozen=True)
class Block:
    """One canonical column block: columns [col0, col1) of the matrix, stored in file ``part``
    from its column ``pcol0`` on."""

    index: int
    col0: int
    col1: int
    part: int
    pcol0: int

    @property
    def width(self) -> int:
        return self.col1 - self.col0


_BUFFERS = threading.local()


def _buffer(rows: int, cols: int) -> np.ndarray:
    """A per-thread float64 buffer (kernels never keep a reference to their input block).

    Reusing it avoids a fresh multi-megabyte allocation per block, which costs page faults on every
    block where malloc returns large blocks to the OS at once (Dask's nanny sets
    ``MALLOC_TRIM_THRESHOLD_``).
    """
    need = rows * cols
    buf = getattr(_BUFFERS, "buf", None)
    if buf is None or buf.size < need:
        buf = _BUFFERS.buf = np.empty(need, dtype=np.float64)
    return buf[:need].reshape(rows, cols)


def _stamp(path: str) -> tuple[int, int]:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise DataChanged(f"data file {path} was removed during the session") from None
    return st.st_size, st.st_mtime_ns


def _grid(part_cols: list[int], k: int, block_values: int, multiple: int = 1) -> tuple[Block, ...]:
    """Split each part into near-equal pieces of at most ``block_values`` values (``multiple``: widths
    are whole multiples of it, e.g. a Zarr chunk width; the last piece of a part may be shorter)."""
    if not isinstance(block_values, int) or block_values < MIN_BLOCK_VALUES:
        raise InvalidMessage(f"block_values must be an integer >= {MIN_BLOCK_VALUES}, got {block_values!r}")
    width = max(1, block_values // k)
    blocks: list[Block] = []
    c = 0
    for pi, nc in enumerate(part_cols):
        if multiple > 1:
            w = max(multiple, (width // multiple) * multiple)
            edges = list(range(0, nc, w)) + [nc]
        else:
            pieces = max(1, math.ceil(nc / width))
            edges = [round(j * nc / pieces) for j in range(pieces + 1)]
        for a, b in zip(edges[:-1], edges[1:]):
            if b > a:
                blocks.append(Block(len(blocks), c + a, c + b, pi, a))
        c += nc
    return tuple(blocks)


def _check_numeric(dtype: np.dtype, where: str) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype.kind not in "fiu":
        raise InputRejected("data must be numeric (float or integer)", f"{where}: dtype {dtype}")
    return dtype


class MatrixSource:
    """A k × n matrix in column blocks (see the module docstring).  Subclasses implement ``_read``."""

    kind = "abstract"

    def __init__(
        self,
        path: str,
        k: int,
        part_cols: list[int],
        dtype: np.dtype,
        files: list[str],
        block_values: int,
        multiple: int = 1,
    ) -> None:
        if k < 1 or sum(part_cols) < 1:
            raise InputRejected("data must be a non-empty 2-D matrix", f"{path}: {k} × {sum(part_cols)}")
        self.path = str(path)
        self.k = int(k)
        self.n = int(sum(part_cols))
        self.shape = (self.k, self.n)
        self.dtype = dtype
        self.part_cols = list(part_cols)
        self.block_values = block_values
        self.blocks = _grid(self.part_cols, self.k, block_values, multiple)
        self.files = list(files)
        self._stamps = {f: _stamp(f) for f in self.files}

    @property
    def nbytes(self) -> int:
        """Size of the matrix as stored (values × item size)."""
        return self.k * self.n * self.dtype.itemsize

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r}, {self.k}×{self.n} {self.dtype}, {len(self.blocks)} blocks)"

    # ------------------------------------------------------------------ identity
    def fingerprint(self) -> str:
        """SHA-256 over the grid and every file's path, size and modification time."""
        h = hashlib.sha256(f"{self.kind}:{self.k}:{self.part_cols}:{self.dtype.str}:{self.block_values}".encode())
        for f in self.files:
            size, mtime = self._stamps[f]
            h.update(f"\0{f}:{size}:{mtime}".encode())
        return h.hexdigest()

    def verify(self) -> None:
        """Raise :class:`DataChanged` if any file changed since the source was opened."""
        for f, st in self._stamps.items():
            if _stamp(f) != st:
                raise DataChanged(f"data file {f} changed during the session (size or modification time)")

    def _check_part(self, files: list[str]) -> None:
        for f in files:
            if _stamp(f) != self._stamps[f]:
                raise DataChanged(f"data file {f} changed during the session (size or modification time)")

    # ------------------------------------------------------------------ reading
    def load(self, block: Block, *, reuse: bool = False) -> np.ndarray:
        """The block's columns as float64 (k × width), C order.  ``reuse``: into a per-thread buffer."""
        if not (0 <= block.index < len(self.blocks)) or self.blocks[block.index] != block:
            raise ValueError(f"{block} is not a block of {self!r}")
        out = _buffer(self.k, block.width) if reuse else np.empty((self.k, block.width), dtype=np.float64)
        self._read(block, out)
        return out

    def _read(self, block: Block, out: np.ndarray) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def to_dask(self):
        """The matrix as a chunked ``dask.array`` whose chunks are the canonical blocks (float64)."""
        import dask.array as da  # deferred: Dask is an optional extra (smcdp[dask])

        return da.from_array(
            _DaskView(self),
            chunks=((self.k,), tuple(b.width for b in self.blocks)),
            asarray=False,
            fancy=False,
            lock=False,
            inline_array=True,
            meta=np.empty((0, 0)),
        )


class _DaskView:
    """The ``__getitem__`` that ``dask.array.from_array`` calls: one canonical block per chunk."""

    def __init__(self, source: MatrixSource) -> None:
        self.source = source
        self.shape, self.ndim, self.dtype = source.shape, 2, np.dtype(np.float64)
        self._by_col0 = {b.col0: b for b in source.blocks}

    def __getitem__(self, idx):
        rows, cols = idx
        blk = self._by_col0.get(cols.start or 0)
        if blk is None or (cols.stop or self.source.n) != blk.col1:
            raise IndexError(f"{cols} is not a canonical block of {self.source!r}")
        return self.source.load(blk)[rows]


class ArraySource(MatrixSource):
    """An in-memory matrix (tests, small inputs): the same grid and kernels as a file."""

    kind = "array"

    def __init__(self, A, block_values: int = DEFAULT_BLOCK_VALUES, name: str = "<array>") -> None:
        A = np.asarray(A)
        if A.ndim != 2:
            raise InputRejected("data must be a non-empty 2-D matrix", f"shape {A.shape}")
        _check_numeric(A.dtype, name)
        self._array = A
        super().__init__(name, A.shape[0], [A.shape[1]], A.dtype, [], block_values)
        digest = hashlib.sha256(np.ascontiguousarray(A).tobytes()).hexdigest()
        self._digest = f"{A.dtype.str}:{A.shape}:{digest}"

    def fingerprint(self) -> str:
        return hashlib.sha256(f"{super().fingerprint()}:{self._digest}".encode()).hexdigest()

    def _read(self, block: Block, out: np.ndarray) -> None:
        np.copyto(out, self._array[:, block.col0 : block.col1], casting="safe")


class _NpyFiles(MatrixSource):
    """``.npy`` files, one per part; a block is a column range of one file, memory-mapped to copy it."""

    def _read(self, block: Block, out: np.ndarray) -> None:
        f = self.files[block.part]
        self._check_part([f])
        _copy_npy_columns(f, block.pcol0, block.width, out)


class NpySource(_NpyFiles):
    """One ``.npy`` file, memory-mapped per block."""

    kind = "npy"

    def __init__(self, path: str, block_values: int = DEFAULT_BLOCK_VALUES) -> None:
        shape, dtype = _npy_header(path)
        super().__init__(path, shape[0], [shape[1]], dtype, [str(path)], block_values)


class ShardSource(_NpyFiles):
    """A folder of ``.npy`` files: column blocks in file-name order."""

    kind = "shards"

    def __init__(self, path: str, block_values: int = DEFAULT_BLOCK_VALUES) -> None:
        folder = Path(path)
        files = sorted(str(p) for p in folder.iterdir() if p.suffix == ".npy" and p.is_file())
        if not files:
            raise InputRejected("the configured data folder holds no .npy shards", str(path))
        rows, dtypes, cols = set(), set(), []
        for f in files:
            shape, dtype = _npy_header(f)
            rows.add(shape[0])
            dtypes.add(dtype.str)
            cols.append(shape[1])
        if len(rows) != 1:
            raise InputRejected(
                "the data's shards have different numbers of rows; every shard must hold the same k rows (features)",
                f"{path}: {sorted(rows)}",
            )
        if len(dtypes) != 1:
            raise InputRejected("the data's shards have different dtypes", f"{path}: {sorted(dtypes)}")
        super().__init__(path, rows.pop(), cols, np.dtype(dtypes.pop()), files, block_values)


class ZarrSource(MatrixSource):
    """A Zarr array (v2 or v3 directory); blocks are whole Zarr chunks along the columns."""

    kind = "zarr"

    def __init__(self, path: str, block_values: int = DEFAULT_BLOCK_VALUES) -> None:
        z = _open_zarr(path)
        if len(z.shape) != 2:
            raise InputRejected("a Zarr data array must be 2-D", f"{path}: shape {z.shape}")
        dtype = _check_numeric(z.dtype, path)
        files = sorted(str(p) for p in Path(path).rglob("*") if p.is_file())
        super().__init__(path, z.shape[0], [z.shape[1]], dtype, files, block_values, multiple=z.chunks[1])
        self._meta = [f for f in self.files if os.path.basename(f) in ("zarr.json", ".zarray")]

    def _read(self, block: Block, out: np.ndarray) -> None:
        # the array's metadata is checked per block; chunk files by verify() after every pass
        self._check_part(self._meta)
        np.copyto(out, _open_zarr(self.path)[:, block.col0 : block.col1], casting="safe")


def _open_zarr(path: str):
    require("zarr", "a Zarr array as input")
    import zarr  # deferred: Zarr is an optional extra (smcdp[dask])

    try:
        return zarr.open_array(str(path), mode="r")
    except Exception as exc:  # zarr raises several unrelated types for a bad store
        if local_failure(exc):
            raise
        raise InputRejected("the configured data is not a readable Zarr array", f"{path}: {exc}") from None


def _open_npy(path: str) -> np.ndarray:
    # the header and memory map under numpy's lock (smcdp._files.NUMPY_HEADERS); copying columns is not
    with NUMPY_HEADERS:
        return np.load(path, mmap_mode="r", allow_pickle=False)


def _npy_header(path: str) -> tuple[tuple[int, int], np.dtype]:
    try:
        check_array_sizes(path)
        m = _open_npy(path)
    except FileNotFoundError:
        raise InputRejected("the configured data file does not exist", str(path)) from None
    except ARRAY_ERRORS as exc:
        if local_failure(exc):
            raise
        raise InputRejected("the data file is not a valid .npy array", f"{path}: {exc}") from None
    if not isinstance(m, np.ndarray):  # an .npz archive: np.load gave its members
        m.close()
        raise InputRejected("the data file is not a valid .npy array", f"{path}: an .npz archive")
    try:
        if m.ndim != 2:
            raise InputRejected("data must be a 2-D matrix", f"{path}: shape {m.shape}")
        return (int(m.shape[0]), int(m.shape[1])), _check_numeric(m.dtype, path)
    finally:
        del m


def _copy_npy_columns(path: str, col0: int, width: int, out: np.ndarray) -> None:
    m = _open_npy(path)
    np.copyto(out, m[:, col0 : col0 + width], casting="safe")
    # dropping the last reference unmaps the file now: its pages leave this process's resident memory
    # (the page cache may keep them)
    del m


def open_matrix(path: str | os.PathLike, *, block_values: int = DEFAULT_BLOCK_VALUES) -> MatrixSource:
    """A source for ``path``: a ``.npy`` file, a folder of ``.npy`` shards or a Zarr array directory."""
    p = Path(path)
    if p.is_dir():
        if (p / "zarr.json").exists() or (p / ".zarray").exists():
            return ZarrSource(str(p), block_values)
        return ShardSource(str(p), block_values)
    if not p.exists():
        raise InputRejected("the configured data file does not exist", str(p))
    return NpySource(str(p), block_values)
