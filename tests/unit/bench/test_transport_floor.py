"""bench/transport_floor.py's floor: the bare gRPC exchange it measures smcdp against really runs over mutual TLS
and echoes what was sent (a floor that failed its handshake would time nothing)."""

from __future__ import annotations

import importlib
import stat
import sys

from tests.support.paths import REPO

if str(REPO / "bench") not in sys.path:
    sys.path.insert(0, str(REPO / "bench"))
floor = importlib.import_module("transport_floor")


def test_the_certificates_are_a_ca_and_a_leaf_for_localhost_with_a_private_key_file(tmp_path):
    from cryptography import x509

    floor.make_certs(tmp_path)
    ca = x509.load_pem_x509_certificate((tmp_path / "ca.pem").read_bytes())
    leaf = x509.load_pem_x509_certificate((tmp_path / "leaf.pem").read_bytes())
    assert leaf.issuer == ca.subject
    # party localhost's certificate as smcdp issues it: its identity name first (the name the client checks)
    assert leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName
    ) == ["localhost.party.smcdp.invalid", "localhost"]
    leaf.verify_directly_issued_by(ca)
    assert stat.S_IMODE((tmp_path / "leaf.key").stat().st_mode) == 0o600


def test_the_bare_exchange_runs_its_round_trips_over_mutual_tls():
    out = floor.bare(rounds=20, nbytes=2_000, repeats=2)
    assert len(out["runs_ms"]) == 2
    assert all(ms > 0 for ms in out["runs_ms"])
    assert out["ms_per_round_trip"] > 0 and out["cpu_ms_per_round_trip"] > 0
