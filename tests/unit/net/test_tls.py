import ipaddress
import stat

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from smcdp.errors import InvalidMessage
from smcdp.net import tls


def test_deployment_files_names_and_modes(tmp_path):
    files = tls.generate_deployment(
        tmp_path, ["alice", "bob", "trent"], hosts={"alice": ["10.0.0.1", "alice.example.org"]}
    )
    assert set(files) == {"alice", "bob", "trent"}
    for name in ("ca.key", "alice.key", "bob.key", "trent.key"):
        mode = stat.S_IMODE((tmp_path / name).stat().st_mode)
        assert mode == 0o600, f"{name} has mode {oct(mode)}"
    ca = tls.load_certificate(tmp_path / "ca.crt")
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    alice = tls.load_certificate(tmp_path / "alice.crt")
    assert alice.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "alice"
    san = alice.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["alice", "alice.example.org"]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("10.0.0.1")]
    eku = alice.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.CLIENT_AUTH in eku and ExtendedKeyUsageOID.SERVER_AUTH in eku
    assert not alice.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    alice.verify_directly_issued_by(ca)
    assert isinstance(alice.public_key(), ec.EllipticCurvePublicKey)
    assert alice.public_key().curve.name == "secp256r1"
    m = tls.TlsMaterial.load(tmp_path / "ca.crt", tmp_path / "alice.crt", tmp_path / "alice.key")
    assert m.name == "alice"


def test_key_mode_is_0600_even_with_permissive_umask(tmp_path):
    import os

    old = os.umask(0)
    try:
        tls.generate_deployment(tmp_path, ["alice"])
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "alice.key").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "alice.crt").stat().st_mode) == 0o644


@pytest.mark.parametrize("bad", ["Alice", "al ice", "-bob", "bob-", "", "a" * 64, "bob_1", "é"])
def test_party_name_validation(bad):
    with pytest.raises(InvalidMessage, match="not valid"):
        tls.validate_party_name(bad)


def test_party_list_unique_and_valid():
    assert tls.parse_party_list("alice, bob,trent") == ["alice", "bob", "trent"]
    with pytest.raises(InvalidMessage, match=r"unique.*alice"):
        tls.parse_party_list("alice,bob,alice")
    with pytest.raises(InvalidMessage, match="not valid"):
        tls.parse_party_list("alice,Bob")
    with pytest.raises(InvalidMessage, match="not in --parties"):
        tls.parse_hosts("carol=10.0.0.3", ["alice"])
    with pytest.raises(InvalidMessage, match="neither an IP"):
        tls.parse_hosts("alice=bad host", ["alice"])


def test_refuses_overwrite_and_reuses_ca(tmp_path):
    tls.generate_deployment(tmp_path, ["alice", "bob"])
    ca_before = (tmp_path / "ca.crt").read_bytes()
    bob_before = (tmp_path / "bob.crt").read_bytes()
    with pytest.raises(InvalidMessage, match="refusing to overwrite"):
        tls.generate_deployment(tmp_path, ["alice"])
    # add a party under the same CA
    tls.generate_deployment(tmp_path, ["charlie"], reuse_ca=True)
    assert (tmp_path / "ca.crt").read_bytes() == ca_before
    ca = tls.load_certificate(tmp_path / "ca.crt")
    tls.load_certificate(tmp_path / "charlie.crt").verify_directly_issued_by(ca)
    # rotate bob's key under the same CA
    tls.generate_deployment(tmp_path, ["bob"], reuse_ca=True, overwrite=True)
    assert (tmp_path / "bob.crt").read_bytes() != bob_before
    assert stat.S_IMODE((tmp_path / "bob.key").stat().st_mode) == 0o600


def test_material_rejects_foreign_cert_and_wrong_key(tmp_path):
    tls.generate_deployment(tmp_path / "one", ["alice", "bob"])
    tls.generate_deployment(tmp_path / "two", ["alice"])
    with pytest.raises(tls.CertificateError, match="not issued by the CA"):
        tls.TlsMaterial.load(tmp_path / "one/ca.crt", tmp_path / "two/alice.crt", tmp_path / "two/alice.key")
    with pytest.raises(tls.CertificateError, match="does not belong"):
        tls.TlsMaterial.load(tmp_path / "one/ca.crt", tmp_path / "one/alice.crt", tmp_path / "one/bob.key")
    with pytest.raises(tls.CertificateError, match="does not exist"):
        tls.TlsMaterial.load(tmp_path / "one/ca.crt", tmp_path / "one/nobody.crt", tmp_path / "one/bob.key")
