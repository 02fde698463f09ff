"""A sender's wait that a session abort ends (``Mailbox.abortable``) and the connector's stubs: the transport's
per-message costs (bench/pingpong_plugin.py) without a task, a timer or a stub per message."""

import asyncio

import grpc
import pytest

from smcdp.errors import SessionAborted
from smcdp.net.channel import Mailbox
from smcdp.net.grpc_channel import PeerConnector


def test_an_abort_ends_the_wait_with_its_error_and_leaves_the_task_uncancelled():
    async def main():
        mb = Mailbox()
        started = asyncio.Event()

        async def slow():
            started.set()
            await asyncio.sleep(30)
            return "never"

        async def abort_soon():
            await started.wait()
            mb.abort(SessionAborted("aborted by bob", "ABORTED"))

        aborter = asyncio.ensure_future(abort_soon())
        with pytest.raises(SessionAborted, match="aborted by bob"):
            await asyncio.wait_for(mb.abortable(slow()), 10)
        await aborter
        task = asyncio.current_task()
        assert task.cancelling() == 0  # the abort's own cancellation was taken back
        await asyncio.sleep(0)  # and nothing is left to cancel the task at its next await
        assert mb._abort_callbacks == []

    asyncio.run(main())


def test_a_wait_that_ends_first_leaves_no_callback_and_an_aborted_mailbox_answers_at_once():
    async def main():
        mb = Mailbox()

        async def quick(x):
            await asyncio.sleep(0)
            return x

        assert await mb.abortable(quick(7)) == 7
        assert mb._abort_callbacks == []
        with pytest.raises(ValueError):

            async def fails():
                raise ValueError("its own error")

            await mb.abortable(fails())
        assert mb._abort_callbacks == []
        mb.abort(SessionAborted("gone", "ABORTED"))
        coro = quick(1)
        with pytest.raises(SessionAborted, match="gone"):
            await mb.abortable(coro)
        assert coro.cr_frame is None  # closed, not left unawaited

    asyncio.run(main())


def test_a_cancellation_from_elsewhere_is_a_cancellation_not_the_abort():
    async def main():
        mb = Mailbox()
        task = asyncio.ensure_future(mb.abortable(asyncio.sleep(30)))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert mb._abort_callbacks == []
        mb.abort(SessionAborted("later", "ABORTED"))  # nothing of the cancelled wait is called

    asyncio.run(main())


def test_the_connector_keeps_one_mailbox_stub_per_party():
    async def main():
        conn = PeerConnector.__new__(PeerConnector)  # no TLS material needed: the channels are given
        conn._channels = {p: grpc.aio.insecure_channel("127.0.0.1:9") for p in ("bob", "carol")}
        conn._mailboxes = {}
        bob = conn.mailbox("bob")
        assert conn.mailbox("bob") is bob and conn.mailbox("carol") is not bob
        await conn.close()
        assert conn._mailboxes == {}

    asyncio.run(main())
