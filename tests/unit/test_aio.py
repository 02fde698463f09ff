"""smcdp._aio.all_or_first_failure: results in order; the first failure unchanged, the others cancelled and
awaited; a cancelled caller cancels them all."""

from __future__ import annotations

import asyncio

import pytest

from smcdp._aio import all_or_first_failure
from smcdp.errors import InvalidMessage


def test_results_come_in_the_order_of_the_awaitables_not_of_completion():
    async def go():
        first_done = asyncio.Event()
        finished: list[str] = []

        async def slow():
            await first_done.wait()  # finishes only after `fast`
            finished.append("slow")
            return "slow"

        async def fast():
            finished.append("fast")
            first_done.set()
            return "fast"

        return await all_or_first_failure(slow(), fast(), asyncio.sleep(0, result=3)), finished

    results, finished = asyncio.run(go())
    assert results == ["slow", "fast", 3]
    assert finished == ["fast", "slow"]


def test_no_awaitables_give_no_results():
    assert asyncio.run(all_or_first_failure()) == []


def test_the_first_failure_propagates_unchanged_and_the_others_are_cancelled_and_awaited():
    failure = InvalidMessage("bad frame from bob")
    log: list[str] = []

    async def go():
        started = asyncio.Event()

        async def waits_forever():
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                log.append("cancelled")
                await asyncio.sleep(0)  # its clean-up awaits, and is waited for
                log.append("cleaned up")
                raise

        async def fails_after_the_other_started():
            await started.wait()
            raise failure

        async def fails_later_when_cancelled():
            try:
                await asyncio.Event().wait()
            finally:
                raise RuntimeError("a later failure of another awaitable")

        try:
            await all_or_first_failure(waits_forever(), fails_after_the_other_started(), fails_later_when_cancelled())
        finally:
            log.append("returned")

    with pytest.raises(InvalidMessage) as info:
        asyncio.run(go())
    assert info.value is failure  # the very exception: not wrapped, not a group
    assert info.value.code == "INVALID_ARGUMENT"  # so the session's status code is the failure's
    assert log == ["cancelled", "cleaned up", "returned"]


def test_a_cancelled_caller_cancels_every_awaitable_and_waits_for_them():
    log: list[str] = []

    async def go():
        running = asyncio.Semaphore(0)

        async def child(name: str):
            running.release()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                await asyncio.sleep(0)
                log.append(name)
                raise

        caller = asyncio.ensure_future(all_or_first_failure(child("a"), child("b")))
        for _ in range(2):
            await running.acquire()  # both children run
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        return sorted(log)

    assert asyncio.run(go()) == ["a", "b"]
