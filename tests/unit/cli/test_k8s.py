"""Structure of the optional Kubernetes manifests (no cluster here: nothing is applied)."""

from __future__ import annotations

import pytest

from smcdp.cli import deploy
from tests.support.paths import REPO as _REPO

yaml = pytest.importorskip("yaml", reason="PyYAML not installed (test extra): cannot parse deploy/k8s")

REPO = _REPO


@pytest.fixture(scope="module")
def docs():
    text = (REPO / "deploy" / "k8s" / "party.yaml").read_text().replace("PARTY", "alice")
    return {d["kind"]: d for d in yaml.safe_load_all(text) if d}


def test_one_party_per_namespace(docs):
    assert set(docs) == {"Namespace", "Service", "StatefulSet", "PersistentVolumeClaim", "NetworkPolicy"}
    assert docs["Namespace"]["metadata"]["name"] == "smcdp-alice"
    for kind, d in docs.items():
        if kind != "Namespace":
            assert d["metadata"]["namespace"] == "smcdp-alice", kind
    assert docs["StatefulSet"]["spec"]["replicas"] == 1


def test_pod_runs_non_root_with_the_bundle_layout_and_grpc_health(docs):
    pod = docs["StatefulSet"]["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == deploy.CONTAINER_UID
    (c,) = pod["containers"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    health = ["smcdp", "health", "--config", deploy.CONTAINER_CONFIG]
    assert c["readinessProbe"]["exec"]["command"] == health
    assert c["livenessProbe"]["exec"]["command"] == health
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert mounts[deploy.CONTAINER_CONFIG]["subPath"] == "party.toml"
    for sub, ro in (("certs", True), ("inputs", True), ("data", False)):
        m = mounts[f"{deploy.CONTAINER_DIR}/{sub}"]
        assert bool(m.get("readOnly", False)) is ro, sub
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["certs"]["secret"]["secretName"] == "smcdp-alice-certs"
    assert volumes["config"]["configMap"]["name"] == "smcdp-alice-config"
    assert [t["metadata"]["name"] for t in docs["StatefulSet"]["spec"]["volumeClaimTemplates"]] == ["data"]


def test_service_exposes_the_grpc_port(docs):
    (port,) = docs["Service"]["spec"]["ports"]
    assert port["port"] == 50051 and port["targetPort"] == "grpc"
    (c,) = docs["StatefulSet"]["spec"]["template"]["spec"]["containers"]
    assert {"name": "grpc", "containerPort": 50051, "protocol": "TCP"} in c["ports"]
