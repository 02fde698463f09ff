"""A Paillier key its owner made, sent to a peer with the proof that its modulus is square-free, and taken only
with that proof.

A protocol where one participant encrypts under *his own* key and another raises, multiplies or opens those
ciphertexts (dp-aggregate's Charlie and his ζ; speaker identification's Bob and his ζ) cannot take the key on
its size alone: under a modulus with a square factor an opening binds only modulo rad(n), and under one with a
small prime factor a one-challenge bit proof passes for a non-bit (docs/crypto.md, "Under a key its prover made"
and "The owner's modulus").  The owner sends, after the public key, :func:`~smcdp.crypto.zkp.prove_modulus` for a
context the protocol names (its session and the key's tag: a proof from another session does not verify); the
receiver checks it -- gcd(n, φ(n)) = 1 and no prime factor up to 2^16 -- before anything is sent or computed
under the key.

* :func:`send_owned_key` -- ``{tag}-pk`` (the public key) and ``{tag}-proof`` (the roots) to every receiver.
* :func:`recv_owned_key` -- the public key and its proof from the owner; :class:`InvalidMessage` unless it holds.
"""

from __future__ import annotations

from collections.abc import Sequence

from smcdp.crypto.codec import bigints, from_bigints, peer_public_key, public_key_to_proto
from smcdp.crypto.paillier import PrivateKey, PublicKey
from smcdp.crypto.zkp import MODULUS_PROOF_ROOTS, no_small_factor, prove_modulus, verify_modulus
from smcdp.errors import InvalidMessage
from smcdp.net.channel import Channel, ReplayDiverged
from smcdp.v1 import messages_pb2 as pb


async def send_owned_key(ch: Channel, to: Sequence[str], tag: str, key: PrivateKey, context: bytes) -> None:
    """The public key of ``key`` as ``{tag}-pk``, then its modulus proof for ``context`` as ``{tag}-proof``, to every
    role of ``to`` (the proof is deterministic: a replayed owner sends the same one).  A replayed owner whose key is
    not the one its journal sent raises :class:`ReplayDiverged` naming itself (``send_many`` would otherwise send the
    journal's key again, and the owner then decrypt under another)."""
    mine = public_key_to_proto(key.public_key)
    if await ch.send_many(to, f"{tag}-pk", mine) != mine.SerializeToString():
        raise ReplayDiverged(
            f"replay of session {ch.session_id} diverged at {ch.me}: {tag}-pk is not the key it sent before", ch.me
        )
    await ch.send_many(to, f"{tag}-proof", bigints(prove_modulus(key, context)))


async def recv_owned_key(
    ch: Channel, owner: str, tag: str, context: bytes, *, bits: int, allow_insecure: bool
) -> PublicKey:
    """``owner``'s public key (``{tag}-pk``) of exactly ``bits`` bits (the session's: a larger one would cost the
    receiver every proof's check at its size), returned only if its modulus has no prime factor up to 2^16 and
    ``{tag}-proof`` shows it square-free for ``context``; else :class:`InvalidMessage` naming the owner."""
    msg = await ch.recv(owner, f"{tag}-pk", pb.PaillierPublicKey)
    pk = peer_public_key(msg, bits=bits, kind="standard", who=owner, allow_insecure=allow_insecure)
    if not no_small_factor(pk.n):
        raise InvalidMessage(
            f"{tag}-pk from {owner} has a prime factor below 2^16: refusing a key under which a bit proof need not "
            "hold (its owner made it)"
        )
    roots = from_bigints(
        await ch.recv(owner, f"{tag}-proof", pb.BigInts),
        count=MODULUS_PROOF_ROOTS,
        bound_bits=pk.bits,
        what=f"{tag}-proof from {owner}",
        nonnegative=True,
    )
    if not verify_modulus(pk, roots, context):
        raise InvalidMessage(
            f"{tag}-proof from {owner} does not show gcd(n, φ(n)) = 1 for the key {owner} made: refusing a key "
            "under which openings need not bind"
        )
    return pk
