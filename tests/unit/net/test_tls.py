import ipaddress
import stat

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from smcdp.errors import InvalidMessage
from smcdp.net import tls
from tests.support.callers import earlier_version_certificate


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
    assert san.get_values_for_type(x509.DNSName) == ["alice.party.smcdp.invalid", "alice", "alice.example.org"]
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


# ------------------------------------------------------------------ party identity (the reserved SAN)
def test_a_host_that_names_another_party_is_refused_before_anything_is_written(tmp_path):
    """The review's case: `smcdp certs --parties alice,bob,carol --hosts alice=bob` put "bob" into alice's
    certificate, which every party dialing bob accepted; and `--localhost` with a party named localhost."""
    parties = ["alice", "bob", "carol"]
    for text in ("alice=bob", "alice=BOB", "carol=10.0.0.3,alice=alice.example.org,alice=carol"):
        with pytest.raises(InvalidMessage, match="is the name of party"):
            tls.parse_hosts(text, parties)
    with pytest.raises(InvalidMessage, match="host 'bob' of party 'alice' is the name of party 'bob'"):
        tls.generate_deployment(tmp_path / "a", parties, hosts={"alice": ["bob"]})
    with pytest.raises(InvalidMessage, match="is the name of party 'localhost'"):  # `smcdp certs --localhost`
        tls.generate_deployment(
            tmp_path / "b", ["alice", "localhost"], {p: ["localhost"] for p in ("alice", "localhost")}
        )
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    # a party's own name, or any name that is no party's, stays a valid host
    assert tls.parse_hosts("alice=alice,bob=db,bob=10.0.0.2", parties) == {
        "alice": ["alice"],
        "bob": ["db", "10.0.0.2"],
        "carol": [],
    }


def test_a_new_party_may_not_take_a_host_name_an_issued_certificate_carries(tmp_path):
    """A short host name that later becomes a party's name: `--reuse-ca` looks at the certificates issued before."""
    tls.generate_deployment(tmp_path, ["alice", "bob"], hosts={"alice": ["db"]})
    with pytest.raises(InvalidMessage, match=r"party 'alice' .* carries the host name 'db'"):
        tls.generate_deployment(tmp_path, ["db"], reuse_ca=True)
    with pytest.raises(InvalidMessage, match="host 'alice' of party 'carol' is the name of party 'alice'"):
        tls.generate_deployment(tmp_path, ["carol"], hosts={"carol": ["alice"]}, reuse_ca=True)
    assert not (tmp_path / "db.crt").exists() and not (tmp_path / "carol.crt").exists()
    # re-issuing alice herself (rotation) with her host is fine
    tls.generate_deployment(tmp_path, ["alice"], hosts={"alice": ["db"]}, reuse_ca=True, overwrite=True)


@pytest.mark.parametrize(
    "host", ["bob.party.smcdp.invalid", "smcdp.invalid", "X.Party.SMCDP.invalid", "a.smcdp.invalid"]
)
def test_the_identity_domain_is_no_host(host, tmp_path):
    with pytest.raises(InvalidMessage, match="reserved for the party identity names"):
        tls.validate_host(host)
    with pytest.raises(InvalidMessage, match="reserved"):
        tls.generate_deployment(tmp_path, ["alice", "bob"], hosts={"alice": [host]})
    ca_key, ca = tls.create_ca()
    with pytest.raises(InvalidMessage, match="reserved"):
        tls.issue_party_certificate(ca_key, ca, "alice", [host])


def test_a_certificate_names_its_party_by_its_identity_name_once(tmp_path):
    tls.generate_deployment(tmp_path, ["alice", "bob"], hosts={"alice": ["bob.example.org", "10.0.0.1"]})
    for name in ("alice", "bob"):
        cert = tls.load_certificate(tmp_path / f"{name}.crt")
        assert tls.party_identity_name(name) == f"{name}.party.smcdp.invalid"
        assert tls.certificate_identity_names(cert) == [name]
        assert tls.check_party_identity(cert) == name


def test_a_certificate_of_an_earlier_version_is_refused_at_load_saying_how_to_reissue(tmp_path):
    tls.generate_deployment(tmp_path, ["alice", "bob"])
    ca_key = tls.load_private_key(tmp_path / "ca.key")
    ca = tls.load_certificate(tmp_path / "ca.crt")
    key, cert = earlier_version_certificate(ca_key, ca, "bob")
    tls.write_private_key(tmp_path / "bob.key", key, overwrite=True)
    tls.write_certificate(tmp_path / "bob.crt", cert, overwrite=True)
    with pytest.raises(tls.CertificateError) as refused:
        tls.TlsMaterial.load(tmp_path / "ca.crt", tmp_path / "bob.crt", tmp_path / "bob.key")
    text = str(refused.value)
    assert "bob.party.smcdp.invalid" in text and "earlier smcdp" in text
    assert "smcdp deploy rotate" in text and "--reuse-ca --force" in text
    # a certificate that is no party's (a console's HTTPS certificate) is not asked for one
    assert (
        tls.TlsMaterial.load(tmp_path / "ca.crt", tmp_path / "bob.crt", tmp_path / "bob.key", party_identity=False).name
        == "bob"
    )
    # re-issued under the same CA, as the message says: accepted
    tls.generate_deployment(tmp_path, ["bob"], reuse_ca=True, overwrite=True)
    assert tls.TlsMaterial.load(tmp_path / "ca.crt", tmp_path / "bob.crt", tmp_path / "bob.key").name == "bob"


def test_a_certificate_whose_identity_name_is_another_partys_is_refused(tmp_path):
    tls.generate_deployment(tmp_path, ["alice"])
    ca_key = tls.load_private_key(tmp_path / "ca.key")
    ca = tls.load_certificate(tmp_path / "ca.crt")
    key, cert = earlier_version_certificate(ca_key, ca, "alice", ["bob.party.smcdp.invalid"])
    tls.write_private_key(tmp_path / "alice.key", key, overwrite=True)
    tls.write_certificate(tmp_path / "alice.crt", cert, overwrite=True)
    with pytest.raises(tls.CertificateError, match="common name 'alice' but names 'bob' as its party identity"):
        tls.TlsMaterial.load(tmp_path / "ca.crt", tmp_path / "alice.crt", tmp_path / "alice.key")
