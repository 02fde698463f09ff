"""Raw calls at a party's boundary and hypothesis strategies for fuzzing it (issue 19).

Used by the status-code table and the short fuzz tests (tests/integration/grpc/test_boundary.py)
and by the long fuzz run (bench/fuzz_boundary.py).  Requests go out as *bytes* (the generic gRPC
client with no serializer), so anything -- valid messages, structured nonsense, garbage,
truncations -- reaches the server exactly as given.
"""

from __future__ import annotations

import json
import re

import grpc
from hypothesis import strategies as st

from smcdp.v1 import messages_pb2 as mpb
from smcdp.v1 import transport_pb2 as tpb

MAILBOX = "/smcdp.v1.Mailbox/"
HEALTH = "/grpc.health.v1.Health/"
CONTROL = "/smcdp.v1.Control/"
#: the only statuses that say "the server failed": never acceptable at the boundary
SERVER_FAILURES = {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN}


def spec_bytes(sid, protocol="net-echo", roles=None, params="{}", timeout=30.0, seed=None) -> bytes:
    """A serialized SessionSpec (a proposal's body); roles default to net-echo's a=alice, b=bob."""
    msg = tpb.SessionSpec(session_id=sid, protocol=protocol, params_json=params, timeout_seconds=timeout)
    for r, p in (roles if roles is not None else {"a": "alice", "b": "bob"}).items():
        msg.roles[r] = p
    if seed is not None:
        msg.seed = seed
    return msg.SerializeToString()


def envelope_bytes(sid, tag, data, type_name, total=None, count=1, index=0) -> bytes:
    """A serialized Envelope (one chunk of a message); ``total`` defaults to the chunk's own size."""
    return tpb.Envelope(
        session_id=sid,
        tag=tag,
        type_name=type_name,
        chunk_index=index,
        chunk_count=count,
        total_size=len(data) if total is None else total,
        data=data,
    ).SerializeToString()


def call_unary(
    channel: grpc.Channel, method: str, payload: bytes, timeout: float = 10.0
) -> tuple[grpc.StatusCode, str]:
    fn = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
    try:
        fn(payload, timeout=timeout)
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as exc:
        return exc.code(), exc.details() or ""


def call_deliver(channel: grpc.Channel, chunks: list[bytes], timeout: float = 10.0) -> tuple[grpc.StatusCode, str]:
    fn = channel.stream_unary(MAILBOX + "Deliver", request_serializer=None, response_deserializer=None)
    try:
        fn(iter(chunks), timeout=timeout)
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as exc:
        return exc.code(), exc.details() or ""


def call_stream(channel: grpc.Channel, chunks: list[bytes], timeout: float = 10.0) -> tuple[grpc.StatusCode, str, int]:
    """``Mailbox.Stream``: (status, details, Acks received before it ended)."""
    fn = channel.stream_stream(MAILBOX + "Stream", request_serializer=None, response_deserializer=None)
    acks = 0
    try:
        for _ in fn(iter(chunks), timeout=timeout):
            acks += 1
        return grpc.StatusCode.OK, "", acks
    except grpc.RpcError as exc:
        return exc.code(), exc.details() or "", acks


def nested_json(depth: int) -> str:
    return "[" * depth + "]" * depth


# ---------------------------------------------------------------------- strategies
_text = st.one_of(st.text(max_size=40), st.sampled_from(["", "s", "x" * 300, "a\nb", "\x00", "../x"]))
_sid = st.one_of(_text, st.sampled_from(["alice.fuzz-live", "alice.fuzz-none", "a" * 193]))
_u32 = st.one_of(st.integers(0, 8), st.integers(0, (1 << 32) - 1))
_u64 = st.one_of(st.integers(0, 64), st.integers(0, (1 << 64) - 1))
_json = st.one_of(
    st.just(""),
    st.just("{}"),
    st.just("[]"),
    st.just("null"),
    st.just('{"n": NaN}'),
    st.builds(nested_json, st.integers(1, 5000)),
    st.dictionaries(st.text(max_size=10), st.one_of(st.integers(), st.floats(), st.text(max_size=10)), max_size=5).map(
        json.dumps
    ),
    st.text(max_size=60),
)


@st.composite
def envelopes(draw, session_ids=_sid) -> bytes:
    env = tpb.Envelope(
        session_id=draw(session_ids),
        tag=draw(_text),
        type_name=draw(
            st.one_of(_text, st.sampled_from(["smcdp.v1.Floats", "smcdp.v1.CiphertextVector", "smcdp.v1.Blobs"]))
        ),
        chunk_index=draw(_u32),
        chunk_count=draw(_u32),
        total_size=draw(_u64),
        data=draw(st.binary(max_size=64)),
    )
    return env.SerializeToString()


@st.composite
def session_specs(draw) -> bytes:
    spec = tpb.SessionSpec(
        session_id=draw(_sid),
        protocol=draw(st.one_of(_text, st.sampled_from(["net-echo", "power-iteration", "dp-aggregate", "keyword"]))),
        params_json=draw(_json),
        timeout_seconds=draw(
            st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, 1.0, 1e9, -1.0]))
        ),
    )
    for role, party in draw(
        st.dictionaries(_text, st.one_of(_text, st.sampled_from(["alice", "bob", "zed"])), max_size=4)
    ).items():
        spec.roles[role] = party
    if draw(st.booleans()):
        spec.seed = draw(st.integers(-(1 << 63), (1 << 63) - 1))
    return spec.SerializeToString()


@st.composite
def abort_requests(draw) -> bytes:
    return tpb.AbortRequest(
        session_id=draw(_sid),
        code=draw(st.one_of(_text, st.sampled_from(["OK", "ABORTED", "INVALID_ARGUMENT", "ok", "CANCELLED"]))),
        message=draw(_text),
    ).SerializeToString()


def _bytes_list(max_items=4, max_size=64):
    return st.lists(st.binary(max_size=max_size), max_size=max_items)


#: every payload type the protocols exchange, as structured random messages
PAYLOADS = {
    "smcdp.v1.CiphertextVector": st.builds(
        lambda cts, e, n, s, b, fp: mpb.CiphertextVector(
            ciphertexts=cts, exponent=e, length=n, slots_per_ciphertext=s, slot_bits=b, key_fingerprint=fp
        ),
        _bytes_list(),
        st.integers(-(1 << 31), (1 << 31) - 1),
        _u32,
        _u32,
        _u32,
        st.binary(max_size=40),
    ),
    "smcdp.v1.PaillierPublicKey": st.builds(lambda n: mpb.PaillierPublicKey(n=n), st.binary(max_size=300)),
    "smcdp.v1.PaillierKeyPair": st.builds(
        lambda n, p, q: mpb.PaillierKeyPair(n=n, p=p, q=q),
        st.binary(max_size=80),
        st.binary(max_size=40),
        st.binary(max_size=40),
    ),
    "smcdp.v1.BigInts": st.builds(
        lambda m, s: mpb.BigInts(magnitude=m, negative=s), _bytes_list(), st.lists(st.booleans(), max_size=4)
    ),
    "smcdp.v1.Ints": st.builds(
        lambda v: mpb.Ints(values=v), st.lists(st.integers(-(1 << 63), (1 << 63) - 1), max_size=4)
    ),
    "smcdp.v1.Floats": st.builds(lambda v: mpb.Floats(values=v), st.lists(st.floats(), max_size=6)),
    "smcdp.v1.Flag": st.builds(lambda v: mpb.Flag(value=v), st.booleans()),
    "smcdp.v1.Blobs": st.builds(lambda v: mpb.Blobs(values=v), _bytes_list()),
    "smcdp.v1.Matrix": st.builds(
        lambda r, c, v: mpb.Matrix(rows=r, cols=c, values=v), _u32, _u32, st.lists(st.floats(), max_size=6)
    ),
    "smcdp.v1.Text": st.builds(lambda v: mpb.Text(value=v), _text),
}


def mutated(valid: bytes):
    """Garbage derived from a valid message: truncations, flipped bytes, appended junk."""
    return st.one_of(
        st.integers(0, max(0, len(valid) - 1)).map(lambda i: valid[:i]),
        st.tuples(st.integers(0, max(0, len(valid) - 1)), st.integers(1, 255)).map(
            lambda t: valid[: t[0]] + bytes([valid[t[0]] ^ t[1]]) + valid[t[0] + 1 :] if valid else b"\xff"
        ),
        st.binary(min_size=1, max_size=32).map(lambda junk: valid + junk),
    )


def mailbox_requests():
    """(method, payload or chunks) for any Mailbox RPC: structured, mutated or raw garbage."""
    valid_env = tpb.Envelope(
        session_id="alice.fuzz-live",
        tag="t",
        type_name="smcdp.v1.Flag",
        chunk_index=0,
        chunk_count=1,
        total_size=2,
        data=b"\x08\x01",
    ).SerializeToString()
    garbage = st.binary(max_size=200)
    deliver = st.lists(st.one_of(envelopes(), mutated(valid_env), garbage), min_size=0, max_size=3).map(
        lambda chunks: ("Deliver", chunks)
    )
    propose = st.one_of(session_specs(), garbage, mutated(tpb.SessionSpec(session_id="x").SerializeToString())).map(
        lambda b: ("Propose", b)
    )
    begin = st.one_of(st.builds(lambda s: tpb.SessionRef(session_id=s).SerializeToString(), _sid), garbage).map(
        lambda b: ("Begin", b)
    )
    abort = st.one_of(abort_requests(), garbage).map(lambda b: ("Abort", b))
    stream = st.lists(st.one_of(envelopes(), mutated(valid_env), garbage), min_size=0, max_size=4).map(
        lambda chunks: ("Stream", chunks)
    )
    return st.one_of(deliver, stream, propose, begin, abort)


def send(channel: grpc.Channel, request) -> tuple[grpc.StatusCode, str]:
    method, body = request
    if method == "Deliver":
        return call_deliver(channel, body)
    if method == "Stream":
        return call_stream(channel, body)[:2]
    return call_unary(channel, MAILBOX + method, body)


# ---------------------------------------------------------------------- a member holding idle calls (issue 24)
class StreamFlood:
    """``count`` idle ``Mailbox.Stream`` calls (or ``Health.Watch`` streams, ``method="watch"``) of one member
    (a valid certificate), kept up from a thread.

    ``method`` may also be ``"bound"`` -- a Stream that sends the first chunk of a two-chunk message of one
    of ``session_ids`` (the member's own admitted sessions) and then stalls -- or ``"propose"`` (a Propose of
    a fresh session with ``target`` that the member never begins), or a tuple of these: call ``i`` is of
    kind ``method[i % len(method)]``.

    Each call sends nothing; when the server ends one, it is opened again after ``reopen_delay`` seconds,
    so the flood lasts until :meth:`stop`.  The calls are spread over ``connections`` separate HTTP/2
    connections (gRPC allows ``limits.max_concurrent_streams`` per connection).  ``codes`` counts how the
    server ended them; ``open_now()`` is how many are open at this moment.
    """

    def __init__(
        self,
        certs,
        as_party: str,
        address: str,
        target: str,
        count: int = 520,
        connections: int = 5,
        reopen_delay: float = 0.5,
        method: str | tuple[str, ...] = "stream",
        session_ids: tuple[str, ...] = (),
    ) -> None:
        import asyncio
        import threading

        self.count, self.connections, self.reopen_delay = count, connections, reopen_delay
        #: "stream": idle Mailbox.Stream calls; "watch": grpc.health.v1 Health.Watch streams
        self.method = method
        self.session_ids, self.as_party = session_ids, as_party
        root = (certs / "ca.crt").read_bytes()
        self._creds = grpc.ssl_channel_credentials(
            root, (certs / f"{as_party}.key").read_bytes(), (certs / f"{as_party}.crt").read_bytes()
        )
        self.address, self.target = address, target
        self.codes: dict[str, int] = {}
        self.details: dict[str, str] = {}
        self.lifetimes: dict[str, list[float]] = {}
        #: how often each limit was named in a refusal ("limits.max_concurrent_rpcs": ...)
        self.rules: dict[str, int] = {}
        self._open = 0
        self._since: dict[int, float] = {}
        self._stop = None
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._main(),), daemon=True)

    def open_now(self) -> int:
        return self._open

    def held(self, seconds: float) -> int:
        """How many calls have been open for ``seconds`` or more: the ones the server admitted (a refused
        call ends as soon as the server answers it; calls just reopened are in flight, not held)."""
        import time

        now = time.monotonic()
        return sum(1 for t in list(self._since.values()) if now - t >= seconds)

    def held_steadily(self, seconds: float, samples: int = 5, every: float = 0.2) -> int:
        """The fewest calls :meth:`held` counts over ``samples`` looks ``every`` s apart.  A server that admits too
        many holds them in every look; a refusal answered late (the flood's own loop or the server starved for a
        moment on a loaded host) shows in one look only."""
        import time

        counts = []
        for k in range(samples):
            if k:
                time.sleep(every)
            counts.append(self.held(seconds))
        return min(counts)

    def start(self, timeout: float = 30) -> StreamFlood:
        self._thread.start()
        assert self._started.wait(timeout), "the flood did not start"
        return self

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    async def _main(self) -> None:
        import asyncio
        import time

        from smcdp.net.grpc_channel import channel_options
        from smcdp.net.tls import party_identity_name

        self._stop = asyncio.Event()
        opts = channel_options() + [
            ("grpc.ssl_target_name_override", party_identity_name(self.target)),
            ("grpc.use_local_subchannel_pool", 1),
        ]
        channels = [grpc.aio.secure_channel(self.address, self._creds, options=opts) for _ in range(self.connections)]
        for ch in channels:
            await ch.channel_ready()
        from grpc_health.v1 import health_pb2

        watch = health_pb2.HealthCheckRequest(service="").SerializeToString()
        stop = self._stop
        proposed = [0]

        async def stalled(sid: str):
            yield tpb.Envelope(
                session_id=sid, tag="stall", type_name="smcdp.v1.Flag", chunk_count=2, total_size=4, data=b"\x08\x01"
            ).SerializeToString()
            await stop.wait()

        def start(kind: str, ch, i: int):
            if kind == "watch":
                return ch.unary_stream(HEALTH + "Watch", request_serializer=None, response_deserializer=None)(watch)
            if kind == "bound":
                sid = self.session_ids[i % len(self.session_ids)]
                return ch.stream_stream(MAILBOX + "Stream", request_serializer=None, response_deserializer=None)(
                    stalled(sid)
                )
            if kind == "propose":
                proposed[0] += 1
                spec = tpb.SessionSpec(
                    session_id=f"{self.as_party}.flood-{proposed[0]}",
                    protocol="net-echo",
                    params_json="{}",
                    timeout_seconds=600.0,
                )
                spec.roles["a"], spec.roles["b"] = self.as_party, self.target
                return ch.unary_unary(MAILBOX + "Propose", request_serializer=None, response_deserializer=None)(
                    spec.SerializeToString()
                )
            return ch.stream_stream(MAILBOX + "Stream", request_serializer=None, response_deserializer=None)()

        kinds = (self.method,) if isinstance(self.method, str) else tuple(self.method)

        async def one(i: int) -> None:
            while not self._stop.is_set():
                call = start(kinds[i % len(kinds)], channels[i % len(channels)], i // len(kinds))
                self._open += 1
                t0 = self._since[i] = time.monotonic()
                try:
                    code = await call.code()
                    details = await call.details() or ""
                    self.details.setdefault(code.name, details)
                    for rule in set(re.findall(r"limits\.[a-z_]+", details)):
                        self.rules[rule] = self.rules.get(rule, 0) + 1
                finally:
                    self._open -= 1
                    self._since.pop(i, None)
                self.codes[code.name] = self.codes.get(code.name, 0) + 1
                self.lifetimes.setdefault(code.name, []).append(time.monotonic() - t0)
                try:
                    await asyncio.wait_for(self._stop.wait(), self.reopen_delay)
                except TimeoutError:
                    pass

        tasks = [asyncio.ensure_future(one(i)) for i in range(self.count)]
        await asyncio.sleep(1.0)  # every call has reached the server (or been refused)
        self._started.set()
        await self._stop.wait()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for ch in channels:
            await ch.close(grace=None)
