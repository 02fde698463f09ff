"""The party image, built and run: one container per party from `smcdp deploy init` bundles.

Runs as root with podman (``make container-test``; CI runs it from .ci/run) and skips with
the reason elsewhere (fails instead when SMCDP_REQUIRE_CONTAINER_TEST=1, as in CI).  The
containers get exactly the settings the bundle's docker-compose.yml asks for (translated
key by key, see harness.podman_run_args), with host networking inside a network namespace
this run creates: the parties reach each other on that namespace's loopback only.

The tests share one deployment and run in file order: the image, the containers' confinement,
every protocol against its plaintext computation, then SIGTERM and restarts.
"""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import tarfile
import threading
import time
from pathlib import Path

import pytest

from tests.integration.multihost.cases import (
    PI_ROLES,
    check_power_iteration,
    power_iteration_params,
    run_power_iteration,
)

from .harness import CONTAINER_UID, NOT_TRANSLATED, REPO, SECRET_CANARY, podman_run_args, read_env_file

pytestmark = [pytest.mark.container, pytest.mark.timeout(1800)]

CONFIG = "/etc/smcdp/party.toml"
HEALTH_CMD = ["CMD", "smcdp", "health", "--config", CONFIG]
PI_PARTIES = list(PI_ROLES.values())


def _sh(podman, image: str, script: str) -> subprocess.CompletedProcess:
    """A shell command in a throw-away container of ``image`` (no network)."""
    return podman.run("run", "--rm", "--network", "none", "--entrypoint", "sh", image, "-c", script, check=False)


# ------------------------------------------------------------------------------ image
def test_image_metadata_labels_and_healthcheck(podman, images):
    info = podman.image_inspect(images.image)
    cfg = info["Config"]
    labels = cfg["Labels"]
    version = re.search(r'^version\s*=\s*"([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M).group(1)
    assert labels["org.opencontainers.image.version"] == version
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
    if head.returncode == 0:
        assert re.fullmatch(
            re.escape(head.stdout.strip()) + r"(-dirty)?", labels["org.opencontainers.image.revision"]
        ), labels
    for key in ("source", "created", "title", "licenses"):
        assert labels.get(f"org.opencontainers.image.{key}"), (key, labels)
    assert cfg["User"] == f"{CONTAINER_UID}:{CONTAINER_UID}"
    assert cfg["Entrypoint"] == ["smcdp", "party", "--config", CONFIG]
    assert cfg["StopSignal"] == "SIGTERM"
    # the image's own HEALTHCHECK (podman keeps it only in the docker image format)
    assert info["Healthcheck"]["Test"] == HEALTH_CMD, info.get("Healthcheck")
    assert info["Healthcheck"]["Retries"] >= 1


def test_runtime_image_has_accelerator_but_no_build_tools_pip_or_caches(podman, images):
    """No compiler, no pip/setuptools/wheel in smcdp's virtualenv, no pip cache, no headers of
    the build stage.  (The base image's own interpreter may bring pip and Debian's ensurepip
    wheels, /usr/share/python-wheels, as python:3.11-slim does; smcdp does not use them.)"""
    r = _sh(
        podman,
        images.image,
        r"""
        set -u
        for t in gcc cc c++ g++ cpp x86_64-linux-gnu-gcc make ld as; do
          command -v "$t" >/dev/null && echo "FOUND tool $t"; done
        /opt/smcdp/bin/python -m pip --version >/dev/null 2>&1 && echo "FOUND pip in the venv"
        ls /opt/smcdp/bin /opt/smcdp/lib/python3*/site-packages \
          | grep -Ei '^(pip|pip3|setuptools|wheel|packaging)([-_.0-9]|$)' | sed 's/^/FOUND build package /'
        find / -xdev \( -path /proc -o -path /sys -o -path /usr/share/python-wheels \) -prune -o \
          \( -type d -name .cache -o -type f -name '*.whl' -o -path '/tmp/pip-*' \) \
          -print 2>/dev/null | sed 's/^/FOUND cache /'
        ls /usr/include/gmp*.h /usr/include/mpfr.h 2>/dev/null | sed 's/^/FOUND header /'
        exit 0""",
    )
    assert r.returncode == 0, r.stderr
    assert "FOUND" not in r.stdout, r.stdout
    # the C accelerator was built in the build stage and loads here, against libgmp10
    r = podman.run(
        "run",
        "--rm",
        "--network",
        "none",
        "--entrypoint",
        "python",
        images.image,
        "-c",
        "from smcdp.crypto import native; print(native.AVAILABLE, native.REASON)",
        check=False,
    )
    assert r.returncode == 0 and r.stdout.startswith("True built against GMP"), (r.stdout, r.stderr)


def test_dependencies_match_the_lock_file(podman, images):
    lock = {}
    for line in (REPO / "deploy" / "requirements.lock").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)==([^ \\;]+)", line)
        if m:
            lock[re.sub(r"[-_.]+", "-", m.group(1)).lower()] = m.group(2)
    r = podman.run(
        "run",
        "--rm",
        "--network",
        "none",
        "--entrypoint",
        "python",
        images.image,
        "-c",
        "import importlib.metadata as m, json; print(json.dumps("
        "{d.metadata['Name']: d.version for d in m.distributions()}))",
    )
    installed = {re.sub(r"[-_.]+", "-", k).lower(): v for k, v in json.loads(r.stdout).items()}
    assert installed.pop("smcdp") == re.search(
        r'^version\s*=\s*"([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M
    ).group(1)
    assert installed == lock


def test_build_secret_reaches_no_layer(podman, images, tmp_path):
    """The extra CA was passed as a build secret (with a canary line): no layer holds it."""
    assert SECRET_CANARY in images.secret_file.read_text()
    archive = tmp_path / "image.tar"
    podman.run("save", "--format", "docker-archive", "-o", str(archive), images.image, timeout=600)
    canary = SECRET_CANARY.encode()
    layers = 0
    with tarfile.open(archive) as outer:
        for member in outer:
            if not member.isfile():
                continue
            data = outer.extractfile(member).read()
            assert canary not in data, f"the build secret is in {member.name} of the saved image"
            if member.name.endswith(".tar"):
                layers += 1
    assert layers >= 2
    history = podman.run("history", "--no-trunc", "--format", "{{.CreatedBy}}", images.image).stdout
    assert "build_ca" not in history and SECRET_CANARY not in history, history


# ------------------------------------------------------------------------------ confinement
def test_podman_run_is_the_compose_file_translated(cluster):
    """Every key of each generated service is translated (harness.podman_run_args raises on an
    unknown one); the few that are not are listed with their reason."""
    import yaml

    for p in cluster.parties:
        doc = yaml.safe_load((cluster.bundle(p) / "docker-compose.yml").read_text())
        (svc,) = doc["services"].values()
        args, image = podman_run_args(cluster.bundle(p), name="x", network="host")
        assert image == cluster.image == read_env_file(cluster.bundle(p) / ".env")["SMCDP_IMAGE"]
        pairs = set(zip(args, args[1:]))
        for pair in [
            ("--user", f"{CONTAINER_UID}:{CONTAINER_UID}"),
            ("--cap-drop", "ALL"),
            ("--security-opt", "no-new-privileges:true"),
            ("--tmpfs", "/tmp"),
            ("--restart", "unless-stopped"),
            ("--stop-timeout", "30"),
            ("--read-only", "--read-only-tmpfs=false"),
            ("--health-cmd", json.dumps(HEALTH_CMD[1:])),
            ("--volume", f"{cluster.bundle(p).resolve()}/certs:/etc/smcdp/certs:ro"),
            ("--volume", f"{cluster.bundle(p).resolve()}/data:/etc/smcdp/data"),
        ]:
            assert pair in pairs, (p, pair, args)
        untranslated = {k for k in NOT_TRANSLATED if "." not in k}
        assert untranslated <= set(svc), (untranslated, list(svc))
        assert svc["ports"] == [f"{cluster.ports[p]}:{cluster.ports[p]}/tcp"]
        assert svc["container_name"] == f"smcdp-{p}"


def test_containers_are_confined_as_compose_asks(cluster):
    for p in cluster.parties:
        info = cluster.podman.inspect(cluster.name(p))
        host = info["HostConfig"]
        assert info["Config"]["User"] == f"{CONTAINER_UID}:{CONTAINER_UID}"
        assert host["ReadonlyRootfs"] is True
        assert "no-new-privileges" in " ".join(host["SecurityOpt"])
        assert info["Config"]["StopSignal"] in ("SIGTERM", 15)
        assert host["RestartPolicy"]["Name"] == "unless-stopped"
        r = cluster.exec(
            p,
            "sh",
            "-c",
            """
            id -u; id -g
            grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs):' /proc/1/status
            touch /probe 2>/dev/null && echo "ROOT WRITABLE"
            touch /etc/smcdp/probe 2>/dev/null && echo "BUNDLE WRITABLE"
            touch /etc/smcdp/certs/probe 2>/dev/null && echo "CERTS WRITABLE"
            touch /var/tmp/probe 2>/dev/null && echo "VAR TMP WRITABLE"
            touch /tmp/probe && echo "tmp ok"
            touch /etc/smcdp/data/probe && rm /etc/smcdp/data/probe && echo "data ok"
            grep ' /tmp ' /proc/mounts | cut -d' ' -f3""",
        )
        out = r.stdout
        lines = out.splitlines()
        assert lines[:2] == [str(CONTAINER_UID)] * 2, (p, out, r.stderr)
        for cap in ("CapEff", "CapPrm", "CapBnd"):
            assert re.search(rf"^{cap}:\s+0+$", out, re.M), (p, cap, out)
        assert re.search(r"^NoNewPrivs:\s+1$", out, re.M), (p, out)
        assert "WRITABLE" not in out, (p, out)
        assert "tmp ok" in out and "data ok" in out and "tmpfs" in out, (p, out)
        # the party process itself (PID 1) runs as 10001
        status = cluster.exec(p, "cat", "/proc/1/status").stdout
        assert re.search(rf"^Uid:\s+{CONTAINER_UID}\s+{CONTAINER_UID}\s+{CONTAINER_UID}", status, re.M), status


PRIVATE_KEY_RE = r"^-----BEGIN ([A-Z]+ )*PRIVATE KEY-----$"


def test_image_holds_no_private_key(podman, images):
    """Scanned as root in a container without any bundle: no file of the image is a key."""
    r = podman.run(
        "run",
        "--rm",
        "--network",
        "none",
        "--user",
        "0",
        "--entrypoint",
        "sh",
        images.image,
        "-c",
        f"grep -rlIE '{PRIVATE_KEY_RE}' /etc /opt /usr /root /var /home /srv /tmp; echo exit=$?",
        check=False,
        timeout=300,
    )
    assert r.stdout.strip().splitlines()[-1] == "exit=1", r.stdout  # grep: 1 = nothing found


def test_each_container_holds_only_its_own_private_key(cluster):
    for p in cluster.parties:
        r = cluster.exec(
            p, "sh", "-c", f"grep -rlE '{PRIVATE_KEY_RE}' /etc/smcdp /tmp; stat -c '%a %u %g' /etc/smcdp/certs/{p}.key"
        )
        lines = r.stdout.splitlines()
        assert lines[:-1] == [f"/etc/smcdp/certs/{p}.key"], (p, r.stdout, r.stderr)
        assert lines[-1] == f"600 {CONTAINER_UID} {CONTAINER_UID}", (p, lines[-1])
        # the bundle on the host holds no other party's key either
        on_host = sorted(f.name for f in cluster.bundle(p).rglob("*.key"))
        assert on_host == [f"{p}.key"], (p, on_host)


def test_healthcheck_reports_the_party_serving(cluster):
    for p in cluster.parties:
        r = cluster.healthcheck(p)
        assert r.returncode == 0, (p, r.stdout, r.stderr)
        assert cluster.podman.inspect(cluster.name(p))["State"]["Health"]["Status"] == "healthy"
        # the same command, run by hand, prints the grpc.health.v1 status
        r = cluster.cli(p, "health", "--config", CONFIG)
        assert (r.returncode, r.stdout.strip()) == (0, "SERVING"), (p, r.stdout, r.stderr)
    # every party reaches every other one with its own certificate
    for p in cluster.parties:
        for q in cluster.parties:
            if q != p:
                r = cluster.cli(p, "health", "--config", CONFIG, "--peer", q)
                assert r.stdout.strip() == "SERVING", (p, q, r.stdout, r.stderr)


# ------------------------------------------------------------------------------ protocols
@pytest.mark.parametrize("protocol", ["power-iteration", "dp-aggregate", "keyword"])
def test_protocol_between_containers_matches_plaintext(cluster, protocol):
    if protocol not in cluster.cases:
        pytest.fail(f"protocol {protocol} is not in this build")
    case = cluster.cases[protocol]
    t0 = time.monotonic()
    records = case.run(cluster, cluster.expected[protocol])
    assert set(records) == set(case.parties)
    print(f"{protocol}: {time.monotonic() - t0:.1f} s")


# ------------------------------------------------------------------------------ stop / restart
def test_sigterm_aborts_running_sessions_tells_peers_and_exits_0(cluster):
    """`podman stop` mid-session: alice aborts, every peer's record names alice, exit 0."""
    sid = f"trent.sigterm-{secrets.token_hex(4)}"  # in its initiator's namespace (issue 24)
    outcome = {}
    # A session that cannot end before alice is stopped, however loaded the host: a tolerance that never
    # stops it (tol² is 0), so it runs its 400 rounds -- half a minute -- unless interrupted.  (With the
    # default tolerance it converged in ~16 rounds, about a second, and at load ~20 it ended before
    # `podman stop` reached alice.)
    params = power_iteration_params(key_bits=2048, tol=1e-300, max_iterations=400)
    worker = threading.Thread(
        target=lambda: outcome.update(
            out=cluster.session("trent", "power-iteration", PI_ROLES, params, session_id=sid, timeout=90)
        )
    )
    worker.start()
    # Stop alice once the session runs at every participant.  (An abort sent before a peer has
    # accepted the Propose is refused there as an unknown session, and that peer then waits
    # for the session deadline: a property of the session layer, not of the container.)
    end = time.monotonic() + 60
    while not all(cluster.running_at(p, sid) for p in PI_PARTIES):
        assert time.monotonic() < end, f"session {sid} never ran everywhere: {cluster.log('alice')}"
        assert worker.is_alive(), outcome
        time.sleep(0.05)
    code, seconds = cluster.stop("alice")
    worker.join(120)
    assert not worker.is_alive()
    log = cluster.log("alice")
    assert code == 0, (code, log)
    assert seconds < 30, f"podman stop took {seconds:.1f} s: the party ignored SIGTERM until SIGKILL"
    assert "party alice: shutting down" in log and "party alice stopped" in log, log
    out = outcome["out"]
    assert out.returncode != 0, "the session succeeded although alice was stopped in the middle"
    # alice told every peer (the abort RPC was acknowledged by each)
    m = re.search(
        rf"session {sid} failed here \(UNAVAILABLE: party alice is shutting down\); "
        r"abort sent: (\{.*\})",
        log,
    )
    assert m, log
    assert json.loads(m.group(1).replace("'", '"')) == {p: "ok" for p in PI_PARTIES if p != "alice"}, log
    # A peer busy in a long computation (2048-bit tables on two shared cores) notices the abort
    # when its role next yields, at the latest at the session deadline (90 s).
    try:
        records = cluster.wait_records(PI_PARTIES, sid, timeout=150)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- alice:\n{log}") from None
    for p, rec in records.items():
        assert rec["state"] == "failed", (p, rec)
        err = rec["error"]
        assert err["origin"] == "alice" and "shutting down" in err["message"], (p, err)
    assert records["alice"]["error"]["code"] == "UNAVAILABLE"
    # with alice down, the health command says so (non-zero), from a peer's container
    r = cluster.cli("trent", "health", "--config", CONFIG, "--peer", "alice")
    assert r.returncode != 0 and "SERVING" not in r.stdout, (r.stdout, r.stderr)


def test_container_restarted_with_the_same_bundle_serves_again(cluster):
    others = {p: cluster.podman.inspect(cluster.name(p))["State"]["StartedAt"] for p in cluster.parties if p != "alice"}
    if cluster.running("alice"):
        cluster.stop("alice")
    # 1. the stopped container started again (what a restart policy or `docker-compose start` does)
    cluster.start("alice")
    run_power_iteration(cluster, cluster.expected["power-iteration"])
    # 2. a new container from the same bundle (what `docker-compose up` after `down` does)
    code, _ = cluster.stop("alice")
    assert code == 0
    cluster.podman.run("rm", cluster.name("alice"))
    cluster.create("alice")
    cluster.wait_healthy(["alice"], 90)
    records = run_power_iteration(cluster, cluster.expected["power-iteration"])
    check_power_iteration(records, cluster.expected["power-iteration"])
    r = cluster.cli("trent", "health", "--config", CONFIG, "--peer", "alice")
    assert r.stdout.strip() == "SERVING", (r.stdout, r.stderr)
    # the other parties kept running throughout
    for p, started in others.items():
        assert cluster.podman.inspect(cluster.name(p))["State"]["StartedAt"] == started, p


def test_every_party_stops_with_exit_0(cluster):
    for p in cluster.parties:
        code, seconds = cluster.stop(p)
        assert code == 0 and seconds < 30, (p, code, seconds, cluster.log(p))
        assert f"party {p} stopped" in cluster.log(p)
    assert Path(cluster.bundle("trent") / "data" / "sessions").is_dir()
