"""Party containers under podman, started from `smcdp deploy init` bundles.

What this module provides to the container tests:

* :class:`Podman` -- podman with a ``containers.conf`` the test writes itself (pointed to by
  ``CONTAINERS_CONF``; nothing under /etc is changed): ``default_ulimits = []``, the cgroupfs
  cgroup manager and runc (Debian's podman with crun fails on rlimits and hybrid cgroups),
  and a CNI configuration directory of its own, so networks made by docker-compose land
  in the test's directory, not in /etc/cni.
* :func:`build_images` -- the local base image (``deploy/image/base-image.sh``, cached
  between runs) and the party image through ``deploy/image/build.sh``, the script behind
  ``make docker-image``.
* :func:`podman_run_args` -- the ``podman run`` arguments for a bundle's service, translated
  key by key from the generated ``docker-compose.yml`` (an unknown key is an error, so a
  change of the compose file cannot silently escape the test).
* :class:`ContainerCluster` -- one container per party in a network namespace the test
  creates, host networking inside it, parties on loopback ports of that namespace.  Operator
  commands run as an operator runs them: ``podman exec <party> smcdp session start ...``.
  Its ``session``/``wait_records``/``log`` match the multi-host harness, so the protocol
  cases of ``tests/integration/multihost/cases.py`` (checks against the plaintext computation) run here
  unchanged.

Parties are started and probed only through the console script (``smcdp party`` is the
image's entry point; ``smcdp health``, ``smcdp session start``), never through module paths.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.bundles import BundleRecords

REPO = Path(__file__).resolve().parents[3]
BASE_IMAGE = "localhost/smcdp-python:3.11-bookworm"
TEST_IMAGE = "localhost/smcdp:container-test"
CONTAINER_UID = 10001
#: label on every container this harness starts: "<owner pid>-<hex>", for leftover clean-up
RUN_LABEL = "org.smcdp.test-run"
NETNS_PREFIX = "smcdp-ct-"
#: a line only the build secret holds: the test scans the image's layers for it
SECRET_CANARY = "smcdp-build-secret-canary-3f9c1e"


def smcdp_command() -> str:
    """The console script of the smcdp installed next to this interpreter (the venv's)."""
    local = Path(sys.executable).parent / "smcdp"
    if local.exists():
        return str(local)
    found = shutil.which("smcdp")
    if not found:
        raise RuntimeError("the smcdp console script is not installed (make install)")
    return found


def unavailable_reason() -> str | None:
    """Why the container tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "the container tests need root (rootful podman, network namespaces); run them as root"
    for tool, pkg in (("podman", "podman"), ("ip", "iproute2"), ("nsenter", "util-linux")):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install {pkg})"
    if not os.environ.get("SMCDP_TEST_PYTHON_IMAGE") and shutil.which("debootstrap") is None:
        return (
            "debootstrap is not installed (apt-get install debootstrap) and no base image was "
            "given (SMCDP_TEST_PYTHON_IMAGE=python:3.11-slim-bookworm)"
        )
    return None


# ============================================================================ podman
@dataclass
class Podman:
    workdir: Path

    def __post_init__(self) -> None:
        self.workdir = Path(self.workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.cni_dir = self.workdir / "cni"
        self.cni_dir.mkdir(exist_ok=True)
        self.conf = self.workdir / "containers.conf"
        runtime = 'runtime = "runc"\n' if shutil.which("runc") else ""
        self.conf.write_text(
            "# written by the smcdp container tests; used through CONTAINERS_CONF only\n"
            "[containers]\ndefault_ulimits = []\n"
            f'[engine]\ncgroup_manager = "cgroupfs"\n{runtime}'
            f'[network]\nnetwork_config_dir = "{self.cni_dir}"\n'
        )
        self.env = dict(os.environ, CONTAINERS_CONF=str(self.conf))

    def run(
        self, *args: str, timeout: float = 120, check: bool = True, input: str | None = None
    ) -> subprocess.CompletedProcess:
        r = subprocess.run(
            ["podman", *args], capture_output=True, text=True, timeout=timeout, env=self.env, input=input
        )
        # podman without systemd logs harmless errors about health-check timers on stderr
        r.stderr = "\n".join(line for line in r.stderr.splitlines() if "unable to get systemd connection" not in line)
        if check and r.returncode != 0:
            raise RuntimeError(f"podman {' '.join(args)} failed ({r.returncode}):\n{r.stderr}\n{r.stdout}")
        return r

    def inspect(self, name: str) -> dict:
        return json.loads(self.run("inspect", name).stdout)[0]

    def image_inspect(self, image: str) -> dict:
        return json.loads(self.run("image", "inspect", image).stdout)[0]

    def remove_leftovers(self) -> None:
        """Containers and namespaces of earlier runs whose owner process no longer exists."""
        r = self.run("ps", "-a", "--format", "{{.Names}} {{.Labels}}", check=False)
        for line in r.stdout.splitlines():
            name = line.split()[0] if line.split() else ""
            # ours, or made by the compose test (project smcdp-ct-<pid>-<hex>)
            m = re.search(RUN_LABEL.replace(".", r"\.") + r":(\d+)-", line) or re.search(
                r"com\.docker\.compose\.project:smcdp-ct-(\d+)-", line
            )
            if name and m and not _pid_alive(int(m.group(1))):
                self.run("rm", "-f", "-t", "0", name, check=False)
        for ns in _netns_list():
            m = re.match(re.escape(NETNS_PREFIX) + r"(\d+)-", ns)
            if m and not _pid_alive(int(m.group(1))):
                subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _netns_list() -> list[str]:
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]


# ============================================================================ images
@dataclass
class BuiltImages:
    image: str
    base: str
    base_seconds: float
    build_seconds: float
    secret_file: Path


def build_images(podman: Podman, image: str = TEST_IMAGE) -> BuiltImages:
    """Base image (cached between runs) and the party image, through make docker-image's script.

    The build trusts the host's CA bundle as the build secret (where the package index sits
    behind a TLS-intercepting proxy, pip in the build container needs it), with a canary
    line appended so that the tests can prove the secret reaches no layer of the image.
    """
    base = os.environ.get("SMCDP_TEST_PYTHON_IMAGE", "")
    t0 = time.monotonic()
    if not base:
        base = BASE_IMAGE
        r = subprocess.run(
            [str(REPO / "deploy" / "image" / "base-image.sh"), base],
            env=podman.env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        if r.returncode != 0:
            raise RuntimeError(f"base-image.sh failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    base_seconds = time.monotonic() - t0
    secret = podman.workdir / "build-ca.pem"
    host_ca = Path("/etc/ssl/certs/ca-certificates.crt")
    secret.write_text((host_ca.read_text() if host_ca.exists() else "") + f"# {SECRET_CANARY}\n")
    # Build containers use the host's network (not a podman bridge): no interface or
    # firewall rule is added to the host for the build.
    env = dict(
        podman.env,
        IMAGE=image,
        PYTHON_IMAGE=base,
        BUILD_CA=str(secret),
        CONTAINER_ENGINE="podman",
        BUILD_FLAGS="--network=host",
    )
    t0 = time.monotonic()
    r = subprocess.run(
        [str(REPO / "deploy" / "image" / "build.sh")], env=env, capture_output=True, text=True, timeout=1500
    )
    if r.returncode != 0:
        raise RuntimeError(f"build.sh failed ({r.returncode}):\n{r.stdout[-6000:]}\n{r.stderr[-6000:]}")
    return BuiltImages(image, base, base_seconds, time.monotonic() - t0, secret)


# ============================================================================ compose -> podman run
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
#: compose keys that a namespace run does not translate, and why (the tests assert this list)
NOT_TRANSLATED = {
    "container_name": "a unique name per test run instead (runs may overlap on one machine)",
    "ports": "host networking in the test's namespace: the party binds its port there directly",
    "logging.options.max-file": "podman's k8s-file log driver has no rotation count",
}


def read_env_file(path: Path) -> dict[str, str]:
    env = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            k, v = line.split("=", 1)
            env[k.strip()] = v.strip()
    return env


def substitute(value: str, env: Mapping[str, str]) -> str:
    """docker-compose's ``${VAR}`` / ``${VAR:-default}`` with the bundle's .env."""
    return _ENV_REF.sub(lambda m: env.get(m.group(1)) or (m.group(2) or ""), value)


def _duration(text: str) -> str:
    if not re.match(r"^\d+(ms|s|m|h)$", text):
        raise ValueError(f"not a duration: {text!r}")
    return text


def podman_run_args(bundle: Path, *, name: str, network: str, labels: Mapping[str, str] = {}) -> tuple[list[str], str]:
    """``podman run`` options and image for the one service of ``bundle/docker-compose.yml``.

    Every key of the service is either translated to the equivalent podman option or listed
    in :data:`NOT_TRANSLATED`; any other key raises, so the test follows the compose file.
    """
    import yaml

    doc = yaml.safe_load((bundle / "docker-compose.yml").read_text())
    env = read_env_file(bundle / ".env")
    ((svc_name, svc),) = doc["services"].items()
    args = ["--name", name, "--network", network]
    for k, v in labels.items():
        args += ["--label", f"{k}={v}"]
    image = ""
    for key, value in svc.items():
        if key == "image":
            image = substitute(value, env)
        elif key in ("container_name", "ports"):
            continue
        elif key == "hostname":
            args += ["--hostname", value]
        elif key == "restart":
            args += ["--restart", value]
        elif key == "user":
            args += ["--user", substitute(value, env)]
        elif key == "volumes":
            for v in value:
                src, dst, *mode = v.split(":")
                host = (bundle / src[2:]).resolve() if src.startswith("./") else Path(src)
                args += ["--volume", ":".join([str(host), dst, *mode])]
        elif key == "environment":
            for k, v in value.items():
                args += ["--env", f"{k}={v}"]
        elif key == "read_only":
            # podman adds tmpfs mounts on /run, /tmp, /var/tmp to a read-only root by default;
            # Docker does not: only what the compose file lists (tmpfs) is writable
            args += ["--read-only", "--read-only-tmpfs=false"] if value else []
        elif key == "tmpfs":
            for t in value:
                args += ["--tmpfs", t]
        elif key == "security_opt":
            for s in value:
                args += ["--security-opt", s]
        elif key == "cap_drop":
            for c in value:
                args += ["--cap-drop", c]
        elif key == "cap_add":
            for c in value:
                args += ["--cap-add", c]
        elif key == "healthcheck":
            test = value["test"]
            if test[0] != "CMD":
                raise ValueError(f"healthcheck.test must be exec form, got {test!r}")
            args += [
                "--health-cmd",
                json.dumps(test[1:]),
                "--health-interval",
                _duration(value["interval"]),
                "--health-timeout",
                _duration(value["timeout"]),
                "--health-retries",
                str(int(value["retries"])),
                "--health-start-period",
                _duration(value["start_period"]),
            ]
        elif key == "stop_grace_period":
            m = re.match(r"^(\d+)s$", value)
            if not m:
                raise ValueError(f"stop_grace_period {value!r}: whole seconds expected")
            args += ["--stop-timeout", m.group(1)]
        elif key == "logging":
            args += ["--log-driver", {"json-file": "k8s-file"}.get(value["driver"], value["driver"])]
            for k, v in value.get("options", {}).items():
                if k == "max-size":
                    args += ["--log-opt", f"max-size={v}"]
                elif f"logging.options.{k}" not in NOT_TRANSLATED:
                    raise ValueError(f"logging option {k!r} has no podman translation")
        else:
            raise ValueError(
                f"docker-compose key services.{svc_name}.{key} has no podman translation "
                "in tests/integration/containers/harness.py; add one"
            )
    return args, image


# ============================================================================ cluster
@dataclass
class SessionOutcome:
    returncode: int
    record: dict | None
    stderr: str
    seconds: float


@dataclass
class ContainerCluster(BundleRecords):
    """One party container per party, host networking inside a namespace of this run."""

    podman: Podman
    image: str
    parties: Sequence[str]
    workdir: Path
    inputs: list[str] = field(default_factory=list)
    plugins: list[str] = field(default_factory=list)
    #: extra `deploy init` arguments (the policy: --roles, --initiator, --budget)
    init_args: list[str] = field(default_factory=list)
    connect_seconds: float = 3.0
    session_seconds: float = 120.0
    rpc_seconds: float = 20.0
    base_port: int = 50051
    run_id: str = field(default_factory=lambda: f"{os.getpid()}-{secrets.token_hex(3)}")

    def __post_init__(self) -> None:
        self.workdir = Path(self.workdir)
        self.deploy_dir = self.workdir / "deployment"
        self.ports = {p: self.base_port + i for i, p in enumerate(self.parties)}
        self.netns = f"{NETNS_PREFIX}{self.run_id}"
        self.netns_made = False
        self.started: set[str] = set()

    # ------------------------------------------------------------------ names
    def name(self, party: str) -> str:
        return f"smcdp-{party}-{self.run_id}"

    def bundle(self, party: str) -> Path:
        return self.deploy_dir / party

    # ------------------------------------------------------------------ set-up
    def up(self) -> None:
        self.podman.remove_leftovers()
        subprocess.run(["ip", "netns", "add", self.netns], check=True, capture_output=True)
        self.netns_made = True
        subprocess.run(["ip", "-n", self.netns, "link", "set", "lo", "up"], check=True, capture_output=True)
        hosts = ",".join(f"{p}=127.0.0.1:{self.ports[p]}" for p in self.parties)
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
            str(self.connect_seconds),
            "--session-seconds",
            str(self.session_seconds),
            "--rpc-seconds",
            str(self.rpc_seconds),
        ]
        for item in self.inputs:
            cmd += ["--inputs", item]
        for module in self.plugins:
            cmd += ["--plugin", module]
        cmd += self.init_args
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"smcdp deploy init failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
        for p in self.parties:
            hand_to_container_user(self.bundle(p))

    def run_args(self, party: str) -> tuple[list[str], str]:
        return podman_run_args(
            self.bundle(party),
            name=self.name(party),
            network=f"ns:/run/netns/{self.netns}",
            labels={RUN_LABEL: self.run_id},
        )

    def create(self, party: str) -> None:
        args, image = self.run_args(party)
        if image != self.image:
            raise AssertionError(f"the bundle's compose file runs {image!r}, not {self.image!r}")
        self.podman.run("run", "--detach", *args, image)
        self.started.add(party)

    def start(self, party: str, wait: float = 90.0) -> None:
        """Start the (stopped) container of ``party`` again -- same bundle -- and wait for it."""
        self.podman.run("start", self.name(party))
        self.wait_healthy([party], wait)

    def start_all(self, wait: float = 180.0) -> None:
        for p in self.parties:
            self.create(p)
        self.wait_healthy(self.parties, wait)

    def healthcheck(self, party: str) -> subprocess.CompletedProcess:
        """The container's own HEALTHCHECK command, run now (``podman healthcheck run``)."""
        return self.podman.run("healthcheck", "run", self.name(party), check=False, timeout=60)

    def wait_healthy(self, parties: Sequence[str], wait: float) -> None:
        """Run each container's health check until it passes (podman without systemd has no
        timer that runs it periodically)."""
        end = time.monotonic() + wait
        for p in parties:
            while True:
                state = self.podman.inspect(self.name(p))["State"]
                if not state["Running"]:
                    raise RuntimeError(
                        f"container of {p} is not running ({state['Status']}, exit {state['ExitCode']}):\n{self.log(p)}"
                    )
                if self.healthcheck(p).returncode == 0:
                    break
                if time.monotonic() > end:
                    raise RuntimeError(f"{p} not healthy after {wait:g} s:\n{self.log(p)}")
                time.sleep(0.5)

    def stop(self, party: str) -> tuple[int, float]:
        """``podman stop`` (SIGTERM, then SIGKILL after the stop timeout): (exit code, seconds)."""
        t0 = time.monotonic()
        self.podman.run("stop", self.name(party), timeout=90)
        seconds = time.monotonic() - t0
        return self.podman.inspect(self.name(party))["State"]["ExitCode"], seconds

    def running(self, party: str) -> bool:
        return bool(self.podman.inspect(self.name(party))["State"]["Running"])

    def log(self, party: str) -> str:
        r = self.podman.run("logs", self.name(party), check=False)
        return (r.stdout + r.stderr)[-6000:]

    def down(self) -> None:
        """Remove every container and the namespace of this run (never raises)."""
        for p in self.started:
            try:
                self.podman.run("rm", "--force", "--time", "10", self.name(p), check=False, timeout=60)
            except Exception:  # noqa: BLE001 - teardown goes on
                pass
        if self.netns_made:
            subprocess.run(["ip", "netns", "del", self.netns], capture_output=True)

    # -------------------------------------------------------------- operations
    def exec(self, party: str, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
        """A command inside ``party``'s container, as ``docker-compose exec -T`` runs it."""
        return self.podman.run("exec", self.name(party), *args, check=False, timeout=timeout)

    def cli(self, party: str, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
        return self.exec(party, "smcdp", *args, timeout=timeout)

    def session(
        self,
        initiator: str,
        protocol: str,
        roles: Mapping[str, str],
        params: Mapping[str, Any],
        *,
        session_id: str | None = None,
        timeout: float | None = None,
    ) -> SessionOutcome:
        """``smcdp session start`` in the initiator's container; its record from stdout."""
        args = [
            "session",
            "start",
            "--config",
            "/etc/smcdp/party.toml",
            "--protocol",
            protocol,
            "--params",
            json.dumps(dict(params)),
        ]
        for role, party in roles.items():
            args += ["--role", f"{role}={party}"]
        if session_id:
            args += ["--session-id", session_id]
        if timeout:
            args += ["--timeout", str(timeout)]
        t0 = time.monotonic()
        r = self.cli(initiator, *args, timeout=(timeout or self.session_seconds) + 90)
        seconds = time.monotonic() - t0
        try:
            record = json.loads(r.stdout) if r.stdout.strip() else None
        except ValueError:
            record = None
        return SessionOutcome(r.returncode, record, r.stderr, seconds)


def hand_to_container_user(bundle: Path) -> None:
    """The operator's documented step: ``chown -R 10001:10001 certs data inputs``."""
    for sub in ("certs", "data", "inputs"):
        for root, _dirs, files in os.walk(bundle / sub):
            os.chown(root, CONTAINER_UID, CONTAINER_UID)
            for f in files:
                os.chown(os.path.join(root, f), CONTAINER_UID, CONTAINER_UID)
