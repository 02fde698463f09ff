"""Plug-in for the key ceremony: a dealer-free (t, n) threshold Paillier key, stored under a group name.

The protocol ``key-ceremony`` runs :func:`smcdp.protocols.keygen.party` among the roles ``party1`` …
``partyN`` like any other session (proposal, ``[policy.key-ceremony]``, approval, audit trail,
checkpoints and resume, progress), and each party stores what it ends with in its key store
(:mod:`smcdp.plugins.keystore`): ``<data_dir>/keys/<group>/share.json`` (0600) and ``group.json``.
Parameters::

    {"group": "hospitals", "parties": 3, "threshold": 1, "key_bits": 2048, "replace": false}

(and, rarely changed: ``jacobi_rounds``, ``batch``, ``max_candidates``).  A group that exists already
is refused before any work unless ``replace`` is true (a refresh: a new key under the same name).
No party reads any input; every party receives the group's public key; nothing is released under
differential privacy and no privacy budget is spent (docs/crypto.md, "The key ceremony as an operation").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from smcdp.crypto.paillier import check_key_bits
from smcdp.errors import InvalidMessage, PreconditionFailed
from smcdp.net.channel import Channel
from smcdp.net.limits import TrafficEnvelope
from smcdp.plugins.base import OutputFlow, ProtocolPlugin, SessionContext, SessionSummary, hiding_of
from smcdp.plugins.keystore import KeyGroup, KeyStore, utc_now, validate_group_name
from smcdp.protocols.base import ProtocolParams, check_roles
from smcdp.protocols.keygen import (
    KeygenParams,
    expected_candidates,
    party,
    party_roles,
    traffic_envelope,
)

PROTOCOL = "key-ceremony"
#: what party 2 of a two-party ceremony risks, as the summary's ``reveals`` names it: the two-party products carry no
#: proof that party 1's ciphertexts hold its shares in range, and party 1 decrypts every product, so a party 1 that
#: deviates learns p and q (docs/crypto.md, "Assumptions") -- party 2's policy decides (``allow_reveal``), not the
#: proposer who chose two parties
TWO_PARTY_REVEAL = "key-to-deviating-party1"
#: the default candidate budget, in multiples of the expected count: the count is about geometric, so a
#: ceremony runs out of candidates with probability about e^-30
CANDIDATE_MARGIN = 30
#: key sizes a proposal may name at all (below 2048 only where the party allows insecure keys)
MIN_KEY_BITS, MAX_KEY_BITS = 256, 8192


@dataclass(frozen=True)
class KeyCeremonyParams(ProtocolParams):
    """The public parameters of a key ceremony session (every party must hold the same)."""

    protocol_name = PROTOCOL

    group: str
    parties: int
    threshold: int
    key_bits: int = 2048
    #: refresh an existing group of this name (its old key and shares are replaced)
    replace: bool = False
    jacobi_rounds: int = KeygenParams.jacobi_rounds
    batch: int = KeygenParams.batch
    #: None: CANDIDATE_MARGIN times the expected number of candidates, rounded up to whole batches
    max_candidates: int | None = None

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any]) -> KeyCeremonyParams:
        missing = [k for k in ("group", "parties", "threshold") if k not in m]
        if missing:
            raise InvalidMessage(
                f"a key ceremony needs the parameters group, parties and threshold; missing: {missing}"
            )
        return super().from_mapping(m)

    def validate(self) -> KeyCeremonyParams:
        validate_group_name(self.group)
        if not isinstance(self.replace, bool):
            raise InvalidMessage(f"replace must be true or false, got {self.replace!r}")
        kb = self.key_bits
        if isinstance(kb, bool) or not isinstance(kb, int) or not MIN_KEY_BITS <= kb <= MAX_KEY_BITS:
            raise InvalidMessage(f"key_bits must be an integer from {MIN_KEY_BITS} to {MAX_KEY_BITS}, got {kb!r}")
        mc = self.max_candidates
        if mc is not None and (isinstance(mc, bool) or not isinstance(mc, int) or mc < 1):
            raise InvalidMessage(f"max_candidates must be a positive integer, got {mc!r}")
        # the protocol's own checks; the key size is checked against the party's allow_insecure_keys by
        # run_role and by its policy (the summary's key_bits), as every plug-in does
        KeygenParams(self.parties, self.threshold, self.key_bits, True, self.jacobi_rounds, self.batch).validate()
        return self

    def candidate_budget(self) -> int:
        if self.max_candidates is not None:
            return self.max_candidates
        expected = expected_candidates(self.key_bits, self.parties)
        return self.batch * math.ceil(CANDIDATE_MARGIN * expected / self.batch)

    def keygen(self, allow_insecure: bool) -> KeygenParams:
        """The protocol's parameters (the key size checked against ``allow_insecure``)."""
        return KeygenParams(
            parties=self.parties,
            threshold=self.threshold,
            key_bits=self.key_bits,
            allow_insecure=allow_insecure,
            jacobi_rounds=self.jacobi_rounds,
            batch=self.batch,
            max_candidates=self.candidate_budget(),
        ).validate()


class KeyCeremonyPlugin(ProtocolPlugin):
    name = PROTOCOL

    def validate_params(self, params: Mapping[str, Any], roles: Mapping[str, str]) -> dict:
        p = KeyCeremonyParams.from_mapping(params)
        check_roles(self.name, roles, set(party_roles(p.parties)))
        return asdict(p)

    def summary(self, params: Mapping[str, Any], roles: Mapping[str, str]) -> SessionSummary:
        p = KeyCeremonyParams.from_mapping(params)
        every = tuple(party_roles(p.parties))
        # no party reads its data: the only output is the group's public key, to every party
        return SessionSummary(
            protocol=self.name,
            key_bits={"paillier": p.key_bits},
            data_roles=(),
            coordinator_roles=(),
            outputs=(OutputFlow(f"threshold public key of group {p.group!r}", every, ()),),
            threshold=p.threshold,
            # the biprimality test's rounds: fewer let a modulus that is no RSA modulus through more often
            # (2^-rounds a candidate), so a party's min_hiding decides below the default, not the proposer
            hiding=hiding_of(p, ("jacobi_rounds",)),
            reveals={"party2": (TWO_PARTY_REVEAL,)} if p.parties == 2 else {},
        )

    def traffic_envelope(
        self, params: Mapping[str, Any], roles: Mapping[str, str], role: str
    ) -> TrafficEnvelope | None:
        return traffic_envelope(KeyCeremonyParams.from_mapping(params).keygen(allow_insecure=True))

    async def run_role(self, role: str, ch: Channel, ctx: SessionContext) -> dict:
        p = KeyCeremonyParams.from_mapping(ctx.params)
        check_key_bits(p.key_bits, ctx.allow_insecure_keys)
        if (isinstance(ctx.seed, int) or getattr(ctx.seed, "seeded", False)) and not ctx.allow_insecure_keys:
            # every share, p and q follow from the session's roots, which a known seed makes public: the group key
            # would be readable by whoever knows the seed in every later session that names it (a review)
            raise PreconditionFailed(
                f"{ch.me} refuses a seeded key ceremony: the seed would make the group's private key computable by "
                "whoever knows it; run it without a seed (a seeded ceremony is for tests, where insecure keys are "
                "allowed)"
            )
        if ctx.keys_dir is None:
            raise PreconditionFailed(f"{ch.me} has no key store (SessionContext.keys_dir) for the key ceremony")
        store = KeyStore(ctx.keys_dir)
        store.check_writable(p.group, replace=p.replace, session_id=ctx.session_id)  # before any heavy work
        res = await party(ch, p.keygen(ctx.allow_insecure_keys), seed=ctx.seed)
        info = KeyGroup(
            group=p.group,
            public=res.public,
            index=res.share.index,
            parties={i: ctx.roles[r] for i, r in enumerate(party_roles(p.parties), 1)},
            key_bits=p.key_bits,
            created=utc_now(),
            session_id=ctx.session_id,
            generation_seconds=round(res.seconds, 3),
            candidates=res.candidates,
        )
        where = store.save(info, res.share, replace=p.replace)
        return {
            **info.summary(),
            "store": str(where),
            "sieve_batches": res.sieve_batches,
            "biprimality_tests": res.biprimality_tests,
            "expected_candidates": round(expected_candidates(p.key_bits, p.parties)),
        }
