"""`smcdp bench paillier --json` (contract): the keys the issue names, with sane values.

Only the output's shape and internal consistency are tested here (tiny key, short runs);
the figures themselves belong to bench/ and docs/benchmarks.md, not to a timed test.
"""

import json
import subprocess
import sys

import pytest

CONTRACT_KEYS = (
    "encrypt_public_ratio",
    "encrypt_private_ratio",
    "decrypt_packed_ratio",
    "dot_ratio",
    "phe_encrypt_per_s",
    "encrypt_public_per_s",
    "encrypt_private_per_s",
    "phe_decrypt_values_per_s",
    "decrypt_packed_values_per_s",
    "phe_dot_per_s",
    "dot_per_s",
)


@pytest.mark.slow  # runs the smcdp command (not in make test-quick)
def test_bench_paillier_json_contract():
    out = subprocess.run(
        [sys.executable, "-m", "smcdp", "bench", "paillier", "--key-bits", "512", "--seconds", "0.05", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    for k in CONTRACT_KEYS:
        assert isinstance(res[k], float) and res[k] > 0, k
    assert res["key_bits"] == 512
    assert "insecure" in out.stderr  # small keys are flagged
    # progress on stderr (not a terminal: plain lines), stdout stays JSON only
    lines = out.stderr.splitlines()
    assert any(ln.startswith("Paillier 512-bit key: 2/2 prime (100%) done, ") for ln in lines), out.stderr
    assert any(ln.startswith("bench paillier 512-bit: 7/7 stage (100%) done, ") for ln in lines), out.stderr
    # the absolute rates behind each ratio are reported, and the step profile is consistent
    assert res["fixed_base_steps_public"] == -(-256 // res["fixed_base_window_bits"])
    assert res["fixed_base_steps_private"] == 2 * -(-256 // res["crt_window_bits"])
    assert res["engine"] in ("native (Montgomery over GMP mpn)", "pure gmpy2")
    assert res["montgomery_products"].startswith(("AVX-512 IFMA", "GMP mpn", "none"))
