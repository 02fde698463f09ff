"""One party's link to another through the userspace proxy of ``bench/delay_proxy.py``, with faults switched
on and off while a session runs (a corrupted TLS stream, a one-way black hole).

:class:`ProxiedCluster` is a :class:`~smcdp.runtime.local.LocalCluster` in which, for each of its
``links`` (``src``, ``dst``), party ``src`` reaches party ``dst`` through a :class:`LinkProxy` of its own
(``src``'s configuration names the proxy's address for ``dst``); every other link is direct.  Each proxy
runs in an event loop of its own thread in the test process.  ``"up"`` on it is what ``src`` sends to
``dst``'s server (its messages, its heartbeats), ``"down"`` what comes back (the acknowledgements, the
heartbeat answers).
"""

from __future__ import annotations

import asyncio
import importlib
import sys
import threading
from dataclasses import replace

from smcdp.runtime.config import dump_config, load_config
from smcdp.runtime.local import LocalCluster
from tests.support.paths import REPO

if str(REPO / "bench") not in sys.path:
    sys.path.insert(0, str(REPO / "bench"))
delay_proxy = importlib.import_module("delay_proxy")


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


class LinkProxy:
    """A :class:`delay_proxy.DelayProxy` (without delay unless ``rtt`` seconds are given), in a thread of its
    own; faults set from any thread."""

    def __init__(self, rtt: float = 0.0) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="link-proxy")
        self.thread.start()
        # the target is filled in once the cluster's ports are known (LinkProxy.to)
        self.proxy = delay_proxy.DelayProxy(("127.0.0.1", 0), ("127.0.0.1", 0), rtt)
        self._call(self.proxy.start())
        assert self.proxy._server is not None
        self.port = self.proxy._server.sockets[0].getsockname()[1]

    def _call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def to(self, address: str) -> None:
        self.proxy.target = _address(address)

    def set_fault(self, direction: str, fault: str | None) -> None:
        """Apply ``fault`` to ``direction`` and return once it is in force: a test that goes on to let a party
        send (SIGCONT, say) must not race the proxy's thread, or under load a chunk slips through unfaulted."""

        async def apply() -> None:
            self.proxy.set_fault(direction, fault)

        self._call(apply())

    def faulted(self, direction: str) -> int:
        return self.proxy.faulted[direction]

    def close(self) -> None:
        self._call(self.proxy.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


class ProxiedCluster(LocalCluster):
    """A local cluster in which each of ``links`` (src, dst) goes through a proxy of its own,
    ``proxies[(src, dst)]`` (closed with the cluster)."""

    def __init__(self, parties, *, links: list[tuple[str, str]], **kw) -> None:
        super().__init__(parties, **kw)
        self.proxies = {link: LinkProxy() for link in links}

    @property
    def proxy(self) -> LinkProxy:
        """The proxy of a cluster with one proxied link."""
        [only] = self.proxies.values()
        return only

    def write_configs(self) -> None:
        super().write_configs()
        for src in {s for s, _ in self.proxies}:
            cfg = load_config(self.configs[src])
            peers = dict(cfg.peers)
            for (s, dst), proxy in self.proxies.items():
                if s == src:
                    proxy.to(cfg.peers[dst])
                    peers[dst] = f"127.0.0.1:{proxy.port}"
            dump_config(replace(cfg, peers=peers), self.configs[src])

    def stop(self, grace: float = 20.0) -> None:
        try:
            super().stop(grace)
        finally:
            for proxy in self.proxies.values():
                proxy.close()
