"""A generated bundle run by docker-compose itself, against podman's Docker-compatible socket.

``podman system service`` runs inside a network namespace this test creates (entered with
``nsenter --net`` only), so the bridge network and port forwarding that docker-compose asks
for exist only there; the namespace's own address 10.213.9.1 (on a veth pair whose both ends
stay inside it) plays the host's address.  bob -- the keyword server -- is started with
``docker-compose up -d`` in his bundle; alice is a plain container with host networking in
the same namespace.  A keyword session between them is checked against the plaintext
recogniser, so bob's published port, volumes and user are exercised, not only parsed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

from tests.integration.multihost.cases import KEYWORD, governance_args, run_keyword

from .harness import CONTAINER_UID, ContainerCluster, smcdp_command

pytestmark = [pytest.mark.container, pytest.mark.timeout(900)]

HOST_ADDR = "10.213.9.1"
PORTS = {"alice": 50081, "bob": 50082}


class ComposeCluster(ContainerCluster):
    """alice: podman run (host networking in the namespace); bob: docker-compose up -d."""

    def name(self, party: str) -> str:
        return "smcdp-bob" if party == "bob" else super().name(party)

    def compose(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
        env = dict(self.podman.env, DOCKER_HOST=f"unix://{self.socket}", COMPOSE_INTERACTIVE_NO_CLI="1")
        return subprocess.run(
            ["docker-compose", "--project-name", f"smcdp-ct-{self.run_id}", *args],
            cwd=self.bundle("bob"),
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def up(self) -> None:
        self.podman.remove_leftovers()
        ns = self.netns
        for cmd in (
            ["ip", "netns", "add", ns],
            ["ip", "-n", ns, "link", "set", "lo", "up"],
            ["ip", "-n", ns, "link", "add", "ct0", "type", "veth", "peer", "name", "ct1"],
            ["ip", "-n", ns, "addr", "add", f"{HOST_ADDR}/24", "dev", "ct0"],
            ["ip", "-n", ns, "link", "set", "ct0", "up"],
            ["ip", "-n", ns, "link", "set", "ct1", "up"],
        ):
            subprocess.run(cmd, check=True, capture_output=True)
            self.netns_made = True
        self.socket = self.workdir / "podman.sock"
        self.service_log = open(self.workdir / "podman-service.log", "wb")  # noqa: SIM115 - the service's stdout, closed with it
        self.service = subprocess.Popen(
            [
                "nsenter",
                f"--net=/run/netns/{ns}",
                "podman",
                "system",
                "service",
                "--time",
                "0",
                f"unix://{self.socket}",
            ],
            env=self.podman.env,
            stdout=self.service_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        hosts = ",".join(f"{p}={HOST_ADDR}:{port}" for p, port in PORTS.items())
        cmd = [
            smcdp_command(),
            "deploy",
            "init",
            "--hosts",
            hosts,
            "--out",
            str(self.deploy_dir),
            "--image",
            self.image,
            "--allow-insecure-keys",
            "--connect-seconds",
            "3",
            "--session-seconds",
            "120",
            "--rpc-seconds",
            "20",
        ]
        for item in self.inputs:
            cmd += ["--inputs", item]
        for module in self.plugins:
            cmd += ["--plugin", module]
        cmd += self.init_args
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        from .harness import hand_to_container_user

        for p in self.parties:
            hand_to_container_user(self.bundle(p))
        end = time.monotonic() + 30
        while not self.socket.exists():
            assert self.service.poll() is None and time.monotonic() < end, (
                self.workdir / "podman-service.log"
            ).read_text()
            time.sleep(0.2)

    def start_all(self, wait: float = 180.0) -> None:
        self.create("alice")
        r = self.compose("up", "-d")
        assert r.returncode == 0, (r.stdout, r.stderr)
        self.compose_up = True
        self.wait_healthy(["alice", "bob"], wait)

    def down(self) -> None:
        if getattr(self, "compose_up", False):
            self.compose("down", "--timeout", "30")
        super().down()
        service = getattr(self, "service", None)
        if service is not None and service.poll() is None:
            service.terminate()
            try:
                service.wait(20)
            except subprocess.TimeoutExpired:
                service.kill()
                service.wait()
        if getattr(self, "service_log", None):
            self.service_log.close()


@pytest.fixture(scope="module")
def compose_cluster(podman, images, tmp_path_factory):
    if shutil.which("docker-compose") is None:
        reason = "docker-compose is not installed (apt-get install docker-compose)"
        if os.environ.get("SMCDP_REQUIRE_CONTAINER_TEST") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    workdir = tmp_path_factory.mktemp("compose")
    items, expected = KEYWORD.inputs(workdir, KEYWORD.parties)
    c = ComposeCluster(
        podman, images.image, ["alice", "bob"], workdir, inputs=items, init_args=governance_args([KEYWORD])
    )
    c.expected = expected
    try:
        c.up()
        c.start_all()
        yield c
    finally:
        c.down()


def test_compose_up_runs_the_bundle_as_written(compose_cluster):
    c = compose_cluster
    r = c.compose("ps")
    assert r.returncode == 0 and "smcdp-bob" in r.stdout and "healthy" in r.stdout, r.stdout
    info = c.podman.inspect("smcdp-bob")
    host = info["HostConfig"]
    assert info["Config"]["User"] == f"{CONTAINER_UID}:{CONTAINER_UID}"
    assert info["Config"]["Labels"]["com.docker.compose.project"] == f"smcdp-ct-{c.run_id}"
    assert host["ReadonlyRootfs"] is True
    assert host["RestartPolicy"]["Name"] == "unless-stopped"
    assert any("no-new-privileges" in s for s in host["SecurityOpt"]), host["SecurityOpt"]
    assert host["PortBindings"]["50082/tcp"][0]["HostPort"] == "50082"
    status = c.exec("bob", "cat", "/proc/1/status").stdout
    assert "NoNewPrivs:\t1" in status and "CapEff:\t0000000000000000" in status, status
    # the operator's check from the guide, through docker-compose exec
    r = c.compose("exec", "-T", "bob", "smcdp", "health", "--config", "/etc/smcdp/party.toml", "--peer", "alice")
    assert (r.returncode, r.stdout.strip()) == (0, "SERVING"), (r.stdout, r.stderr)


def test_keyword_session_with_the_compose_run_party(compose_cluster):
    records = run_keyword(compose_cluster, compose_cluster.expected)
    assert records["bob"]["state"] == "succeeded"


def test_compose_stop_is_a_clean_sigterm(compose_cluster):
    c = compose_cluster
    r = c.compose("stop", timeout=120)
    assert r.returncode == 0, r.stderr
    state = c.podman.inspect("smcdp-bob")["State"]
    assert (state["Running"], state["ExitCode"]) == (False, 0), state
    assert "party bob stopped" in c.log("bob")
