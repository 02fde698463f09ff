"""The operator's client: talk to one's own party with one's own certificate.

``StartSession`` / ``GetResult`` are operator calls: the party accepts them
only from a caller holding the party's own certificate (docs/transport.md).
The ``smcdp session …`` and ``smcdp health`` commands are thin layers over
these functions.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import stat
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, cast

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from smcdp.errors import (
    DeadlineExceeded,
    SessionAborted,
    SmcdpError,
    Unavailable,
)
from smcdp.net.grpc_channel import (
    NotFound,
    channel_options,
    error_for_code,
    error_from_rpc,
    identity_hint,
    remote_failure,
)
from smcdp.net.server import (
    SESSION_FAILED_METADATA,
    namespaced,
    new_session_id,
)
from smcdp.net.tls import TlsMaterial, party_identity_name
from smcdp.runtime.config import PartyConfig, load_config, operator_socket
from smcdp.states import SessionState
from smcdp.v1 import transport_pb2 as tpb
from smcdp.v1 import transport_pb2_grpc as tgrpc

log = logging.getLogger("smcdp.client")

#: the words of gRPC's UNAVAILABLE for a call that was never sent: no connection to the server could be made
NOT_CONNECTED = "failed to connect to all addresses"


#: how long one connection attempt of an operator's call may take (TCP, the TLS handshake, HTTP/2's
#: settings).  gRPC takes it from ``grpc.min_reconnect_backoff_ms``, which the parties' own channels keep
#: at :data:`~smcdp.net.grpc_channel.PEER_CONNECT_MS` (their calls are retried within the grace).  An
#: operator's call is made once: with 200 ms (the parties' value then), a handshake with a party busy
#: computing on a loaded host failed the call ("connection attempt timed out before receiving SETTINGS
#: frame", "Handshake read failed") although the party was up -- so here it is gRPC's own default.
OPERATOR_CONNECT_MS = 20_000


def _operator_options(target: str) -> list[tuple[str, int | str]]:
    options: list[tuple[str, int | str]] = [
        (key, OPERATOR_CONNECT_MS if key == "grpc.min_reconnect_backoff_ms" else value)
        for key, value in channel_options()
    ]
    return options + [("grpc.ssl_target_name_override", party_identity_name(target))]


def _operator_address(config: PartyConfig, party: str | None = None) -> str:
    """Where this party's operator reaches ``party`` (default: this party): its own party through the unix
    socket in its data directory where this user may open it -- a connection flood on the TCP port does not
    lock the operator out -- else the configured address."""
    target = party or config.name
    sock = operator_socket(config) if target == config.name else None
    if sock is not None and _answers(sock):
        return f"unix:{sock}"
    return config.address_of(target)


def _answers(sock: Path) -> bool:
    """Is a process listening on the unix socket ``sock``, for this user?  (A socket left by a killed process,
    one this user may not open, or one across a mount that does not carry it -- a VM's bind mount, NFS --
    sends the operator to the TCP address instead.)"""
    try:
        if not stat.S_ISSOCK(os.stat(sock).st_mode):
            return False
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(1.0)
            s.connect(str(sock))
        return True
    except OSError:
        return False


def _operator_channel(config: PartyConfig, party: str | None = None) -> grpc.Channel:
    """A blocking channel to ``party`` (default: this party) with this party's certificate."""
    tls = TlsMaterial.load(config.tls.ca, config.tls.cert, config.tls.key)
    target = party or config.name
    creds = grpc.ssl_channel_credentials(tls.ca_pem, tls.key_pem, tls.cert_pem)
    return grpc.secure_channel(_operator_address(config, target), creds, options=_operator_options(target))


def _as_config(config: str | os.PathLike | PartyConfig) -> PartyConfig:
    return config if isinstance(config, PartyConfig) else load_config(config)


def start_session(
    config: str | os.PathLike | PartyConfig,
    protocol: str,
    roles: Mapping[str, str],
    params: Mapping[str, Any] | None = None,
    *,
    session_id: str | None = None,
    timeout: float | None = None,
    seed: int | None = None,
) -> dict:
    """Run a session with this party as initiator; return its durable record.

    Connects to the party's own server (address from its config) with the
    party's own certificate, so only its operator can do this.  Raises an
    :mod:`smcdp.errors` exception (code and message of the failure, e.g.
    :class:`~smcdp.errors.Unavailable` naming an unreachable party) if the
    session fails; the record stays available through :func:`get_result`.

    The wait follows the party's liveness as the parties follow each other's: if it
    does not answer for ``peer_grace_seconds`` (killed, paused, cut off) this raises
    Unavailable naming it.  A party that restarts within the grace resumes the session
    from its checkpoint, and this follows it to its end.
    """
    return begin_session(config, protocol, roles, params, session_id=session_id, timeout=timeout, seed=seed).result()


class StartCall:
    """A ``StartSession`` (or ``ResumeSession``) call in flight: the party runs the session while it is open.

    :meth:`wait` waits for the session's record (what :func:`start_session`
    returns, with the same errors), probing the party every ``poll`` seconds: a
    party silent for ``peer_grace_seconds`` ends the wait with Unavailable naming
    it.  :meth:`close` without waiting hangs up: the session runs on at the party
    (its proposals, approvals and rounds do not depend on the operator's call) and
    :func:`follow_session` finds its record later.
    """

    #: how often the call is made in all when it never left (no connection could be made) and the party,
    #: asked moments later, has no such session
    ATTEMPTS = 3

    def __init__(self, cfg: PartyConfig, method: str, request, session_id: str, end: float) -> None:
        self.config = cfg
        self.session_id = session_id
        self._end = end
        self._method = method
        self._request = request
        self._returned = threading.Event()  # set by the call's own completion: no polling for it
        self._outcome: tuple[dict | None, SmcdpError | None] | None = None
        #: when the party last answered (its call, or a probe): the liveness clock
        self.last_answer = time.monotonic()
        self.attempts = 0
        self._call()

    def _call(self) -> None:
        """Make the call (again) on a fresh connection."""
        self.attempts += 1
        self._returned.clear()
        self._channel = _operator_channel(self.config)
        self._future = getattr(tgrpc.ControlStub(self._channel), self._method).future(
            self._request, timeout=max(1.0, self._end - time.monotonic())
        )
        self._future.add_done_callback(lambda _f: self._returned.set())

    @property
    def grace(self) -> float:
        return float(self.config.timeouts.peer_grace_seconds)

    @property
    def seconds_left(self) -> float:
        """How long this call waits at most (the session's deadline and a margin)."""
        return max(0.0, self._end - time.monotonic())

    def done(self) -> bool:
        """True once the call has returned (the session ended, or the call failed)."""
        return self._outcome is not None or self._future.done()

    def result(self) -> dict:
        return self.wait()

    def wait(
        self, timeout: float | None = None, on_status: Callable[[dict], None] | None = None, poll: float = 1.0
    ) -> dict:
        """The session's record once it ended; its failure raised.  ``timeout``: DeadlineExceeded after
        that long (the session and the call run on); ``on_status``: each probe's GetStatus answer."""
        end = None if timeout is None else time.monotonic() + timeout
        # without a display to feed, a probe every sixth of the grace is enough to notice silence in time
        every = poll if on_status is not None else max(poll, self.grace / 6)
        while self._outcome is None:
            while not self.done():
                if end is not None and time.monotonic() >= end:
                    raise DeadlineExceeded(
                        f"session {self.session_id} did not end within {timeout:g} s (it is still running)"
                    )
                self._probe(on_status)
                _sleep_until(self, every if end is None else max(0.0, min(every, end - time.monotonic())))
            if on_status is not None and self._outcome is None:  # how it ended (the last round, the state)
                self._probe(on_status)
            if self._outcome is None:
                self._outcome = self._settle()  # None: the call was lost before the party heard of it, made again
        record, err = self._outcome
        if err is not None:
            raise err
        assert record is not None
        return record

    def _probe(self, on_status: Callable[[dict], None] | None) -> None:
        """GetStatus once: the party answered (even "no such session yet"), or it has been silent so long."""
        try:
            st = get_status(
                self.config, self.session_id, timeout=max(1.0, min(10.0, self.grace / 3)), channel=self._channel
            )  # the call's own connection: no handshake per probe
        except NotFound:
            self.last_answer = time.monotonic()
            return
        except (Unavailable, DeadlineExceeded) as exc:
            silent = time.monotonic() - self.last_answer
            if silent > self.grace and not self.done():
                self.close()
                self._outcome = (None, silent_party(self.config, self.session_id, silent, exc))
            return
        except SmcdpError:
            self.last_answer = time.monotonic()
            return
        self.last_answer = time.monotonic()
        if on_status is not None:
            on_status(st)

    def _settle(self) -> tuple[dict | None, SmcdpError | None] | None:
        """How the call ended: (record, None) or (None, error); None when it was made again."""
        unsent = False
        try:
            try:
                reply = self._future.result()
                return json.loads(reply.record_json), None
            except grpc.RpcError as exc:
                err = _client_error(exc, self.config, self._method)
                # gRPC's words for a call that never left: no connection to the party could be made
                unsent = exc.code() == grpc.StatusCode.UNAVAILABLE and NOT_CONNECTED in str(exc.details())
                if not isinstance(err, Unavailable) or isinstance(err, SessionAborted):
                    return None, err  # the session's outcome, not a lost call
            finally:
                self.close()
            try:
                return follow_session(self.config, self.session_id, self._end - time.monotonic(), lost=err), None
            except SmcdpError as exc:
                # the party answers, and has no such session, and the call never left (its connection could
                # not be made: under load, a handshake that timed out): nobody began the session.  The party
                # refuses a second session under the same id and takes a repeated call of a session it runs
                # for the same one, so the call is made again, a few times.  A call that did leave and was
                # cut (the party killed mid-call, say) is not repeated: a party that restarted without the
                # session (its state lost) must not begin it anew
                if not unsent or exc is not err or self.attempts >= self.ATTEMPTS or self._end - time.monotonic() < 1.0:
                    raise
                log.warning(
                    "%s at party %r was lost before it arrived (%s); calling again", self._method, self.config.name, err
                )
                self._call()
                return None
        except SmcdpError as exc:
            return None, exc

    def close(self) -> None:
        self._channel.close()


def _sleep_until(call: StartCall, seconds: float) -> None:
    """Sleep ``seconds``, or less: until the call returns (woken by it, not by polling)."""
    if call._outcome is None:
        call._returned.wait(max(0.0, seconds))


def silent_party(cfg: PartyConfig, session_id: str, silent: float, last: BaseException | None = None) -> Unavailable:
    """The wait for a session ends: this operator's own party has not answered for ``silent`` seconds."""
    exc = Unavailable(
        f"party {cfg.name!r} ({cfg.address_of(cfg.name)}), which runs session {session_id} for this operator, "
        f"has not answered for {silent:.0f} s (peer_grace_seconds = {cfg.timeouts.peer_grace_seconds:g}): it is "
        f"down, paused or cut off.  If it comes back, its checkpoint continues the session: 'smcdp session "
        f"status {session_id}' then tells how it stands" + (f" (last error: {last})" if last is not None else "")
    )
    exc.origin = cfg.name
    return exc


def wait_bound(cfg: PartyConfig, session_seconds: float | None = None) -> float:
    """How long waiting for a session takes at most: its deadline, the connection's and a margin."""
    return (session_seconds or cfg.timeouts.session_seconds) + cfg.timeouts.connect_seconds + 30.0


def begin_session(
    config: str | os.PathLike | PartyConfig,
    protocol: str,
    roles: Mapping[str, str],
    params: Mapping[str, Any] | None = None,
    *,
    session_id: str | None = None,
    timeout: float | None = None,
    seed: int | None = None,
) -> StartCall:
    """Start a session with this party as initiator without waiting; ``.wait()`` waits (see :class:`StartCall`)."""
    cfg = _as_config(config)
    # known here, so the session can be followed: in this party's namespace, as the party names it
    sid = namespaced(cfg.name, session_id or new_session_id(protocol))
    req = tpb.StartSessionRequest(
        protocol=protocol,
        roles=dict(roles),
        params_json=json.dumps(dict(params or {})),
        session_id=sid,
        timeout_seconds=timeout or 0,
    )
    if seed is not None:
        req.seed = seed
    return StartCall(cfg, "StartSession", req, sid, time.monotonic() + wait_bound(cfg, timeout))


def begin_resume(config: str | os.PathLike | PartyConfig, session_id: str, timeout: float | None = None) -> StartCall:
    """Continue a resumably failed session this party initiated, without waiting (see :class:`StartCall`)."""
    cfg = _as_config(config)
    return StartCall(
        cfg,
        "ResumeSession",
        tpb.SessionRef(session_id=session_id),
        session_id,
        time.monotonic() + wait_bound(cfg, timeout),
    )


def follow_session(
    config: str | os.PathLike | PartyConfig,
    session_id: str,
    timeout: float,
    lost: SmcdpError | None = None,
    poll: float = 0.5,
) -> dict:
    """Wait until ``session_id`` ends at this party (coming back after a restart); return its record.

    Raises the record's error if it failed, ``lost`` if the party never heard of the
    session, Unavailable naming the party if it does not answer for ``peer_grace_seconds``
    (or stays unreachable past ``timeout``).
    """
    cfg = _as_config(config)
    end = time.monotonic() + max(0.0, timeout)
    grace = float(cfg.timeouts.peer_grace_seconds)
    last: SmcdpError | None = lost
    last_answer = time.monotonic()
    while time.monotonic() < end:
        try:
            rec = get_result(cfg, session_id, timeout=max(1.0, min(10.0, grace / 3, end - time.monotonic())))
        except NotFound:
            if lost is not None:
                raise lost from None
            raise
        except (Unavailable, DeadlineExceeded) as exc:
            last = exc
            if time.monotonic() - last_answer > grace:
                raise silent_party(cfg, session_id, time.monotonic() - last_answer, last) from None
            time.sleep(poll)
            continue
        last_answer = time.monotonic()
        if rec.get("state") == SessionState.SUCCEEDED:
            return rec
        if rec.get("state") == SessionState.FAILED:
            e = rec.get("error") or {}
            code, origin = e.get("code", "INTERNAL"), e.get("origin")
            msg = f"session {session_id} failed: {e.get('message', '')}"
            if origin and origin != cfg.name:  # it started at another party: named, and typed by its code
                raise remote_failure(code, msg, origin)
            raise error_for_code(code, msg, origin)
        time.sleep(poll)
    raise Unavailable(
        f"session {session_id} at party {cfg.name!r} did not end within the wait of {timeout:.0f} s"
        + (f" (last error: {last})" if last is not None else "")
    )


def get_status(
    config: str | os.PathLike | PartyConfig, session_id: str, timeout: float = 10.0, channel: grpc.Channel | None = None
) -> dict:
    """How ``session_id`` stands at this party now: state, round, step, restarts, peers' liveness.
    ``channel``: an operator channel already open (no new TLS handshake), else one for this call."""
    cfg = _as_config(config)
    ch = channel or _operator_channel(cfg)
    try:
        reply = tgrpc.ControlStub(ch).GetStatus(tpb.SessionRef(session_id=session_id), timeout=timeout)
    except grpc.RpcError as exc:
        raise _client_error(exc, cfg, "GetStatus") from None
    finally:
        if channel is None:
            ch.close()
    return json.loads(reply.status_json)


def resume_session(config: str | os.PathLike | PartyConfig, session_id: str, timeout: float | None = None) -> dict:
    """Continue a session this party initiated that failed resumably; return its record when it ends
    (following the party's liveness as :func:`start_session` does)."""
    return begin_resume(config, session_id, timeout).result()


def get_result(config: str | os.PathLike | PartyConfig, session_id: str, timeout: float = 30.0) -> dict:
    """The record of ``session_id`` at this party (running, succeeded or failed)."""
    cfg = _as_config(config)
    with _operator_channel(cfg) as ch:
        try:
            reply = tgrpc.ControlStub(ch).GetResult(tpb.SessionRef(session_id=session_id), timeout=timeout)
        except grpc.RpcError as exc:
            raise _client_error(exc, cfg, "GetResult") from None
    return json.loads(reply.record_json)


def _control(cfg: PartyConfig, method: str, request, timeout: float):
    with _operator_channel(cfg) as ch:
        try:
            return getattr(tgrpc.ControlStub(ch), method)(request, timeout=timeout)
        except grpc.RpcError as exc:
            raise _client_error(exc, cfg, method) from None


def list_sessions(
    config: str | os.PathLike | PartyConfig, pending_only: bool = False, timeout: float = 30.0
) -> list[dict]:
    """Proposals (pending and decided) and sessions at this party, as dicts (docs/governance.md)."""
    cfg = _as_config(config)
    reply = _control(cfg, "ListSessions", tpb.ListSessionsRequest(pending_only=pending_only), timeout)
    return [json.loads(i.info_json) for i in reply.sessions]


def show_session(config: str | os.PathLike | PartyConfig, session_id: str, timeout: float = 30.0) -> dict:
    """What a proposal asks of this party (protocol, roles, parameters, initiator, epsilon) and its state."""
    cfg = _as_config(config)
    return json.loads(_control(cfg, "ShowSession", tpb.SessionRef(session_id=session_id), timeout).info_json)


def approve_session(config: str | os.PathLike | PartyConfig, session_id: str, timeout: float = 60.0) -> dict:
    """Approve a pending proposal (its privacy cost is reserved now; RESOURCE_EXHAUSTED if it does not fit)."""
    cfg = _as_config(config)
    req = tpb.DecisionRequest(session_id=session_id)
    return json.loads(_control(cfg, "ApproveSession", req, timeout).info_json)


def reject_session(
    config: str | os.PathLike | PartyConfig, session_id: str, reason: str, timeout: float = 60.0
) -> dict:
    """Reject a pending (or approved, not yet started) proposal; the initiator is told ``reason``."""
    cfg = _as_config(config)
    req = tpb.DecisionRequest(session_id=session_id, reason=reason)
    return json.loads(_control(cfg, "RejectSession", req, timeout).info_json)


def _client_error(exc: grpc.RpcError, cfg: PartyConfig, what: str) -> SmcdpError:
    try:
        # grpc-stubs type RpcError.trailing_metadata() as _Metadatum objects; grpc returns (key, value) pairs
        pairs = cast(Iterable[tuple[str, str | bytes]], exc.trailing_metadata() or ())
        session_failed = any(k == SESSION_FAILED_METADATA for k, _ in pairs)
    except Exception:  # noqa: BLE001 - errors raised before any response carry no metadata
        session_failed = False
    if exc.code() == grpc.StatusCode.UNAVAILABLE and not session_failed:
        return Unavailable(
            f"{what}: party {cfg.name!r} is not reachable at {_operator_address(cfg)}: {exc.details()}"
            + identity_hint(exc.details(), cfg.name)
        )
    return error_from_rpc(exc, f"{what} at party {cfg.name!r}", None, dialed=cfg.name)  # this party's own answer


def check_health(
    config: str | os.PathLike | PartyConfig, peer: str | None = None, timeout: float = 5.0, service: str = ""
) -> str:
    """grpc.health.v1 status of this party's server (or of ``peer``), e.g. ``"SERVING"``."""
    cfg = _as_config(config)
    with _operator_channel(cfg, peer) as ch:
        try:
            resp = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.RpcError as exc:
            raise error_from_rpc(exc, f"health check of {peer or cfg.name!r}", None, dialed=peer or cfg.name) from None
    return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)


def wait_healthy(config: str | os.PathLike | PartyConfig, peer: str | None = None, timeout: float = 30.0) -> None:
    """Block until the party (or ``peer``) answers SERVING; raise Unavailable after ``timeout``."""
    cfg = _as_config(config)
    end = time.monotonic() + timeout
    last = "no answer"
    while True:
        try:
            status = check_health(cfg, peer, timeout=max(0.5, min(5.0, end - time.monotonic())))
            if status == "SERVING":
                return
            last = status
        except SmcdpError as exc:
            last = str(exc)
        if time.monotonic() >= end:
            raise Unavailable(f"party {peer or cfg.name!r} not healthy within {timeout:g} s: {last}")
        time.sleep(0.2)
