"""Certificates for a deployment: one CA, one key + certificate per party.

Built on the ``cryptography`` package.  Choices (see docs/transport.md):

* Keys are ECDSA on P-256 (CA and parties).  P-256 is supported by every TLS
  stack gRPC uses, signs and verifies much faster than RSA-3072 at a
  comparable (~128-bit) security level, and keeps certificates small.
* A party certificate carries the party name as subject common name (CN) and
  its *identity name* ``<name>.party.smcdp.invalid`` as a DNS subjectAltName,
  plus the bare party name (for earlier versions' clients, deprecated) and
  optional extra host names / IP addresses.  Its extended key usage allows
  both TLS server and TLS client authentication, because every party is both.
* The party name is the identity: servers read the CN of the verified client
  certificate, clients verify the server certificate against the identity
  name of the party they expect (``grpc.ssl_target_name_override``), whatever
  address it has.  No host name can be an identity name (``smcdp.invalid`` is
  reserved: :func:`validate_host`), so an extra host name never makes one
  party pass for another; host lists that name another party are refused too
  (:func:`check_hosts_name_no_other_party`).
* Private keys are written unencrypted (the party process must start
  unattended) with mode 0600, created that way with ``os.open``.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from smcdp.errors import InvalidMessage

#: a path given as text or as a path object
StrPath = str | os.PathLike[str]

#: Allowed party names: lowercase letters, digits and dashes, starting with a
#: letter or digit, at most 63 characters (a DNS label, so the name can be a SAN).
PARTY_NAME_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\Z")

#: The DNS domain under which a certificate names its party: ``<party>.party.smcdp.invalid``.
#: ``.invalid`` is reserved (RFC 6761: never a real host, never resolves), and no host given for a
#: certificate or a deployment may lie under :data:`RESERVED_DOMAIN`, so an identity name cannot
#: collide with any host name.
IDENTITY_DOMAIN = "party.smcdp.invalid"
RESERVED_DOMAIN = "smcdp.invalid"

DEFAULT_CA_DAYS = 3650
DEFAULT_PARTY_DAYS = 825
CA_CERT_FILE = "ca.crt"
CA_KEY_FILE = "ca.key"


class CertificateError(InvalidMessage):
    """A certificate, key or certificate request is not acceptable."""


def validate_party_name(name: object, what: str = "party name") -> str:
    """Return ``name`` if it is a valid party name, else raise :class:`InvalidMessage`."""
    if not isinstance(name, str) or not PARTY_NAME_RE.match(name):
        raise InvalidMessage(
            f"{what} {name!r} is not valid: use 1-63 lowercase letters, digits and '-' "
            "(not starting or ending with '-')"
        )
    return name


def party_identity_name(name: str) -> str:
    """The name a party's certificate carries as its identity (a DNS subjectAltName), and the name a
    client checks a server's certificate against (``grpc.ssl_target_name_override``) when it dials
    party ``name``: ``<name>.party.smcdp.invalid``."""
    return f"{validate_party_name(name)}.{IDENTITY_DOMAIN}"


def parse_party_list(text: str) -> list[str]:
    """``"alice,bob,trent"`` -> ``["alice", "bob", "trent"]`` (validated, unique)."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise InvalidMessage("--parties needs at least one party name, e.g. alice,bob,trent")
    for n in names:
        validate_party_name(n)
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise InvalidMessage(f"party names must be unique; repeated: {', '.join(dup)}")
    return names


def parse_hosts(text: str | None, parties: Sequence[str]) -> dict[str, list[str]]:
    """``"alice=10.0.0.1,alice=alice.example.org,bob=10.0.0.2"`` -> name -> extra SANs."""
    out: dict[str, list[str]] = {p: [] for p in parties}
    if not text:
        return out
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        if "=" not in item:
            raise InvalidMessage(f"--hosts entry {item!r} must look like PARTY=HOST")
        name, host = (s.strip() for s in item.split("=", 1))
        if name not in out:
            raise InvalidMessage(f"--hosts names party {name!r}, which is not in --parties")
        validate_host(host)
        out[name].append(host)
    check_hosts_name_no_other_party(out, parties)
    return out


def check_hosts_name_no_other_party(hosts: Mapping[str, Iterable[str]], parties: Iterable[str]) -> None:
    """Refuse a host of one party that is the name of another party (DNS names compare case-insensitively).

    The identity clients check is the reserved :func:`party_identity_name`, which no host can be; but a
    client of an earlier version checks the bare party name, which the certificate carrying such a host
    would then pass for -- and a host list that names another party is a mistake in any case."""
    names = set(parties)
    for party, items in hosts.items():
        for host in items:
            other = host.lower()
            if other in names and other != party:
                raise InvalidMessage(
                    f"host {host!r} of party {party!r} is the name of party {other!r}: {party}'s certificate would "
                    f"carry {other}'s name; give {party} a fully qualified host name or an IP address instead"
                )


_DNS_RE = re.compile(
    r"^(?=.{1,253}$)(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*"
    r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$"
)


def validate_host(host: str) -> str:
    """A host for a SAN: an IP address or a DNS name."""
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    if not _DNS_RE.match(host):
        raise InvalidMessage(f"host {host!r} is neither an IP address nor a DNS name")
    low = host.lower()
    if low == RESERVED_DOMAIN or low.endswith("." + RESERVED_DOMAIN):
        raise InvalidMessage(
            f"host {host!r} is under {RESERVED_DOMAIN}, which is reserved for the party identity names "
            f"(<party>.{IDENTITY_DOMAIN}) that certificates carry"
        )
    return host


def _san_entries(names: Iterable[str]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    seen = set()
    for n in names:
        if n in seen:
            continue
        seen.add(n)
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            out.append(x509.DNSName(n))
    return out


def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC)


def create_ca(
    common_name: str = "smcdp deployment CA", days: int = DEFAULT_CA_DAYS
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A self-signed CA that may sign end-entity certificates only (path length 0)."""
    if days <= 0:
        raise InvalidMessage(f"CA validity must be positive days, got {days}")
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = _now()
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(minutes=5))
        .not_valid_after(now + _dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ski, critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def issue_party_certificate(
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    name: str,
    hosts: Iterable[str] = (),
    days: int = DEFAULT_PARTY_DAYS,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """Key + certificate for party ``name``: CN = name; DNS SANs: its identity name
    (:func:`party_identity_name`), the bare name (read only by earlier versions' clients; deprecated),
    plus ``hosts``."""
    validate_party_name(name)
    hosts = [validate_host(h) for h in hosts]
    if days <= 0:
        raise InvalidMessage(f"certificate validity must be positive days, got {days}")
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    not_after = min(now + _dt.timedelta(days=days), ca_cert.not_valid_after_utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(minutes=5))
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        .add_extension(
            x509.SubjectAlternativeName(_san_entries([party_identity_name(name), name, *hosts])), critical=False
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert


# ------------------------------------------------------------------ files
def write_private_key(path: StrPath, key: PrivateKeyTypes, overwrite: bool = False) -> Path:
    """PEM (PKCS#8, unencrypted) created with mode 0600 from the start."""
    path = Path(path)
    data = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    if overwrite and path.exists():
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return path


def write_certificate(path: StrPath, cert: x509.Certificate, overwrite: bool = False) -> Path:
    path = Path(path)
    if overwrite and path.exists():
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
        f.flush()
        os.fsync(f.fileno())
    return path


def load_certificate(path: StrPath) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(Path(path).read_bytes())
    except FileNotFoundError:
        raise CertificateError(f"certificate file {path} does not exist") from None
    except ValueError as exc:
        raise CertificateError(f"{path} is not a PEM certificate: {exc}") from None


def load_certificates(path: StrPath) -> list[x509.Certificate]:
    """Every certificate of a PEM bundle (a CA file may hold several during a CA rotation)."""
    try:
        certs = x509.load_pem_x509_certificates(Path(path).read_bytes())
    except FileNotFoundError:
        raise CertificateError(f"certificate file {path} does not exist") from None
    except ValueError as exc:
        raise CertificateError(f"{path} is not a PEM certificate bundle: {exc}") from None
    if not certs:
        raise CertificateError(f"{path} holds no certificate")
    return certs


def load_private_key(path: StrPath) -> PrivateKeyTypes:
    try:
        return serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    except FileNotFoundError:
        raise CertificateError(f"key file {path} does not exist") from None
    except (ValueError, TypeError) as exc:
        raise CertificateError(f"{path} is not an unencrypted PEM private key: {exc}") from None


def certificate_party_name(cert: x509.Certificate) -> str:
    """The party name (subject CN) of a certificate."""
    cns = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if len(cns) != 1:
        raise CertificateError("a party certificate must have exactly one common name")
    return validate_party_name(str(cns[0].value), "certificate common name")


def certificate_identity_names(cert: x509.Certificate) -> list[str]:
    """The party names a certificate's identity names (``<party>.party.smcdp.invalid`` SANs) name, lowercased."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    suffix = "." + IDENTITY_DOMAIN
    return [n.lower()[: -len(suffix)] for n in san.get_values_for_type(x509.DNSName) if n.lower().endswith(suffix)]


#: what an operator does about a certificate without an identity name (docs/security.md, "Party identity")
REISSUE_HINT = (
    "re-issue it under the same CA: `smcdp deploy rotate --dir DIR --all` for `smcdp deploy` bundles, "
    "`smcdp certs --out DIR --parties NAMES --reuse-ca --force` otherwise (docs/security.md, 'Party identity')"
)


def check_party_identity(cert: x509.Certificate, where: object = "the certificate") -> str:
    """The party name of a party certificate that names it as its identity: its CN, and exactly one identity
    name (:func:`party_identity_name`), of that party.  A certificate made by an earlier version (no
    identity name) is refused, saying how to re-issue it: no peer of this version would accept it."""
    name = certificate_party_name(cert)
    ids = certificate_identity_names(cert)
    if not ids:
        raise CertificateError(
            f"certificate {where} of party {name!r} has no party identity name ({party_identity_name(name)}): it was "
            f"made by an earlier smcdp, whose certificates peers no longer accept (an extra host name could make one "
            f"party pass for another); {REISSUE_HINT}"
        )
    if ids != [name]:
        raise CertificateError(
            f"certificate {where} has common name {name!r} but names {', '.join(map(repr, ids))} as its party "
            f"identity; {REISSUE_HINT}"
        )
    return name


def _subject(cert: x509.Certificate) -> str:
    """A certificate's subject for an error message (a damaged one may not render: then its serial)."""
    try:
        return cert.subject.rfc4514_string()
    except ValueError:
        return f"the certificate with serial {cert.serial_number:x} (its subject is damaged)"


def _issued_host_names(out: Path, skip: Iterable[str]) -> dict[str, set[str]]:
    """Party -> the other DNS names (hosts, lowercased) of each party certificate ``<party>.crt`` in ``out``,
    but those of ``skip`` (being re-issued) and files that are no party certificate."""
    skip = set(skip)
    found: dict[str, set[str]] = {}
    for path in sorted(out.glob("*.crt")) if out.is_dir() else ():
        if path.name == CA_CERT_FILE or path.stem in skip:
            continue
        try:
            cert = load_certificate(path)
            name = certificate_party_name(cert)
            san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        except (CertificateError, InvalidMessage, x509.ExtensionNotFound, ValueError):
            continue
        dns = {n.lower() for n in san.get_values_for_type(x509.DNSName)}
        found[name] = dns - {name, party_identity_name(name)}
    return found


@dataclass(frozen=True)
class PartyFiles:
    name: str
    cert: Path
    key: Path


def generate_deployment(
    out_dir: StrPath,
    parties: Sequence[str],
    hosts: Mapping[str, Sequence[str]] | None = None,
    days: int = DEFAULT_PARTY_DAYS,
    reuse_ca: bool = False,
    overwrite: bool = False,
) -> dict[str, PartyFiles]:
    """Write ``ca.crt`` (+ ``ca.key``) and ``<name>.crt`` / ``<name>.key`` per party.

    ``reuse_ca`` issues new party certificates under the CA already in
    ``out_dir`` (adding a party, rotating a party's key) instead of creating
    one.  Existing files are never replaced unless ``overwrite`` is set.
    """
    out = Path(out_dir)
    parties = list(parties)
    for p in parties:
        validate_party_name(p)
    if len(set(parties)) != len(parties):
        raise InvalidMessage("party names must be unique")
    if not parties:
        raise InvalidMessage("at least one party is needed")
    hosts = dict(hosts or {})
    for n in hosts:
        if n not in parties:
            raise InvalidMessage(f"hosts given for {n!r}, which is not one of the parties")
        for h in hosts[n]:
            validate_host(h)  # before anything is written
    check_hosts_name_no_other_party(hosts, parties)
    # parties issued before in this directory: no new certificate carries their names, nor theirs a new party's
    if reuse_ca:
        issued = _issued_host_names(out, skip=parties)
        check_hosts_name_no_other_party(hosts, [*parties, *issued])
        for other, names in issued.items():
            clash = sorted(names & set(parties))
            if clash:
                raise InvalidMessage(
                    f"the certificate of party {other!r} in {out} carries the host name {clash[0]!r}: a party of "
                    f"that name would share it; choose another name, or first re-issue {other} without that host"
                )
    out.mkdir(parents=True, exist_ok=True)
    ca_crt, ca_key = out / CA_CERT_FILE, out / CA_KEY_FILE
    targets = [out / f"{p}.crt" for p in parties] + [out / f"{p}.key" for p in parties]
    if not reuse_ca:
        targets += [ca_crt, ca_key]
    existing = [str(t) for t in targets if t.exists()]
    if existing and not overwrite:
        raise InvalidMessage(
            f"refusing to overwrite existing files: {', '.join(existing)} (use --force, "
            "or --reuse-ca to issue under the existing CA)"
        )
    if reuse_ca:
        ca_key_obj = load_private_key(ca_key)
        ca_cert_obj = load_certificate(ca_crt)
        if not isinstance(ca_key_obj, ec.EllipticCurvePrivateKey):
            raise CertificateError(f"{ca_key} is not an EC key")
    else:
        ca_key_obj, ca_cert_obj = create_ca()
        write_private_key(ca_key, ca_key_obj, overwrite=overwrite)
        write_certificate(ca_crt, ca_cert_obj, overwrite=overwrite)
    result = {}
    for p in parties:
        key, cert = issue_party_certificate(ca_key_obj, ca_cert_obj, p, hosts.get(p, ()), days)
        kpath = write_private_key(out / f"{p}.key", key, overwrite=overwrite)
        cpath = write_certificate(out / f"{p}.crt", cert, overwrite=overwrite)
        result[p] = PartyFiles(p, cpath, kpath)
    return result


@dataclass(frozen=True)
class TlsMaterial:
    """PEM bytes a party needs for gRPC: the CA, its own certificate and key."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes
    name: str  # the CN of cert_pem

    @classmethod
    def load(cls, ca: StrPath, cert: StrPath, key: StrPath, *, party_identity: bool = True) -> TlsMaterial:
        """Load and check: the certificate is signed by a CA of the bundle, valid now, matches the key and (with
        ``party_identity``, for a party's own certificate) names its party as its identity
        (:func:`check_party_identity`: a certificate of an earlier version is refused, saying how to re-issue).

        The CA file may hold several certificates (a CA rotation: the old CA and
        the new one side by side): every one is trusted for peers, and this
        party's own certificate must be issued by one of them that is valid now.
        """
        cas = load_certificates(ca)
        own = load_certificate(cert)
        priv = load_private_key(key)
        try:
            public = own.public_key()
        except (UnsupportedAlgorithm, ValueError) as exc:  # e.g. a damaged curve OID
            raise CertificateError(f"certificate {cert}: its public key cannot be read: {exc}") from None
        pub_own = public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        pub_key = priv.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        if pub_own != pub_key:
            raise CertificateError(f"key {key} does not belong to certificate {cert}")
        now = _now()
        issuer = None
        problems = []
        for ca_cert in cas:
            try:
                own.verify_directly_issued_by(ca_cert)
            except (InvalidSignature, ValueError, TypeError, UnsupportedAlgorithm) as exc:
                problems.append(f"{_subject(ca_cert)}: {type(exc).__name__} {exc}".strip())
                continue
            issuer = ca_cert
            break
        if issuer is None:
            raise CertificateError(
                f"certificate {cert} is not issued by the CA in {ca} "
                f"({len(cas)} certificate(s) there; {'; '.join(problems)})"
            )
        for c, p in ((own, cert), (issuer, ca)):
            if not (c.not_valid_before_utc <= now <= c.not_valid_after_utc):
                raise CertificateError(
                    f"certificate {p} is not valid now (valid {c.not_valid_before_utc:%Y-%m-%d} "
                    f"to {c.not_valid_after_utc:%Y-%m-%d})"
                )
        name = check_party_identity(own, cert) if party_identity else certificate_party_name(own)
        return cls(Path(ca).read_bytes(), Path(cert).read_bytes(), Path(key).read_bytes(), name)
