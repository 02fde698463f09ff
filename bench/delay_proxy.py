"""A userspace TCP proxy that adds a fixed delay each way, for measuring protocols over a slow network.

``tc netem`` needs privileges and kernel modules this machine lacks; this does the part the benchmarks
need in plain asyncio.  Every listening address forwards to one target; every byte read in either
direction is written out ``rtt/2`` later, in order, so a request and its answer take one extra RTT,
and data that follows back to back (a pipelined stream) is delayed once, not once per message.
Bandwidth is not limited.  Loopback only: it refuses to listen on or forward to anything else.

The link-fault tests use the same proxy with ``rtt=0`` and a *fault* per direction, switched while it
runs (:meth:`DelayProxy.set_fault`): ``"up"`` is what the connecting side sends, ``"down"`` what it
receives.  ``"corrupt"`` flips one byte of every chunk passed on (inside a TLS stream: a record that
fails its authentication), ``"drop"`` passes nothing on and keeps the connection open (a black hole:
nothing arrives, nothing is refused).  :attr:`DelayProxy.faulted` counts the chunks a fault touched.

    python bench/delay_proxy.py --rtt-ms 50 --map 127.0.0.1:41001=127.0.0.1:40001 [--map ...]

prints ``ready`` once every listener is up and runs until SIGTERM.  :class:`DelayProxy` is the same in
a process's own event loop.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time

CHUNK = 256 * 1024
#: a direction of a proxied connection: what the connecting side sends ("up") or receives ("down")
DIRECTIONS = ("up", "down")
FAULTS = ("corrupt", "drop")


def _loopback(host: str) -> bool:
    return host in ("127.0.0.1", "::1", "localhost") or host.startswith("127.")


class DelayProxy:
    """Forward ``listen`` -> ``target`` (both ``(host, port)`` on loopback) with ``rtt/2`` added each way."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int], rtt: float) -> None:
        for host, _ in (listen, target):
            if not _loopback(host):
                raise ValueError(f"{host} is not a loopback address: this proxy sends traffic to loopback only")
        if rtt < 0:
            raise ValueError("the RTT cannot be negative")
        self.listen, self.target, self.delay = listen, target, rtt / 2
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task] = set()
        #: direction -> the fault applied to it now (None: bytes pass unchanged)
        self.faults: dict[str, str | None] = dict.fromkeys(DIRECTIONS)
        #: direction -> chunks a fault corrupted or dropped so far
        self.faulted: dict[str, int] = dict.fromkeys(DIRECTIONS, 0)

    def set_fault(self, direction: str, fault: str | None) -> None:
        """From now on apply ``fault`` ("corrupt", "drop" or None) to ``direction`` ("up" or "down") of every
        connection, open ones included.  Call it in the proxy's event loop (or between its iterations)."""
        if direction not in DIRECTIONS or (fault is not None and fault not in FAULTS):
            raise ValueError(f"direction must be one of {DIRECTIONS}, fault one of {FAULTS} or None")
        self.faults[direction] = fault

    def _apply(self, direction: str, data: bytes) -> bytes | None:
        """``data`` as the fault of ``direction`` lets it through (None: dropped)."""
        fault = self.faults[direction]
        if fault is None or not data:
            return data
        self.faulted[direction] += 1
        if fault == "drop":
            return None
        i = len(data) // 2
        return data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1 :]

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, *self.listen)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._tasks):
            t.cancel()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        for direction, src, dst in (("up", reader, up_writer), ("down", up_reader, writer)):
            task = asyncio.ensure_future(self._pump(direction, src, dst))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pump(self, direction: str, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        """Copy ``src`` to ``dst``, each chunk written ``delay`` after it was read (order kept), as the
        fault of ``direction`` lets it through."""
        queue: asyncio.Queue = asyncio.Queue()

        async def later() -> None:
            while True:
                due, data = await queue.get()
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                if data is None:
                    break
                passed = self._apply(direction, data)
                if passed is None:
                    continue
                dst.write(passed)
                await dst.drain()

        writer = asyncio.ensure_future(later())
        try:
            while True:
                data = await src.read(CHUNK)
                queue.put_nowait((time.monotonic() + self.delay, data or None))
                if not data:
                    break
            await writer
        except (ConnectionError, asyncio.CancelledError):
            writer.cancel()
        finally:
            try:
                dst.close()
            except RuntimeError:
                pass


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


async def _main(maps: list[tuple[tuple[str, int], tuple[str, int]]], rtt: float) -> None:
    proxies = [DelayProxy(a, b, rtt) for a, b in maps]
    for p in proxies:
        await p.start()
    print("ready", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    for p in proxies:
        await p.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rtt-ms", type=float, required=True, help="round-trip time to add (milliseconds)")
    ap.add_argument(
        "--map",
        action="append",
        required=True,
        metavar="LISTEN=TARGET",
        help="host:port to listen on = host:port to forward to (repeat)",
    )
    args = ap.parse_args()
    maps = []
    for m in args.map:
        listen, _, target = m.partition("=")
        maps.append((_address(listen), _address(target)))
    asyncio.run(_main(maps, args.rtt_ms / 1000.0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
