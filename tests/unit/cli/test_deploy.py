"""`smcdp deploy init|rotate|check`, the generated compose files, the Dockerfile."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess

import numpy as np
import pytest

from smcdp.cli import deploy
from smcdp.cli import main as smcdp_main
from smcdp.cli.deploy import DeployError, HostSpec
from smcdp.net.tls import TlsMaterial, load_certificate
from smcdp.runtime.config import load_config
from tests.support.paths import REPO as _REPO

REPO = _REPO
HOSTS = "alice=10.0.0.1:50051,bob=bob.example.org:50052,trent=10.0.0.3:50051,charlie=[2001:db8::4]:6000"
ADDR = {
    "alice": "10.0.0.1:50051",
    "bob": "bob.example.org:50052",
    "trent": "10.0.0.3:50051",
    "charlie": "[2001:db8::4]:6000",
}


@pytest.fixture()
def deployment(tmp_path):
    data = tmp_path / "A.npy"
    np.save(data, np.arange(6.0).reshape(2, 3))
    out = tmp_path / "dep"
    rc = smcdp_main(
        ["deploy", "init", "--hosts", HOSTS, "--out", str(out), "--inputs", f"alice:power-iteration:data={data}"]
    )
    assert rc == 0
    return out


def _san(cert):
    from cryptography import x509

    ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return {str(v) for v in ext.get_values_for_type(x509.DNSName)} | {
        str(v) for v in ext.get_values_for_type(x509.IPAddress)
    }


# ------------------------------------------------------------------------------ init
def test_bundles_are_self_contained_and_hold_only_their_own_key(deployment):
    ca = (deployment / "ca" / "ca.crt").read_bytes()
    assert stat.S_IMODE((deployment / "ca" / "ca.key").stat().st_mode) == 0o600
    for name, addr in ADDR.items():
        b = deployment / name
        cfg = load_config(b / "party.toml")
        assert cfg.name == name
        assert cfg.listen == f"0.0.0.0:{addr.rsplit(':', 1)[1]}"
        assert dict(cfg.peers) == {p: a for p, a in ADDR.items() if p != name}
        # every path the config names lies inside the bundle
        for path in (cfg.tls.ca, cfg.tls.cert, cfg.tls.key, cfg.data_dir):
            assert path.resolve().is_relative_to(b.resolve()), path
        assert sorted(f.name for f in (b / "certs").iterdir()) == sorted(["ca.crt", f"{name}.crt", f"{name}.key"])
        assert (b / "certs" / "ca.crt").read_bytes() == ca
        assert stat.S_IMODE((b / "certs" / f"{name}.key").stat().st_mode) == 0o600
        assert stat.S_IMODE((b / "data").stat().st_mode) == 0o700
        tls = TlsMaterial.load(cfg.tls.ca, cfg.tls.cert, cfg.tls.key)  # key matches, CA signed it
        assert tls.name == name
        host = addr.rsplit(":", 1)[0].strip("[]")
        assert {name, host} <= _san(load_certificate(cfg.tls.cert))
        assert (b / "docker-compose.yml").is_file() and (b / ".env").is_file()
        assert name in (b / "README.txt").read_text()
        assert cfg.allow_insecure_keys is False
    # private keys: exactly one per bundle (its own) and the CA key outside every bundle
    keys = sorted(str(p.relative_to(deployment)) for p in deployment.rglob("*.key"))
    assert keys == sorted(["ca/ca.key"] + [f"{n}/certs/{n}.key" for n in ADDR])
    manifest = json.loads((deployment / "deployment.json").read_text())
    assert [(p["name"], p["port"]) for p in manifest["parties"]] == [
        ("alice", 50051),
        ("bob", 50052),
        ("trent", 50051),
        ("charlie", 6000),
    ]


def test_inputs_are_copied_into_the_owners_bundle_only(deployment, tmp_path):
    cfg = load_config(deployment / "alice" / "party.toml")
    path = cfg.inputs["power-iteration"]["data"]
    assert path == (deployment / "alice" / "inputs" / "power-iteration" / "A.npy").resolve()
    assert np.array_equal(np.load(path), np.arange(6.0).reshape(2, 3))
    for other in ("bob", "trent", "charlie"):
        assert load_config(deployment / other / "party.toml").inputs == {}
        assert not any((deployment / other / "inputs").iterdir())


@pytest.mark.parametrize(
    "hosts, message",
    [
        ("alice=10.0.0.1:50051", "at least two parties"),
        ("alice=10.0.0.1:50051,bob", "must look like PARTY=HOST:PORT"),
        ("alice=10.0.0.1:50051,Bob=10.0.0.2:1", "is not valid"),
        ("alice=10.0.0.1:50051,bob=10.0.0.2", 'is not "host:port"'),
        ("alice=10.0.0.1:50051,bob=10.0.0.2:70000", "port must be 1..65535"),
        ("alice=10.0.0.1:50051,bob=bad_host!:1", "neither an IP address nor a DNS name"),
        ("alice=10.0.0.1:50051,alice=10.0.0.2:50051", "more than once"),
        ("alice=10.0.0.1:50051,bob=10.0.0.1:50051", "would both listen on 10.0.0.1:50051"),
        ("alice=0.0.0.0:50051,bob=10.0.0.2:50051", "listen-everywhere"),
        # a party's certificate carries its host: never another party's name (the review's `--hosts alice=bob:50051`)
        ("alice=bob:50051,bob=10.0.0.2:50051", "host 'bob' of party 'alice' is the name of party 'bob'"),
        ("alice=10.0.0.1:50051,bob=ALICE:50051", "host 'ALICE' of party 'bob' is the name of party 'alice'"),
        ("alice=10.0.0.1:50051,bob=bob.party.smcdp.invalid:1", "reserved for the party identity names"),
    ],
)
def test_host_specs_are_validated(hosts, message, tmp_path, capsys):
    with pytest.raises(DeployError, match=message.replace("(", r"\(").replace(".", r"\.")):
        deploy.parse_hosts(hosts)
    assert smcdp_main(["deploy", "init", "--hosts", hosts, "--out", str(tmp_path / "x")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_host_spec_addresses():
    assert [s.address for s in deploy.parse_hosts(HOSTS)] == list(ADDR.values())
    assert deploy.parse_hosts(HOSTS)[3] == HostSpec("charlie", "2001:db8::4", 6000)


@pytest.mark.parametrize(
    "item, message",
    [
        ("alice:power-iteration:data", "must look like PARTY:PROTOCOL:NAME=PATH"),
        ("mallory:power-iteration:data={f}", "not in --hosts"),
        ("alice:power-iteration:da ta={f}", "input names use"),
        ("alice:power-iteration:data={f}.missing", "not a readable file"),
    ],
)
def test_input_specs_are_validated(item, message, tmp_path):
    f = tmp_path / "A.npy"
    f.write_bytes(b"x")
    with pytest.raises(DeployError, match=message):
        deploy.parse_input_specs([item.format(f=f)], ["alice", "bob"])


def test_refuses_to_write_into_a_non_empty_directory(deployment, capsys):
    before = (deployment / "alice" / "certs" / "alice.key").read_bytes()
    assert smcdp_main(["deploy", "init", "--hosts", HOSTS, "--out", str(deployment)]) == 2
    assert "not an empty directory" in capsys.readouterr().err
    assert (deployment / "alice" / "certs" / "alice.key").read_bytes() == before


# ---------------------------------------------------------------------------- compose
def _spec(name):
    return next(s for s in deploy.parse_hosts(HOSTS) if s.name == name)


def test_generated_compose_documents_pass_the_structural_validation(deployment):
    for name in ADDR:
        doc = deploy.compose_document(_spec(name))
        assert deploy.validate_compose_document(doc, deployment / name, name) == []
        svc = doc["services"][name]
        port = int(ADDR[name].rsplit(":", 1)[1])
        assert svc["ports"] == [f"{port}:{port}/tcp"]
        assert svc["restart"] == "unless-stopped"


def _broken(mutate):
    doc = deploy.compose_document(_spec("alice"))
    mutate(doc["services"]["alice"])
    return doc


@pytest.mark.parametrize(
    "mutate, problem",
    [
        (lambda s: s.update(user="0:0"), "non-root"),
        (lambda s: s.pop("healthcheck"), "no healthcheck"),
        (lambda s: s["healthcheck"].update(test=["CMD", "true"]), "smcdp health --config"),
        (lambda s: s.update(ports=["50052:50052"]), "do not publish the listen port 50051"),
        (lambda s: s.update(restart="no"), "restart must be"),
        (lambda s: s["volumes"].remove("./certs:/etc/smcdp/certs:ro"), "tls.ca -> /etc/smcdp/certs/ca.crt"),
        (
            lambda s: s["volumes"].__setitem__(3, "./data:/etc/smcdp/data:ro"),
            "must mount ./data at /etc/smcdp/data (rw)",
        ),
        (lambda s: s["volumes"].append("./nowhere:/x"), "./nowhere does not exist"),
        (lambda s: s.pop("image"), "no image"),
    ],
)
def test_structural_validation_catches_broken_documents(deployment, mutate, problem):
    problems = deploy.validate_compose_document(_broken(mutate), deployment / "alice", "alice")
    assert any(problem in p for p in problems), problems


def test_structural_validation_checks_the_service_name(deployment):
    doc = deploy.compose_document(_spec("bob"))
    problems = deploy.validate_compose_document(doc, deployment / "alice", "alice")
    assert any("exactly one service named 'alice'" in p for p in problems), problems


def test_compose_file_is_the_document_in_yaml(deployment):
    yaml = pytest.importorskip("yaml", reason="PyYAML not installed (test extra); the structural tests above still run")
    for name in ADDR:
        text = (deployment / name / "docker-compose.yml").read_text()
        assert yaml.safe_load(text) == deploy.compose_document(_spec(name))


def test_yaml_writer_quotes_every_string():
    yaml = pytest.importorskip("yaml", reason="PyYAML not installed (test extra)")
    doc = {
        "a": {
            "b": ["yes", "no", "1.0", "on", "null", "x: y", "# c", "'q'", "ünï", "\t"],
            "c": True,
            "d": 3,
            "e": None,
            "f": {},
            "g": [],
        }
    }
    assert yaml.safe_load(deploy.dump_yaml(doc)) == doc


DOCKER_COMPOSE = shutil.which("docker-compose")


@pytest.mark.slow  # runs docker-compose on every file (not in make test-quick)
@pytest.mark.skipif(
    DOCKER_COMPOSE is None,
    reason="docker-compose is not installed "
    "(apt-get install docker-compose); the structural validation above still ran",
)
def test_docker_compose_accepts_every_generated_file(deployment):
    for name in ADDR:
        b = deployment / name
        r = subprocess.run(
            [DOCKER_COMPOSE, "-f", str(b / "docker-compose.yml"), "config", "-q"],
            cwd=b,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 0, r.stderr
        r = subprocess.run(
            [DOCKER_COMPOSE, "-f", str(b / "docker-compose.yml"), "config"],
            cwd=b,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 0, r.stderr
        port = ADDR[name].rsplit(":", 1)[1]
        assert f"published: {port}" in r.stdout and f"target: {port}" in r.stdout
        assert "user: 10001:10001" in r.stdout  # from the bundle's .env
        assert "image: smcdp:latest" in r.stdout
        assert f"{b.resolve()}/data:/etc/smcdp/data:rw" in r.stdout


@pytest.mark.skipif(DOCKER_COMPOSE is None, reason="docker-compose is not installed")
def test_docker_compose_rejects_a_broken_file(deployment):
    # control: the tool really validates (so the test above cannot pass vacuously)
    b = deployment / "alice"
    text = (b / "docker-compose.yml").read_text().replace("    restart:", "    restartt:")
    (b / "broken.yml").write_text(text)
    r = subprocess.run(
        [DOCKER_COMPOSE, "-f", str(b / "broken.yml"), "config", "-q"], cwd=b, capture_output=True, text=True, timeout=60
    )
    assert r.returncode != 0 and "restartt" in (r.stderr + r.stdout)


# ----------------------------------------------------------------------------- rotate
def test_rotate_one_party_keeps_the_ca_and_the_others(deployment, capsys):
    def snap(n):
        return {f.name: f.read_bytes() for f in (deployment / n / "certs").iterdir()}

    before = {n: snap(n) for n in ADDR}
    assert smcdp_main(["deploy", "rotate", "--dir", str(deployment), "--party", "alice"]) == 0
    assert "alice: new key and certificate" in capsys.readouterr().out
    after = {n: snap(n) for n in ADDR}
    assert after["alice"]["alice.crt"] != before["alice"]["alice.crt"]
    assert after["alice"]["alice.key"] != before["alice"]["alice.key"]
    assert after["alice"]["ca.crt"] == before["alice"]["ca.crt"]
    for n in ("bob", "trent", "charlie"):
        assert after[n] == before[n]
    b = deployment / "alice" / "certs"
    assert stat.S_IMODE((b / "alice.key").stat().st_mode) == 0o600
    assert TlsMaterial.load(b / "ca.crt", b / "alice.crt", b / "alice.key").name == "alice"
    assert sorted(f.name for f in b.iterdir()) == ["alice.crt", "alice.key", "ca.crt"]  # no temp files left


def test_rotate_with_a_new_ca_reissues_everyone(deployment):
    old_ca = (deployment / "ca" / "ca.crt").read_bytes()
    summary = deploy.rotate_certificates(deployment, new_ca=True)
    assert sorted(summary) == sorted(ADDR)
    new_ca = (deployment / "ca" / "ca.crt").read_bytes()
    assert new_ca != old_ca
    assert len(list((deployment / "ca").glob("ca.crt.replaced-*"))) == 1
    for n in ADDR:
        b = deployment / n / "certs"
        assert (b / "ca.crt").read_bytes() == new_ca
        TlsMaterial.load(b / "ca.crt", b / f"{n}.crt", b / f"{n}.key")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--party", "mallory"], "not in this deployment: mallory"),
        ([], "name the parties to rotate"),
        (["--party", "alice", "--all"], "not both"),
    ],
)
def test_rotate_validates_its_arguments(deployment, args, message, capsys):
    assert smcdp_main(["deploy", "rotate", "--dir", str(deployment), *args]) == 2
    assert message in capsys.readouterr().err


def test_rotate_refuses_a_directory_not_made_by_init(tmp_path, capsys):
    assert smcdp_main(["deploy", "rotate", "--dir", str(tmp_path), "--all"]) == 2
    assert "deployment.json is missing" in capsys.readouterr().err


# ------------------------------------------------------------------------------ check
def test_check_accepts_a_fresh_bundle_and_reports_problems(deployment, capsys):
    b = deployment / "bob"
    assert smcdp_main(["deploy", "check", str(b)]) == 0
    assert "bundle looks good" in capsys.readouterr().out
    (b / "certs" / "bob.key").chmod(0o644)
    shutil.copy(deployment / "alice" / "certs" / "alice.key", b / "certs" / "alice.key")
    assert smcdp_main(["deploy", "check", str(b)]) == 1
    out = capsys.readouterr().out
    assert "must be 0600" in out and "other private keys (alice.key)" in out
    assert smcdp_main(["deploy", "check", str(b), "--warn-days", "100000"]) == 1
    assert "rotate it" in capsys.readouterr().out


# ------------------------------------------------------------------------- Dockerfile
def _stages(text):
    stages, cur = [], None
    for line in text.splitlines():
        s = line.strip()
        if s.upper().startswith("FROM "):
            cur = {"from": s, "lines": []}
            stages.append(cur)
        elif cur is not None and s and not s.startswith("#"):
            cur["lines"].append(s)
    return stages


def test_dockerfile_is_multi_stage_slim_non_root_with_grpc_health():
    text = (REPO / "deploy" / "Dockerfile").read_text()
    stages = _stages(text)
    assert len(stages) == 2
    assert "ARG PYTHON_IMAGE=python:3.11-slim" in text
    build = " ".join(stages[0]["lines"])
    # dependencies only as pinned and hashed in the lock; smcdp itself built offline
    assert "--require-hashes --no-deps --no-build-isolation -r requirements.lock" in build
    assert "COPY deploy/build-requirements.lock deploy/requirements.lock" in build
    assert "--no-index ." in build
    final = " ".join(stages[1]["lines"])
    for compiler in ("build-essential", "gcc", "g++", "-dev ", "clang", "make ", "pip install"):
        assert compiler not in final, compiler
    assert "COPY --from=build /opt/smcdp /opt/smcdp" in final
    users = [ln for ln in stages[1]["lines"] if ln.startswith("USER ")]
    assert users and users[-1].split()[1].split(":")[0] not in ("0", "root")
    assert users[-1] == f"USER {deploy.CONTAINER_UID}:{deploy.CONTAINER_UID}"
    hc = [ln for ln in stages[1]["lines"] if ln.startswith(("HEALTHCHECK", 'CMD ["smcdp", "health"'))]
    assert hc and '"smcdp", "health", "--config", "/etc/smcdp/party.toml"' in text
    assert 'ENTRYPOINT ["smcdp", "party", "--config", "/etc/smcdp/party.toml"]' in final
    assert deploy.CONTAINER_CONFIG == "/etc/smcdp/party.toml"


def test_dockerignore_keeps_keys_and_local_state_out_of_the_build_context():
    lines = [
        ln.strip() for ln in (REPO / ".dockerignore").read_text().splitlines() if ln.strip() and not ln.startswith("#")
    ]
    assert lines[0] == "*"  # deny by default ...
    assert {
        "!pyproject.toml",
        "!setup.py",
        "!README.md",
        "!smcdp/",
        "!deploy/requirements.lock",
        "!deploy/build-requirements.lock",
    } <= set(lines)  # ... allow what the image needs
    assert "**/*.key" in lines
    text = (REPO / "deploy" / "Dockerfile").read_text()
    for src in ("pyproject.toml", "setup.py", "README.md", "smcdp", "deploy/requirements.lock"):
        assert f"COPY {src}" in text or f" {src} " in text


# ------------------------------------------------------------------ options, native run
def test_plugin_and_image_options(tmp_path, capsys):
    out = tmp_path / "d"
    assert (
        smcdp_main(
            [
                "deploy",
                "init",
                "--hosts",
                "alice=10.0.0.1:1,bob=10.0.0.2:1",
                "--out",
                str(out),
                "--plugin",
                "tests.support.echo_plugin",
                "--image",
                "registry.example.org/smcdp:0.1.0",
                "--session-seconds",
                "120",
            ]
        )
        == 0
    )
    cfg = load_config(out / "bob" / "party.toml")
    assert cfg.plugins == ("tests.support.echo_plugin",)
    assert cfg.timeouts.session_seconds == 120.0
    assert "SMCDP_IMAGE=registry.example.org/smcdp:0.1.0" in (out / "bob" / ".env").read_text()
    capsys.readouterr()
    for bad, message in (
        (["--plugin", "not a module"], "is not a Python module name"),
        (["--image", "bad image"], "is not an image reference"),
    ):
        assert (
            smcdp_main(
                ["deploy", "init", "--hosts", "alice=10.0.0.1:1,bob=10.0.0.2:1", "--out", str(tmp_path / "e"), *bad]
            )
            == 2
        )
        assert message in capsys.readouterr().err


@pytest.mark.slow  # party processes (not in make test-quick)
def test_bundles_run_natively_on_one_host(tmp_path):
    """Bundles for two parties on 127.0.0.1 start as they are and reach each other over mTLS."""
    import signal
    import socket
    import sys
    import time

    from smcdp.runtime import client

    def free_port() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    ports = {"alice": free_port(), "bob": free_port()}
    out = tmp_path / "d"
    bundles = deploy.init_deployment(
        out, [f"{p}=127.0.0.1:{port}" for p, port in ports.items()], listen_host="127.0.0.1"
    )
    procs = {}
    try:
        for p, b in bundles.items():
            procs[p] = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "smcdp",
                    "party",
                    "--config",
                    str(b / "party.toml"),
                    "--ready-file",
                    str(tmp_path / f"{p}.ready"),
                ],
                cwd=REPO,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
        end = time.monotonic() + 60
        while not all((tmp_path / f"{p}.ready").exists() for p in bundles):
            assert time.monotonic() < end and all(pr.poll() is None for pr in procs.values())
            time.sleep(0.1)
        assert client.check_health(bundles["alice"] / "party.toml", peer="bob") == "SERVING"
        assert client.check_health(bundles["bob"] / "party.toml", peer="alice") == "SERVING"
    finally:
        for pr in procs.values():
            pr.send_signal(signal.SIGTERM)
        for pr in procs.values():
            assert pr.wait(timeout=30) == 0


def test_init_validates_inputs_before_writing_anything(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for d in ("a", "b"):
        (tmp_path / d / "X.npy").write_bytes(b"x")
    out = tmp_path / "d"
    inputs = {"alice": {"p": {"one": tmp_path / "a" / "X.npy", "two": tmp_path / "b" / "X.npy"}}}
    with pytest.raises(DeployError, match=r"share the file name X\.npy"):
        deploy.init_deployment(out, "alice=10.0.0.1:1,bob=10.0.0.2:1", inputs=inputs)
    assert not out.exists()
    with pytest.raises(DeployError, match="is not a readable file"):
        deploy.init_deployment(
            out, "alice=10.0.0.1:1,bob=10.0.0.2:1", inputs={"bob": {"p": {"x": tmp_path / "missing.npy"}}}
        )
    assert not out.exists()


# -------------------------------------------------------------------------------- add
def test_add_a_party_to_an_existing_deployment(deployment, capsys):
    certs_before = {n: (deployment / n / "certs" / f"{n}.crt").read_bytes() for n in ADDR}
    inputs_before = load_config(deployment / "alice" / "party.toml").inputs
    assert smcdp_main(["deploy", "add", "--dir", str(deployment), "--hosts", "dave=10.0.0.5:50051"]) == 0
    out = capsys.readouterr().out
    assert 'alice: dave = "10.0.0.5:50051"' in out
    dave = load_config(deployment / "dave" / "party.toml")
    assert dict(dave.peers) == ADDR
    assert dave.policy is not None and dave.policy.protocols == {} and not dave.policy.open  # joins nothing yet
    assert TlsMaterial.load(dave.tls.ca, dave.tls.cert, dave.tls.key).name == "dave"
    assert (deployment / "dave" / "certs" / "ca.crt").read_bytes() == (deployment / "ca" / "ca.crt").read_bytes()
    assert (
        deploy.validate_compose_document(
            deploy.compose_document(HostSpec("dave", "10.0.0.5", 50051)), deployment / "dave", "dave"
        )
        == []
    )
    for n in ADDR:
        cfg = load_config(deployment / n / "party.toml")
        assert cfg.peers["dave"] == "10.0.0.5:50051"
        assert (deployment / n / "certs" / f"{n}.crt").read_bytes() == certs_before[n]
    assert load_config(deployment / "alice" / "party.toml").inputs == inputs_before
    manifest = json.loads((deployment / "deployment.json").read_text())
    assert [p["name"] for p in manifest["parties"]] == [*ADDR, "dave"]
    # rotate knows the new party
    assert smcdp_main(["deploy", "rotate", "--dir", str(deployment), "--party", "dave"]) == 0


@pytest.mark.parametrize(
    "hosts, message",
    [
        ("bob=10.0.0.9:1", "already in the deployment: bob"),
        ("dave=10.0.0.1:50051", "would both listen on 10.0.0.1:50051"),
        ("Dave=10.0.0.9:1", "is not valid"),
        ("dave=trent:1", "host 'trent' of party 'dave' is the name of party 'trent'"),
    ],
)
def test_add_refuses_clashes(deployment, hosts, message, capsys):
    manifest = (deployment / "deployment.json").read_text()
    assert smcdp_main(["deploy", "add", "--dir", str(deployment), "--hosts", hosts]) == 2
    assert message in capsys.readouterr().err
    assert (deployment / "deployment.json").read_text() == manifest
    assert not (deployment / "dave").exists()


def test_a_party_may_not_be_added_under_a_host_name_of_the_deployment(tmp_path, capsys):
    """A short host name that later becomes a party's name: alice's certificate carries "db"."""
    out = tmp_path / "dep"
    assert smcdp_main(["deploy", "init", "--hosts", "alice=db:50051,bob=10.0.0.2:50051", "--out", str(out)]) == 0
    manifest = (out / "deployment.json").read_text()
    assert smcdp_main(["deploy", "add", "--dir", str(out), "--hosts", "db=10.0.0.3:50051"]) == 2
    assert "host 'db' of party 'alice' is the name of party 'db'" in capsys.readouterr().err
    assert (out / "deployment.json").read_text() == manifest and not (out / "db").exists()


def test_host_equal_to_the_own_party_name_is_fine(tmp_path):
    """Container networks name a party's host after the party (a compose service "alice"): still accepted."""
    assert [s.host for s in deploy.parse_hosts("alice=alice:50051,bob=bob:50051")] == ["alice", "bob"]


def test_bundle_certificates_name_their_party_by_its_identity_name_only(deployment):
    from smcdp.net.tls import certificate_identity_names

    for name in ADDR:
        cert = load_certificate(deployment / name / "certs" / f"{name}.crt")
        assert certificate_identity_names(cert) == [name]
        sans = _san(cert)
        assert f"{name}.party.smcdp.invalid" in sans
        assert not sans & ({p for p in ADDR if p != name} | {f"{p}.party.smcdp.invalid" for p in ADDR if p != name})


def test_check_refuses_a_certificate_of_an_earlier_version_and_rotate_repairs_it(deployment, capsys):
    """A bundle made before identity names: `deploy check` says to re-issue, `deploy rotate` does, and the
    bundle passes again with the same CA (the other parties need no change)."""
    from smcdp.net.tls import load_private_key, write_certificate, write_private_key
    from tests.support.callers import earlier_version_certificate

    certs = deployment / "bob" / "certs"
    ca_key = load_private_key(deployment / "ca" / "ca.key")
    key, cert = earlier_version_certificate(ca_key, load_certificate(certs / "ca.crt"), "bob", ["bob.example.org"])
    write_private_key(certs / "bob.key", key, overwrite=True)
    write_certificate(certs / "bob.crt", cert, overwrite=True)
    assert smcdp_main(["deploy", "check", str(deployment / "bob")]) == 1
    out = capsys.readouterr().out
    assert "no party identity name (bob.party.smcdp.invalid)" in out and "smcdp deploy rotate" in out
    assert smcdp_main(["deploy", "rotate", "--dir", str(deployment), "--party", "bob"]) == 0
    assert smcdp_main(["deploy", "check", str(deployment / "bob")]) == 0
    assert "bundle looks good" in capsys.readouterr().out


# ------------------------------------------------------------------------------ governance
def test_bundles_get_an_explicit_policy_and_budget_from_the_layouts(tmp_path, capsys):
    out = tmp_path / "gov"
    rc = smcdp_main(
        [
            "deploy",
            "init",
            "--hosts",
            HOSTS,
            "--out",
            str(out),
            "--roles",
            "power-iteration:trent=trent,party1=alice,party2=bob",
            "--roles",
            "dp-aggregate:charlie=charlie,dave=trent,party1=alice,party2=bob",
            "--roles",
            "keyword:alice=alice,bob=bob",
            "--initiator",
            "keyword=alice",
            "--budget",
            "4",
            "--approval",
            "operator",
        ]
    )
    assert rc == 0
    alice = load_config(out / "alice" / "party.toml")
    assert alice.policy.approval == "operator" and not alice.policy.allow_seeded and not alice.policy.open
    assert set(alice.policy.protocols) == {"power-iteration", "dp-aggregate", "keyword"}
    pi = alice.policy.protocols["power-iteration"]
    assert (pi.roles, pi.initiators, pi.coordinators, pi.allow_non_dp, pi.min_key_bits) == (
        ("party1",),
        ("trent",),
        ("trent",),
        True,
        2048,
    )
    dpa = alice.policy.protocols["dp-aggregate"]
    assert (dpa.initiators, dpa.coordinators, dpa.allow_non_dp) == (("charlie",), ("charlie", "trent"), False)
    assert alice.policy.protocols["keyword"].initiators == ("alice",)
    assert (alice.budget.dataset, alice.budget.epsilon, alice.budget.delta) == ("alice", 4.0, 1e-6)
    trent = load_config(out / "trent" / "party.toml")
    assert set(trent.policy.protocols) == {"power-iteration", "dp-aggregate"} and trent.budget is None
    assert trent.policy.protocols["dp-aggregate"].roles == ("dave",)
    # a party in no layout joins nothing
    charlie_only = load_config(out / "charlie" / "party.toml").policy.protocols
    assert set(charlie_only) == {"dp-aggregate"}


def test_without_layouts_every_party_joins_nothing(deployment, capsys):
    for name in ADDR:
        cfg = load_config(deployment / name / "party.toml")
        assert cfg.policy is not None and not cfg.policy.open and cfg.policy.protocols == {}


@pytest.mark.parametrize(
    "args, message",
    [
        (["--roles", "power-iteration"], "must look like PROTOCOL:ROLE=PARTY"),
        (["--roles", "nope:a=alice,b=bob"], "unknown protocol 'nope'"),
        (["--roles", "keyword:alice=alice,bob=zed"], "not in --hosts"),
        (["--roles", "keyword:alice=alice,bob=alice"], "at most one role"),
        (["--roles", "keyword:alice=alice"], "at least two roles"),
        (["--roles", "keyword:alice=alice,bob=bob", "--initiator", "keyword=trent"], "holds no role"),
        (["--roles", "keyword:alice=alice,bob=bob", "--initiator", "dp-aggregate=alice"], "no --roles layout"),
    ],
)
def test_layouts_are_validated(tmp_path, capsys, args, message):
    assert smcdp_main(["deploy", "init", "--hosts", HOSTS, "--out", str(tmp_path / "x"), *args]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_the_local_example_configs_have_an_explicit_policy_and_finite_budgets():
    for path in sorted((REPO / "deploy" / "local").glob("*.toml")):
        cfg = load_config(path)
        pol = cfg.policy
        assert pol is not None and not pol.open and not pol.allow_seeded and pol.protocols, path
        for proto, rules in pol.protocols.items():
            assert rules.initiators and "*" not in rules.initiators, (path, proto)
            assert rules.min_key_bits == 2048, (path, proto)
        if cfg.inputs.get("dp-aggregate", {}).get("data"):
            assert cfg.budget is not None and 0 < cfg.budget.epsilon < float("inf"), path
            assert pol.protocols["dp-aggregate"].max_epsilon is not None
        assert set(pol.protocols) <= {"power-iteration", "dp-aggregate"}


def test_check_reports_a_bundle_without_a_restrictive_policy(deployment):
    from dataclasses import replace as _replace

    from smcdp.runtime.config import dump_config
    from smcdp.runtime.governance.policy import Policy

    problems, notes = deploy.check_bundle(deployment / "alice")
    assert problems == [] and any(n.startswith("policy: joins no protocol") for n in notes)
    cfg = load_config(deployment / "alice" / "party.toml")
    for policy, text in ((None, "no [policy]"), (Policy(open=True, allow_seeded=True), "open = true")):
        dump_config(_replace(cfg, policy=policy), deployment / "alice" / "party.toml")
        problems, _ = deploy.check_bundle(deployment / "alice")
        assert any(text in p for p in problems), problems
    assert any("allow_seeded" in p for p in problems)


def test_the_image_lock_pins_every_runtime_dependency_of_pyproject():
    """deploy/requirements.lock (make docker-lock) must follow pyproject.toml: a dependency added
    to the package but not to the lock fails the image build's `pip check` (found that way once)."""
    import re
    import tomllib

    from packaging.requirements import Requirement

    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    pinned = {}
    for line in (REPO / "deploy" / "requirements.lock").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)", line)
        if m:
            pinned[re.sub(r"[-_.]+", "-", m.group(1)).lower()] = m.group(2)
    for dep in deps:
        req = Requirement(dep)
        if req.marker is not None and not req.marker.evaluate({"python_version": "3.11"}):
            continue
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        assert name in pinned, f"{req.name} is a dependency in pyproject.toml but not in the lock: make docker-lock"
        assert req.specifier.contains(pinned[name], prereleases=True), (req.name, str(req.specifier), pinned[name])


def test_check_notes_a_data_party_whose_policy_states_nothing_of_its_data(deployment):
    """A data party's policy without data_bounds refuses every session asking more than the protocol's default
    bound of its data (docs/governance.md, "Bounds on a party's data"): `smcdp deploy check` says so."""
    from dataclasses import replace as _replace

    from smcdp.runtime.config import dump_config
    from smcdp.runtime.governance.policy import Policy, ProtocolRules

    path = deployment / "alice" / "party.toml"
    cfg = load_config(path)
    data = deployment / "alice" / "a.npz"
    data.write_bytes(b"")
    rules = ProtocolRules(roles=("party*",), initiators=("bob",))
    for stated, noted in ((None, True), ((("records", 9),), False)):
        policy = Policy(protocols={"dp-aggregate": _replace(rules, data_bounds=stated)})
        dump_config(_replace(cfg, inputs={"dp-aggregate": {"data": data}}, policy=policy), path)
        _, notes = deploy.check_bundle(deployment / "alice")
        assert any(n.startswith("policy.dp-aggregate states no data_bounds") for n in notes) is noted, notes
