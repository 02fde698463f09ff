"""Client certificates a party's boundary must refuse or tell apart (tests/integration/grpc/test_rpc_fuzz.py).

``make_deployment`` issues one certificate per party under the deployment CA.  A fuzzer of the boundary also
needs callers that no honest deployment has: a certificate of the same CA whose common name is not a party name
at all (the TLS handshake passes -- only the server's own reading of the name can refuse it), one for a name in
no party's ``[peers]``, and certificates of another CA (the handshake itself must fail).  And a party
certificate as versions before party identity names issued it (:func:`earlier_version_certificate`).
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from smcdp.net.tls import generate_deployment, load_certificate, load_private_key


def issue_raw_certificate(certs: Path, stem: str, common_name: str, days: int = 2) -> tuple[Path, Path]:
    """``certs/<stem>.crt`` and ``.key``: a client and server certificate issued by the CA in ``certs``
    (``ca.crt``, ``ca.key``) whose CN is ``common_name`` exactly as given -- no party-name check, unlike
    :func:`smcdp.net.tls.issue_party_certificate`."""
    ca_key = load_private_key(certs / "ca.key")
    ca_cert = load_certificate(certs / "ca.crt")
    key = ec.generate_private_key(ec.SECP256R1())
    now = _dt.datetime.now(_dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(minutes=5))
        .not_valid_after(now + _dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]  # the deployment CA's key is an EC key
    )
    key_path, cert_path = certs / f"{stem}.key", certs / f"{stem}.crt"
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    key_path.chmod(0o600)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path


def earlier_version_certificate(ca_key, ca_cert: x509.Certificate, name: str, hosts=(), days: int = 365):
    """(key, certificate) for party ``name`` as smcdp issued them before party identity names: CN and DNS SAN =
    the party name, plus ``hosts`` -- no ``<name>.party.smcdp.invalid`` (docs/security.md, "Party identity")."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = _dt.datetime.now(_dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(minutes=5))
        .not_valid_after(now + _dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in (name, *hosts)]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert


def issue_member_certificates(certs: Path, names: list[str]) -> None:
    """Party certificates for ``names`` under the deployment CA already in ``certs`` (members no config names)."""
    generate_deployment(certs, names, reuse_ca=True)


def foreign_certificates(out: Path, names: list[str]) -> Path:
    """A second, unrelated CA in ``out`` with a party certificate per name (``out/<name>.crt``, ``.key``)."""
    generate_deployment(out, names)
    return out
