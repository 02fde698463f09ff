"""A modified power-iteration plug-in for the malicious-coordinator tests (issue 25; listed in
``party.plugins`` of trent and of the colluding key holder only).

* As **trent** it runs the honest Trent code behind a channel that replaces every block it sends the data
  parties (``v/<t>``, ``final/v``; in the exact mode the block of every ``reply/<t>``) by E[2^20 · I_b] --
  standard basis vectors of its choosing -- and, in the exact mode, every blinded Gram (in ``reply/<t>``)
  by E[diag(b, …, 1)], so that the parties' Ritz vectors, the final ones among them, are the basis vectors
  themselves (the issue's attack: the x blocks sent in clear are then rows of the data).
  It saves every contribution it receives (``noisy/<t>``, ``contrib/0``, the contribution in ``round/<t>``)
  to its output directory.
* As a **data party** it is honest, but keeps the key pair party1 sent it in its output directory
  (``keypair.bin``): the key holder colluding with Trent.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from smcdp.crypto.codec import public_key_from_proto
from smcdp.crypto.vector import EncryptedVector
from smcdp.net.channel import Channel
from smcdp.plugins.base import SessionContext, register
from smcdp.plugins.power_iteration import PowerIterationPlugin
from smcdp.protocols.power_iteration import TRENT, PowerIterationParams, data_party, trent
from smcdp.v1 import messages_pb2 as pb

SCALE = 2.0**20


class _Evil:
    """Trent's channel, rewriting what it sends and keeping what it receives."""

    def __init__(self, ch: Channel, params: PowerIterationParams, out) -> None:
        self._ch, self._p, self._out = ch, params, out
        self._pk = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ch, name)

    def _block(self, values: np.ndarray, frac_bits: int, packing) -> pb.CiphertextVector:
        return EncryptedVector.encrypt(self._pk, values, frac_bits=frac_bits, packing=packing).to_proto()

    def _rewrite(self, tag: str, msg):
        p, b = self._p, self._p.block_size
        if tag.startswith("v/") or tag == "final/v":
            k = self._k
            E = np.zeros((k, b))
            E[np.arange(b), np.arange(b)] = SCALE
            return self._block(E.ravel(order="F"), p.release_frac_bits(), p.packing(self._pk))
        if tag.startswith("reply/"):  # the exact mode: the blinded Gram and the next (or final) block
            G = np.diag(np.arange(b, 0, -1, dtype=float))
            return pb.PowerIterationReply(
                blinded_gram=self._block(
                    G[np.triu_indices(b)], p.frac_bits + p.blind_offset_bits, p.gram_packing(self._pk)
                ),
                stop=msg.stop,
                block=self._rewrite("v/", msg.block),
            )
        return msg

    async def recv(self, frm: str, tag: str, cls):
        msg = await self._ch.recv(frm, tag, cls)
        if tag == "public_key":
            self._pk = public_key_from_proto(msg, allow_insecure=True)
        return msg

    async def recv_all(self, roles, tag: str, cls):
        got = await self._ch.recv_all(roles, tag, cls)
        if tag == "dims":
            self._k = int(next(iter(got.values())).values[0])
        if tag.startswith(("noisy/", "contrib/")):
            for role, msg in got.items():
                (self._out / f"{role}-{tag.replace('/', '-')}.bin").write_bytes(msg.SerializeToString())
        if tag.startswith("round/"):
            for role, msg in got.items():
                t = int(tag.split("/")[1]) + 1
                (self._out / f"{role}-contrib-{t}.bin").write_bytes(msg.contribution.SerializeToString())
        return got

    async def send(self, to: str, tag: str, msg):
        return await self._ch.send(to, tag, self._rewrite(tag, msg))

    async def send_many(self, to, tag: str, msg):
        return await self._ch.send_many(to, tag, self._rewrite(tag, msg))


class _KeepsTheKey:
    """A data party's channel that writes down the key pair it receives."""

    def __init__(self, ch: Channel, out) -> None:
        self._ch, self._out = ch, out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ch, name)

    async def recv(self, frm: str, tag: str, cls):
        msg = await self._ch.recv(frm, tag, cls)
        if tag == "keypair":
            (self._out / "keypair.bin").write_bytes(msg.SerializeToString())
        return msg


class MaliciousPowerIteration(PowerIterationPlugin):
    async def run_role(self, role: str, ch: Channel, ctx: SessionContext) -> dict:
        p = PowerIterationParams.from_mapping(ctx.params)
        if role == TRENT:
            res = await trent(
                _Evil(ch, p, ctx.output_dir), p, seed=ctx.seed, allow_insecure_keys=ctx.allow_insecure_keys
            )
            return {"x": res.x, "components": res.components}
        if p.dp:
            ch = self.release_gate(ch, ctx, [(TRENT, "noisy/0")])
        A = np.load(self.input_path(ctx, "data", ch.me))
        res = await data_party(
            _KeepsTheKey(ch, ctx.output_dir), A, p, seed=ctx.seed, allow_insecure_keys=ctx.allow_insecure_keys
        )
        return {"u": res.u}


register(MaliciousPowerIteration())
