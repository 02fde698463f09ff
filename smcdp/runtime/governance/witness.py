"""A witnessed audit trail: peers keep each other's signed audit heads.

A hash chain with a head file shows an edit made by someone who did not rewrite everything
after it; whoever can write the party's disk can still truncate the log and rewrite
``audit.head`` to match, or rewrite the whole log.  Nothing on the local disk can show
that.  So, at the end of every session, the participants exchange their current audit
heads, each **signed with the party's TLS key** (its certificate travels with it), and
each keeps the others' (``data_dir/witness/<party>.json``, 0600):

* a :class:`SignedHead` says "party X's audit log whose first line hashes to ``log_id``
  had ``lines`` lines, the last hashing to ``sha256``, at ``time``" -- addressed to one
  witness, for one session;
* a witness keeps, per peer and per log of that peer, the latest head (by line count);
  a head that goes *backwards* (fewer lines, or the same count with another hash) is
  kept as evidence (``conflicts``) and reported in the witness's log and audit trail;
* ``smcdp audit verify --witnesses`` fetches what every peer holds about this party
  (``Mailbox.GetWitnessed``, over mutual TLS with the party's own certificate, or
  from files a peer's operator handed over) and checks the local log against it:
  each head's signature and certificate (issued by the deployment CA, for this party),
  then that the log still has that many lines and that line's hash is the one
  witnessed.  Truncation, a rewritten head, a rewritten history or a replaced log are
  detected without trusting anything on the local disk but the CA.

Signatures: ECDSA with SHA-256 for EC keys (what ``smcdp certs`` issues), RSA-PSS with
SHA-256 for RSA keys, Ed25519 as is.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as _dt
import hashlib
import json
import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import grpc
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa

from smcdp._files import atomic_write_json, json_loads
from smcdp._text import printable
from smcdp.errors import InvalidMessage, PermissionDenied
from smcdp.net.grpc_channel import PeerConnector
from smcdp.net.limits import MAX_JSON_DEPTH, json_depth_exceeds
from smcdp.net.tls import CertificateError, certificate_party_name, load_certificates
from smcdp.runtime.durability.integrity import local_failure
from smcdp.runtime.governance.audit import LOG_NAME, utc_now
from smcdp.v1 import transport_pb2 as tpb

log = logging.getLogger("smcdp.governance")

KIND = "smcdp-audit-head"
VERSION = 1
WITNESS_DIR = "witness"
MAX_STATEMENT = 2048
MAX_SIGNATURE = 1024
MAX_CERTIFICATE = 16 * 1024
#: heads taken per peer and session (its own end, and the reply when this party ended first),
#: and how many sessions are remembered for that
HEADS_PER_SESSION = 2
KEEP_SESSIONS = 512
#: logs of one peer whose latest head is kept, and conflicting heads kept as evidence
KEEP_LOGS = 8
KEEP_CONFLICTS = 16


class WitnessError(InvalidMessage):
    """A signed head that does not verify or does not say what it must."""


def _signed_at(claims: Mapping[str, Any]) -> _dt.datetime | None:
    """When a head says it was signed (None if its time does not parse)."""
    try:
        t = _dt.datetime.fromisoformat(str(claims["time"]).replace("Z", "+00:00"))
    except (KeyError, ValueError, TypeError):
        return None
    return t if t.tzinfo is not None else t.replace(tzinfo=_dt.UTC)


def went_back(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Two heads of one log that no append-only log can have signed.

    The same length with another last line; or the head signed *later* is the shorter one.  Heads
    arrive out of order (two sessions end at once and their heads cross on the way): a shorter head
    signed earlier than a longer one is just old news.  Heads signed at the same instant count as out
    of order unless they have the same length.
    """
    if a["lines"] == b["lines"]:
        return a["sha256"] != b["sha256"]
    shorter, longer = (a, b) if a["lines"] < b["lines"] else (b, a)
    ts, tl = _signed_at(shorter), _signed_at(longer)
    return ts is not None and tl is not None and ts > tl


def _canonical(obj: Mapping[str, Any]) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


# ---------------------------------------------------------------------- signing
def _sign(key, data: bytes) -> bytes:
    if isinstance(key, ec.EllipticCurvePrivateKey):
        return key.sign(data, ec.ECDSA(hashes.SHA256()))
    if isinstance(key, rsa.RSAPrivateKey):
        return key.sign(data, padding.PSS(padding.MGF1(hashes.SHA256()), padding.PSS.MAX_LENGTH), hashes.SHA256())
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key.sign(data)
    raise CertificateError(f"cannot sign with a {type(key).__name__}")


def _verify(public_key, signature: bytes, data: bytes) -> None:
    if isinstance(public_key, ec.EllipticCurvePublicKey):
        public_key.verify(signature, data, ec.ECDSA(hashes.SHA256()))
    elif isinstance(public_key, rsa.RSAPublicKey):
        public_key.verify(
            signature, data, padding.PSS(padding.MGF1(hashes.SHA256()), padding.PSS.MAX_LENGTH), hashes.SHA256()
        )
    elif isinstance(public_key, ed25519.Ed25519PublicKey):
        public_key.verify(signature, data)
    else:
        raise InvalidSignature(f"unsupported key type {type(public_key).__name__}")


@dataclass(frozen=True)
class SignedHead:
    """One party's audit head, signed by it for one witness (the wire and file form)."""

    statement: bytes  # canonical JSON, see :meth:`claims`
    signature: bytes
    certificate: bytes  # PEM of the signer's certificate

    def claims(self) -> dict:
        if (
            len(self.statement) > MAX_STATEMENT
            or len(self.signature) > MAX_SIGNATURE
            or len(self.certificate) > MAX_CERTIFICATE
        ):
            raise WitnessError("the signed head is larger than a head can be")
        if not (self.statement.isascii() and self.certificate.isascii()):  # as kept: as_dict writes them as ASCII
            raise WitnessError("the signed head's statement and certificate must be ASCII")
        # a head is one flat object: nesting is refused before the parser recurses into it (a statement nested
        # 999 deep parsed near the recursion limit, and whatever the collector finalised there could not even be
        # reported: the RPC fuzz failed once in CI on that)
        if json_depth_exceeds(self.statement.decode("ascii"), MAX_JSON_DEPTH):  # ASCII: checked above
            raise WitnessError(f"the signed head nests deeper than {MAX_JSON_DEPTH} levels")
        try:
            c = json_loads(self.statement)
        except ValueError:
            raise WitnessError("the signed head is not JSON") from None
        if not isinstance(c, dict) or c.get("kind") != KIND or c.get("version") != VERSION:
            raise WitnessError("the signed head is not a version-1 smcdp audit head")
        for k, t in (
            ("party", str),
            ("to", str),
            ("session", str),
            ("log_id", str),
            ("sha256", str),
            ("time", str),
            ("lines", int),
        ):
            if not isinstance(c.get(k), t) or isinstance(c.get(k), bool):
                raise WitnessError(f"the signed head lacks a valid {k!r}")
        if c["lines"] < 1 or len(c["log_id"]) != 64 or len(c["sha256"]) != 64:
            raise WitnessError("the signed head's line count or hashes are not valid")
        if _signed_at(c) is None:  # heads are ordered by it (WitnessStore.keep)
            raise WitnessError("the signed head's time is not an ISO 8601 time")
        return c

    def as_dict(self) -> dict:
        return {
            "statement": self.statement.decode("ascii"),
            "signature": base64.b64encode(self.signature).decode(),
            "certificate": self.certificate.decode("ascii"),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SignedHead:
        try:
            return cls(
                str(d["statement"]).encode("ascii"),
                base64.b64decode(str(d["signature"]), validate=True),
                str(d["certificate"]).encode("ascii"),
            )
        except (KeyError, ValueError, TypeError, UnicodeError):
            raise WitnessError("not a signed audit head") from None

    def check(self, ca_pem: bytes, party: str | None = None) -> dict:
        """Verify size, certificate (issued by a CA of ``ca_pem``, for ``party``) and signature;
        returns the claims.  Raises :class:`WitnessError`."""
        claims = self.claims()
        try:
            cert = x509.load_pem_x509_certificate(self.certificate)
            name = certificate_party_name(cert)
        except (ValueError, CertificateError) as exc:
            raise WitnessError(f"the signed head's certificate is not valid: {exc}") from None
        if name != claims["party"] or (party is not None and name != party):
            raise WitnessError(
                f"the signed head of {claims['party']!r} comes with the certificate of {name!r}"
                + ("" if party is None else f" (expected {party!r})")
            )
        try:
            cas = x509.load_pem_x509_certificates(ca_pem)
        except ValueError:
            cas = []
        if not any(_issued_by(cert, ca) for ca in cas):
            raise WitnessError(f"the certificate of {name!r} is not issued by the deployment CA")
        try:
            _verify(cert.public_key(), self.signature, self.statement)
        except (InvalidSignature, ValueError, TypeError):
            raise WitnessError(f"the signature on {name!r}'s audit head does not verify") from None
        return claims


def _issued_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
        return True
    except (InvalidSignature, ValueError, TypeError):
        return False


def sign_head(
    tls, state: tuple[str, int, str] | tuple[str, int, str, str] | None, to: str, session: str
) -> SignedHead | None:
    """This party's audit head ``state`` (:meth:`AuditLog.head`: log id, lines, last line's SHA-256 and
    the time it was read, taken together; without a time, now), signed with its TLS key for ``to``."""
    if state is None:
        return None
    log_id, lines, sha = state[:3]
    at = state[3] if len(state) > 3 else utc_now("microseconds")  # heads are ordered by it (keep)
    statement = _canonical(
        {
            "kind": KIND,
            "version": VERSION,
            "party": tls.name,
            "to": to,
            "session": session,
            "log_id": log_id,
            "lines": lines,
            "sha256": sha,
            "time": at,
        }
    )
    key = serialization.load_pem_private_key(tls.key_pem, password=None)
    return SignedHead(statement, _sign(key, statement), tls.cert_pem)


# ---------------------------------------------------------------------- what a witness keeps
@dataclass
class _PeerFile:
    party: str
    heads: dict[str, dict] = field(default_factory=dict)  # log id -> SignedHead.as_dict() (latest)
    sessions: list[str] = field(default_factory=list)
    conflicts: list[dict] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "kind": "smcdp-witnessed-heads",
            "party": self.party,
            "heads": self.heads,
            "sessions": self.sessions,
            "conflicts": self.conflicts,
        }


def _witness_fields(raw: Any) -> tuple[dict[str, dict], list[str], list[dict]]:
    """A witness file's heads, sessions and conflicts, each checked for the shape :class:`WitnessStore` writes
    (every head readable as a :class:`SignedHead`); ValueError naming the field otherwise."""
    if not isinstance(raw, dict):
        raise ValueError("not a JSON object")
    heads, sessions, conflicts = raw.get("heads") or {}, raw.get("sessions") or [], raw.get("conflicts") or []
    if not isinstance(heads, dict) or not all(isinstance(k, str) and isinstance(h, dict) for k, h in heads.items()):
        raise ValueError("'heads' must be an object of signed heads")
    if not isinstance(sessions, list) or not all(isinstance(x, str) for x in sessions):
        raise ValueError("'sessions' must be a list of session ids")
    if not isinstance(conflicts, list) or not all(
        isinstance(c, dict) and isinstance(c.get("head"), dict) and isinstance(c.get("after"), (dict, type(None)))
        for c in conflicts
    ):
        raise ValueError("'conflicts' must be a list of objects holding a signed 'head'")
    for where, h in [
        *((f"'heads' {k!r}", h) for k, h in heads.items()),
        *(("'conflicts'", c["head"]) for c in conflicts),
    ]:
        try:
            SignedHead.from_dict(h)
        except WitnessError as exc:
            raise ValueError(f"{where}: {exc}") from None
    return dict(heads), list(sessions), list(conflicts)


class WitnessStore:
    """``data_dir/witness/<peer>.json``: the heads this party witnessed for each peer."""

    def __init__(self, data_dir: Path, me: str, ca_pem: bytes) -> None:
        self.dir = Path(data_dir) / WITNESS_DIR
        self.me = me
        self.ca_pem = ca_pem
        self._lock = threading.Lock()

    def _path(self, peer: str) -> Path:
        return self.dir / f"{peer}.json"

    def _load(self, peer: str) -> _PeerFile:
        path = self._path(peer)
        try:
            return _PeerFile(peer, *_witness_fields(json_loads(path.read_text(encoding="utf-8"))))
        except FileNotFoundError:
            return _PeerFile(peer)
        except OSError as exc:
            # a file this party cannot open -- out of file descriptors under a connection flood, memory, a
            # wrong owner after a restore -- says nothing of its content: it stays where it is, and the call
            # fails naming the cause (UNAVAILABLE for a resource; before, EMFILE moved an intact file aside as
            # unreadable and its heads were forgotten)
            raise local_failure(exc, self.me, f"cannot read its witness file {path.name}") from None
        except (ValueError, AttributeError, TypeError) as exc:
            return self._aside(peer, path, exc)

    def _aside(self, peer: str, path: Path, exc: BaseException) -> _PeerFile:
        """A witness file that cannot be read as one: kept as it is (it may be evidence) under another name;
        the peer's next heads start a new file."""
        aside = path.with_name(f"{path.name}.unreadable-{utc_now('microseconds').replace(':', '')}")
        log.error("witness file %s is unreadable (%s); moved to %s", path, exc, aside.name)
        try:
            path.replace(aside)
        except OSError:
            pass
        return _PeerFile(peer)

    def keep(self, peer: str, head: SignedHead, live_or_ended: bool) -> str | None:
        """Keep ``peer``'s signed head (``peer``: the caller's verified identity).

        ``live_or_ended``: the session the head names is one ``peer`` took part in here.
        Returns a description of a conflict (the head went backwards), else None."""
        if not live_or_ended:  # before any signature work
            raise PermissionDenied(f"party {peer!r} took part in no session {head.claims()['session']!r} here")
        claims = head.check(self.ca_pem, peer)
        if claims["to"] != self.me:
            raise WitnessError(f"the head is addressed to {claims['to']!r}, not {self.me!r}")
        with self._lock:
            pf = self._load(peer)
            if pf.sessions.count(claims["session"]) >= HEADS_PER_SESSION:
                return None  # a repeat changes nothing (each side sends one at its end)
            conflict = None
            old = pf.heads.get(claims["log_id"])
            old_claims = SignedHead.from_dict(old).claims() if old is not None else None
            if old_claims is not None and went_back(old_claims, claims):
                # both times parse (claims() checks), so the keys are datetimes, never None
                first, then = sorted((old_claims, claims), key=lambda c: cast(_dt.datetime, _signed_at(c)))
                conflict = (
                    f"party {peer!r} signed an audit head of {then['lines']} lines (sha256 "
                    f"{then['sha256'][:16]}…, {then['time']}) after one of {first['lines']} lines "
                    f"(sha256 {first['sha256'][:16]}…, {first['time']}) for the same log: "
                    "its log went back"
                )
                pf.conflicts = (pf.conflicts + [{"head": head.as_dict(), "after": old}])[-KEEP_CONFLICTS:]
                if claims["lines"] > old_claims["lines"]:  # the longest head is the one a check needs
                    pf.heads[claims["log_id"]] = head.as_dict()
            elif old_claims is not None and claims["lines"] < old_claims["lines"]:
                pass  # an older head that arrived late: the longer one it preceded is kept
            else:
                pf.heads[claims["log_id"]] = head.as_dict()
                if len(pf.heads) > KEEP_LOGS:  # the oldest logs' heads go first
                    for k in sorted(pf.heads, key=lambda k: SignedHead.from_dict(pf.heads[k]).claims()["time"])[
                        : len(pf.heads) - KEEP_LOGS
                    ]:
                        del pf.heads[k]
            pf.sessions = (pf.sessions + [claims["session"]])[-KEEP_SESSIONS:]
            try:
                self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
                atomic_write_json(self._path(peer), pf.as_dict(), 0o600, sort_keys=True)
            except OSError as exc:
                raise local_failure(exc, self.me, f"cannot write its witness file {peer}.json") from None
            return conflict

    def held_for(self, peer: str) -> list[SignedHead]:
        """Every head (latest per log, and the conflicting ones) this party holds about ``peer``."""
        with self._lock:
            pf = self._load(peer)
        return [SignedHead.from_dict(h) for h in pf.heads.values()] + [
            SignedHead.from_dict(c["head"]) for c in pf.conflicts
        ]


def heads_from_file(path: Path) -> list[SignedHead]:
    """The heads in a peer's ``witness/<party>.json`` handed over as a file."""
    try:
        raw = json_loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise WitnessError(f"{path} is not a witness file: {exc}") from None
    if not isinstance(raw, dict) or raw.get("kind") != "smcdp-witnessed-heads":
        raise WitnessError(f"{path} is not a witness file (smcdp-witnessed-heads)")
    try:
        heads, _sessions, conflicts = _witness_fields(raw)
    except ValueError as exc:
        raise WitnessError(f"{path} is not a witness file: {exc}") from None
    return [SignedHead.from_dict(h) for h in heads.values()] + [SignedHead.from_dict(c["head"]) for c in conflicts]


async def fetch_witnessed(config, tls) -> tuple[list[tuple[str, SignedHead]], dict[str, str]]:
    """Ask every peer in ``config.peers`` what it holds about this party (over mutual TLS with the
    party's own certificate): ((peer, head) pairs, peer -> why it could not be asked)."""
    connector = PeerConnector(config, tls)
    heads: list[tuple[str, SignedHead]] = []
    errors: dict[str, str] = {}

    async def one(peer: str) -> None:
        try:
            reply = await connector.mailbox(peer).GetWitnessed(
                tpb.WitnessQuery(), timeout=config.timeouts.connect_seconds
            )
        except grpc.RpcError as exc:
            errors[peer] = f"{exc.code().name}: {printable(exc.details() or '', 300)}"
            return
        heads.extend((f"peer {peer}", SignedHead(h.statement, h.signature, h.certificate)) for h in reply.heads)

    try:
        await asyncio.gather(*(one(p) for p in sorted(config.peers)))
    finally:
        await connector.close()
    return heads, errors


# ---------------------------------------------------------------------- checking the local log
@dataclass
class Finding:
    source: str  # where the head came from (a peer, a file)
    ok: bool
    lines: int | None
    message: str


def check_log(data_dir: Path, me: str, ca_path: Path, witnessed: Iterable[tuple[str, SignedHead]]) -> list[Finding]:
    """Check the local log against signed heads (``(source, head)`` pairs) of party ``me``."""
    ca_pem = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in load_certificates(ca_path))
    data = (Path(data_dir) / LOG_NAME).read_bytes()
    lines = data.split(b"\n")[:-1]
    hashes_ = [hashlib.sha256(line).hexdigest() for line in lines]
    first = lines[0] if lines else b""
    try:
        restarted = json.loads(first).get("event") == "log-started" if first else False
    except (ValueError, AttributeError):
        restarted = False
    out = []
    for source, head in witnessed:
        try:
            c = head.check(ca_pem, me)
        except WitnessError as exc:
            out.append(Finding(source, False, None, f"unusable witness: {exc}"))
            continue
        where = f"{source} witnessed {c['lines']} lines at {c['time']} (session {c['session']})"
        if not hashes_ or c["log_id"] != hashes_[0]:
            why = (
                " (this log was started anew by its operator, line 1)"
                if restarted
                else " (the log was replaced or its first line changed)"
            )
            out.append(Finding(source, False, c["lines"], f"{where} of another log{why}"))
        elif c["lines"] > len(hashes_):
            out.append(
                Finding(source, False, c["lines"], f"{where}, the log now holds {len(hashes_)}: it was truncated")
            )
        elif hashes_[c["lines"] - 1] != c["sha256"]:
            out.append(
                Finding(
                    source,
                    False,
                    c["lines"],
                    f"{where}, but line {c['lines']} is not the line witnessed: the log was rewritten",
                )
            )
        else:
            out.append(Finding(source, True, c["lines"], f"{where}: matches"))
    return out


def verdicts(findings: Iterable[Finding]) -> dict[str, dict[str, Any]]:
    """Per witness (a finding's source: one peer, one file), its verdict on the log -- "contradicts" if any
    of its usable heads does, "agrees" if every usable one matches, "unusable" if none could be checked --
    and how many heads it gave.  A witness is counted once however many heads it returns: one hostile peer
    returning 2,003 copies made 2,003 "agreements"."""
    out: dict[str, dict[str, Any]] = {}
    for f in findings:
        v = out.setdefault(f.source, {"heads": 0, "agreeing": 0, "contradicting": 0, "unusable": 0})
        v["heads"] += 1
        v["agreeing" if f.ok else "contradicting" if f.lines is not None else "unusable"] += 1
    for v in out.values():
        v["verdict"] = "contradicts" if v["contradicting"] else "agrees" if v["agreeing"] else "unusable"
    return out


class Witnessing:
    """A party's side of the exchange at a session's end: its audit head signed for each peer, and the
    peers' heads kept (``store``).  A head that went backwards is kept as evidence and recorded on the
    audit trail (``audit``).  Without ``tls`` nothing is signed."""

    def __init__(self, store: WitnessStore, audit, tls=None) -> None:
        self.store = store
        self.audit = audit
        self.tls = tls

    def witness(self, peer: str, head: SignedHead, took_part: bool) -> SignedHead | None:
        """Keep ``peer``'s signed audit head; this party's own head, signed for ``peer``, in return."""
        self._keep(peer, head, took_part, head.claims()["session"])
        return self.signed_head(peer, head.claims()["session"])

    def signed_head(self, to: str, session: str) -> SignedHead | None:
        """This party's audit head now, signed for witness ``to``."""
        return None if self.tls is None else sign_head(self.tls, self.audit.head(), to, session)

    def keep_witnessed(self, peer: str, head: SignedHead, session: str) -> None:
        """``peer``'s head in answer to ours, at the end of ``session``."""
        if head.claims()["session"] != session:
            raise WitnessError(f"{peer!r} answered with a head for another session")
        self._keep(peer, head, True, session)

    def _keep(self, peer: str, head: SignedHead, took_part: bool, session: str) -> None:
        conflict = self.store.keep(peer, head, took_part)
        if conflict is not None:
            log.warning("!!! witness: %s", conflict)
            self.audit.append("witness-conflict", peer=peer, session=session, problem=conflict)


__all__ = [
    "WITNESS_DIR",
    "Finding",
    "SignedHead",
    "WitnessError",
    "WitnessStore",
    "Witnessing",
    "check_log",
    "fetch_witnessed",
    "heads_from_file",
    "sign_head",
    "verdicts",
    "went_back",
]
