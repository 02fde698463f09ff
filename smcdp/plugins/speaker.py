"""Plug-ins for speaker verification and identification: Alice's utterance (WAV audio or a feature file),
Bob's speaker models file (``smcdp speech enroll``) -> their roles (:mod:`smcdp.protocols.speaker`).

Inputs: Alice ``[inputs.speaker-verify] utterance`` (or ``[inputs.speaker-identify]``), Bob ``models``.
The result goes to the party the session's ``output`` parameter names (bob by default); the summary says
so, so a party's ``[policy]`` admits or refuses the layout before any file is read."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict
from typing import Any

from smcdp._files import npy_rows
from smcdp.crypto.paillier import check_key_bits
from smcdp.errors import InvalidMessage
from smcdp.net.channel import Channel
from smcdp.plugins.base import (
    FORWARD_HIDING,
    DataBound,
    OutputFlow,
    ProtocolPlugin,
    SessionContext,
    SessionSummary,
    hiding_of,
)
from smcdp.plugins.keyword import load_utterance, utterance_kind
from smcdp.primitives.rng import Randomness
from smcdp.protocols.base import check_roles
from smcdp.protocols.speaker import (
    ALICE,
    BOB,
    MAX_SPEAKERS_BOUND,
    AliceSizes,
    EnrolledBits,
    IdentifyParams,
    VerifyParams,
    identify_alice,
    identify_bob,
    prepare_alice,
    prepare_bob,
    verify_alice,
    verify_bob,
)
from smcdp.speech.audio import read_wav
from smcdp.speech.speaker import SpeakerModels


def load_speaker_models(path) -> SpeakerModels:
    return SpeakerModels.load(path)


def speakers_bound(max_speakers: int) -> DataBound:
    """Bob's enrolled speakers must be at most the session's public bound K̄, which he pads to."""
    fixed = max_speakers >= MAX_SPEAKERS_BOUND or max_speakers == IdentifyParams.max_speakers
    return DataBound("speakers", "at_most", max_speakers, trivial=fixed)


class _SpeakerPlugin(ProtocolPlugin):
    params_class: type[VerifyParams] | type[IdentifyParams] = VerifyParams
    output_name = ""
    #: set by each plug-in below: the protocol's two roles and the record made of a role's result
    alice: Callable[..., Awaitable[Any]]
    bob: Callable[..., Awaitable[Any]]
    _result: Callable[[Any], dict]

    def __init__(self) -> None:
        #: what Alice's next session is prepared for: her last session's sizes (the plug-in lives as long
        #: as the party process; the protocol module keeps no state of its own)
        self.last_alice = AliceSizes()
        #: Bob's enrolled models' coefficient bits and range bound, kept between sessions (made while idle)
        self.enrolled_bits = EnrolledBits()

    def validate_params(self, params: Mapping[str, Any], roles: Mapping[str, str]) -> dict:
        p = self.params_class.from_mapping(params)
        check_roles(self.name, roles, {ALICE, BOB})
        return asdict(p)

    def summary(self, params: Mapping[str, Any], roles: Mapping[str, str]) -> SessionSummary:
        p = self.params_class.from_mapping(params)
        return SessionSummary(
            protocol=self.name,
            key_bits={"paillier": p.key_bits, "dgk": p.dgk_bits},
            data_roles=(ALICE, BOB),
            coordinator_roles=(),
            outputs=(OutputFlow(self.output_name, (p.output,), (ALICE, BOB)),),
            hiding=hiding_of(p, (*FORWARD_HIDING, "stat_bits")),
            subgroup_key=(ALICE, BOB) if p.key_kind == "subgroup" else (),
            # speaker-verify with ubm = "shared" shows alice bob's UBM: his policy's allow_reveal decides
            reveals={BOB: ("ubm",)} if getattr(p, "ubm", "private") == "shared" else {},
            # speaker-identify: more enrolled speakers than max_speakers end the session at bob, a bit of his
            # data a session
            data_bounds={BOB: (speakers_bound(p.max_speakers),)} if isinstance(p, IdentifyParams) else {},
        )

    def traffic_envelope(self, params: Mapping[str, Any], roles: Mapping[str, str], role: str):
        return self.params_class.from_mapping(params).traffic_envelope(role)

    def prepare_next(self, root: Randomness, inputs: Mapping[str, str], allow_insecure_keys: bool) -> None:
        """A party with an utterance configured is an Alice: her next session's key pair, tables and
        obfuscators for the utterance's frames are made while she is idle.  A Bob (a models file configured): his
        padding speakers' imports and his models' coefficient bits and range bound."""
        if inputs.get("models"):
            prepare_bob(load_speaker_models(inputs["models"]), self.enrolled_bits)
        path = inputs.get("utterance")
        if not path:
            return
        if utterance_kind(path) == "wav":
            frames = read_wav(path).frames
        else:
            frames = npy_rows(path)
        prepare_alice(root, frames, self.name, sizes=self.last_alice, allow_insecure_keys=allow_insecure_keys)

    async def run_role(self, role: str, ch: Channel, ctx: SessionContext) -> dict:
        p = self.params_class.from_mapping(ctx.params)
        check_key_bits(p.key_bits, ctx.allow_insecure_keys)
        if role == ALICE:
            X = load_utterance(self.input_path(ctx, "utterance", ch.me), p.cmn)
            res = await self.alice(ch, X, p, seed=ctx.seed, allow_insecure_keys=ctx.allow_insecure_keys)
            if res.prepare_next is not None:
                self.last_alice = res.prepare_next
            return self._result(res)
        if role == BOB:
            models = load_speaker_models(self.input_path(ctx, "models", ch.me))
            return self._result(
                await self.bob(
                    ch, models, p, seed=ctx.seed, allow_insecure_keys=ctx.allow_insecure_keys, **self._bob_state()
                )
            )
        raise InvalidMessage(f"{self.name} has no role {role!r}")

    def _bob_state(self) -> dict[str, Any]:
        """What this plug-in keeps for Bob's role between sessions, as its keyword arguments."""
        return {"enrolled_bits": self.enrolled_bits}


class SpeakerVerifyPlugin(_SpeakerPlugin):
    name = "speaker-verify"
    params_class = VerifyParams
    output_name = "decision"
    alice = staticmethod(verify_alice)
    bob = staticmethod(verify_bob)

    @staticmethod
    def _result(res) -> dict:
        out = {**asdict(res), "decision": res.decision}
        del out["prepare_next"]  # for the next session here, not part of the record
        return out


class SpeakerIdentifyPlugin(_SpeakerPlugin):
    name = "speaker-identify"
    params_class = IdentifyParams
    output_name = "speaker"
    alice = staticmethod(identify_alice)
    bob = staticmethod(identify_bob)

    @staticmethod
    def _result(res) -> dict:
        out = asdict(res)
        del out["prepare_next"]  # for the next session here, not part of the record
        return out
