"""Pure per-block kernels, the deterministic tree reduction, and the crypto kernels.

Every engine runs exactly these functions, on the same canonical blocks (:mod:`smcdp.compute.sources`),
in float64 with **one BLAS thread** (a multi-threaded BLAS changes the order of its sums: measured
differences of 7e-12 between 1 and 2 OpenBLAS threads), and sums the per-block results with
:func:`tree_sum`.  That is why a local and a Dask run give bit-identical results.  Parallelism comes from
running blocks side by side, never from inside a kernel.

Kernels (A is one block, k × n_b; Q and U are k × b):

* :func:`gram_block`: Z_b = A (Aᵀ Q) and H_b = (Aᵀ Q)ᵀ (Aᵀ Q); the n_b × b product Aᵀ Q never leaves
  the kernel;
* :func:`clipped_gram_block`: Z_b = Ã (Ãᵀ Q) with every column of A scaled to norm at most C (the DP
  mode of power iteration), and how many columns were scaled;
* :func:`init_block`: A X₀ and the squared column norms of X₀, where X₀ (n_b × b) is Gaussian from
  SHAKE-256(stream key ‖ block index), so the start vector depends on the key and the block, not on
  which process computes which block or in which order;
* :func:`project_block`: Aᵀ U (n_b × r), the final blocks;
* :func:`frobenius_block`: ‖A‖_F² (and, through the finiteness check, that A holds no NaN or infinity).

The crypto kernels build a private key from (n, p, q) once per process (a per-session cache that
:func:`forget_key` clears) and encrypt or decrypt a chunk of integers.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Sequence

import numpy as np
from threadpoolctl import ThreadpoolController  # a dependency of scikit-learn, so always installed

from smcdp.compute.sources import Block, MatrixSource
from smcdp.crypto.paillier import PrivateKey, PublicKey
from smcdp.errors import InputRejected

#: fan-in of the reduction tree
FANIN = 8
#: the most columns one BLAS product sums in the DP kernel: a block's product is formed this many columns at a
#: time and the parts summed by the fixed tree, so that the rounding depth of a column sum is bounded by
#: :func:`reduction_depth` whatever a source's block width (the DP sensitivity's margin rests on it:
#: smcdp.protocols.power_iteration.fp_error_margin)
REDUCTION_CHUNK = 1024


# ----------------------------------------------------------------------------- randomness
def keyed_gaussian(stream_key: bytes, index: int, shape: tuple[int, int]) -> np.ndarray:
    """Standard normal values from SHAKE-256(stream_key ‖ index) by Box–Muller (53-bit uniforms).

    Reproducible from the key, independent of the order in which blocks are computed, and as
    unpredictable as the key (32 bytes from the protocol's randomness source)."""
    if len(stream_key) < 16:
        raise ValueError("the stream key must have at least 128 bits")
    count = int(shape[0]) * int(shape[1])
    pairs = (count + 1) // 2
    raw = hashlib.shake_256(bytes(stream_key) + int(index).to_bytes(8, "big", signed=True)).digest(16 * pairs)
    u = np.frombuffer(raw, dtype="<u8").reshape(pairs, 2) >> np.uint64(11)
    u1 = (u[:, 0].astype(np.float64) + 0.5) / 2.0**53  # in (0, 1): log is finite
    u2 = u[:, 1].astype(np.float64) / 2.0**53
    rad = np.sqrt(-2.0 * np.log(u1))
    z = np.concatenate([rad * np.cos(2 * np.pi * u2), rad * np.sin(2 * np.pi * u2)])
    return z[:count].reshape(shape)


#: block index of the padding part of X₀ (the k × b rows that multiply ρ_i I); data blocks are 0, 1, …
PADDING_STREAM_INDEX = -1


# ----------------------------------------------------------------------------- kernels
def gram_block(A: np.ndarray, Q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    W = A.T @ Q
    return A @ W, W.T @ W


def clip_columns(A: np.ndarray, clip: float) -> tuple[np.ndarray, np.ndarray]:
    """(Ã, over): every column a_j scaled to norm at most ``clip`` (Ã = A·diag(min(1, clip/‖a_j‖))) and the mask
    of the columns it shortens -- finite for every finite column: one whose sum of squares overflows (entries
    near 1e154 and up) becomes (a_j/m)·(clip/‖a_j/m‖) with m its largest magnitude (a scale of clip/‖a_j‖ itself
    would be subnormal there and lose the column's digits)."""
    norms = np.sqrt(np.einsum("ij,ij->j", A, A))
    over = norms > clip
    scale = np.ones_like(norms)
    scale[over] = clip / norms[over]
    At = A * scale
    big = np.flatnonzero(np.isinf(norms))
    if big.size:
        part = A[:, big]
        m = np.max(np.abs(part), axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):  # an infinite entry: a NaN the caller refuses
            unit = part / m
            At[:, big] = unit * (clip / np.sqrt(np.einsum("ij,ij->j", unit, unit)))
    return At, over


def clipped_gram_block(A: np.ndarray, Q: np.ndarray, clip: float) -> tuple[np.ndarray, np.ndarray]:
    # Ã first, then ÃᵀQ: every product stays within clip·‖q‖ -- (AᵀQ)·scale overflowed to inf·0 = NaN for a
    # finite column near 1e308, a refusal that one column decided (a review)
    At, over = clip_columns(A, clip)
    W = At.T @ Q
    return chunked_product(At, W), np.array([float(np.count_nonzero(over))])


def chunked_product(A: np.ndarray, W: np.ndarray) -> np.ndarray:
    """``A @ W`` over at most :data:`REDUCTION_CHUNK` columns of ``A`` at a time, the parts tree-summed as they come
    (:class:`TreeSum`: at most FANIN − 1 parts held a level, the floats of :func:`tree_sum`)."""
    w = A.shape[1]
    if w <= REDUCTION_CHUNK:
        return A @ W
    total = TreeSum()
    for i in range(0, w, REDUCTION_CHUNK):
        total.push(A[:, i : i + REDUCTION_CHUNK] @ W[i : i + REDUCTION_CHUNK])
    return total.result()


def _tree_levels(parts: int) -> int:
    """An upper bound on the levels of :func:`tree_sum` / :class:`TreeSum` over ``parts`` parts."""
    levels, reach = 0, 1
    while reach < parts:
        reach *= FANIN
        levels += 1
    return levels + 1  # TreeSum.result may carry a short group one level further


def reduction_depth(n: int) -> int:
    """The most floating-point additions any one product goes through in a column sum of ``n`` columns, as every
    engine computes it: at most REDUCTION_CHUNK − 1 inside one BLAS product, FANIN − 1 per level of the
    chunk tree inside a block and of the tree over blocks (a block holds at least one column)."""
    n = max(1, int(n))
    chunks = -(-n // REDUCTION_CHUNK)
    tree = min(n, REDUCTION_CHUNK) - 1 + (FANIN - 1) * (_tree_levels(chunks) + _tree_levels(n))
    return min(n - 1, tree)  # no product meets more additions than there are other terms


def init_block(A: np.ndarray, index: int, stream_key: bytes, b: int) -> tuple[np.ndarray, np.ndarray]:
    X0 = keyed_gaussian(stream_key, index, (A.shape[1], b))
    return A @ X0, np.einsum("ij,ij->j", X0, X0)


def project_block(A: np.ndarray, U: np.ndarray) -> np.ndarray:
    return A.T @ U


def frobenius_block(A: np.ndarray) -> np.ndarray:
    return np.array([np.vdot(A, A)])


class _OneBlasThread:
    """ "BLAS uses one thread" in this process from the first kernel on, for the process's life.

    Parallelism comes from the engine's block threads (or Dask workers, whose nanny starts them
    with one BLAS thread), each block's products run on one thread.  The limit is never lifted
    again: lifting it between passes and setting it again per block changed the results in the
    last bits (measured in bench/power_iteration_scale_bench.py: a cell run after another one
    differed from the Dask engine's by 1e-13 while a fresh process agreed bit for bit), and the
    engines promise the same floats.  Other numpy work of the process (the protocol's small
    matrices) runs on one BLAS thread too once a compute engine has run.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pinned = False
        self._limiter = None

    def __enter__(self) -> None:
        if self._pinned:
            return
        with self._lock:
            if not self._pinned:
                controller = ThreadpoolController()
                if any(lib.get("num_threads", 1) != 1 for lib in controller.info()):
                    self._limiter = controller.limit(limits=1)  # kept: never restored
                self._pinned = True

    def __exit__(self, *exc) -> None:
        return None


#: ``with one_blas_thread:`` around every kernel call
one_blas_thread = _OneBlasThread()


def apply_block(source: MatrixSource, block: Block, kernel: Callable, *args, index_arg: bool = False):
    """Load one block (into a per-thread buffer) and run ``kernel`` on it; outputs must be finite.

    ``index_arg``: pass the block index after the block (the keyed start vector needs it)."""
    A = source.load(block, reuse=True)
    with one_blas_thread:
        out = kernel(A, block.index, *args) if index_arg else kernel(A, *args)
    for o in out if isinstance(out, tuple) else (out,):
        if not np.all(np.isfinite(o)):
            raise InputRejected(
                "some columns of the data hold NaN or infinite values, or values too large for float64 products",
                f"{source.path}: columns {block.col0}..{block.col1 - 1}",
            )
    return out


# ----------------------------------------------------------------------------- reduction
def add(a, b):
    """Element-wise sum of two arrays or two tuples of arrays."""
    if isinstance(a, tuple):
        return tuple(x + y for x, y in zip(a, b, strict=True))
    return a + b


def sum_group(*group):
    """Left-to-right sum of one group of the tree."""
    acc = group[0]
    for g in group[1:]:
        acc = add(acc, g)
    return acc


def tree_sum(parts: Sequence, fanin: int = FANIN):
    """Sum consecutive groups of ``fanin`` left to right, then the group sums the same way, until one
    is left.  The order of additions depends only on the number of parts."""
    parts = list(parts)
    if not parts:
        raise ValueError("nothing to sum")
    while len(parts) > 1:
        parts = [sum_group(*parts[i : i + fanin]) for i in range(0, len(parts), fanin)]
    return parts[0]


class TreeSum:
    """:func:`tree_sum` computed as parts arrive (in order), holding at most fanin − 1 parts per level."""

    def __init__(self, fanin: int = FANIN) -> None:
        self.fanin = fanin
        self.levels: list[list] = []
        self.counts: list[int] = []

    def push(self, part, level: int = 0) -> None:
        while len(self.levels) <= level:
            self.levels.append([])
            self.counts.append(0)
        self.levels[level].append(part)
        self.counts[level] += 1
        if len(self.levels[level]) == self.fanin:
            group, self.levels[level] = self.levels[level], []
            self.push(sum_group(*group), level + 1)

    def result(self):
        if not self.counts:
            raise ValueError("nothing to sum")
        level = 0
        while True:
            items = self.levels[level]
            if self.counts[level] == 1:
                return items[0]
            if items:
                self.levels[level] = []
                self.push(sum_group(*items), level + 1)
            level += 1


# ----------------------------------------------------------------------------- crypto kernels
_KEYS: dict[str, PrivateKey] = {}
_KEYS_LOCK = threading.Lock()


def key_id(n: int) -> str:
    """A short public identifier of a key (SHA-256 of n): what may appear in task names and logs."""
    n = int(n)
    return hashlib.sha256(n.to_bytes((n.bit_length() + 7) // 8, "big")).hexdigest()[:32]


def private_key_of(material: tuple[int, int, int]) -> PrivateKey:
    """The private key for (n, p, q), built once per process and session key."""
    n, p, q = (int(v) for v in material)
    kid = key_id(n)
    with _KEYS_LOCK:
        sk = _KEYS.get(kid)
        if sk is None:
            sk = _KEYS[kid] = PrivateKey(PublicKey(n), p, q)
    return sk


def forget_key(kid: str) -> bool:
    """Drop the cached key (and its CRT tables) from this process."""
    with _KEYS_LOCK:
        return _KEYS.pop(kid, None) is not None


def encrypt_chunk(material: tuple[int, int, int], ints: Sequence[int]) -> list[int]:
    sk = private_key_of(material)
    return [int(sk.raw_encrypt(m)) for m in ints]


def decrypt_chunk(material: tuple[int, int, int], cts: Sequence[int]) -> list[int]:
    sk = private_key_of(material)
    return [sk.raw_decrypt_signed(c) for c in cts]


def chunks(seq: Sequence, size: int) -> list[list]:
    size = max(1, int(size))
    return [list(seq[i : i + size]) for i in range(0, len(seq), size)]
