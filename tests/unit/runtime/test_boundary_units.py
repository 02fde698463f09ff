"""Units of the party boundary (issue 19): [limits] and [logging] validation, admission, budgets,
bounded JSON, log lines that cannot be forged, private directories and files."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import stat
from types import SimpleNamespace

import pytest

from smcdp._files import atomic_write_json
from smcdp._text import printable
from smcdp.errors import InvalidMessage, ResourceExhausted
from smcdp.net.config import ConfigError, TlsConfig
from smcdp.net.grpc_channel import CLIENT_KEEPALIVE_MS
from smcdp.net.limits import CallQuotas, InboundBudget, Limits, TrafficEnvelope, bounded_json_object
from smcdp.net.server import SessionSpec, server_options
from smcdp.protocols.dp_aggregate import write_durable
from smcdp.runtime.config import LoggingConfig, PartyConfig, dump_config, load_config
from smcdp.runtime.limits import begin_wait_seconds, check_begin, check_proposal, check_resume, fair_share
from smcdp.runtime.logs import JsonLines, _OneLine, private_dir
from smcdp.runtime.states import Phase

BASE = """
[party]
name = "alice"
listen = "127.0.0.1:50051"
data_dir = "state"

[tls]
ca = "ca.crt"
cert = "alice.crt"
key = "alice.key"
"""


def _load(tmp_path, extra=""):
    p = tmp_path / "alice.toml"
    p.write_text(BASE + extra)
    return load_config(p)


# ----------------------------------------------------------------------------- configuration
def test_limits_defaults_and_values(tmp_path):
    cfg = _load(tmp_path)
    assert cfg.limits == Limits() and cfg.logging == LoggingConfig()
    cfg = _load(
        tmp_path,
        "[limits]\npending_per_peer = 2\nproposal_grace_seconds = 30\nmax_message_mib = 8\n"
        '[logging]\nformat = "json"\nlevel = "debug"\n',
    )
    assert cfg.limits.pending_per_peer == 2 and cfg.limits.proposal_grace_seconds == 30.0
    assert cfg.max_message_bytes == 8 << 20
    assert cfg.logging == LoggingConfig("json", "DEBUG")


@pytest.mark.parametrize(
    "extra, message",
    [
        ("[limits]\npending_per_peer = 0\n", r"limits.pending_per_peer must be an integer in \[1, "),
        ("[limits]\npending_per_peer = true\n", "limits.pending_per_peer"),
        ("[limits]\nproposal_grace_seconds = 0.5\n", "limits.proposal_grace_seconds"),
        ("[limits]\nmax_session_seconds = 1e9\n", "limits.max_session_seconds"),
        ("[limits]\nslots = 3\n", r"unknown key\(s\) in \[limits\]: slots"),
        ("[limits]\npending_per_peer = 20\npending_total = 10\n", "cannot exceed limits.pending_total"),
        ("[limits]\nmax_message_mib = 64\nmax_session_mib = 32\n", "cannot exceed limits.max_session_mib"),
        ("[limits]\nmax_message_mib = 64\n[party2]\n", "unknown key"),
        ("[limits]\ncalls_per_peer = 600\n", "each must be at most the one before it"),
        ("[limits]\ncalls_per_session = 200\n", "each must be at most the one before it"),
        ("[limits]\nidle_calls_per_peer = 200\n", "each must be at most the one before it"),
        ("[limits]\ncall_idle_seconds = 0\n", "limits.call_idle_seconds"),
        ("[limits]\noperator_calls = 1\n", r"limits.operator_calls must be an integer in \[4, "),
        ("[limits]\ninbound_mib_per_peer = 9\ninbound_mib_total = 8\n", "cannot exceed limits.inbound_mib_total"),
        ('[logging]\nformat = "xml"\n', "logging.format"),
        ('[logging]\nlevel = "LOUD"\n', "logging.level"),
    ],
)
def test_invalid_limits_and_logging_are_named(tmp_path, extra, message):
    with pytest.raises(ConfigError, match=message):
        _load(tmp_path, extra)


def test_legacy_max_message_mib_and_round_trip(tmp_path):
    p = tmp_path / "legacy.toml"
    p.write_text(BASE.replace('data_dir = "state"', 'data_dir = "state"\nmax_message_mib = 16'))
    assert load_config(p).limits.max_message_mib == 16
    p.write_text(
        BASE.replace('data_dir = "state"', 'data_dir = "state"\nmax_message_mib = 16')
        + "[limits]\nmax_message_mib = 16\n"
    )
    with pytest.raises(ConfigError, match="both set"):
        load_config(p)
    full = PartyConfig(
        name="bob",
        listen="127.0.0.1:1",
        data_dir=tmp_path / "d",
        tls=TlsConfig(tmp_path / "a", tmp_path / "b", tmp_path / "c"),
        limits=Limits(pending_per_peer=1, max_session_mib=100, max_message_mib=10),
        logging=LoggingConfig("json", "WARNING"),
    )
    back = load_config(dump_config(full, tmp_path / "cfg" / "bob.toml"))
    assert back.with_changes(source=None) == full


def test_server_keepalive_policy_accepts_the_clients_pings():
    """Clients ping every CLIENT_KEEPALIVE_MS, also between calls; the server must allow pings at
    least that often or it answers GOAWAY "too_many_pings" (issue 15 measured it)."""
    opts = dict(server_options(Limits()))
    assert opts["grpc.keepalive_permit_without_calls"] == 1
    assert opts["grpc.http2.min_ping_interval_without_data_ms"] < CLIENT_KEEPALIVE_MS
    assert opts["grpc.max_concurrent_streams"] == Limits().max_concurrent_streams
    assert opts["grpc.max_receive_message_length"] <= 5 << 20


def test_a_partys_port_is_its_alone():
    """Without grpc.so_reuseport = 0 a second server binds the same port and the kernel shares the
    connections between the two (a CI run met a peer's certificate where bob's was expected)."""
    import grpc

    async def bind_twice():
        first = grpc.aio.server(options=server_options(Limits()))
        port = first.add_insecure_port("127.0.0.1:0")
        await first.start()
        try:
            second = grpc.aio.server(options=server_options(Limits()))
            try:
                got = second.add_insecure_port(f"127.0.0.1:{port}")
            except RuntimeError:
                got = 0
            await second.stop(None)
            return got
        finally:
            await first.stop(None)

    assert asyncio.run(bind_twice()) == 0
    assert dict(server_options(Limits()))["grpc.so_reuseport"] == 0


def test_running_sessions_calls_are_outside_the_shared_pool():
    """Issue 40: calls of running sessions (reserved) count against their peer's quota only, so any number of
    members filling max_concurrent_rpcs cannot refuse them; a call moves between the pools when it names its
    session, and one that turns out not to be a running session's is refused if the shared pool is full."""
    q = CallQuotas(Limits(max_concurrent_rpcs=8, calls_per_peer=5, calls_per_session=2, idle_calls_per_peer=2), "me")
    for m in ("m1", "m2"):
        for _ in range(4):
            q.enter(m)
    with pytest.raises(ResourceExhausted, match=re.escape("limits.max_concurrent_rpcs")):
        q.enter("charlie")  # the shared pool is full ...
    q.enter("charlie", reserved=True)  # ... a running session's call still enters
    assert q.peer_calls == 8 and q.reserved_calls == 1 and q.calls("charlie") == 1
    for _ in range(4):
        q.enter("charlie", reserved=True)
    with pytest.raises(ResourceExhausted, match=re.escape("limits.calls_per_peer")):
        q.enter("charlie", reserved=True)  # bounded by the peer's own quota
    with pytest.raises(ResourceExhausted, match=re.escape("limits.max_concurrent_rpcs")):
        q.unreserve("charlie")  # not a running session's call after all: no room in the shared pool
    q.leave("charlie", reserved=True)
    q.leave("m1")
    q.unreserve("charlie")  # now there is room
    assert q.peer_calls == 8 and q.reserved_calls == 3
    q.reserve("charlie")  # bound to a running session: frees its shared slot
    assert q.peer_calls == 7 and q.reserved_calls == 4
    for _ in range(4):
        q.leave("charlie", reserved=True)
    assert q.calls("charlie") == 0 and q.reserved_calls == 0 and q.peer_calls == 7


def test_call_quotas_per_peer_in_all_and_the_operators_reserve():
    q = CallQuotas(
        Limits(max_concurrent_rpcs=8, calls_per_peer=5, calls_per_session=2, idle_calls_per_peer=2, operator_calls=4),
        "me",
    )
    for _ in range(5):
        q.enter("mallory")
    with pytest.raises(ResourceExhausted, match=re.escape("limits.calls_per_peer")):
        q.enter("mallory")
    for _ in range(3):
        q.enter("bob")
    with pytest.raises(ResourceExhausted, match=re.escape("limits.max_concurrent_rpcs")):
        q.enter("carol")  # all peers together are at 8
    for _ in range(4):
        q.enter("me")  # the operator's reserve is its own
    with pytest.raises(ResourceExhausted, match=re.escape("limits.operator_calls")):
        q.enter("me")
    q.leave("mallory")
    q.enter("carol")
    assert q.calls("mallory") == 4 and q.peer_calls == 8 and q.calls("me") == 4
    # message calls: idle until bound to a session, then counted per session
    q.enter_idle("mallory")
    q.enter_idle("mallory")
    with pytest.raises(ResourceExhausted, match=re.escape("limits.idle_calls_per_peer")):
        q.enter_idle("mallory")
    q.bind("mallory", "s")  # frees its idle slot
    q.enter_idle("mallory")
    q.bind("mallory", "s")
    q.enter_idle("mallory")
    with pytest.raises(ResourceExhausted, match=re.escape("limits.calls_per_session")):
        q.bind("mallory", "s")
    q.bind("mallory", "t")  # another session of hers
    q.leave_message_call("mallory", "s")
    q.enter_idle("mallory")
    q.bind("mallory", "s")


# ----------------------------------------------------------------------------- admission
class _S:
    """A live session as the limits see it: its initiator and its phase."""

    def __init__(self, initiator, phase):
        self.initiator, self.lifecycle = initiator, SimpleNamespace(phase=phase)


def _spec(timeout=60.0, seed=None):
    return SessionSpec("s", "p", {"a": "x", "b": "me"}, {}, timeout, seed)


def test_pending_slots_are_a_fair_share_of_the_total():
    """Issue 40: four members each at pending_per_peer filled pending_total (16 of 16).  Each peer's share is
    its per-peer limit but at most an equal part of the total among the peers the policy admits, so k of
    them hold at most k parts and every other admitted peer finds its own."""
    lim = Limits(pending_per_peer=4, pending_total=16)
    assert fair_share(4, 16, 1) == 4 and fair_share(4, 16, 6) == 2 and fair_share(4, 16, 10) == 1
    live = [_S(f"m{i}", Phase.PREPARED) for i in range(1, 5) for _ in range(2)]  # 4 members, 2 each
    for m in ("m1", "m2", "m3", "m4"):
        with pytest.raises(ResourceExhausted, match=r"its share of limits.pending_total = 16 among the 6 peers"):
            check_proposal(live, m, _spec(), lim, "me", proposers=6)
    check_proposal(live, "charlie", _spec(), lim, "me", proposers=6)  # the honest members' shares are free
    check_proposal(live, "m1", _spec(), lim, "me", proposers=3)  # fewer admitted peers: larger shares


def test_admission_per_initiator_and_in_all():
    lim = Limits(pending_per_peer=2, pending_total=3, running_per_peer=2, sessions_total=5)
    live = [_S("x", Phase.PREPARED), _S("x", Phase.PREPARED)]
    with pytest.raises(ResourceExhausted, match="pending_per_peer"):
        check_proposal(live, "x", _spec(), lim, "me")
    check_proposal(live, "y", _spec(), lim, "me")  # another peer is not blocked
    live.append(_S("y", Phase.PREPARED))
    with pytest.raises(ResourceExhausted, match="pending_total"):
        check_proposal(live, "z", _spec(), lim, "me")
    running = [_S("x", Phase.RUNNING), _S("x", Phase.RUNNING)]
    with pytest.raises(ResourceExhausted, match="running_per_peer"):
        check_proposal(running, "x", _spec(), lim, "me")
    with pytest.raises(ResourceExhausted, match="running_per_peer"):
        check_begin(running, "x", lim, "me")
    full = [_S(f"p{i}", Phase.RUNNING) for i in range(5)]
    with pytest.raises(ResourceExhausted, match="sessions_total"):
        check_proposal(full, "q", _spec(), lim, "me")
    with pytest.raises(ResourceExhausted, match="max_session_seconds"):
        check_proposal([], "x", _spec(timeout=lim.max_session_seconds + 1), lim, "me")
    # a session whose end was asked for (an accepted Abort) holds no slot while it winds down; it still
    # counts against the party's total until it is gone (CI: a Propose right after an Abort was refused)
    aborted = [_S("x", Phase.PREPARED), _S("x", Phase.PREPARED), _S("x", Phase.RUNNING)]
    for a in aborted:
        a.lifecycle.phase = Phase.ENDING
    check_proposal(aborted, "x", _spec(), lim, "me")
    check_begin(aborted + [_S("x", Phase.RUNNING)], "x", lim, "me")
    with pytest.raises(ResourceExhausted, match="sessions_total"):
        check_proposal(aborted + [_S("y", Phase.RUNNING)] * 2, "z", _spec(), lim, "me")
    # but one peer holds no more of its sessions at once, winding down or not, than its two quotas allow
    # together: a stream of propose-and-abort cannot fill the party with sessions ending
    winding = [_S("x", Phase.FAILED) for _ in range(lim.pending_per_peer + lim.running_per_peer)]
    big = Limits(pending_per_peer=2, pending_total=3, running_per_peer=2, sessions_total=50)
    with pytest.raises(ResourceExhausted, match="winding down"):
        check_proposal(winding, "x", _spec(), big, "me")
    check_proposal(winding, "y", _spec(), big, "me")  # another peer is not blocked
    check_proposal(winding[1:], "x", _spec(), big, "me")
    with pytest.raises(ResourceExhausted, match=re.escape("rule limits.pending")):
        check_resume(
            winding,
            "x",
            {"session_id": "s", "restarts": 0, "deadline_epoch": 2e9, "began_epoch": 1.0},
            big,
            "me",
            now=1e9,
        )
    # a seed is the governor's rule ([policy] allow_seeded, tests/unit/runtime/test_governance.py),
    # not a limit: the limits admit it
    check_proposal([], "x", _spec(seed=1), lim, "me")


def test_admission_counts_what_is_being_admitted_and_resumes():
    """Proposals (and resumes) being admitted hold no session yet but count as pending (issue 24)."""
    lim = Limits(pending_per_peer=2, pending_total=3, running_per_peer=2, sessions_total=5)
    with pytest.raises(ResourceExhausted, match="pending_per_peer"):
        check_proposal([_S("x", Phase.PREPARED)], "x", _spec(), lim, "me", {"x": 1})
    with pytest.raises(ResourceExhausted, match="pending_total"):
        check_proposal([], "z", _spec(), lim, "me", {"x": 2, "y": 1})
    check_proposal([], "z", _spec(), lim, "me", {"x": 2})
    # the party's own operator: no peer's quota, only the party's total
    check_proposal([_S("me", Phase.PREPARED)] * 3, "me", _spec(), lim, "me", {"me": 1})
    with pytest.raises(ResourceExhausted, match="sessions_total"):
        check_proposal([_S("me", Phase.RUNNING)] * 5, "me", _spec(), lim, "me")
    # a session whose Begin was admitted counts as running before its thread says so
    begun = [_S("x", Phase.PREPARED), _S("x", Phase.PREPARED)]
    for b in begun:
        b.lifecycle.phase = Phase.BEGUN
    with pytest.raises(ResourceExhausted, match="running_per_peer"):
        check_begin(begun, "x", lim, "me")
    # a resume (the governance half's check_resume) counts the admissions in flight too
    meta = {"session_id": "s", "restarts": 0, "deadline_epoch": 2e9, "began_epoch": 1.0}
    check_resume([_S("x", Phase.PREPARED)], "x", meta, lim, "me", now=1e9)
    with pytest.raises(ResourceExhausted, match=re.escape("limits.pending")):
        check_resume([_S("x", Phase.PREPARED)], "x", meta, lim, "me", now=1e9, in_flight={"x": 1})


def test_proposal_grace():
    lim = Limits(proposal_grace_seconds=120.0)
    assert begin_wait_seconds(1000.0 + 7 * 86400, lim, own=False, now=1000.0) == 120.0
    assert begin_wait_seconds(1010.0, lim, own=False, now=1000.0) == 10.0
    assert begin_wait_seconds(1010.0, lim, own=True, now=1000.0) == 40.0


def test_inbound_budget():
    b = InboundBudget(TrafficEnvelope(100, 250, 3), "s")
    with pytest.raises(ResourceExhausted, match="at most 100 bytes per message"):
        b.admit("r", "t0", 101)
    c1 = b.admit("r", "t1", 100)
    b.settle("r", "t1", c1, stored=True)
    assert b.admit("r", "t1", 100) is None  # a retry of a received message: free
    c2 = b.admit("r", "t2", 100)
    b.settle("r", "t2", c2, stored=False)  # the stream failed: charge returned
    c2 = b.admit("r", "t2", 100)
    b.settle("r", "t2", c2, stored=True)
    assert b.bytes_charged == 200
    with pytest.raises(ResourceExhausted, match="budget of 250"):
        b.admit("r", "t3", 60)
    b.admit("r", "t3", 50)
    with pytest.raises(ResourceExhausted, match="limit of 3 distinct"):
        b.admit("r", "t4", 1)


def test_empty_messages_take_one_tag_each_not_two():
    """A proto3 message with default fields serialises to 0 bytes (power iteration's stop flag
    False): its tag must leave the in-flight set when it is stored, or every such message would
    count twice and a long session would hit its tag limit early."""
    b = InboundBudget(TrafficEnvelope(100, 250, 4), "s")
    for i in range(4):
        c = b.admit("r", f"stop/{i}", 0)
        assert c == 0
        b.settle("r", f"stop/{i}", c, stored=True)
    assert b.bytes_charged == 0
    with pytest.raises(ResourceExhausted, match="limit of 4 distinct"):
        b.admit("r", "stop/4", 0)


def test_envelope_is_capped_by_the_ceilings():
    lim = Limits(max_message_mib=1, max_session_mib=2, max_tags_per_session=100)
    env = lim.envelope(TrafficEnvelope(10 << 20, 100 << 20, 10**6, source="p"))
    assert (env.message_bytes, env.session_bytes, env.tags) == (1 << 20, 2 << 20, 100)
    assert lim.envelope(None).source == "the party's [limits]"


def test_bounded_json():
    assert bounded_json_object('{"a": [1, {"b": "[[[["}]}') == {"a": [1, {"b": "[[[["}]}
    for bad, message in (
        ("[" * 33 + "]" * 33, "deeper than 32"),
        ('{"x": "' + "y" * 70000 + '"}', "bytes"),
        ('{"a": NaN}', "not valid JSON"),
        ("[]", "JSON object"),
        ("{", "not valid JSON"),
    ):
        with pytest.raises(InvalidMessage, match=message):
            bounded_json_object(bad)


# ----------------------------------------------------------------------------- logs
def _record(msg, *args, exc=None):
    return logging.LogRecord("smcdp.party", logging.WARNING, __file__, 1, msg, args, exc)


FORGED = "bye\n2026-01-01 00:00:00,000 INFO smcdp.party: session s succeeded\r\x1b[31m\u2028\u202e"


@pytest.mark.parametrize("formatter", [_OneLine(), JsonLines()], ids=["text", "json"])
def test_a_peer_string_cannot_forge_a_log_line(formatter):
    line = formatter.format(_record("session %s aborted by %s: %s", "s", "bob", FORGED))
    assert "\n" not in line and "\r" not in line and "\x1b" not in line
    assert "\u2028" not in line and "\u202e" not in line
    if isinstance(formatter, JsonLines):
        obj = json.loads(line)
        assert obj["level"] == "WARNING" and obj["logger"] == "smcdp.party"
        assert obj["message"].startswith("session s aborted by bob: bye\\x0a2026-01-01")


def test_tracebacks_cannot_pose_as_log_lines():
    try:
        raise ValueError(FORGED)
    except ValueError:
        import sys

        rec = _record("internal error", exc=sys.exc_info())
    text = _OneLine().format(rec)
    first, *rest = text.split("\n")
    assert first.endswith("internal error") and rest and all(line.startswith("  | ") for line in rest)
    assert json.loads(JsonLines().format(rec))["exception"].startswith("Traceback")


def test_printable():
    assert printable("a\tb\nc\x7f\u0085é€") == "a\\x09b\\x0ac\\x7f\\x85é€"
    assert printable("x" * 10, 4) == "xxxx...[cut: 10 characters]"


# ----------------------------------------------------------------------------- files
def test_private_dirs_and_files(tmp_path):
    old = os.umask(0o022)
    try:
        data = tmp_path / "state" / "alice"
        out = private_dir(data / "outputs" / "s1", data)
        (data / "sessions").mkdir(mode=0o755)
        private_dir(data / "sessions", data)
        write_durable(out / "dp-aggregate-model.json", {"w": [1]})
        atomic_write_json(data / "sessions" / "s1.json", {}, 0o600)
    finally:
        os.umask(old)
    for p in (data, data / "outputs", out, data / "sessions"):
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o700, p
    assert stat.S_IMODE(os.stat(out / "dp-aggregate-model.json").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "state").st_mode) == 0o755  # outside the data dir: untouched


def test_a_directory_made_private_has_its_name_synced(tmp_path, monkeypatch):
    """``sessions/`` made at a party's first start: its name synced in the data directory, as each made
    directory's in its parent (a power cut lost ``sessions/`` and every checkpoint in it)."""
    real, synced = os.fsync, []
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real(fd)))
    data = tmp_path / "alice"
    private_dir(data / "sessions", data)
    assert synced == [str(tmp_path), str(data)]  # alice/ in tmp_path, then sessions/ in alice/
    synced.clear()
    private_dir(data / "sessions", data)
    assert synced == []  # nothing made: nothing synced


def test_the_operator_socket_is_in_the_data_directory_unless_its_path_is_too_long(tmp_path):
    from dataclasses import replace

    from smcdp.runtime.config import load_config, operator_socket
    from smcdp.runtime.local import write_local_deployment

    cfg = load_config(write_local_deployment(tmp_path, ["alice", "bob"], allow_insecure_keys=True)["alice"])
    assert operator_socket(cfg) == cfg.data_dir.absolute() / "operator.sock"
    deep = replace(cfg, data_dir=tmp_path / ("d" * 120))  # past a unix socket's 108 bytes: the TCP address
    assert operator_socket(deep) is None
    for odd in ("party#1", "p?x", "p%41", "p x"):  # gRPC's client reads a "unix:" target as a URI
        assert operator_socket(replace(cfg, data_dir=tmp_path / odd)) is None, odd


def test_the_operator_uses_the_socket_only_where_a_party_answers_on_it(tmp_path):
    """A socket file nobody listens on (left by a killed process) or a plain file sends the operator to the TCP
    address; one a process listens on is used."""
    import socket as _socket

    from smcdp.runtime.client import _operator_address
    from smcdp.runtime.config import load_config, operator_socket
    from smcdp.runtime.local import write_local_deployment

    cfg = load_config(write_local_deployment(tmp_path, ["alice", "bob"], allow_insecure_keys=True)["alice"])
    sock = operator_socket(cfg)
    assert sock is not None and _operator_address(cfg) == cfg.address_of("alice")  # no socket yet
    sock.parent.mkdir(parents=True, exist_ok=True)
    with _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM) as listener:
        listener.bind(str(sock))
        assert _operator_address(cfg) == cfg.address_of("alice")  # bound, not listening: a stale socket
        listener.listen()
        assert _operator_address(cfg) == f"unix:{sock}"
        assert _operator_address(cfg, "bob") == cfg.address_of("bob")  # another party: its address


def test_a_governed_session_keeps_its_protocols_byte_envelope():
    """A session holding a budget reservation runs its plug-in wrapped by the governor (issue 24: the
    wrapper did not pass traffic_envelope on, so a DP release got the [limits] ceilings, 2 GiB, instead of
    its protocol's envelope).  Every question the runtime asks a plug-in reaches the protocol's own."""
    import inspect

    from smcdp.plugins.base import ProtocolPlugin
    from smcdp.plugins.registry import get_plugin
    from smcdp.runtime.governance.gate import _Governed

    asked = {
        n
        for n, f in vars(ProtocolPlugin).items()
        if callable(f) and not n.startswith("_") and not isinstance(f, staticmethod) and n != "run_role"
    }
    assert {"validate_params", "summary", "traffic_envelope"} <= asked
    assert not asked - set(vars(_Governed)), asked - set(vars(_Governed))
    plugin = get_plugin("dp-aggregate")
    roles = {"charlie": "c", "party1": "a", "party2": "b", "dave": "d"}
    params = plugin.validate_params({"n_parties": 2, "key_bits": 512, "dgk_bits": 512}, roles)
    governed = _Governed(plugin, None, "s")
    for role in roles:
        env = governed.traffic_envelope(params, roles, role)
        assert env is not None and env == plugin.traffic_envelope(params, roles, role)
        assert env.session_bytes < Limits().max_session_bytes // 100
    assert inspect.signature(governed.traffic_envelope).parameters.keys() == {"params", "roles", "role"}


def test_what_the_sessions_hold_is_bounded_per_peer_and_in_all():
    """Bytes a peer sends into the live sessions (memory, then their journals) count across its sessions
    (limits.inbound_mib_per_peer) and with every peer's (inbound_mib_total); an ended session gives them back.
    Each message costs the ledgers its bytes and its bookkeeping (message_cost)."""
    from smcdp.net.limits import MIB, InboundLedger, message_cost

    one = MIB - message_cost("t1", 0)  # a message under a two-character tag that costs the ledgers 1 MiB
    ledger = InboundLedger(Limits(inbound_mib_per_peer=2, inbound_mib_total=3), "me")
    env = TrafficEnvelope(MIB, 8 * MIB, 100)
    a = InboundBudget(env, "a", ledger, {"x": "mallory", "y": "bob"})
    b = InboundBudget(env, "b", ledger, {"x": "mallory", "y": "bob"})
    a.settle("x", "t1", a.admit("x", "t1", one), True)
    b.settle("x", "t1", b.admit("x", "t1", one), True)
    with pytest.raises(ResourceExhausted, match=re.escape("limits.inbound_mib_per_peer")):
        b.admit("x", "t2", 0)  # mallory: 2 MiB over both sessions (an empty message costs too)
    charge = a.admit("y", "t3", 0)
    assert ledger.held("bob") == message_cost("t3", 0)
    a.settle("y", "t3", charge, False)  # a failed stream gives its charge back
    assert ledger.held("bob") == 0
    b.settle("y", "t1", b.admit("y", "t1", one), True)  # bob is not held back by her ...
    with pytest.raises(ResourceExhausted, match=re.escape("limits.inbound_mib_total")):
        a.admit("y", "t2", 0)  # ... until all peers together are at 3 MiB
    assert ledger.held("mallory") == 2 * MIB and ledger.held() == 3 * MIB
    a.close()  # session a ended
    assert ledger.held("mallory") == MIB and ledger.held() == 2 * MIB
    a.settle("x", "late", None, False)  # a stream that ends after the session
    b.close()
    assert ledger.held() == 0
