"""Asyncio helpers shared by every layer (imports nothing from smcdp).

:func:`all_or_first_failure` runs awaitables together and fails as soon as one of them fails, with that
failure unchanged.  ``asyncio.TaskGroup`` would wrap it in an ``ExceptionGroup``, and the runtime maps
the exception a session fails with to a gRPC status code by its type (:mod:`smcdp.errors`): a group
would turn a peer's INVALID_ARGUMENT into an internal error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any


async def all_or_first_failure(*aws: Awaitable[Any]) -> list[Any]:
    """Run ``aws`` concurrently and return their results, in order.

    On the first failure (in time) cancel the others, wait until every one has finished, and re-raise
    that failure as it is; later failures of the others are swallowed.  If the caller is cancelled, all
    of them are cancelled and awaited before the cancellation goes on."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
