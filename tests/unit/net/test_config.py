import tomllib
from pathlib import Path

import pytest

from smcdp.net.config import ConfigError, Timeouts, TlsConfig, dumps_toml
from smcdp.runtime.config import PartyConfig, dump_config, load_config

GOOD = """
[party]
name = "alice"
listen = "0.0.0.0:50051"
data_dir = "state/alice"
allow_insecure_keys = false
plugins = ["tests.support.echo_plugin"]

[tls]
ca = "certs/ca.crt"
cert = "certs/alice.crt"
key = "/abs/alice.key"

[peers]
bob = "127.0.0.1:50052"
trent = "[::1]:50053"

[inputs.power-iteration]
data = "A.npy"

[timeouts]
connect_seconds = 2.5
session_seconds = 100
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "sub" / "alice.toml"
    p.parent.mkdir(exist_ok=True)
    p.write_text(text)
    return p


def test_good_config_resolves_relative_paths(tmp_path):
    cfg = load_config(write(tmp_path, GOOD))
    base = (tmp_path / "sub").resolve()
    assert cfg.name == "alice" and cfg.listen == "0.0.0.0:50051"
    assert cfg.data_dir == base / "state/alice"
    assert cfg.tls.ca == base / "certs/ca.crt" and cfg.tls.key == Path("/abs/alice.key")
    assert cfg.peers == {"bob": "127.0.0.1:50052", "trent": "[::1]:50053"}
    assert cfg.inputs == {"power-iteration": {"data": base / "A.npy"}}
    assert cfg.timeouts == Timeouts(connect_seconds=2.5, session_seconds=100.0, rpc_seconds=120.0)
    assert cfg.plugins == ("tests.support.echo_plugin",)
    assert cfg.address_of("alice") == "127.0.0.1:50051"
    assert cfg.address_of("bob") == "127.0.0.1:50052"
    with pytest.raises(ConfigError, match="'carol' has no address"):
        cfg.address_of("carol")


@pytest.mark.parametrize(
    "change, message",
    [
        (('name = "alice"', 'name = "Alice"'), "party.name"),
        (('name = "alice"\n', ""), "missing party.name"),
        (('listen = "0.0.0.0:50051"', 'listen = "0.0.0.0"'), "party.listen"),
        (('listen = "0.0.0.0:50051"', 'listen = "0.0.0.0:70000"'), "port must be"),
        (("allow_insecure_keys = false", 'allow_insecure_keys = "no"'), "party.allow_insecure_keys"),
        (('plugins = ["tests.support.echo_plugin"]', 'plugins = ["not a module"]'), "party.plugins"),
        (('bob = "127.0.0.1:50052"', 'bob = "127.0.0.1"'), "peers.bob"),
        (('bob = "127.0.0.1:50052"', 'alice = "127.0.0.1:50052"'), "must not list the party itself"),
        (('bob = "127.0.0.1:50052"', 'Bob = "127.0.0.1:50052"'), "peer name"),
        (("connect_seconds = 2.5", "connect_seconds = -1"), "timeouts.connect_seconds"),
        (("connect_seconds = 2.5", "connect_secs = 1"), "unknown key.*connect_secs"),
        (("[tls]\n", '[tls]\ncrt = "x"\n'), r"unknown key.*\[tls\]"),
        (('cert = "certs/alice.crt"\n', ""), "missing tls.cert"),
        (("[timeouts]", "[timeout]"), "unknown key.*timeout"),
        (('data = "A.npy"', "data = 3"), "inputs.power-iteration.data"),
        (('name = "alice"', 'name = "alice'), "not valid TOML"),
    ],
)
def test_invalid_fields_are_named(tmp_path, change, message):
    old, new = change
    assert old in GOOD
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, GOOD.replace(old, new, 1)))


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")


def test_dump_round_trip(tmp_path):
    cfg = PartyConfig(
        name="bob",
        listen="[::]:6000",
        data_dir=tmp_path / "state" / "bob",
        tls=TlsConfig(tmp_path / "c/ca.crt", tmp_path / "c/bob.crt", tmp_path / "c/bob.key"),
        peers={"alice": "alice.example.org:6000"},
        inputs={"power-iteration": {"data": tmp_path / "data dir" / 'B "x".npy'}},
        plugins=("a.b",),
        allow_insecure_keys=True,
        timeouts=Timeouts(1.5, 30.0, 10.0),
    )
    path = dump_config(cfg, tmp_path / "cfg" / "bob.toml")
    back = load_config(path)
    assert back.with_changes(source=None) == cfg
    assert 'data_dir = "../state/bob"' in path.read_text()


def test_dumps_toml_escapes():
    doc = {
        "t": {"s": 'quote " backslash \\ newline \n tab \t ünï', "l": ["x", "y"], "f": 1.5, "b": False, "weird key": 1}
    }
    assert tomllib.loads(dumps_toml(doc)) == doc


def test_the_admission_queues_are_shared_among_the_peers_the_policy_admits(tmp_path):
    """Issue 40 (fair admission): pending_total and pending_approvals_total are shared among the peers whose
    proposals the policy may admit; a total smaller than their number would let some of them fill it, and is
    refused at start-up naming the key."""
    peers = "".join(f'm{i} = "127.0.0.1:{51000 + i}"\n' for i in range(6))
    text = GOOD.replace("[peers]\n", "[peers]\n" + peers, 1)
    opened = text + "\n[policy]\nopen = true\n"
    cfg = load_config(write(tmp_path, opened))
    assert cfg.proposers == {"bob", "trent"} | {f"m{i}" for i in range(6)}
    with pytest.raises(ConfigError, match=r"limits\.pending_total \(7\) is smaller than the 8 peers"):
        load_config(write(tmp_path, opened + "\n[limits]\npending_per_peer = 1\npending_total = 7\n"))
    with pytest.raises(ConfigError, match=r"limits\.pending_approvals_total"):
        load_config(
            write(tmp_path, opened + "\n[limits]\npending_approvals_per_peer = 1\npending_approvals_total = 5\n")
        )
    # a policy that lets two peers propose: only they share the queues
    ruled = text + '\n[policy.net-echo]\nroles = ["b"]\ninitiators = ["bob", "m1"]\n'
    ruled += "\n[limits]\npending_per_peer = 1\npending_total = 2\n"
    assert load_config(write(tmp_path, ruled)).proposers == {"bob", "m1"}
    assert load_config(write(tmp_path, text)).proposers == frozenset()  # no [policy]: nobody is admitted
