"""Batched 1-out-of-M oblivious transfer (Naor–Pinkas 2001, random-oracle variant) as coroutines.

The sender holds N rows of M byte strings, the chooser N choices in [0, M);
the chooser obtains exactly the chosen string of every row and the sender
learns nothing about the choices (each PK it receives is a uniformly random
group element whatever the choice).  Two messages in all, whatever N:

    chooser -> sender   "<prefix>/np-hdr"  Ints  [version, N, M]
                        "<prefix>/np-pk0"  Blobs [PK_{j,0}]          (N elements)
    sender  -> chooser  "<prefix>/np-gr"   Blobs [g^r]               (1 element)
                        "<prefix>/np-ct"   Blobs [ct_{j,i}] row-major (N*M strings)

The chooser learns the byte length of every one of the M strings of each row
(pad them to a common length if that matters).  Math and security argument:
:mod:`smcdp.crypto.naor_pinkas` and docs/primitives.md.

The sender's r, g^r and C_1^r..C_{M-1}^r depend on nothing the chooser sends -- only on the session, the
tag prefix and M -- so a protocol that knows those before its online phase makes them there
(:func:`sender_setup`) and hands them to :func:`ot_send`: online, the sender then raises only the chooser's
keys (one power per transfer) instead of M + N.
"""

from __future__ import annotations

import asyncio
import operator
import random
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass

import gmpy2

from smcdp.crypto.modexp import FixedBase, powmod
from smcdp.crypto.naor_pinkas import (
    MODP2048,
    chooser_decrypt,
    chooser_first,
    context_bytes,
    derive_c,
    sender_encrypt,
)
from smcdp.errors import InvalidMessage
from smcdp.net.channel import Channel
from smcdp.primitives.offload import run_chunked
from smcdp.v1 import messages_pb2

PROTOCOL_VERSION = 1
MAX_M = 1 << 16
MAX_TRANSFERS = 1_000_000
#: Batches at least this large use fixed-base tables (g, g^r) on the chooser's side.
TABLE_THRESHOLD = 32
DEFAULT_CHUNK = 16


def _tags(prefix: str) -> dict[str, str]:
    if not isinstance(prefix, str) or not prefix:
        raise InvalidMessage("tag_prefix must be a non-empty string")
    return {k: f"{prefix}/np-{k}" for k in ("hdr", "pk0", "gr", "ct")}


@dataclass(frozen=True, eq=False)
class SenderSetup:
    """The sender's part of one batch that needs no message from the chooser (:func:`sender_setup`): its
    secret r, g^r and C_i^r for i = 1..M-1, bound to the batch's context (session, tag prefix, M)."""

    context: bytes
    m: int
    r: gmpy2.mpz
    gr: gmpy2.mpz
    c_r: tuple[gmpy2.mpz | None, ...]


def sender_setup(session_id: str, m: int, *, tag_prefix: str = "ot", rng: random.Random | None = None) -> SenderSetup:
    """Make the sender's r, g^r and C_1^r..C_{M-1}^r for the batch ``tag_prefix`` of ``session_id`` with ``m``
    strings a row, ahead of :func:`ot_send` (which takes them as ``setup``).  ``rng`` as in :func:`ot_send`:
    the same stream gives the same r whether it is drawn here or there.  CPU-bound (M powers mod a 2048-bit
    prime): call it on a worker thread."""
    _tags(tag_prefix)
    m = _check_m(m)
    group = MODP2048
    context = context_bytes(session_id, tag_prefix, m)
    r = group.random_exponent(rng)
    c_r = (None, *(powmod(derive_c(group, context, i), r, group.p) for i in range(1, m)))
    return SenderSetup(context=context, m=m, r=r, gr=group.exp_g(r), c_r=c_r)


def _sender_chunk(
    context: bytes, first: int, pk0s: list[int], r: int, c_r: list[gmpy2.mpz], rows: list[list[bytes]]
) -> list[bytes]:
    out: list[bytes] = []
    for off, (pk0, row) in enumerate(zip(pk0s, rows)):
        out.extend(sender_encrypt(MODP2048, context, first + off, gmpy2.mpz(pk0), r, c_r, row))
    return out


def _check_m(m: object) -> int:
    if isinstance(m, bool) or not isinstance(m, int):
        raise InvalidMessage(f"m must be an int, got {type(m).__name__}")
    if not (2 <= m <= MAX_M):
        raise InvalidMessage(f"m = {m} is outside [2, {MAX_M}]")
    return m


async def ot_send(
    ch: Channel,
    chooser_role: str,
    messages: Sequence[Sequence[bytes]],
    *,
    tag_prefix: str = "ot",
    executor: Executor | None = None,
    chunk: int = DEFAULT_CHUNK,
    rng: random.Random | None = None,
    setup: SenderSetup | None = None,
) -> None:
    """Sender: ``messages[j][i]`` is string i of transfer j; every row has the same M >= 2.

    ``rng`` draws the sender's secret r (a role's stream from :mod:`smcdp.primitives.rng`;
    default the OS CSPRNG).  ``setup``: r and its powers made ahead by :func:`sender_setup` for this very
    batch (its session, ``tag_prefix`` and M; anything else is a ``ValueError``) -- then ``rng`` is not used.
    """
    tags = _tags(tag_prefix)
    try:
        rows = [list(row) for row in messages]
    except TypeError:
        raise InvalidMessage("messages must be a sequence of sequences of bytes") from None
    if not rows:
        raise InvalidMessage("messages is empty: at least one transfer is needed")
    if len(rows) > MAX_TRANSFERS:
        raise InvalidMessage(f"{len(rows)} transfers in one call; at most {MAX_TRANSFERS}")
    m = _check_m(len(rows[0]))
    for j, row in enumerate(rows):
        if len(row) != m:
            raise InvalidMessage(f"messages[{j}] has {len(row)} strings, messages[0] has {m}")
        for i, s in enumerate(row):
            if not isinstance(s, (bytes, bytearray, memoryview)):
                raise InvalidMessage(f"messages[{j}][{i}] is a {type(s).__name__}, expected bytes")
            row[i] = bytes(s)
    if not isinstance(chunk, int) or chunk < 1:
        raise InvalidMessage("chunk must be a positive int")
    count = len(rows)
    group = MODP2048

    hdr = await ch.recv(chooser_role, tags["hdr"], messages_pb2.Ints)
    want = [PROTOCOL_VERSION, count, m]
    if list(hdr.values) != want:
        raise InvalidMessage(
            f"OT header from {chooser_role} is {list(hdr.values)}, expected [version, transfers, m] = {want}"
        )
    pk_msg = await ch.recv(chooser_role, tags["pk0"], messages_pb2.Blobs)
    if len(pk_msg.values) != count:
        raise InvalidMessage(f"expected {count} OT public keys from {chooser_role}, got {len(pk_msg.values)}")
    pk0s = [int(group.decode(b, f"OT public key {j} from {chooser_role}")) for j, b in enumerate(pk_msg.values)]

    context = context_bytes(ch.session_id, tag_prefix, m)
    if setup is None:
        setup = await asyncio.to_thread(sender_setup, ch.session_id, m, tag_prefix=tag_prefix, rng=rng)
    elif setup.context != context or setup.m != m:
        raise ValueError(f"the OT set-up was made for another batch than {tag_prefix!r} of this session with m = {m}")
    r, c_r = setup.r, list(setup.c_r)
    await ch.send(chooser_role, tags["gr"], messages_pb2.Blobs(values=[group.encode(setup.gr)]))
    cts = await run_chunked(
        executor,
        _sender_chunk,
        [(context, s, pk0s[s : s + chunk], r, c_r, rows[s : s + chunk]) for s in range(0, count, chunk)],
    )
    await ch.send(chooser_role, tags["ct"], messages_pb2.Blobs(values=cts))


async def ot_choose(
    ch: Channel,
    sender_role: str,
    choices: Sequence[int],
    m: int,
    *,
    tag_prefix: str = "ot",
    rng: random.Random | None = None,
) -> list[bytes]:
    """Chooser: returns ``[messages[j][choices[j]] for j]``; the sender learns nothing of the choices.

    ``rng`` draws the chooser's secrets k (a role's stream; default the OS CSPRNG).
    """
    tags = _tags(tag_prefix)
    m = _check_m(m)
    try:
        choices = list(choices)
    except TypeError:
        raise InvalidMessage("choices must be a sequence of ints") from None
    if not choices:
        raise InvalidMessage("choices is empty: at least one transfer is needed")
    if len(choices) > MAX_TRANSFERS:
        raise InvalidMessage(f"{len(choices)} transfers in one call; at most {MAX_TRANSFERS}")
    for j, c in enumerate(choices):
        if isinstance(c, bool):
            raise InvalidMessage(f"choices[{j}] is a bool, expected an int")
        try:
            c = operator.index(c)
        except TypeError:
            raise InvalidMessage(f"choices[{j}] = {c!r} is not an integer") from None
        if not (0 <= c < m):
            raise InvalidMessage(f"choices[{j}] = {c} is outside [0, {m})")
        choices[j] = c
    count = len(choices)
    group = MODP2048
    context = context_bytes(ch.session_id, tag_prefix, m)
    needed = sorted({c for c in choices if c != 0})
    cs: list[gmpy2.mpz | None] = [None] * m
    for i in needed:  # only the C_i this batch uses
        cs[i] = derive_c(group, context, i)
    big = count >= TABLE_THRESHOLD
    ks, pk0s = [], []
    for c in choices:
        k, pk0 = chooser_first(group, cs, c, table=big, rng=rng)
        ks.append(k)
        pk0s.append(group.encode(pk0))
    await ch.send(sender_role, tags["hdr"], messages_pb2.Ints(values=[PROTOCOL_VERSION, count, m]))
    await ch.send(sender_role, tags["pk0"], messages_pb2.Blobs(values=pk0s))

    gr_msg = await ch.recv(sender_role, tags["gr"], messages_pb2.Blobs)
    if len(gr_msg.values) != 1:
        raise InvalidMessage(f"expected one g^r from {sender_role}, got {len(gr_msg.values)}")
    gr = group.decode(gr_msg.values[0], f"g^r from {sender_role}")
    ct_msg = await ch.recv(sender_role, tags["ct"], messages_pb2.Blobs)
    if len(ct_msg.values) != count * m:
        raise InvalidMessage(f"expected {count * m} OT ciphertexts from {sender_role}, got {len(ct_msg.values)}")
    base = FixedBase(gr, group.p, group.q.bit_length()) if big else gr
    out = []
    for j, (c, k) in enumerate(zip(choices, ks)):
        out.append(chooser_decrypt(group, context, j, c, k, base, ct_msg.values[j * m + c]))
        if j % DEFAULT_CHUNK == DEFAULT_CHUNK - 1:
            await asyncio.sleep(0)
    return out
