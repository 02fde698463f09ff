"""dp-aggregate with one party's noise against shared noise (``calibration="gaussian"``), in the same run.

* Cost: ``smcdp demo dp-aggregate``'s code path (Charlie, Dave and K data parties as separate OS processes over
  gRPC with mutual TLS on loopback) at ``--key-bits`` (default 2048), ε = 1, δ = 10⁻⁶, λ = 0.01, 200 synthetic
  rows per party; the two modes alternate, ``--repeats`` sessions each.  Seconds from session start to Dave's
  result; bytes every participant sent.
* Utility, from the calibrations alone (no cryptography): the expected L2 error of the released average,
  E‖ŵˢ − (1/K)Σŵ_j‖, for the selected party's vector mechanism (exact: ‖ν‖ ~ Gamma(d, Δ/ε) on the sum), the
  shared Gaussian with h = 1, K − 1 and K, and one trusted curator's Gaussian for the same (ε, δ) (the central
  baseline: σ = Δ/√(2ρ), the same zCDP calibration without the parties) -- each over K.

``PYTHONPATH=. .venv/bin/python bench/aggregate_shared_noise.py [--quick] [--key-bits 2048]``
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.aggregate_bench import write_parties  # noqa: E402
from smcdp.cli.demo.dp_aggregate import demo_dp_aggregate  # noqa: E402
from smcdp.protocols.dp_aggregate import DPAggregateParams, selected_sensitivity, sensitivity_key  # noqa: E402

EPS, DELTA, LAM, ROWS = 1.0, 1e-6, 0.01, 200


def expected_errors(K: int, d: int, n_min: int) -> dict[str, float]:
    """E‖noise on the average‖ for each mode (grid-step rounding ignored: 2^-F ≪ the noise)."""
    sens = 1.0 / (n_min * LAM)
    out = {"exact (selected party's vector mechanism)": d * (sens + math.sqrt(d) * 2.0**-40) / EPS / K}
    for h in sorted({1, K - 1, K}):
        p = DPAggregateParams(
            n_parties=K, dim=d, epsilon=EPS, lam=LAM, calibration="gaussian", delta=DELTA, noise_parties=h
        )
        k = sensitivity_key(sens)[0]
        t, q = p.share_parameters(selected_sensitivity(k))
        sigma = math.sqrt(K * t * q) * 2.0**-p.frac_bits  # K shares on the sum
        out[f"shared Gaussian, h = {h}"] = _chi_mean(d) * sigma / K
    p = DPAggregateParams(n_parties=K, dim=d, epsilon=EPS, lam=LAM, calibration="gaussian", delta=DELTA)
    central = (sens + math.sqrt(d) * 2.0**-p.frac_bits) / math.sqrt(2 * p.rho_capacity)
    out["one trusted curator's Gaussian (baseline)"] = _chi_mean(d) * central / K
    return out


def _chi_mean(d: int) -> float:
    """E‖Z‖ for Z ~ N(0, I_d)."""
    return math.sqrt(2) * math.exp(math.lgamma((d + 1) / 2) - math.lgamma(d / 2))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="K = 3 only, one session per mode")
    ap.add_argument("--key-bits", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args(argv)
    Ks = (3,) if args.quick else (3, 8)
    repeats = 1 if args.quick else args.repeats
    d = 10
    modes = {"exact": {}, "gaussian": {"calibration": "gaussian", "delta": DELTA, "noise_parties": 1}}
    lines = [
        f"Paillier {args.key_bits}-bit, ε = {EPS}, δ = {DELTA:g} (gaussian), λ = {LAM}, d = {d}, {ROWS} rows per "
        f"party; load average at the start {os.getloadavg()[0]:.1f}.",
        "",
        "| K | mode | seconds (median) | bytes sent (all) | max data party sent |",
        "|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for K in Ks:
            sub = Path(tmp) / f"K{K}"
            sub.mkdir()
            paths = write_parties(sub, K, d, n=ROWS)
            seen: dict[str, list[tuple[float, int, int]]] = {m: [] for m in modes}
            for _ in range(repeats):
                for mode, kw in modes.items():  # alternating
                    t0 = time.monotonic()
                    out = demo_dp_aggregate(paths, EPS, LAM, key_bits=args.key_bits, min_records=100, **kw)
                    b = out["bytes_sent"]
                    parties = [v for k, v in b.items() if k not in ("charlie", "dave")]
                    seen[mode].append((time.monotonic() - t0, sum(b.values()), max(parties)))
            for mode, runs in seen.items():
                lines.append(
                    f"| {K} | {mode} | {statistics.median(r[0] for r in runs):.1f} | "
                    f"{runs[0][1] / 1024:.0f} KiB | {runs[0][2] / 1024:.0f} KiB |"
                )
    lines += ["", f"Expected L2 error of the released average (d = {d}, smallest data set {ROWS} rows, ε = {EPS}):", ""]
    lines += ["| K | mode | E‖error‖ |", "|---|---|---|"]
    for K in Ks:
        for mode, err in expected_errors(K, d, ROWS).items():
            lines.append(f"| {K} | {mode} | {err:.4f} |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
