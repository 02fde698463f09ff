"""The console's HTTP server: aiohttp on the party's own event loop (issue 18).

Read-only: GET and HEAD only, no forms, no cookies, no JavaScript.  Every response says
``Cache-Control: no-store`` and a Content-Security-Policy that allows nothing but this
server's stylesheet, so a peer-supplied string that reached a page could not run or load
anything even if escaping failed.  File and ledger reads run in the loop's executor: a
scrape never holds up a delivery or a health check.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import logging
import ssl

from aiohttp import web

from smcdp.net.config import ConfigError, parse_address
from smcdp.net.tls import CertificateError, TlsMaterial
from smcdp.runtime.console import pages
from smcdp.runtime.console.config import ConsoleConfig
from smcdp.runtime.console.metrics import CONTENT_TYPE, PartyMetrics
from smcdp.runtime.console.readmodel import Observatory, PeerProber

log = logging.getLogger("smcdp.console")

HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; "
                               "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}


def console_ssl_context(cfg: ConsoleConfig, ca_path) -> ssl.SSLContext | None:
    """HTTPS for a console with ``[console.tls]``: its certificate must come from the federation's CA."""
    if cfg.tls is None:
        return None
    try:
        TlsMaterial.load(ca_path, cfg.tls.cert, cfg.tls.key)   # issued by [tls] ca, valid now, key matches
    except (CertificateError, OSError, ValueError) as exc:
        raise ConfigError(f"[console.tls]: {exc}") from None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(cfg.tls.cert), str(cfg.tls.key))
    return ctx


class Console:
    """The web console and /metrics of one party."""

    def __init__(self, party, observatory: Observatory) -> None:
        self.party = party
        self.cfg: ConsoleConfig = party.config.console
        self.obs = observatory
        self.metrics = PartyMetrics(observatory)
        self._runner: web.AppRunner | None = None
        self.port: int | None = None
        self.url: str | None = None

    # ---------------------------------------------------------------- lifecycle
    async def start(self) -> int:
        cfg = self.cfg
        host, port = parse_address(cfg.listen, "console.listen")
        sslctx = console_ssl_context(cfg, self.party.config.tls.ca)
        if not cfg.loopback and sslctx is None:
            log.warning("!!! console: serving plain HTTP on the non-loopback address %s (console.insecure_bind = "
                        "true): anyone who can reach it sees this party's sessions, peers and budgets",
                        cfg.listen)
        self.obs.prober = PeerProber(self.party.config, self.party.tls, cfg.probe_seconds)
        self.obs.prober.start()
        app = web.Application(middlewares=[_headers], client_max_size=4096)
        app.add_routes([
            web.get("/", self.sessions_page), web.get("/sessions", self.sessions_page),
            web.get("/sessions/{sid}", self.session_page), web.get("/peers", self.peers_page),
            web.get("/budgets", self.budgets_page), web.get("/audit", self.audit_page),
            web.get("/metrics", self.metrics_page), web.get("/static/console.css", self.css),
            web.get("/healthz", self.healthz), web.get("/favicon.ico", self.no_icon),
        ])
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, ssl_context=sslctx, reuse_address=True)
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            raise ConfigError(f"console: cannot listen on {cfg.listen}: {exc}") from None
        sock = site._server.sockets[0]   # the bound port (port 0 picks one)
        self.port = sock.getsockname()[1]
        scheme = "https" if sslctx is not None else "http"
        shown = f"[{host}]" if ":" in host else host
        self.url = f"{scheme}://{shown}:{self.port}/"
        log.info("console of party %s at %s (metrics at %smetrics)", self.party.name, self.url, self.url)
        return self.port

    async def stop(self) -> None:
        if self.obs.prober is not None:
            await self.obs.prober.stop()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ---------------------------------------------------------------- pages
    def _page(self, title: str, active: str, body: str) -> web.Response:
        now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        return web.Response(text=pages.page(title, self.party.name, active, body, self.cfg.refresh_seconds, now),
                            content_type="text/html", charset="utf-8")

    async def _blocking(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    async def sessions_page(self, request: web.Request) -> web.Response:
        return self._page("Sessions", "/", pages.sessions_body(await self._blocking(self.obs.sessions)))

    async def session_page(self, request: web.Request) -> web.Response:
        sid = request.match_info["sid"]
        s = await self._blocking(self.obs.session, sid)
        if s is None:
            raise web.HTTPNotFound(text=f"party {self.party.name} has no session {sid!r}", headers=HEADERS)
        return self._page(f"Session {sid}", "/", pages.session_body(s))

    async def peers_page(self, request: web.Request) -> web.Response:
        return self._page("Peers", "/peers", pages.peers_body(self.obs.peers(), self.obs.own_certificate(),
                                                             self.party.name))

    async def budgets_page(self, request: web.Request) -> web.Response:
        return self._page("Privacy budgets", "/budgets", pages.budgets_body(await self._blocking(self.obs.budgets)))

    async def audit_page(self, request: web.Request) -> web.Response:
        return self._page("Audit log", "/audit", pages.audit_body(await self._blocking(self.obs.audit)))

    async def metrics_page(self, request: web.Request) -> web.Response:
        body = await self._blocking(self.metrics.exposition)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

    async def css(self, request: web.Request) -> web.Response:
        return web.Response(text=pages.CSS, content_type="text/css", charset="utf-8")

    async def no_icon(self, request: web.Request) -> web.Response:
        return web.Response(status=204)   # browsers ask for one; answering 404 would log an error

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n", content_type="text/plain")


@web.middleware
async def _headers(request: web.Request, handler):
    if request.method not in ("GET", "HEAD"):
        raise web.HTTPMethodNotAllowed(request.method, ["GET", "HEAD"], headers=HEADERS)
    resp = await handler(request)
    resp.headers.update(HEADERS)
    return resp
