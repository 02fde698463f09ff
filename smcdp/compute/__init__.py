"""Where a data party's compute runs: in its own process (``local``) or on its own Dask cluster (``dask``).

Why: a party's matrix may be larger than its process's memory and its crypto may need more cores
than its host has.  This package reads the matrix in canonical column blocks from where it is stored
(:mod:`~smcdp.compute.sources`), runs pure per-block kernels (:mod:`~smcdp.compute.kernels`) and batch
Paillier encryption/decryption on an engine (:mod:`~smcdp.compute.base`):

* :class:`~smcdp.compute.local.LocalEngine` (default): threads over blocks, crypto threads started once
  per party process (no worker processes, so the key stays in the party process);
* :class:`~smcdp.compute.dask_engine.DaskEngine`: tasks on the party's own Dask cluster (Dask is an
  optional extra, imported only when this engine starts).

Layering: ``compute`` sits beside ``net``/``dp``/``speech``.  It may import ``crypto``; protocols and
the layers above import it; it never imports ``net``, ``protocols`` or anything above.
"""

from __future__ import annotations

import threading

from smcdp._optional import require
from smcdp.compute.base import ComputeEngine, ComputeSession
from smcdp.compute.config import ComputeConfig, ComputeConfigError
from smcdp.compute.local import LocalEngine
from smcdp.compute.sources import ArraySource, Block, MatrixSource, open_matrix

__all__ = [
    "ArraySource",
    "Block",
    "ComputeConfig",
    "ComputeConfigError",
    "ComputeEngine",
    "ComputeSession",
    "LocalEngine",
    "MatrixSource",
    "close_engines",
    "engine_for",
    "make_engine",
    "open_matrix",
]


def make_engine(config: ComputeConfig | None = None) -> ComputeEngine:
    """A new engine for ``config`` (default: the local engine)."""
    config = config or ComputeConfig()
    if config.engine == "dask":
        require("dask", '[compute] engine = "dask"')
        from smcdp.compute.dask_engine import DaskEngine  # deferred: needs the optional Dask extra

        return DaskEngine(config)
    return LocalEngine(config.workers)


_ENGINES: dict[ComputeConfig, ComputeEngine] = {}
_ENGINES_LOCK = threading.Lock()


def engine_for(config: ComputeConfig | None) -> ComputeEngine:
    """The process's engine for ``config``: created on first use, shared by the process's sessions."""
    config = config or ComputeConfig()
    with _ENGINES_LOCK:
        engine = _ENGINES.get(config)
        if engine is None:
            engine = _ENGINES[config] = make_engine(config)
        return engine


async def close_engines() -> None:
    """Close every engine :func:`engine_for` created (the party process calls this when it stops)."""
    with _ENGINES_LOCK:
        engines = list(_ENGINES.values())
        _ENGINES.clear()
    for engine in engines:
        await engine.aclose()
