"""Running CPU-heavy chunks of a protocol step without starving the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any


async def run_offloaded(executor: Executor | None, fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args) in ``executor`` if given, else inline followed by a yield to other tasks."""
    if executor is None:
        res = fn(*args)
        await asyncio.sleep(0)  # let other tasks (transport, peers) run between chunks
        return res
    return await asyncio.get_running_loop().run_in_executor(executor, fn, *args)


async def run_chunked(
    executor: Executor | None, fn: Callable[..., list[Any]], arg_list: list[tuple[Any, ...]]
) -> list[Any]:
    """Run fn(*args) for every args (in a pool if given); flatten the results in order."""
    if executor is None:
        results = [await run_offloaded(None, fn, *args) for args in arg_list]
    else:
        results = await asyncio.gather(*(run_offloaded(executor, fn, *args) for args in arg_list))
    return [x for part in results for x in part]
