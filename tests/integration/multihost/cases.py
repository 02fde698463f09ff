"""Protocols the multi-host test runs: one :class:`ProtocolCase` each.

To add a protocol: write ``_<name>_inputs`` (write its input files, return the
``--inputs`` items for ``smcdp deploy init`` and the expected answer) and
``_<name>_run`` (run one session through the cluster and assert the result),
then add it to :func:`available_cases`.  A case is used only if its protocol
is registered in this build (``smcdp.plugins.base.known_protocols``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .harness import NetnsCluster, ProtocolCase

#: Paillier key size for the namespace test.  512-bit keys are INSECURE; the deployment
#: opts in explicitly (`smcdp deploy init --allow-insecure-keys`).  Justification: this test
#: is about the network (addresses, TLS between hosts, failures); key size only changes the
#: CPU time per ciphertext (~30x per operation at 2048 bits on the shared 2-core CI
#: machine), and the 2048-bit path runs in the protocol tests and `make demo`.
KEY_BITS = 512

POWER_ITERATION_PARTIES = ("trent", "alice", "bob", "charlie")
PI_ROLES = {"trent": "trent", "party1": "alice", "party2": "bob", "party3": "charlie"}


def _power_iteration_inputs(workdir: Path, parties: Sequence[str]):
    rng = np.random.default_rng(7)
    k = 6
    # M = [A_1 A_2 A_3] with a clear spectral gap so 60 rounds converge far below 1e-4
    basis = np.linalg.qr(rng.normal(size=(k, k)))[0]
    M = basis @ np.diag([5.0, 2.0, 1.0, 0.6, 0.3, 0.1]) @ np.linalg.qr(rng.normal(size=(k, 9)).T)[0].T
    blocks = [M[:, 0:3], M[:, 3:7], M[:, 7:9]]
    items = []
    for party, block in zip(list(PI_ROLES.values())[1:], blocks, strict=True):
        path = workdir / f"{party}-A.npy"
        np.save(path, block)
        items.append(f"{party}:power-iteration:data={path}")
    return items, blocks


def power_iteration_params(**extra) -> dict:
    return {"n_parties": 3, "key_bits": KEY_BITS, **extra}


def check_power_iteration(records: dict[str, dict], blocks) -> None:
    """Trent's x and every data party's u against numpy's eigenvectors (same sign convention)."""
    from smcdp.protocols.power_iteration import plaintext_reference

    u_ref, x_ref = plaintext_reference(blocks)
    for party, rec in records.items():
        assert rec["state"] == "succeeded", (party, rec.get("error"))
    x = np.asarray(records["trent"]["result"]["x"])
    assert x.shape == x_ref.shape
    assert abs(float(x @ x_ref)) >= 0.9999, (x, x_ref)
    assert np.allclose(x, x_ref, atol=1e-4), (x, x_ref)
    for party in ("alice", "bob", "charlie"):
        u = np.asarray(records[party]["result"]["u"])
        assert np.allclose(u, u_ref, atol=1e-4), (party, u, u_ref)


def run_power_iteration(
    cluster: NetnsCluster, blocks, session_id: str | None = None, timeout: float = 60.0
) -> dict[str, dict]:
    out = cluster.session(
        "trent", "power-iteration", PI_ROLES, power_iteration_params(), session_id=session_id, timeout=timeout
    )
    assert out.returncode == 0, f"session failed ({out.returncode}): {out.stderr}"
    sid = out.record["session_id"]
    records = cluster.wait_records(list(PI_ROLES.values()), sid, timeout=30)
    check_power_iteration(records, blocks)
    return records


POWER_ITERATION = ProtocolCase(
    "power-iteration",
    POWER_ITERATION_PARTIES,
    _power_iteration_inputs,
    run_power_iteration,
    roles=PI_ROLES,
    initiator="trent",
)


# ------------------------------------------------------------------------ dp-aggregate
#: roles are not party names: trent plays the user "dave" who receives the classifier
DPA_ROLES = {"charlie": "charlie", "dave": "trent", "party1": "alice", "party2": "bob"}
DPA_LAM = 0.1
#: a very large ε makes the noise negligible (Δ ≈ 1/(nλ) = 0.25 -> |η| ~ 1e-5), so Dave's
#: model can be compared with the plain average of the parties' local fits
DPA_EPSILON = 1e4


def _dp_aggregate_inputs(workdir: Path, parties: Sequence[str]):
    rng = np.random.default_rng(11)
    w_true = np.array([1.5, -2.0])
    items, sets = [], []
    for party, n in (("alice", 40), ("bob", 60)):
        X = rng.normal(size=(n, 2))
        X = 0.9 * X / np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
        y = np.where(X @ w_true + 0.1 * rng.normal(size=n) > 0, 1, -1)
        path = workdir / f"{party}-dpa.npz"
        np.savez(path, X=X, y=y)
        items.append(f"{party}:dp-aggregate:data={path}")
        sets.append((X, y))
    return items, sets


def run_dp_aggregate(cluster: NetnsCluster, sets, session_id: str | None = None) -> dict[str, dict]:
    from smcdp.protocols.dp_aggregate import train_local

    params = {
        "n_parties": 2,
        "dim": 2,
        "epsilon": DPA_EPSILON,
        "lam": DPA_LAM,
        "key_bits": KEY_BITS,
        "dgk_bits": KEY_BITS,
        "dgk_t": 96,
    }
    out = cluster.session("charlie", "dp-aggregate", DPA_ROLES, params, session_id=session_id, timeout=90)
    assert out.returncode == 0, f"session failed ({out.returncode}): {out.stderr}"
    sid = out.record["session_id"]
    records = cluster.wait_records(list(DPA_ROLES.values()), sid, timeout=30)
    for party, rec in records.items():
        assert rec["state"] == "succeeded", (party, rec.get("error"))
    dave = records["trent"]["result"]
    # every publisher's share reached dave unchanged, in publisher order (charlie, party1, party2)
    published = [records[p]["result"]["share"] for p in ("charlie", "alice", "bob")]
    assert dave["shares_mod"] == published
    plain = np.mean([train_local(X, y, DPA_LAM)[0] for X, y in sets], axis=0)
    assert np.allclose(dave["weights"], plain, atol=1e-3), (dave["weights"], plain)
    return records


DP_AGGREGATE = ProtocolCase(
    "dp-aggregate",
    ("charlie", "trent", "alice", "bob"),
    _dp_aggregate_inputs,
    run_dp_aggregate,
    module="smcdp.protocols.dp_aggregate",
    roles=DPA_ROLES,
    initiator="charlie",
)


# ----------------------------------------------------------------------------- keyword
KW_ROLES = {"alice": "alice", "bob": "bob"}


def _keyword_inputs(workdir: Path, parties: Sequence[str]):
    from smcdp.speech.forward import recognise
    from smcdp.speech.models import KeywordModels

    rng = np.random.default_rng(5)
    D, N, d = 3, 3, 3
    startprob = np.zeros((D, N))
    startprob[:, 0] = 1.0
    A = np.array([[0.6, 0.4, 0.0], [0.0, 0.6, 0.4], [0.0, 0.0, 1.0]])
    means = rng.normal(size=(D, N, d)) * 3
    models = KeywordModels(
        ["one", "two", "three"], startprob, np.stack([A] * D), means=means, covars=rng.uniform(0.5, 1.5, (D, N, d))
    )
    # an utterance of "two": frames near its states' means, two per state
    X = np.stack([means[1, s] + 0.3 * rng.normal(size=d) for s in (0, 0, 1, 1, 2, 2)])
    models.save(workdir / "bob-models.npz")
    np.save(workdir / "alice-utterance.npy", X)
    index, word, scores = recognise(models, X)
    top2 = np.sort(scores)[-2:]
    assert top2[1] - top2[0] > 10, scores  # a clear winner: fixed point cannot flip it
    return (
        [
            f"alice:keyword:utterance={workdir / 'alice-utterance.npy'}",
            f"bob:keyword:models={workdir / 'bob-models.npz'}",
        ],
        (index, word),
    )


def run_keyword(cluster: NetnsCluster, expected, session_id: str | None = None) -> dict[str, dict]:
    out = cluster.session("alice", "keyword", KW_ROLES, {"key_bits": KEY_BITS}, session_id=session_id, timeout=90)
    assert out.returncode == 0, f"session failed ({out.returncode}): {out.stderr}"
    sid = out.record["session_id"]
    records = cluster.wait_records(list(KW_ROLES.values()), sid, timeout=30)
    for party, rec in records.items():
        assert rec["state"] == "succeeded", (party, rec.get("error"))
    index, word = expected
    alice = records["alice"]["result"]
    assert (alice["index"], alice["keyword"]) == (index, word)
    assert alice["log_likelihoods"] is None  # no debug reveal: alice learns only the word
    assert "keyword" not in records["bob"]["result"]
    return records


KEYWORD = ProtocolCase(
    "keyword",
    ("alice", "bob"),
    _keyword_inputs,
    run_keyword,
    module="smcdp.protocols.keyword",
    roles=KW_ROLES,
    initiator="alice",
)


# ------------------------------------------------------------------------------- all
ALL_CASES = (POWER_ITERATION, DP_AGGREGATE, KEYWORD)


def governance_args(cases) -> list[str]:
    """`smcdp deploy init` arguments whose policies admit every case's sessions.  The budget is
    large: the dp-aggregate case releases at epsilon = 1e4 so that its noise is negligible."""
    args = ["--budget", str(10 * DPA_EPSILON)]
    for case in cases:
        args += [
            "--roles",
            f"{case.protocol}:" + ",".join(f"{r}={p}" for r, p in case.roles.items()),
            "--initiator",
            f"{case.protocol}={case.initiator}",
        ]
    return args


def available_cases() -> list[ProtocolCase]:
    """Cases whose protocol exists in this build (``module_needed``: pass it as a plug-in)."""
    import importlib

    from smcdp.plugins.registry import known_protocols

    out = []
    for case in ALL_CASES:
        case.module_needed = False
        if case.protocol not in known_protocols() and case.module:
            try:
                importlib.import_module(case.module)
            except ModuleNotFoundError as exc:
                if exc.name != case.module:
                    raise
                continue
            case.module_needed = True
        if case.protocol in known_protocols():
            out.append(case)
    return out
