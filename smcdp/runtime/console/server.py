"""The console's HTTP server: aiohttp on the party's own event loop (why: docs/operations.md).

Read-only: GET and HEAD only, no forms, no cookies, no JavaScript.  Every response says
``Cache-Control: no-store`` and a Content-Security-Policy that allows nothing but this
server's stylesheet, so a peer-supplied string that reached a page could not run or load
anything even if escaping failed.  File and ledger reads run in the loop's executor: a
scrape never holds up a delivery or a health check.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import hmac
import logging
import os
import ssl
import stat
from http import HTTPStatus
from pathlib import Path
from typing import cast

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from cryptography.hazmat.primitives import hashes

from smcdp.net.config import ConfigError, parse_address
from smcdp.net.tls import CertificateError, TlsMaterial, load_certificates
from smcdp.runtime.console import pages
from smcdp.runtime.console.config import ConsoleConfig
from smcdp.runtime.console.metrics import CONTENT_TYPE, PartyMetrics
from smcdp.runtime.console.readmodel import Observatory, PeerProber
from smcdp.runtime.governance.gate import warnings_for

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
    """HTTPS for a console with ``[console.tls]``: its certificate must come from the federation's CA;
    clients present one from ``client_ca`` (required, or optional when a bearer token may stand in)."""
    if cfg.tls is None:
        return None
    try:
        # issued by [tls] ca, valid now, key matches; browsers check its host name, not a party identity
        TlsMaterial.load(ca_path, cfg.tls.cert, cfg.tls.key, party_identity=False)
        if cfg.tls.client_ca is not None:
            load_certificates(cfg.tls.client_ca)
    except (CertificateError, OSError, ValueError) as exc:
        raise ConfigError(f"[console.tls]: {exc}") from None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(cfg.tls.cert), str(cfg.tls.key))
    if cfg.tls.client_ca is not None:
        ctx.load_verify_locations(cafile=str(cfg.tls.client_ca))
        ctx.verify_mode = ssl.CERT_REQUIRED if cfg.token_file is None else ssl.CERT_OPTIONAL
    return ctx


def read_token(path) -> bytes:
    """The console's bearer token: at least 32 characters from a file only its owner can read."""
    try:
        mode = os.stat(path).st_mode
        token = Path(path).read_bytes().strip()
    except OSError as exc:
        raise ConfigError(f"console.token_file: {exc}") from None
    if mode & 0o077:
        raise ConfigError(
            f"console.token_file {path} is readable by others (mode {stat.S_IMODE(mode):o}); make it 0600"
        )
    if len(token) < 32 or not token.isascii() or not token.decode().isprintable() or b" " in token:
        raise ConfigError(
            f"console.token_file {path} must hold one token of at least 32 printable characters "
            "(e.g. 'python -c \"import secrets; print(secrets.token_urlsafe(32))\"')"
        )
    return token


#: what a client that has not authenticated may fetch: nothing about the party
PUBLIC_PATHS = frozenset({"/healthz", "/static/console.css", "/favicon.ico"})

#: the host names a plain-HTTP loopback console answers to (besides its listen address)
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def host_name(header: str) -> str:
    """The name of a Host header without its port (IPv6 literals without their brackets), lower case."""
    h = header.strip()
    if h.startswith("["):
        end = h.find("]")
        return h[1:end].lower() if end > 0 else "\x00"  # no name ever allowed
    if h.count(":") == 1:
        h = h.rsplit(":", 1)[0]
    return h.lower().rstrip(".")


def allowed_hosts(cfg: ConsoleConfig, tls: bool) -> frozenset[str] | None:
    """The Host names a console answers to: for a plain-HTTP loopback console its loopback names and its listen
    host -- any other name is a page of another site that had its name point at 127.0.0.1 (DNS rebinding) and
    would read this console as its own origin; None (any) where TLS makes a browser check the name itself, or
    where the console already answers everyone who can reach it (``insecure_bind``)."""
    if tls or not cfg.loopback or cfg.listen is None:
        return None
    return LOOPBACK_NAMES | {host_name(parse_address(cfg.listen, "console.listen")[0])}


class Gate:
    """Who may read the console: a client certificate issued by ``client_ca`` -- this
    party's own if ``client_ca`` is the federation's CA, which every member holds a certificate
    of -- or the bearer token.  Without ``[console.tls]`` and a token, a loopback console is open to
    whoever can connect on this host, as before."""

    def __init__(self, cfg: ConsoleConfig, party_name: str, federation_ca) -> None:
        self.party_name = party_name
        self.token = read_token(cfg.token_file) if cfg.token_file is not None else None
        client_ca = cfg.tls.client_ca if cfg.tls is not None else None
        self.certificates = client_ca is not None
        self.own_only = False
        if client_ca is not None:
            fed = {c.fingerprint(hashes.SHA256()) for c in load_certificates(federation_ca)}
            self.own_only = any(c.fingerprint(hashes.SHA256()) in fed for c in load_certificates(client_ca))

    @property
    def required(self) -> bool:
        return self.token is not None or self.certificates

    def admits(self, request: web.Request) -> bool:
        if not self.required or request.path in PUBLIC_PATHS:
            return True
        peer = request.transport.get_extra_info("peercert") if request.transport is not None else None
        if peer:  # verified by the TLS handshake against client_ca
            cns = [v for rdn in peer.get("subject", ()) for k, v in rdn if k == "commonName"]
            return not self.own_only or cns == [self.party_name]
        auth = request.headers.get("Authorization", "")
        if self.token is not None and auth.startswith("Bearer "):
            # aiohttp keeps header bytes that are not UTF-8 as surrogates: encode them back, never fail (a 500)
            return hmac.compare_digest(auth[7:].strip().encode("utf-8", "surrogateescape"), self.token)
        return False


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
        #: what the party warns about at start-up, on every page too (an open policy, seeds), so no operator misses them
        self.warnings = warnings_for(party.config)
        self.gate: Gate | None = None
        self.hosts: frozenset[str] | None = None  # set by start(): the Host names it answers to (None: any)

    # ---------------------------------------------------------------- lifecycle
    async def start(self) -> int:
        cfg = self.cfg
        host, port = parse_address(cfg.listen, "console.listen")
        sslctx = console_ssl_context(cfg, self.party.config.tls.ca)
        if not cfg.loopback and sslctx is None:
            log.warning(
                "!!! console: serving plain HTTP on the non-loopback address %s (console.insecure_bind = "
                "true): anyone who can reach it sees this party's sessions, peers and budgets",
                cfg.listen,
            )
        self.gate = Gate(cfg, self.party.name, self.party.config.tls.ca)
        if cfg.token_file is not None and sslctx is None and not cfg.loopback:
            log.warning("!!! console: the bearer token travels in plain HTTP on %s (console.insecure_bind)", cfg.listen)
        self.obs.prober = PeerProber(self.party.config, self.party.tls, cfg.probe_seconds)
        self.obs.prober.start()
        self.hosts = allowed_hosts(cfg, sslctx is not None)
        app = web.Application(middlewares=[_headers, self._same_host, self._authenticated], client_max_size=4096)
        app.on_response_prepare.append(_with_headers)  # the router's own 404 and any 500 too
        app.add_routes(
            [
                web.get("/", self.sessions_page),
                web.get("/sessions", self.sessions_page),
                web.get("/sessions/{sid}", self.session_page),
                web.get("/peers", self.peers_page),
                web.get("/budgets", self.budgets_page),
                web.get("/audit", self.audit_page),
                web.get("/metrics", self.metrics_page),
                web.get("/static/console.css", self.css),
                web.get("/healthz", self.healthz),
                web.get("/favicon.ico", self.no_icon),
            ]
        )
        self._runner = _Runner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, ssl_context=sslctx, reuse_address=True)
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            raise ConfigError(f"console: cannot listen on {cfg.listen}: {exc}") from None
        # the bound port (port 0 picks one); aiohttp types _server as AbstractServer | None, and once start()
        # returned it is the loop's listening asyncio.Server
        sock = cast(asyncio.Server, site._server).sockets[0]
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

    @web.middleware
    async def _same_host(self, request: web.Request, handler):
        """421 for a Host this console does not answer to (:func:`allowed_hosts`); a request without a Host
        (HTTP/1.0 tools) is served -- browsers always send one -- and so are the public paths, which say nothing
        about the party (a health probe may name the host as it likes)."""
        header = request.headers.get("Host")
        if (
            self.hosts is not None
            and header is not None
            and request.path not in PUBLIC_PATHS
            and host_name(header) not in self.hosts
        ):
            raise web.HTTPMisdirectedRequest(
                text="this console answers to its own address only (localhost, 127.0.0.1, ::1)\n", headers=HEADERS
            )
        return await handler(request)

    @web.middleware
    async def _authenticated(self, request: web.Request, handler):
        assert self.gate is not None  # start() sets it before the app that runs this middleware serves
        if not self.gate.admits(request):
            raise web.HTTPUnauthorized(
                text="authentication required\n",
                headers=dict(HEADERS, **{"WWW-Authenticate": 'Bearer realm="smcdp console"'}),
            )
        return await handler(request)

    # ---------------------------------------------------------------- pages
    def _page(self, title: str, active: str, body: str) -> web.Response:
        now = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
        return web.Response(
            text=pages.page(title, self.party.name, active, body, self.cfg.refresh_seconds, now, self.warnings),
            content_type="text/html",
            charset="utf-8",
        )

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
        return self._page(
            "Peers", "/peers", pages.peers_body(self.obs.peers(), self.obs.own_certificate(), self.party.name)
        )

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
        return web.Response(status=204)  # browsers ask for one; answering 404 would log an error

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n", content_type="text/plain")


async def _with_headers(request: web.Request, response: web.StreamResponse) -> None:
    response.headers.update(HEADERS)


class _Handler(RequestHandler):
    """aiohttp's connection handler, but a request its parser refuses (a bad method, framing, a NUL in a header)
    gets a bare status line with the console's headers: aiohttp's own page quotes the request's bytes back -- an
    Authorization header's token included -- and has none of the headers."""

    def handle_error(self, request, status=500, exc=None, message=None) -> web.StreamResponse:
        log.debug("console: refused a request (%s): %s", status, exc)
        if request.writer.output_size > 0:  # as aiohttp: part of a response went out, the connection is broken
            raise ConnectionError("a response was being sent when the request failed")
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = "Error"
        resp = web.Response(status=status, text=f"{status} {phrase}\n", headers=HEADERS)
        resp.force_close()
        return resp


class _Server(web.Server):
    def __call__(self) -> RequestHandler:
        return _Handler(self, loop=self._loop, **self._kwargs)


class _Runner(web.AppRunner):
    """An AppRunner whose connections use :class:`_Handler` (aiohttp makes its server in ``_make_server``; the
    instance's class is swapped rather than the server rebuilt, so every argument aiohttp passes it is kept)."""

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = _Server
        return server


@web.middleware
async def _headers(request: web.Request, handler):
    if request.method not in ("GET", "HEAD"):
        raise web.HTTPMethodNotAllowed(request.method, ["GET", "HEAD"], headers=HEADERS)
    resp = await handler(request)
    resp.headers.update(HEADERS)
    return resp
