"""The fused mixture LOGSUM of the secure forward algorithm = the reference secure LOGSUM = numpy.

``smcdp.primitives.logsum.secure_logsum_bob/alice`` is the reference implementation of the
seed's LOGSUM; ``secure_forward._bob_mixture/_alice_mixture`` is the fused form the protocol
runs for Gaussian-mixture emissions.  Both are run here on the same component log-densities
ℓ_{i,c,t} and mixture weights w_{i,c}; both must give ln Σ_c w_{i,c} e^{ℓ_{i,c,t}} for every
(state i, frame t) within the fixed-point tolerance of the public MaskParams.
"""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp

from smcdp.crypto.obfuscation import ObfuscatorPool
from smcdp.crypto.vector import EncryptedVector
from smcdp.primitives.logsum import MaskParams, secure_logsum_alice, secure_logsum_bob
from smcdp.primitives.rng import protocol_rng
from smcdp.protocols.secure_forward import Shape, _alice_mixture, _bob_mixture
from tests.unit.protocols.keyword_util import run_pair

D, N, C, T = 2, 3, 3, 4            # models, states, mixture components, frames
Dn = D * N


def tolerance(mp: MaskParams, max_abs_log: float) -> float:
    """Absolute error bound (nats) of one LOGSUM of C terms, from the public parameters.

    * rounding of ê (F_e bits) and of the integer weights (W bits): F_e and W are sized so that
      every term that can dominate keeps p significant bits; the worst-case relative error of a
      C-term sum is C·2^{-(p+2)} (≤ C·2^{-(p+3)} from each rounding), which bounds the log error;
    * fixed point of ξ(·) (log_frac_bits): the encrypted logs, the masks, Alice's result and
      Bob's correction are each rounded once (≤ 2^{-F-1} each);
    * double rounding of values carrying the masks (|ψ| ≤ offset_nats): a few ulps of the
      largest magnitude involved.
    """
    quant = C * 2.0 ** -(mp.precision_bits + 2)
    fixed = 4 * 2.0 ** -(mp.log_frac_bits + 1)
    flt = 8 * np.finfo(float).eps * (mp.offset_nats + mp.mask_nats + max_abs_log)
    return quant + fixed + flt


def _inputs(seed: int, mp: MaskParams):
    rng = np.random.default_rng(seed)
    # component log-densities: a typical spread, plus rows where one component is far below the others
    ell = rng.normal(-60.0, 25.0, size=(Dn, C, T))
    ell[0, 1, :] -= 300.0
    # mixture weights, spanning well inside 2^range_bits
    w = rng.dirichlet(np.ones(C), size=Dn)
    w = np.maximum(w, 2.0 ** -(mp.range_bits - 4))
    w /= w.sum(axis=1, keepdims=True)
    # Bob's masks as in _bob_gaussian: per (state, component, frame) U[-K, K] + per (model, frame) U[-ψ, ψ]
    rho = rng.uniform(-mp.mask_nats, mp.mask_nats, size=(D, N * C, T))
    psi = rng.uniform(-mp.offset_nats, mp.offset_nats, size=(D, 1, T))
    vmask = (rho + psi).reshape(Dn * C, T)
    return ell, w, vmask


def _pools(sk):
    return ObfuscatorPool.for_private_key(sk, background=False), \
        ObfuscatorPool.for_public_key(sk.public_key, background=False)


def run_fused(sk, mp: MaskParams, ell, w, vmask, seed: int) -> np.ndarray:
    """Alice's v − Bob's vm from _alice_mixture/_bob_mixture, as (Dn, T)."""
    shape = Shape("gmm-diag", D, N, C, 1)
    # Alice's decrypted component values, as in the protocol (log weight folded into the quadratic form)
    q = (ell + np.log(w)[:, :, None]).reshape(Dn * C, T) + vmask
    apool, bpool = _pools(sk)
    try:
        res, _ = run_pair(
            lambda ch: _alice_mixture(ch, "bob", sk, mp, apool, shape, q, T, "fw"),
            lambda ch: _bob_mixture(ch, "alice", shape, mp, sk.public_key, bpool,
                                    protocol_rng(seed, "test", "bob"), vmask, T, "fw"))
    finally:
        apool.close()
        bpool.close()
    v, vm = res["alice"], res["bob"]                               # (T, Dn) each
    assert v.shape == vm.shape == (T, Dn)
    return (v - vm).T


def run_reference(sk, mp: MaskParams, ell, w, seed: int) -> np.ndarray:
    """ξ(ln Σ_c w_c θ_c) from secure_logsum_bob/alice, decrypted, as (Dn, T)."""
    flat = ell.transpose(0, 2, 1).reshape(-1)                      # values in order (i, t, c)
    rows = Dn * T
    A = np.zeros((rows, flat.size))
    for i in range(Dn):
        for t in range(T):
            A[i * T + t, (i * T + t) * C:(i * T + t + 1) * C] = w[i]
    groups = np.repeat(np.arange(rows), C).tolist()               # one LOGSUM per (state, frame)
    pk = sk.public_key
    vec = EncryptedVector.encrypt(pk, flat, frac_bits=mp.log_frac_bits)
    apool, bpool = _pools(sk)
    try:
        res, _ = run_pair(
            lambda ch: secure_logsum_alice(ch, "bob", sk, mp, apool, "ref", length=flat.size,
                                           exponent=-mp.log_frac_bits, rows=rows),
            lambda ch: secure_logsum_bob(ch, "alice", vec, A, mp, bpool, protocol_rng(seed, "test", "ref"), "ref",
                                         groups=groups))
    finally:
        apool.close()
        bpool.close()
    return res["bob"].decrypt(sk).reshape(Dn, T)


def plaintext(ell, w) -> np.ndarray:
    return logsumexp(ell + np.log(w)[:, :, None], axis=1)          # (Dn, T)


def test_fused_mixture_logsum_matches_reference(keypair512):
    _, sk = keypair512
    mp = MaskParams().validate()
    ell, w, vmask = _inputs(11, mp)
    tol = tolerance(mp, float(np.max(np.abs(ell))))
    want = plaintext(ell, w)

    fused = run_fused(sk, mp, ell, w, vmask, seed=1)
    ref = run_reference(sk, mp, ell, w, seed=2)

    assert np.max(np.abs(fused - want)) <= tol, f"fused vs numpy: {np.max(np.abs(fused - want)):.3g} > {tol:.3g}"
    assert np.max(np.abs(ref - want)) <= tol, f"reference vs numpy: {np.max(np.abs(ref - want)):.3g} > {tol:.3g}"
    assert np.max(np.abs(fused - ref)) <= 2 * tol, f"fused vs reference: {np.max(np.abs(fused - ref)):.3g}"

    # The comparison can fail: the reference with one weight perturbed by a relative 1e-6 moves the
    # LOGSUMs of that state by ln(1 + 1e-6 × the component's share) (numpy), far beyond the tolerance
    # where the component dominates, and leaves every other state's LOGSUMs where they were.
    i = 2
    t_dom = 0
    c = int(np.argmax(ell[i, :, t_dom] + np.log(w[i])))            # the dominant component there
    w2 = w.copy()
    w2[i, c] *= 1.0 + 1e-6
    moved = run_reference(sk, mp, ell, w2, seed=2)
    shift = plaintext(ell, w2) - want
    assert np.max(np.abs(shift[i])) > 10 * tol and np.all(np.delete(shift, i, axis=0) == 0.0)
    assert np.max(np.abs((moved - fused) - shift)) <= 2 * tol     # the reference follows the weight exactly
    assert np.max(np.abs(moved[i] - fused[i])) > 10 * tol         # so the fused/reference check would fail
