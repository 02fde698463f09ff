"""Top-r power iteration (issue 17) in memory: subspace iteration against numpy's eigh, the blinded Gram
against the scale-recovery attack of docs/protocols/power-iteration.md, and message validation."""

import numpy as np
import pytest

from smcdp.crypto.encoding import encode_fixed
from smcdp.crypto.vector import EncryptedVector
from smcdp.errors import InvalidMessage, SessionAborted
from smcdp.protocols import power_iteration as pi
from smcdp.protocols.power_iteration import (
    PowerIterationParams,
    orthonormal_basis,
    plaintext_components,
    rayleigh_ritz,
)
from smcdp.v1 import messages_pb2 as pb
from tests.unit.protocols.test_power_iteration import run


def spectrum_data(rng, k, ns, top, tail_decay=0.7):
    """M = U diag(√λ) Vᵀ split into column blocks: MMᵀ has eigenvalues ``top`` then a geometric tail."""
    n = sum(ns)
    d = min(k, n)
    lam = list(top)
    while len(lam) < d:
        lam.append(lam[-1] * tail_decay)
    U = np.linalg.qr(rng.normal(size=(k, d)))[0]
    V = np.linalg.qr(rng.normal(size=(n, d)))[0]
    M = (U * np.sqrt(np.array(lam[:d]))) @ V.T
    return np.split(M, np.cumsum(ns)[:-1], axis=1)


def check_components(blocks, res, r, min_gap=1e-3):
    """Every component whose relative eigengap is at least ``min_gap``: |cos| ≥ 0.999 against eigh for
    u_j (every party) and x_j (Trent), and equal with the sign convention."""
    lam, U, X = plaintext_components(blocks, r + 1)
    tr = res["trent"]
    assert len(tr.components) == r
    assert tr.x == tr.components[0]["x"]
    checked = 0
    for j in range(r):
        gaps = [lam[j] - lam[j + 1]] + ([lam[j - 1] - lam[j]] if j else [])
        if min(gaps) / lam[0] < min_gap:
            continue
        checked += 1
        x = np.asarray(tr.components[j]["x"])
        assert abs(x @ X[:, j]) >= 0.999, (j, abs(x @ X[:, j]))
        assert np.allclose(x, X[:, j], atol=1e-4), j
        for role, pr in res.items():
            if role == "trent":
                continue
            assert pr.u == pr.components[0]["u"]
            u = np.asarray(pr.components[j]["u"])
            assert abs(u @ U[:, j]) >= 0.999, (role, j, abs(u @ U[:, j]))
            assert np.allclose(u, U[:, j], atol=1e-4), (role, j)
    return checked


@pytest.mark.parametrize(
    "k,ns,r,p",
    [
        (12, (15, 20), 2, 1.0),  # k < n, N = 2
        (10, (6, 9, 8), 3, 0.8),  # N = 3 with decoys
        (30, (8, 9), 3, 0.9),  # k > n: MMᵀ is rank deficient (padding keeps the Gram definite)
        (16, (10, 12, 14), 5, 0.8),  # r = 5, N = 3
    ],
)
def test_top_r_matches_numpy_eigh(k, ns, r, p):
    rng = np.random.default_rng(100 * k + r)
    blocks = spectrum_data(rng, k, ns, [10.0 * 0.6**j for j in range(r + 1)])
    _, res = run(
        blocks, PowerIterationParams(n_parties=len(ns), key_bits=512, p=p, tol=1e-10, components=r), seed=k + r
    )
    assert res["trent"].converged
    assert res["trent"].n_per_party == list(ns)
    assert check_components(blocks, res, r) == r
    if p == 1.0:
        assert res["trent"].decoys == 0


def test_close_eigenvalues_inside_the_block_converge_fast():
    """1 % gaps between λ₁, λ₂, λ₃ but a clear gap to λ₄: the Ritz step separates the components, so the
    rounds follow λ₄/λ₃, not the 1 % gaps (deflation would need thousands of rounds)."""
    rng = np.random.default_rng(3)
    blocks = spectrum_data(rng, 20, (25, 30), [10.0, 9.9, 9.8, 4.0])
    _, res = run(blocks, PowerIterationParams(n_parties=2, key_bits=512, p=0.9, tol=1e-9, components=3), seed=1)
    tr = res["trent"]
    assert tr.converged and tr.rounds < 100, tr.rounds
    assert check_components(blocks, res, 3, min_gap=1e-3) == 3


def test_one_component_is_the_seed_output_and_oversampling_gives_the_same_components():
    rng = np.random.default_rng(5)
    blocks = spectrum_data(rng, 9, (7, 8), [5.0, 4.0, 3.8, 1.0])
    _, one = run(blocks, PowerIterationParams(n_parties=2, key_bits=512, p=1.0, tol=1e-11), seed=2)
    _, two = run(
        blocks, PowerIterationParams(n_parties=2, key_bits=512, p=1.0, tol=1e-11, components=2, oversample=2), seed=2
    )
    u_ref, x_ref = pi.plaintext_reference(blocks)
    assert np.allclose(one["party1"].u, u_ref, atol=1e-6) and np.allclose(one["trent"].x, x_ref, atol=1e-6)
    assert np.allclose(two["party2"].u, u_ref, atol=1e-6) and np.allclose(two["trent"].x, x_ref, atol=1e-6)
    assert check_components(blocks, two, 2) == 2
    # the boundary gap λ₂/λ₃ is small (4.0 vs 3.8): oversampling makes it λ₂/λ₅
    _, slow = run(blocks, PowerIterationParams(n_parties=2, key_bits=512, p=1.0, tol=1e-11, components=2), seed=2)
    assert two["trent"].rounds < slow["trent"].rounds


# ----------------------------------------------------------------------------------------- attack
def party1_view(net, params, sk, k, n_parties):
    """What party1 decrypts from Trent, and (ground truth) every party's contribution, under the names of
    the protocol's steps: v/t (round t's block), blinded/t (round t's blinded Gram), final/v; contrib[(role,
    t)] (the contribution Trent sums into round t's block)."""
    pk = sk.public_key
    b = params.block_size
    got, contrib = {}, {}

    def dec(msg):
        return EncryptedVector.from_proto(msg, pk).decrypt(sk)

    for s, r, tag, _tn, data in net.transcript:
        if r == "party1" and s == "trent" and tag == "v/0":
            got[tag] = dec(pb.CiphertextVector.FromString(data))
        elif r == "party1" and s == "trent" and tag.startswith("reply/"):
            t, msg = int(tag.split("/")[1]), pb.PowerIterationReply.FromString(data)
            got[f"blinded/{t}"] = dec(msg.blinded_gram)
            got["final/v" if msg.stop else f"v/{t + 1}"] = dec(msg.block)
        elif r == "trent" and tag == "contrib/0":
            contrib[(s, 0)] = dec(pb.CiphertextVector.FromString(data)).reshape((k, b), order="F")
        elif r == "trent" and tag.startswith("round/"):
            t, msg = int(tag.split("/")[1]), pb.PowerIterationRound.FromString(data)
            contrib[(s, t + 1)] = dec(msg.contribution).reshape((k, b), order="F")
    return got, contrib


def scale_recovery_attack(net, params, sk, k, n_parties):
    """Party1 replays its own computation from what it decrypted and estimates Trent's factor on the
    next block, F̂ = (G'_t S)⁻¹ Q_tᵀ V_{t+1}, S = diag(Θ'_{t−1})^{−1/2} being the parties' common scaling
    of the contributions (V_{t+1} = r_{t+1}·Σ_j Ā_jĀ_jᵀQ_tS, so Q_tᵀV_{t+1} = r_{t+1}·G_tS).  Without
    blinding F̂ = r_{t+1}·I with r an integer (which flags consecutive real rounds); then
    Σ_{j≠1} C_j = V_{t+1}/r − C_1.  Returns (pairs, recovered)."""
    b = params.block_size
    got, contrib = party1_view(net, params, sk, k, n_parties)
    rounds = sum(1 for tag in got if tag.startswith("v/"))
    previous = None
    state = {}
    S = np.eye(b)  # round 0's contribution is unscaled
    for t in range(rounds):
        V = got[f"v/{t}"].reshape((k, b), order="F")
        Q = orthonormal_basis(V, "v")
        Gp = pi._from_triu(got[f"blinded/{t}"], b)
        U, theta = rayleigh_ritz(Gp, Q, previous)
        previous = U
        state[t] = (Q, Gp, S)
        S = np.diag(1 / np.sqrt(theta))
    pairs = recovered = 0
    for t in range(rounds - 1):
        Q, Gp, S = state[t]
        V1 = got[f"v/{t + 1}"].reshape((k, b), order="F")
        F = np.linalg.lstsq(Gp @ S, Q.T @ V1, rcond=None)[0]
        f = float(np.mean(np.diag(F)))
        pairs += 1
        if f >= 1 and abs(f - round(f)) < 1e-3:
            others = V1 / round(f) - contrib[("party1", t + 1)]
            truth = sum(contrib[(f"party{i}", t + 1)] for i in range(2, n_parties + 1))
            if np.max(np.abs(others - truth)) <= 1e-2 * np.max(np.abs(truth)):
                recovered += 1
    return pairs, recovered


@pytest.mark.parametrize("n_parties", [2, 3])
def test_blinded_gram_defeats_the_scale_recovery_attack(keypair512, monkeypatch, n_parties):
    _, sk = keypair512
    rng = np.random.default_rng(9)
    k = 8
    blocks = spectrum_data(rng, k, [10 + i for i in range(n_parties)], [6.0, 3.0, 1.5])
    params = PowerIterationParams(n_parties=n_parties, key_bits=512, p=0.8, tol=1e-12, components=2, max_iterations=40)
    # the unblinded variant (m_t = 1): the attack must work, or this test could not fail
    monkeypatch.setattr(pi, "blind_multiplier", lambda rng, offset_bits, bits: 1 << offset_bits)
    net, _ = run(blocks, params, seed=4, private_key=sk)
    pairs, recovered = scale_recovery_attack(net, params, sk, k, n_parties)
    assert pairs >= 10 and recovered >= pairs // 3, (pairs, recovered)
    # the protocol as shipped: not one round pair gives the others' contribution away
    monkeypatch.undo()
    net, _ = run(blocks, params, seed=4, private_key=sk)
    pairs, recovered = scale_recovery_attack(net, params, sk, k, n_parties)
    assert pairs >= 10 and recovered == 0, (pairs, recovered)


def test_no_data_party_sees_an_eigenvalue(keypair512):
    """The seed's final S/‖v‖² was λ₁ exactly; now the only eigenvalue-like numbers a party decrypts are
    the blinded Ritz values m_t(λ_j + c), with a fresh m_t ∈ [1, 2^16) every round."""
    _, sk = keypair512
    rng = np.random.default_rng(12)
    blocks = spectrum_data(rng, 7, (9, 8), [6.0, 3.0, 1.0])
    params = PowerIterationParams(n_parties=2, key_bits=512, p=1.0, tol=1e-12, components=2)
    net, _res = run(blocks, params, seed=7, private_key=sk)
    lam = np.linalg.eigvalsh(np.concatenate(blocks, axis=1) @ np.concatenate(blocks, axis=1).T)[::-1]
    got, _ = party1_view(net, params, sk, 7, 2)
    tops = []
    for tag, vals in got.items():
        if "blinded" in tag:
            theta = np.linalg.eigvalsh(pi._from_triu(vals, 2))[::-1]
            tops.append(theta[0])
            for j in range(2):
                assert abs(theta[j] / lam[j] - 1) > 1e-3, (tag, theta, lam)
    # the blinding changes every round: the ratio to λ₁ is all over [1, 2^16)
    ratios = np.log2(np.array(tops) / lam[0])
    assert ratios.max() - ratios.min() > 4
    # … while the ratio of Ritz values (inherent to any power method) is what the party may learn
    last = max(int(tag.split("/")[1]) for tag in got if tag.startswith("blinded/"))
    theta = np.linalg.eigvalsh(pi._from_triu(got[f"blinded/{last}"], 2))[::-1]
    assert theta[1] / theta[0] > lam[1] / lam[0]  # shifted by the secret padding c = Σρ²: (λ₂+c)/(λ₁+c)


# ----------------------------------------------------------------------------------------- validation
def _tamper(net, role, tag, edit, field=None):
    """``role``'s message ``tag`` edited on its way (``field``: a CiphertextVector inside a round or reply)."""
    ch = net.channel(role)
    orig = ch._transmit
    cls = pb.PowerIterationRound if tag.startswith("round/") else pb.PowerIterationReply

    async def evil(to, t, type_url, data):
        if t == tag and field is None:
            data = edit(data)
        elif t == tag:
            msg = cls.FromString(data)
            getattr(msg, field).CopyFrom(pb.CiphertextVector.FromString(edit(getattr(msg, field).SerializeToString())))
            data = msg.SerializeToString()
        await orig(to, t, type_url, data)

    ch._transmit = evil


def test_a_gram_that_is_not_positive_definite_is_refused(keypair512):
    pk, sk = keypair512
    blocks = spectrum_data(np.random.default_rng(1), 6, (5, 5), [4.0, 2.0])
    params = PowerIterationParams(n_parties=2, key_bits=512, p=1.0, components=2)

    def negative(data):
        msg = pb.CiphertextVector.FromString(data)
        bad = EncryptedVector.encrypt(
            pk,
            [-1.0, 0.0, -1.0],
            frac_bits=params.frac_bits + params.blind_offset_bits,
            packing=params.gram_packing(pk),
        )
        msg.ClearField("ciphertexts")
        msg.ciphertexts.extend(bad.to_proto().ciphertexts)
        return msg.SerializeToString()

    with pytest.raises((InvalidMessage, SessionAborted), match="not a positive definite Gram"):
        run(
            blocks,
            params,
            private_key=sk,
            tamper=lambda net: _tamper(net, "trent", "reply/1", negative, "blinded_gram"),
        )


def test_a_gram_with_the_wrong_shape_is_refused_by_trent():
    blocks = spectrum_data(np.random.default_rng(2), 6, (5, 5), [4.0, 2.0])
    params = PowerIterationParams(n_parties=2, key_bits=512, p=1.0, components=2)

    def shorter(data):
        msg = pb.CiphertextVector.FromString(data)
        msg.length = msg.length - 1
        return msg.SerializeToString()

    with pytest.raises(InvalidMessage, match=r"round/0 from party2 \(its Gram\) holds 2 values, expected 3"):
        run(blocks, params, tamper=lambda net: _tamper(net, "party2", "round/0", shorter, "gram"))


@pytest.mark.parametrize(
    "edit,match",
    [
        (lambda m: m.__setattr__("cols", 2), "expected at most"),
        (lambda m: m.values.__setitem__(0, float("nan")), "not finite"),
        (lambda m: m.__setattr__("rows", m.rows + 1), "expected at most"),
    ],
)
def test_malformed_final_blocks_are_refused_by_trent(edit, match):
    blocks = spectrum_data(np.random.default_rng(4), 5, (4, 6), [4.0, 2.0])
    params = PowerIterationParams(n_parties=2, key_bits=512, p=1.0)

    def change(data):
        m = pb.Matrix.FromString(data)
        edit(m)
        return m.SerializeToString()

    with pytest.raises(InvalidMessage, match=match):
        run(blocks, params, tamper=lambda net: _tamper(net, "party1", "final/x/0", change))


def test_bad_sigma_from_party1_is_refused():
    blocks = spectrum_data(np.random.default_rng(6), 5, (4, 6), [4.0, 2.0])

    def huge(data):
        return pb.Floats(values=[1e30]).SerializeToString()

    with pytest.raises((InvalidMessage, SessionAborted), match="sigma from party1"):
        run(
            blocks,
            PowerIterationParams(n_parties=2, key_bits=512),
            tamper=lambda net: _tamper(net, "party1", "sigma", huge),
        )


def test_block_larger_than_k_is_refused():
    blocks = [np.ones((3, 4)), np.ones((3, 5))]
    with pytest.raises((InvalidMessage, SessionAborted), match="exceeds the number of rows"):
        run(blocks, PowerIterationParams(n_parties=2, key_bits=512, components=2, oversample=2))


def test_new_params_are_validated():
    for bad in (
        {"components": 0},
        {"oversample": -1},
        {"components": 40, "oversample": 30},
        {"blind_bits": 0},
        {"gram_bits": 0},
        {"sigma_bits": 99},
        {"components": True},
    ):
        with pytest.raises(InvalidMessage):
            PowerIterationParams.from_mapping(bad)


def test_blind_multiplier_range_and_low_bits():
    import random

    rng = random.Random(1)
    ms = [pi.blind_multiplier(rng, 48, 16) for _ in range(2000)]
    assert all(1 << 48 <= m < 1 << 64 for m in ms)
    assert len({m & 0xFF for m in ms}) > 200  # the low bits are random too, not zeros of a float
    logs = np.log2(ms) - 48
    assert logs.min() < 1 and logs.max() > 15  # log-uniform over the whole range


def test_contribution_and_gram_encodings_fit_their_slots(keypair512):
    pk, _ = keypair512
    p = PowerIterationParams(n_parties=3, key_bits=512, components=3)
    assert p.gram_packing(pk).slot_bits in (0, p.gram_slot_bits())
    worst = (1 << (p.gram_bits + p.frac_bits)) * 3 * (1 << (p.blind_offset_bits + p.blind_bits))
    assert worst.bit_length() < p.gram_slot_bits() - 1
    assert max(abs(v) for v in encode_fixed([2.0**p.gram_bits - 1], p.frac_bits)) <= p.gram_bound()


# ----------------------------------------------------------------------------------------- traffic envelope
@pytest.mark.parametrize(
    "k,ns,r,over,p",
    [
        (4, (70_000, 3), 1, 0, 1.0),  # party1's clear blocks take two final/x chunks
        (6, (5, 7, 4), 2, 1, 0.5),  # N = 3, oversampling, decoys
    ],
)
def test_traffic_envelope_covers_every_message(k, ns, r, over, p):
    """Every message a role receives fits the envelope its party derives from the public parameters
    (issue 19: a party refuses anything beyond it before buffering it), and so do the totals."""
    rng = np.random.default_rng(k)
    blocks = [rng.normal(size=(k, n)) for n in ns]
    params = PowerIterationParams(
        n_parties=len(ns),
        key_bits=512,
        p=p,
        tol=1e-14,
        max_iterations=4,
        components=r,
        oversample=over,
        rows=k,
        max_samples=max(ns),
    )
    net, res = run(blocks, params, seed=5)
    assert res["trent"].rounds == 4
    for role in ["trent", *params.data_roles]:
        env = params.traffic_envelope(role)
        got = [len(d) for *_, d in net.received_by(role)]
        assert max(got) <= env.message_bytes, (role, max(got), env)
        assert sum(got) <= env.session_bytes, (role, sum(got), env)
        assert len(got) <= env.tags, (role, len(got), env)
    assert sum(t.startswith("final/x/") for _, t, _, _ in net.received_by("trent")) == sum(
        params.final_chunks(n) for n in ns
    )


def test_the_final_chunking_is_exact_at_trent():
    """Trent accepts only the public chunking of the final blocks (their count and every size)."""
    blocks = spectrum_data(np.random.default_rng(4), 5, (4, 6), [4.0, 2.0])
    params = PowerIterationParams(n_parties=2, key_bits=512, p=1.0)

    def more_chunks(data):
        m = pb.Ints.FromString(data)
        m.values[1] += 1
        return m.SerializeToString()

    with pytest.raises(InvalidMessage, match="final/cols from party1 must be"):
        run(blocks, params, tamper=lambda net: _tamper(net, "party1", "final/cols", more_chunks))


def test_data_beyond_the_public_bounds_is_rejected_with_the_rule_only():
    """rows and max_samples (issue 19): a party whose data breaks them tells its peers the rule, and
    keeps the value in its own record."""
    from smcdp.errors import InputRejected, public_message

    blocks = [np.ones((4, 3)), np.ones((4, 5))]
    for params, rule in [
        (PowerIterationParams(n_parties=2, key_bits=512, rows=5), "rows parameter"),
        (PowerIterationParams(n_parties=2, key_bits=512, max_samples=4), "max_samples"),
    ]:
        with pytest.raises((InvalidMessage, SessionAborted)) as info:
            run(blocks, params)
        err = info.value
        if isinstance(err, InputRejected):
            assert (
                rule in public_message(err)
                and "k = 4" not in public_message(err)
                and "n = 5" not in public_message(err)
            )
        else:
            assert rule in str(err)
