"""Utility of power iteration's DP mode (issue 25) against central-model DP PCA, on the same data.

Data: tests/support/pca_data.spectral_gap_data (k = 20, n = 20,000 columns of norm <= 1 by default, split
45 % / 55 % over two data parties, lambda2/lambda1 ~ 0.4).  For each epsilon in {0.1, 0.3, 1, 3} (delta = 1e-6)
and several data seeds, |cos| of u_1 (and u_2) against numpy's eigenvectors of MMᵀ, for:

* **smcdp, DP mode** -- the protocol itself (Trent and two data parties in memory, 1024-bit keys: the
  key size does not change a single value it computes), T = 10 rounds, h = 1: each party adds the full
  sigma, so the aggregate carries twice the noise variance a central curator would need;
* **central Gaussian** -- one release of MMᵀ plus symmetric Gaussian noise at the same (epsilon, delta)
  (sensitivity ‖aaᵀ‖_F <= C², sigma from the same zCDP calibration), then eigh: what a trusted curator
  holding all the data would publish with the same accounting;
* **diffprivlib** -- ``diffprivlib.models.PCA(epsilon, data_norm=1, centered=True)`` on the pooled data
  (pure epsilon-DP: delta = 0).  Its eigenvector sampler (Bingham, rejection sampling) slows down sharply
  as epsilon·n grows; each fit gets ``--dpl-timeout`` seconds in a subprocess and a cell reports how many
  fits finished.

Prints a markdown table (mean ± standard deviation over seeds) and CPU seconds per fit.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import multiprocessing as mp
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from smcdp.crypto.paillier import generate_keypair  # noqa: E402
from smcdp.dp.conversions import rho_capacity  # noqa: E402
from smcdp.net.channel import InMemoryNetwork  # noqa: E402
from smcdp.protocols.power_iteration import PowerIterationParams, data_party, trent  # noqa: E402
from tests.support.pca_data import spectral_gap_data, top_eigenvectors  # noqa: E402

EPSILONS = (0.1, 0.3, 1.0, 3.0)
DELTA = 1e-6


def smcdp_dp(M: np.ndarray, eps: float, sk) -> tuple[np.ndarray, float]:
    params = PowerIterationParams(n_parties=2, key_bits=sk.public_key.bits, epsilon=eps, delta=DELTA,
                                  components=2, rows=M.shape[0], max_samples=M.shape[1])
    roles = {"trent": "trent", "party1": "a", "party2": "b"}
    net = InMemoryNetwork(roles, timeout=600)
    split = M.shape[1] * 9 // 20
    blocks = [M[:, :split], M[:, split:]]
    coros = {"trent": lambda c: trent(c, params, allow_insecure_keys=True)}
    for i, A in enumerate(blocks):
        coros[f"party{i + 1}"] = (lambda c, A=A, i=i: data_party(c, A, params, private_key=sk if i == 0 else None,
                                                                allow_insecure_keys=True))
    t0 = time.process_time()
    res = asyncio.run(net.run(coros))
    return np.column_stack([c["u"] for c in res["party1"].components]), time.process_time() - t0


def central_gaussian(M: np.ndarray, eps: float, rng) -> tuple[np.ndarray, float]:
    t0 = time.process_time()
    sigma = 1.0 / math.sqrt(2 * rho_capacity(eps, DELTA))      # sensitivity C² = 1, one release
    k = M.shape[0]
    E = np.triu(rng.normal(scale=sigma, size=(k, k)))
    E = E + np.triu(E, 1).T
    V = np.linalg.eigh(M @ M.T + E)[1][:, ::-1][:, :2]
    return V, time.process_time() - t0


def _dpl_fit(conn, X, eps, seed):
    warnings.filterwarnings("ignore")
    from diffprivlib.models import PCA
    t0 = time.process_time()
    p = PCA(n_components=2, epsilon=eps, data_norm=1.0, centered=True, random_state=seed).fit(X)
    conn.send((p.components_.T, time.process_time() - t0))


def diffprivlib_pca(M: np.ndarray, eps: float, seed: int, timeout: float):
    """(components k × 2, CPU seconds), or None if the fit did not finish within ``timeout``."""
    recv, send = mp.Pipe(duplex=False)
    proc = mp.get_context("fork").Process(target=_dpl_fit, args=(send, np.ascontiguousarray(M.T), eps, seed))
    proc.start()
    got = recv.poll(timeout)
    out = recv.recv() if got else None
    proc.kill()
    proc.join()
    return out


def fmt(values: list[float], total: int) -> str:
    if not values:
        return f"— (0/{total} finished)"
    s = f"{np.mean(values):.4f} ± {np.std(values):.4f}"
    return s if len(values) == total else f"{s} ({len(values)}/{total} finished)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--dpl-timeout", type=float, default=60.0)
    ap.add_argument("--n", type=int, default=20_000, help="samples (default 20,000; the first 45 %% are party1's)")
    ap.add_argument("--quick", action="store_true", help="3 seeds, 20 s per diffprivlib fit")
    args = ap.parse_args()
    seeds = 3 if args.quick else args.seeds
    timeout = 20.0 if args.quick else args.dpl_timeout
    _, sk = generate_keypair(1024, allow_insecure=True)
    rng = np.random.default_rng(2026)
    rows, secs = [], {"smcdp": [], "central": [], "diffprivlib": []}
    for eps in EPSILONS:
        cos = {m: ([], []) for m in secs}
        for s in range(seeds):
            M = spectral_gap_data(s, n=args.n)
            U = top_eigenvectors(M, 2)
            fits = {"smcdp": smcdp_dp(M, eps, sk), "central": central_gaussian(M, eps, rng),
                    "diffprivlib": diffprivlib_pca(M, eps, s, timeout)}
            for m, fit in fits.items():
                if fit is None:
                    continue
                V, cpu = fit
                secs[m].append(cpu)
                for j in range(2):
                    cos[m][j].append(abs(float(V[:, j] @ U[:, j])))
        rows.append(f"| {eps:g} | " + " | ".join(f"{fmt(cos[m][0], seeds)} | {fmt(cos[m][1], seeds)}"
                                                 for m in ("smcdp", "central", "diffprivlib")) + " |")
    cpu = ", ".join(f"{m} {np.median(v):.3g} s" for m, v in secs.items() if v)
    split = args.n * 9 // 20
    print(f"k = 20, n = {args.n:,} (two parties: {split:,} and {args.n - split:,}), delta = {DELTA:g} "
          f"(diffprivlib: 0), {seeds} data seeds; |cos| against numpy, mean ± std over seeds.\n")
    print("| epsilon | smcdp DP mode u_1 | u_2 | central Gaussian u_1 | u_2 | diffprivlib PCA u_1 | u_2 |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print(f"\nMedian CPU seconds per fit (finished fits): {cpu}; diffprivlib fits were given {timeout:g} s each.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
