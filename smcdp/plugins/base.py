"""The interface between the party runtime and a protocol.

A :class:`ProtocolPlugin` is what ``smcdp party`` knows of a protocol: how to
validate a proposed session's parameters and roles, and how to run one role
given the session's context (this party's configured inputs, its output
directory).  The plug-in reads the party's files and turns them into the
arrays a role of :mod:`smcdp.protocols` takes, and turns the role's result
into files and a JSON-serialisable dict.  Built-in plug-ins are listed in
:mod:`smcdp.plugins.registry`; a deployment's extra plug-in modules (party
config ``plugins = [...]``) call :func:`register` when imported.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from smcdp.compute.config import ComputeConfig
from smcdp.errors import InputRejected, InvalidMessage, PreconditionFailed
from smcdp.net.channel import Channel
from smcdp.net.limits import TrafficEnvelope
from smcdp.primitives.rng import Randomness, SeedLike


@dataclass
class SessionContext:
    """What a party knows locally when it runs its role in a session."""

    session_id: str
    protocol: str
    roles: Mapping[str, str]  # role -> party name
    params: Mapping[str, Any]  # validated, agreed by every participant
    inputs: Mapping[str, str] = field(default_factory=dict)  # this party's configured inputs (name -> path)
    output_dir: Path | None = None  # where this party writes durable outputs
    allow_insecure_keys: bool = False  # only test deployments set this
    seed: SeedLike = None  # the role's randomness root (smcdp.primitives.rng); None = OS CSPRNG
    #: called once, in the role's thread, just before the first message after which this party's
    #: differentially private output may have left it (the runtime commits the budget there);
    #: if it raises, that message is not sent
    on_release: Callable[[], None] | None = None
    compute: ComputeConfig = field(default_factory=ComputeConfig)  # [compute]: this party's engine
    #: this party's key store, ``<data_dir>/keys`` (smcdp.plugins.keystore): the key ceremony writes a
    #: group there; None outside a party process
    keys_dir: Path | None = None


@dataclass(frozen=True)
class OutputFlow:
    """One output of a session in governance terms: what, computed from whose data, sent to whom."""

    name: str
    recipients: tuple[str, ...]  # roles that receive it
    sources: tuple[str, ...]  # roles whose private inputs it is computed from
    dp: bool = False  # released under differential privacy (the session's epsilon)

    def as_dict(self) -> dict:
        return {"name": self.name, "recipients": list(self.recipients), "sources": list(self.sources), "dp": self.dp}


#: the relations a :class:`DataBound` can state of a party's data
BOUND_RELATIONS = ("at_least", "at_most")
#: the built-in protocols' bound names and their relations (a policy's ``data_bounds`` names them)
BOUND_NAMES = MappingProxyType({"records": "at_least", "samples": "at_most", "speakers": "at_most"})


@dataclass(frozen=True)
class DataBound:
    """A bound the proposal sets that a data role's own input must meet, else the session ends there: e.g.
    dp-aggregate's records ``at_least`` min_records, power iteration's samples ``at_most`` max_samples.

    Whether the input meets it is one bit about the data, told to every participant by how the session ends
    (before any release, so no epsilon pays for it); a proposer who moves the bound over sessions searches
    the data's size.  So a party's policy admits such a session only where the bound is one it *declared*
    (``data_bounds``: what it states of its data, publicly) or within its ``max_bound_tests`` a period
    (docs/governance.md, "Bounds on a party's data").  ``trivial``: the protocol's default or its own extreme
    (1 record, its largest sample count) -- fixed questions, the same in every session that asks them, so
    nothing a proposer can move to search the data with: the two together tell at most log₂3 bits in all."""

    name: str  # what is bounded, as a policy's data_bounds names it ("records", "samples", "speakers")
    relation: str  # "at_least" or "at_most"
    value: int
    trivial: bool = False

    def __post_init__(self) -> None:
        if self.relation not in BOUND_RELATIONS:
            raise ValueError(f"a data bound's relation is one of {BOUND_RELATIONS}, got {self.relation!r}")

    def covered_by(self, declared: int | None) -> bool:
        """Whether a party that declared ``declared`` (at least that many, or at most, by the relation) meets
        this bound by its own public statement -- so the session's test of it is no question to its data."""
        if self.trivial:
            return True
        if declared is None:
            return False
        return self.value <= declared if self.relation == "at_least" else self.value >= declared

    def as_dict(self) -> dict:
        return {"name": self.name, "relation": self.relation, "value": self.value, "trivial": self.trivial}

    @classmethod
    def from_dict(cls, d: object) -> DataBound:
        """:meth:`as_dict` back (a stored proposal's summary), or InvalidMessage naming what is wrong."""
        if not isinstance(d, Mapping) or set(d) != {"name", "relation", "value", "trivial"}:
            raise InvalidMessage(f"a stored data bound must have name, relation, value and trivial, got {d!r}")
        name, relation, value, trivial = d["name"], d["relation"], d["value"], d["trivial"]
        if not (isinstance(name, str) and relation in BOUND_RELATIONS and isinstance(trivial, bool)) or (
            isinstance(value, bool) or not isinstance(value, int)
        ):
            raise InvalidMessage(f"a stored data bound is malformed: {d!r}")
        return cls(name, relation, value, trivial)


@dataclass(frozen=True)
class SessionSummary:
    """A validated proposal described for a party's policy and privacy budget.

    Built by :meth:`ProtocolPlugin.summary` from public parameters only (never
    from a party's files), so a party can decide before it reads any data.
    """

    protocol: str
    key_bits: Mapping[str, int]  # every key size the session uses, e.g. {"paillier": 3072}
    data_roles: tuple[str, ...]  # roles that read their party's private inputs
    coordinator_roles: tuple[str, ...]  # roles that coordinate over the data roles' contributions
    outputs: tuple[OutputFlow, ...]
    #: the differential-privacy cost to every data role's dataset; None: the session releases
    #: nothing under DP (its outputs, if any, are exact)
    epsilon: float | None = None
    delta: float = 0.0
    rho: float | None = None  # zCDP rho of the release, when the ledger's rule needs one
    record_bound: int | None = None  # public lower bound on every data role's number of records
    #: how many vectors (components) the session computes from the data, for protocols that have
    #: such a number (power iteration: components + oversample); bounded by a policy's max_components
    components: int | None = None
    #: role -> how many of the protocol's frames one round covers, for the roles whose data a round of
    #: several frames shows more of (keyword: bob's models, docs/protocols/keyword.md); bounded by a
    #: policy's max_frames_per_round, 1 when the policy does not say
    frames_per_round: Mapping[str, int] = field(default_factory=dict)
    #: role -> among how many data parties the noise protecting that role's data is shared (each adds
    #: 1/h of the variance: h − 1 colluding parties remove theirs); bounded by a policy's
    #: max_noise_parties, 1 when the policy does not say
    noise_parties: Mapping[str, int] = field(default_factory=dict)
    #: the most protocol rounds a session may run (power iteration: its rounds bound); bounded by a
    #: policy's max_iterations with a default, since every round is bytes this party may receive
    iterations: int | None = None
    #: the proposal's statistical hiding parameters -- name -> (its value, the protocol's default), each
    #: one that hides more the larger it is (masks' ranges, smudging, blinding, statistical bits); bounded
    #: below by a policy's min_hiding, the protocol's default when the policy does not say
    hiding: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    #: the kind of encryption key that protects the data roles' contributions, for protocols that have the
    #: choice: "threshold" (a group key, no party holds the private key) or "single" (one party's key pair,
    #: shared with the other data parties); bounded by a policy's ``key`` rule.  None: no such choice
    key: str | None = None
    #: whether this protocol, in this session's mode, can run under a group key instead of one party's key
    #: pair (power iteration's DP modes: ``key_group``); only the advice of a refusal by the ``key`` rule
    group_key_mode: bool = False
    #: the threshold t of the group key involved (no t of its parties together decrypt anything, t + 1 do):
    #: the key ceremony's, or that of the group key a session encrypts under; bounded below by a policy's
    #: ``min_threshold``.  None: no group key
    threshold: int | None = None
    #: the roles whose guarantee rests on a *subgroup* Paillier key (docs/crypto.md, "Subgroup keys"): its
    #: owner's data under the subgroup assumption, and a peer who re-randomises under the owner's base;
    #: each such party's policy must say ``allow_subgroup_key = true``.  Empty: only standard keys
    subgroup_key: tuple[str, ...] = ()
    #: role -> what of that role's private inputs the session shows a peer in the clear, by name
    #: (speaker-verify with ``ubm = "shared"``: bob's ``"ubm"``); each name must be in the ``allow_reveal``
    #: list of that party's policy.  Empty: the session shows no party's inputs
    reveals: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: role -> the bounds the proposal sets on that role's own input (:class:`DataBound`), each tested against
    #: its data when the role begins; bounded by a policy's ``data_bounds`` and ``max_bound_tests``.  Empty:
    #: the session tests no party's data against a bound its proposer chose
    data_bounds: Mapping[str, tuple[DataBound, ...]] = field(default_factory=dict)

    def outputs_from(self, role: str) -> list[OutputFlow]:
        """The outputs computed from ``role``'s private inputs."""
        return [o for o in self.outputs if role in o.sources]

    def as_dict(self) -> dict:
        return {
            "protocol": self.protocol,
            "key_bits": dict(self.key_bits),
            "data_roles": list(self.data_roles),
            "coordinator_roles": list(self.coordinator_roles),
            "outputs": [o.as_dict() for o in self.outputs],
            "epsilon": self.epsilon,
            "delta": self.delta,
            "rho": self.rho,
            "record_bound": self.record_bound,
            "components": self.components,
            "frames_per_round": dict(self.frames_per_round),
            "noise_parties": dict(self.noise_parties),
            "iterations": self.iterations,
            "hiding": {k: list(v) for k, v in self.hiding.items()},
            "key": self.key,
            "group_key_mode": self.group_key_mode,
            "threshold": self.threshold,
            "subgroup_key": list(self.subgroup_key),
            "reveals": {k: list(v) for k, v in self.reveals.items()},
            "data_bounds": {k: [b.as_dict() for b in v] for k, v in self.data_bounds.items()},
        }


#: the secure forward algorithm's hiding parameters (keyword, speaker): masks' and offsets' ranges, the
#: smudging of packed sums
FORWARD_HIDING = ("mask_nats", "offset_nats", "emission_offset_nats", "smudge_bits")


def hiding_of(params: Any, names: Iterable[str]) -> dict[str, tuple[float, float]]:
    """:attr:`SessionSummary.hiding` of a parameters dataclass: each name's value and its field's default."""
    defaults: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(params)}
    return {n: (float(getattr(params, n)), float(defaults[n])) for n in names}


class ProtocolPlugin(abc.ABC):
    """A protocol as the party runner sees it."""

    #: protocol name used in session specs and the CLI, e.g. "power-iteration"
    name: str = ""
    #: roles that coordinate a session over the data roles' contributions (e.g. "trent"); a
    #: party's [policy] names the peers it lets hold them (deployment tools read it too)
    coordinating_roles: tuple[str, ...] = ()
    #: whether what its sessions release from the data roles' inputs is differentially private
    #: (deployment tools write allow_non_dp = true into generated policies when it is not)
    differentially_private: bool = False

    @abc.abstractmethod
    def validate_params(self, params: Mapping[str, Any], roles: Mapping[str, str]) -> dict:
        """Check a proposed session's parameters and roles; return the normalised params.

        Raise :class:`smcdp.errors.InvalidMessage` with a clear message if they are not acceptable.
        """

    @abc.abstractmethod
    async def run_role(self, role: str, ch: Channel, ctx: SessionContext) -> dict:
        """Run ``role`` and return a JSON-serialisable result for this party."""

    def summary(self, params: Mapping[str, Any], roles: Mapping[str, str]) -> SessionSummary:
        """Describe a validated proposal (``params`` as returned by :meth:`validate_params`)
        in governance terms: key sizes, DP cost, record bound, data roles, output flows.

        Must use the public parameters only -- a party evaluates its policy and
        budget on it before it opens any of its files.  A plug-in that does not
        implement it can run only at parties without a ``[policy]``.
        """
        raise PreconditionFailed(
            f"the plug-in of protocol {self.name!r} does not describe its sessions "
            "(ProtocolPlugin.summary), so no party policy can admit it"
        )

    @staticmethod
    def release_gate(ch: Channel, ctx: SessionContext, points: Iterable[tuple[str, str]]) -> Channel:
        """``ch``, calling ``ctx.on_release`` once before the first send of a message
        ``(to role, tag)`` in ``points`` -- the protocol's release point for this role."""
        if ctx.on_release is None:
            return ch
        return _ReleaseGate(ch, frozenset(points), ctx.on_release)  # type: ignore[return-value]

    def traffic_envelope(
        self, params: Mapping[str, Any], roles: Mapping[str, str], role: str
    ) -> TrafficEnvelope | None:
        """The most ``role`` may receive in a session with these (validated) parameters.

        A party refuses, with RESOURCE_EXHAUSTED and before buffering it, any
        message larger than the envelope's ``message_bytes``, anything past its
        ``session_bytes`` in all, and more distinct (sender, tag) messages than
        its ``tags``; the party's ``[limits]`` cap the envelope in turn.  Derive
        it from the parameters that determine the sizes (key sizes, dimensions,
        rounds), with the protocol's own public bounds for sizes its parameters
        leave open.  ``None`` (the default) means: the ``[limits]`` ceilings only.
        """
        return None

    def prepare_next(self, root: Randomness, inputs: Mapping[str, str], allow_insecure_keys: bool) -> None:
        """Offline work for a session this party may run next, whose randomness root will be ``root``
        (the runtime draws it ahead, :mod:`smcdp.runtime.offline`), started while the party is
        idle: a key the role will derive from ``root``, its tables, its obfuscators.  ``inputs``: this
        party's configured inputs for the protocol.  Nothing by default.  It must send nothing, read
        nothing but this party's own inputs, and return quickly (start the work in the background); a
        session finding nothing prepared does the work itself, so an error here is only logged."""

    @staticmethod
    def input_path(ctx: SessionContext, name: str, who: str) -> str:
        """The configured input ``name`` of this party for ``ctx.protocol``, or a clear error."""
        path = ctx.inputs.get(name)
        if not path:
            raise InputRejected(f"{who} has no [inputs.{ctx.protocol}] {name} file configured")
        return path


class _ReleaseGate:
    """A channel that calls ``on_release`` once before its first message to a release point."""

    def __init__(self, ch: Channel, points: Collection[tuple[str, str]], on_release: Callable[[], None]):
        self._ch = ch
        self._points = points
        self._on_release: Callable[[], None] | None = on_release

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ch, name)

    def _before(self, to: Iterable[str], tag: str) -> None:
        if self._on_release is not None and any((r, tag) in self._points for r in to):
            self._on_release()  # raises: the message is not sent
            self._on_release = None

    async def send(self, to: str, tag: str, msg) -> bytes:
        self._before((to,), tag)
        return await self._ch.send(to, tag, msg)

    async def send_many(self, to: Iterable[str], tag: str, msg) -> bytes:
        to = list(to)
        self._before(to, tag)
        return await self._ch.send_many(to, tag, msg)


_REGISTRY: dict[str, ProtocolPlugin] = {}


def register(plugin: ProtocolPlugin) -> ProtocolPlugin:
    """Make ``plugin`` available to sessions (a later registration of the same name replaces it)."""
    if not plugin.name:
        raise ValueError("plugin needs a name")
    _REGISTRY[plugin.name] = plugin
    return plugin


def registered() -> Mapping[str, ProtocolPlugin]:
    """Every plug-in registered so far, by name (see :mod:`smcdp.plugins.registry` for the built-ins)."""
    return dict(_REGISTRY)
