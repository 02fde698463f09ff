"""Group-key sessions between real party processes (power iteration's and dp-aggregate's process tests): dealt
shares in the data parties' key stores, a cluster whose coordinator may load a modified plug-in, and that
plug-in's channel wrapper relaying one party's release for every party; reading and rewriting one role's entry of a
coordinator's relay (``RelayedReleases``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from smcdp.crypto.paillier import generate_keypair
from smcdp.crypto.threshold import deal
from smcdp.net.channel import Channel
from smcdp.plugins.keystore import KeyGroup, KeyStore
from smcdp.runtime.config import dump_config, load_config
from smcdp.runtime.local import LocalCluster
from smcdp.v1 import messages_pb2 as pb


def store_dealt_shares(cluster: LocalCluster, names: tuple[str, ...], group: str = "lab", bits: int = 512) -> None:
    """A dealt (1, n) key of ``bits`` in every data party's key store under ``group`` (share i to names[i − 1])."""
    pub, shares = deal(generate_keypair(bits, allow_insecure=True)[1], len(names), 1)
    by_index = dict(enumerate(names, 1))
    for i, name in by_index.items():
        info = KeyGroup(group, pub, i, by_index, bits, "2026-12-02T00:00:00Z", "dealt", 0.0)
        KeyStore(cluster.data_dir(name) / "keys").save(info, shares[i - 1], replace=False)


def cluster_class(coordinator: str, plugin_module: str | None) -> type[LocalCluster]:
    """A LocalCluster whose ``coordinator`` loads ``plugin_module`` (a modified plug-in) when it is given."""

    class Cluster(LocalCluster):
        def write_configs(self) -> None:
            super().write_configs()
            if plugin_module is not None:
                cfg = load_config(self.configs[coordinator])
                dump_config(replace(cfg, plugins=(plugin_module,)), self.configs[coordinator])

    return Cluster


def relayed_release(data: bytes, role: str) -> pb.CiphertextVector:
    """``role``'s release in a coordinator's relay (the bytes of a ``RelayedReleases``)."""
    return next(e.release for e in pb.RelayedReleases.FromString(data).releases if e.role == role)


def relayed_proof(data: bytes, role: str) -> pb.BigInts:
    """``role``'s proof in a coordinator's relay."""
    return next(e.proof for e in pb.RelayedReleases.FromString(data).releases if e.role == role)


def with_relayed_release(
    data: bytes, role: str, release: pb.CiphertextVector | bytes, proof: pb.BigInts | bytes | None = None
) -> bytes:
    """The relay ``data`` with ``role``'s release replaced by ``release`` (and its proof by ``proof``, if given)."""
    msg = pb.RelayedReleases.FromString(data)
    if isinstance(release, bytes):
        release = pb.CiphertextVector.FromString(release)
    if isinstance(proof, bytes):
        proof = pb.BigInts.FromString(proof)
    for entry in msg.releases:
        if entry.role == role:
            entry.release.CopyFrom(release)
            if proof is not None:
                entry.proof.CopyFrom(proof)
    return msg.SerializeToString()


class OneForAll:
    """A coordinator's channel that keeps the releases it receives (``release_tag``) and relays ``victim``'s in
    place of every party's (each entry of the relay ``contrib_tag``, the proofs kept): the "sum" a data party would
    decrypt is then a multiple of one party's release -- a coordinator asking the data parties to decrypt one party's
    contribution."""

    def __init__(self, ch: Channel, release_tag: str, contrib_tag: str, victim: str = "party3") -> None:
        self._ch = ch
        self._release_tag, self._contrib_tag, self._victim = release_tag, contrib_tag, victim
        self._releases: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ch, name)

    async def recv_all(self, roles, tag: str, cls):
        got = await self._ch.recv_all(roles, tag, cls)
        if tag == self._release_tag:
            self._releases = dict(got)
        return got

    async def send_many(self, to, tag: str, msg):
        if tag == self._contrib_tag:
            msg = pb.RelayedReleases(
                releases=[
                    pb.RelayedRelease(role=e.role, release=self._releases[self._victim], proof=e.proof)
                    for e in msg.releases
                ]
            )
        return await self._ch.send_many(to, tag, msg)
