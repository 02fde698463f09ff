"""Pairwise keys among a session's parties, agreed over their authenticated channels, and MACs under them that a
party relaying the MACs cannot forge.

Group-key sessions use them for the echo round (docs/protocols/power-iteration.md, step 2b): the first echo of
a session goes from every data party to every other directly -- each message authenticated by its mutual-TLS
channel -- and carries the sender's X25519 public key; every later echo goes through the coordinator as one MAC
per other data party under the pair's key, which the coordinator does not hold.  K + K messages a stage instead
of K(K − 1).

* :func:`link_secret` -- a party's X25519 private key for a session: HMAC-SHA256 keyed by a secret of the
  party's for the session (a group-key session passes a stream of its checkpointed randomness root) over the
  session and the party's role, so that a replayed party (docs/fault-tolerance.md) sends the very public key it
  sent before, and no two sessions or roles share one.
* :func:`pair_key` -- HKDF-SHA256 of the X25519 shared secret, salted with the session, its info naming both
  roles (in sorted order: both ends derive the same key).  An invalid public key (wrong length, or a low-order
  point whose shared secret is zero) raises ``ValueError``.
* :func:`pair_mac` -- HMAC-SHA256 under the pair's key over the session, the message's tag, the sender's and the
  receiver's roles and the payload, truncated to :data:`MAC_BYTES`: a MAC does not replay into another session,
  stage, direction or pair.

Why X25519 from ``cryptography`` and not the parties' TLS keys: the protocols do not hold their party's TLS key
(``net`` knows nothing of protocols, and a protocol sees only its :class:`~smcdp.net.channel.Channel`), and a
static-key scheme would tie the MAC keys to the certificates' key types.  The channel that carries the public
keys is what authenticates them.
"""

from __future__ import annotations

import hashlib
import hmac

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

_DOMAIN = b"smcdp/links/v1"
#: an X25519 public key
PUBLIC_BYTES = 32
#: a pairwise MAC (HMAC-SHA256, truncated): 2^-128 to forge one
MAC_BYTES = 16


def _framed(*parts: str | bytes) -> bytes:
    out = bytearray()
    for part in parts:
        b = part.encode() if isinstance(part, str) else part
        out += len(b).to_bytes(4, "big") + b
    return bytes(out)


def link_secret(secret: bytes, session_id: str, role: str) -> X25519PrivateKey:
    """The party's X25519 private key for ``session_id`` as ``role``, derived from its ``secret`` (32 bytes or more
    of key material only it holds)."""
    seed = hmac.new(secret, _DOMAIN + b"\x00secret\x00" + _framed(session_id, role), hashlib.sha256).digest()
    return X25519PrivateKey.from_private_bytes(seed)


def link_public(key: X25519PrivateKey) -> bytes:
    """The public key to send the other parties (:data:`PUBLIC_BYTES` bytes)."""
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def pair_key(key: X25519PrivateKey, peer_public: bytes, session_id: str, role: str, peer: str) -> bytes:
    """The 32-byte key ``role`` shares with ``peer`` in ``session_id`` (the peer derives the same one)."""
    if len(peer_public) != PUBLIC_BYTES:
        raise ValueError(f"a link public key has {PUBLIC_BYTES} bytes, not {len(peer_public)}")
    shared = key.exchange(X25519PublicKey.from_public_bytes(peer_public))  # ValueError for a low-order point
    lo, hi = sorted((role, peer))
    info = _DOMAIN + b"\x00pair\x00" + _framed(lo, hi)
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=session_id.encode(), info=info).derive(shared)


def pair_mac(key: bytes, session_id: str, tag: str, sender: str, receiver: str, payload: bytes) -> bytes:
    """``sender``'s MAC of ``payload`` for ``receiver`` under their pair's ``key``."""
    msg = _DOMAIN + b"\x00mac\x00" + _framed(session_id, tag, sender, receiver, payload)
    return hmac.new(key, msg, hashlib.sha256).digest()[:MAC_BYTES]
