"""A party's ``[policy]``: what it joins, with whom, within which bounds (docs/governance.md).

The TOML, written for a data-protection officer to read::

    [policy]
    approval = "operator"          # "auto" (default) or "operator": a person approves each session
    allow_seeded = false           # true lets a peer's seed replace this party's CSPRNG (tests only)
    # open = true                  # no protocol rules at all (test deployments only; without
                                   #   [policy] every peer's proposal is refused)

    [policy.dp-aggregate]          # one table per protocol this party joins; no table: not joined
    roles = ["party*"]             # the roles it may hold ("*" matches any characters)
    initiators = ["charlie"]       # peers that may propose a session involving it
    coordinators = ["charlie", "dave"]  # peers that may hold the protocol's coordinating roles
    release_to = ["dave"]          # peers that may receive an output computed from its data
    max_epsilon = 1.0              # per session
    max_delta = 1e-9
    min_records = 100              # the session's public record bound must be at least this
    min_key_bits = 2048

    [policy.power-iteration]
    roles = ["party*"]
    initiators = ["trent"]
    coordinators = ["trent"]
    release_to = ["trent", "bob"]
    allow_non_dp = true            # exact (non-DP) outputs may leave at all (default false)
    max_components = 8             # at most 8 vectors (components + oversample) per session
    max_exact_sessions = 4         # at most 4 sessions with exact outputs from its data ...
    period_days = 30               # ... in any 30 days (counted from the audit trail)
    data_bounds = { samples = 5000 }  # what it states of its data: at most 5000 samples (public)

    [policy.keyword]
    roles = ["bob"]
    initiators = ["*"]
    release_to = ["*"]
    allow_non_dp = true
    max_frames_per_round = 2       # induction rounds of up to 2 frames (default 1: the seed's)

Parameters that weaken a data party's guarantee, or size what a session may make it receive, are
bounded here with a safe default, never left to the proposer (docs/governance.md, "Parameters the
proposer does not decide"): ``max_noise_parties`` (default 1: every party adds the whole noise
itself), ``max_frames_per_round`` (default 1), ``max_key_bits`` (default 4096), ``max_iterations``
(default 2000) and ``max_receive_mib`` (default 512: what the protocol's envelope for the proposal's
parameters lets a peer's session make this party receive).  A bound the proposal sets on the party's own
data (a record count it must reach, a sample count it must not pass) is a question to that data, so it is
admitted only where the party declared the answer (``data_bounds``) or within ``max_bound_tests`` sessions
a period (default 0: none).

Every rule is checked against the plug-in's :class:`~smcdp.plugins.base.SessionSummary`
of the proposal -- public parameters only -- so the evaluation here knows no protocol by
name.  A refusal is an :mod:`smcdp.errors` exception whose status code says what kind of
rule refused (PERMISSION_DENIED: who or what is not allowed; FAILED_PRECONDITION:
parameters out of bounds) and whose message names the party and the rule, and nothing of
the party's data.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from smcdp.errors import InvalidMessage, PermissionDenied, PreconditionFailed, SmcdpError
from smcdp.net.config import ConfigError, check_keys
from smcdp.net.limits import finite_number
from smcdp.net.tls import validate_party_name
from smcdp.plugins.base import BOUND_NAMES, DataBound, OutputFlow, SessionSummary

APPROVALS = ("auto", "operator")
#: the smallest Paillier/DGK key a party accepts unless party.allow_insecure_keys is set
SECURE_KEY_BITS = 2048
ANY = "*"

_PROTOCOL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z")
_ROLE_PATTERN_RE = re.compile(r"^[A-Za-z0-9*][A-Za-z0-9_.*-]{0,63}\Z")
_TOP_KEYS = {"approval", "allow_seeded", "open"}
#: the rules of a [policy.<protocol>] table that may be absent (None: the rule's default)
_OPTIONAL_RULES = (
    "min_key_bits",
    "max_epsilon",
    "max_delta",
    "min_records",
    "approval",
    "max_components",
    "max_exact_sessions",
    "period_days",
    "max_frames_per_round",
    "max_noise_parties",
    "max_key_bits",
    "max_iterations",
    "max_receive_mib",
    "min_hiding",
    "key",
    "min_threshold",
    "allow_subgroup_key",
    "allow_reveal",
    "data_bounds",
    "max_bound_tests",
)
_RULE_KEYS = {"roles", "initiators", "coordinators", "release_to", "allow_non_dp", *_OPTIONAL_RULES}
#: the window of max_exact_sessions and max_bound_tests when period_days is not given
DEFAULT_PERIOD_DAYS = 30.0
#: what a ``key`` rule may say: the kind of encryption key a session may protect its data with
KEY_KINDS = ("threshold", "single")
#: a name in ``allow_reveal`` (what a protocol's summary calls a party input it shows a peer)
_REVEAL_RE = re.compile(r"^[a-z][a-z0-9_-]{0,31}\Z")
#: the defaults of the bounds on what a proposal may size (the receive limit derives from them): the
#: largest key and the most rounds an honest session of today's documented sizes uses, with headroom
DEFAULT_MAX_KEY_BITS = 4096
DEFAULT_MAX_ITERATIONS = 2000
#: the default bound on what one session a peer proposes may make this party receive (the envelope its
#: protocol derives from the proposal's parameters, MiB): the largest documented honest sessions at their
#: defaults -- keyword's Bob 266 MB, power iteration's Trent 175 MB -- with headroom, a quarter of the
#: [limits] ceiling (max_session_mib, 2 GiB) that 64 components of 4096-bit keys reached
DEFAULT_MAX_RECEIVE_MIB = 512


@dataclass(frozen=True)
class ProtocolRules:
    """The rules of one ``[policy.<protocol>]`` table (absent lists allow nobody)."""

    roles: tuple[str, ...]
    initiators: tuple[str, ...]
    coordinators: tuple[str, ...] = ()
    release_to: tuple[str, ...] = ()
    allow_non_dp: bool = False
    min_key_bits: int | None = None
    max_epsilon: float | None = None
    max_delta: float | None = None
    min_records: int | None = None
    approval: str | None = None  # None: [policy].approval
    max_components: int | None = None  # the most vectors a session computes from its data; each releases a direction
    max_exact_sessions: int | None = None  # the most sessions releasing exact outputs from its data ...
    period_days: float | None = None  # ... in any window of this many days (default 30)
    #: the most frames one protocol round may cover where that shows more of its data (keyword's
    #: induction; SessionSummary.frames_per_round); None: 1
    max_frames_per_round: int | None = None
    #: the most data parties that may share the noise protecting its data (SessionSummary.noise_parties:
    #: with h > 1 each adds 1/h of the variance, and h − 1 colluding parties remove theirs); None: 1
    max_noise_parties: int | None = None
    #: the largest key and the most protocol rounds a session may use (each multiplies the bytes it may
    #: make this party receive); None: DEFAULT_MAX_KEY_BITS, DEFAULT_MAX_ITERATIONS
    max_key_bits: int | None = None
    max_iterations: int | None = None
    #: the most a session a peer proposes may make this party receive: its protocol's envelope for this
    #: party's role, derived from the proposal's parameters and capped by [limits] (MiB); None:
    #: DEFAULT_MAX_RECEIVE_MIB (a value >= [limits] max_session_mib adds no bound of its own)
    max_receive_mib: int | None = None
    #: the least value of each statistical hiding parameter a proposal may use (SessionSummary.hiding: masks'
    #: ranges, smudging, blinding, statistical bits -- each hides its data less the smaller it is), as
    #: (name, floor) pairs; a parameter it does not name: the protocol's default
    min_hiding: tuple[tuple[str, float], ...] | None = None
    #: the kind of key its data may be encrypted under (SessionSummary.key): "threshold" refuses a session in
    #: which one party's key pair decrypts the data parties' contributions, "single" admits one; None: threshold
    #: where this party holds a group key of exactly the session's data parties, else single
    key: str | None = None
    #: the least threshold t of a group key it holds a share of or encrypts its data under
    #: (SessionSummary.threshold: a coalition of t + 1 of the group's parties decrypts); None: 1
    min_threshold: int | None = None
    #: whether a session may protect its data with a *subgroup* Paillier key, or have it re-randomise under a
    #: peer's (SessionSummary.subgroup_key: fast decryption, another hardness assumption, a base whose order
    #: only its owner can check -- docs/crypto.md, "Subgroup keys"); None: no
    allow_subgroup_key: bool | None = None
    #: what of its private inputs a session may show a peer in the clear (SessionSummary.reveals, by name:
    #: speaker-verify's "ubm"); None: nothing
    allow_reveal: tuple[str, ...] | None = None
    #: what it states of its own data, publicly, as (name, value) pairs: for a bound "at least" (records) the
    #: count its data reaches at least, for one "at most" (samples, speakers) the count it stays within.  A
    #: session whose bound (SessionSummary.data_bounds) this covers asks its data nothing; None: nothing stated
    data_bounds: tuple[tuple[str, int], ...] | None = None
    #: the most sessions a window of ``period_days`` that test its data against a bound it did not declare
    #: (each such test answers one bit of its data, whether the session then ends or not); None: 0
    max_bound_tests: int | None = None

    def declared(self, name: str) -> int | None:
        """What it declared of its data's ``name`` (``data_bounds``), or None."""
        return dict(self.data_bounds or ()).get(name)

    def as_dict(self) -> dict:
        out: dict[str, Any] = {
            "roles": list(self.roles),
            "initiators": list(self.initiators),
            "coordinators": list(self.coordinators),
            "release_to": list(self.release_to),
            "allow_non_dp": self.allow_non_dp,
        }
        for k in _OPTIONAL_RULES:
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        if self.min_hiding is not None:
            out["min_hiding"] = dict(self.min_hiding)  # a TOML table
        if self.allow_reveal is not None:
            out["allow_reveal"] = list(self.allow_reveal)  # a TOML array
        if self.data_bounds is not None:
            out["data_bounds"] = dict(self.data_bounds)  # a TOML table
        return out


@dataclass(frozen=True)
class Policy:
    """A party's ``[policy]``: it joins the protocols it has tables for, nothing else.

    ``open = true`` instead means no protocol rules (whatever a peer in [peers] proposes
    is accepted; test deployments only); approval and the seed rule still apply.  No
    ``[policy]`` at all refuses every peer's proposal (:func:`evaluate`)."""

    approval: str = "auto"
    allow_seeded: bool = False
    protocols: Mapping[str, ProtocolRules] = field(default_factory=dict)
    open: bool = False

    @property
    def restricts(self) -> bool:
        return not self.open

    def proposers(self, peers: Iterable[str]) -> frozenset[str]:
        """The peers (of ``peers``, the ``[peers]`` table) whose proposals this policy may admit: every one
        when ``open``, else those some ``[policy.<protocol>]`` names in ``initiators`` ("*": every one).
        The admission queues are shared among them (:func:`smcdp.runtime.limits.fair_share`)."""
        peers = frozenset(peers)
        if self.open:
            return peers
        return frozenset(p for p in peers if any(_allowed(r.initiators, p) for r in self.protocols.values()))

    def approval_for(self, protocol: str) -> str:
        rules = self.protocols.get(protocol)
        return (rules.approval if rules is not None and rules.approval else None) or self.approval

    def as_dict(self) -> dict:
        out: dict[str, Any] = {"approval": self.approval, "allow_seeded": self.allow_seeded}
        if self.open:
            out["open"] = True
        out.update({name: rules.as_dict() for name, rules in self.protocols.items()})
        return out


# ---------------------------------------------------------------------------- parsing
def _bool(t: Mapping[str, Any], key: str, where: str, default: bool) -> bool:
    v = t.get(key, default)
    if not isinstance(v, bool):
        raise ConfigError(f"{where}.{key} must be true or false, got {v!r}")
    return v


def _approval(t: Mapping[str, Any], where: str, default: str | None) -> str | None:
    v = t.get("approval", default)
    if v is not None and v not in APPROVALS:
        raise ConfigError(f"{where}.approval must be one of {', '.join(repr(a) for a in APPROVALS)}, got {v!r}")
    return v


def _parties(t: Mapping[str, Any], key: str, where: str, known: set[str]) -> tuple[str, ...]:
    v = t.get(key, [])
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise ConfigError(f'{where}.{key} must be a list of party names (or ["*"] for any peer), got {v!r}')
    for name in v:
        if name == ANY:
            continue
        try:
            validate_party_name(name, f"{where}.{key}")
        except InvalidMessage as exc:
            raise ConfigError(str(exc)) from None
        if name not in known:
            raise ConfigError(f"{where}.{key} names {name!r}, which is neither this party nor in [peers]")
    return tuple(dict.fromkeys(v))


def _number(
    t: Mapping[str, Any],
    key: str,
    where: str,
    *,
    integer: bool,
    lo: float,
    hi: float | None,
    lo_open: bool = False,
    hi_open: bool = False,
) -> Any:
    if key not in t:
        return None
    v = t[key]
    ok_type = isinstance(v, int) if integer else isinstance(v, (int, float))
    if (
        isinstance(v, bool)
        or not ok_type
        or not finite_number(v)
        or (v <= lo if lo_open else v < lo)
        or (hi is not None and (v >= hi if hi_open else v > hi))
    ):
        rng = f"{'(' if lo_open else '['}{lo:g}, {'∞)' if hi is None else f'{hi:g}' + (')' if hi_open else ']')}"
        raise ConfigError(f"{where}.{key} must be {'an integer' if integer else 'a number'} in {rng}, got {v!r}")
    return v if integer else float(v)


def _rules(name: str, t: Any, known: set[str]) -> ProtocolRules:
    where = f"policy.{name}"
    if not isinstance(t, dict):
        raise ConfigError(f"[{where}] must be a table")
    check_keys(t, _RULE_KEYS, f"[{where}]")
    for required in ("roles", "initiators"):
        if required not in t:
            raise ConfigError(f"[{where}] must say {required} = [...] (an empty list allows none)")
    roles = t["roles"]
    if (
        not isinstance(roles, list)
        or not roles
        or not all(isinstance(r, str) and _ROLE_PATTERN_RE.match(r) for r in roles)
    ):
        raise ConfigError(
            f'{where}.roles must be a non-empty list of role names or patterns such as "party*", got {roles!r}'
        )
    return ProtocolRules(
        roles=tuple(dict.fromkeys(roles)),
        initiators=_parties(t, "initiators", where, known),
        coordinators=_parties(t, "coordinators", where, known),
        release_to=_parties(t, "release_to", where, known),
        allow_non_dp=_bool(t, "allow_non_dp", where, False),
        min_key_bits=_number(t, "min_key_bits", where, integer=True, lo=256, hi=16384),
        max_epsilon=_number(t, "max_epsilon", where, integer=False, lo=0, hi=None, lo_open=True),
        max_delta=_number(t, "max_delta", where, integer=False, lo=0, hi=1, hi_open=True),
        min_records=_number(t, "min_records", where, integer=True, lo=1, hi=1 << 40),
        approval=_approval(t, where, None),
        max_components=_number(t, "max_components", where, integer=True, lo=1, hi=1 << 20),
        max_exact_sessions=_number(t, "max_exact_sessions", where, integer=True, lo=0, hi=1 << 30),
        period_days=_period(t, where),
        max_frames_per_round=_number(t, "max_frames_per_round", where, integer=True, lo=1, hi=1 << 10),
        max_noise_parties=_number(t, "max_noise_parties", where, integer=True, lo=1, hi=1 << 10),
        max_key_bits=_number(t, "max_key_bits", where, integer=True, lo=256, hi=16384),
        max_iterations=_number(t, "max_iterations", where, integer=True, lo=1, hi=1 << 20),
        max_receive_mib=_number(t, "max_receive_mib", where, integer=True, lo=1, hi=1 << 20),
        min_hiding=_min_hiding(t, where),
        key=_key_kind(t, where),
        min_threshold=_number(t, "min_threshold", where, integer=True, lo=1, hi=1 << 10),
        allow_subgroup_key=_bool(t, "allow_subgroup_key", where, False) if "allow_subgroup_key" in t else None,
        allow_reveal=_reveal_names(t, where),
        data_bounds=_data_bounds(t, where),
        max_bound_tests=_number(t, "max_bound_tests", where, integer=True, lo=0, hi=1 << 30),
    )


def _named_table(t: Mapping[str, Any], key: str, where: str, what: str) -> dict[str, Any] | None:
    """A rule that is a TOML table of lower-case names (``min_hiding``, ``data_bounds``), or None when absent."""
    if key not in t:
        return None
    table = t[key]
    if not isinstance(table, dict) or not all(isinstance(k, str) and re.fullmatch(r"[a-z_]{1,64}", k) for k in table):
        raise ConfigError(f"{where}.{key} must be a table of {what}")
    return table


def _data_bounds(t: Mapping[str, Any], where: str) -> tuple[tuple[str, int], ...] | None:
    """``data_bounds = { records = 1000 }``: what the party states of its data, by the bound's name."""
    table = _named_table(
        t, "data_bounds", where, "bound names to counts, e.g. { records = 1000 } (what the party states of its data)"
    )
    if table is None:
        return None
    return tuple(
        (k, int(_number(table, k, f"{where}.data_bounds", integer=True, lo=0, hi=1 << 62))) for k in sorted(table)
    )


def _reveal_names(t: Mapping[str, Any], where: str) -> tuple[str, ...] | None:
    if "allow_reveal" not in t:
        return None
    v = t["allow_reveal"]
    if not isinstance(v, list) or not all(isinstance(x, str) and _REVEAL_RE.match(x) for x in v):
        raise ConfigError(f'{where}.allow_reveal must be a list of names such as ["ubm"], got {v!r}')
    return tuple(dict.fromkeys(v))


def _key_kind(t: Mapping[str, Any], where: str) -> str | None:
    v = t.get("key")
    if v is not None and v not in KEY_KINDS:
        raise ConfigError(f"{where}.key must be one of {', '.join(repr(k) for k in KEY_KINDS)}, got {v!r}")
    return v


def _min_hiding(t: Mapping[str, Any], where: str) -> tuple[tuple[str, float], ...] | None:
    """``min_hiding = { blind_bits = 8 }``: floors of the protocol's hiding parameters, by name."""
    table = _named_table(t, "min_hiding", where, "parameter names to numbers, e.g. { blind_bits = 8 }")
    if table is None:
        return None
    return tuple(
        (k, float(_number(table, k, f"{where}.min_hiding", integer=False, lo=0, hi=1e300, lo_open=True)))
        for k in sorted(table)
    )


def _period(t: Mapping[str, Any], where: str) -> float | None:
    counted = "max_exact_sessions" in t or "max_bound_tests" in t
    if "period_days" in t and not counted:
        raise ConfigError(
            f"{where}.period_days is the window of max_exact_sessions and max_bound_tests: give one of them too"
        )
    if not counted:
        return None
    days = _number(t, "period_days", where, integer=False, lo=0, hi=36600, lo_open=True)
    return DEFAULT_PERIOD_DAYS if days is None else days


def parse_policy(t: Mapping[str, Any], me: str, peers: Mapping[str, str]) -> Policy:
    """Validate a ``[policy]`` table (``me``: this party; names must be it or in ``peers``)."""
    known = {me, *peers}
    top = {k: v for k, v in t.items() if not isinstance(v, dict)}
    check_keys(top, _TOP_KEYS, "[policy] (protocol rules go in [policy.<protocol>] tables)")
    protocols = {}
    for name, sub in t.items():
        if not isinstance(sub, dict):
            continue
        if not _PROTOCOL_RE.match(name):
            raise ConfigError(f"[policy.{name}]: {name!r} is not a protocol name")
        protocols[name] = _rules(name, sub, known)
    is_open = _bool(t, "open", "policy", False)
    if is_open and protocols:
        raise ConfigError(
            "[policy] open = true admits every protocol; it cannot be combined with "
            f"[policy.<protocol>] tables ({', '.join(protocols)})"
        )
    return Policy(
        approval=_approval(t, "policy", "auto") or "auto",
        allow_seeded=_bool(t, "allow_seeded", "policy", False),
        protocols=protocols,
        open=is_open,
    )


# ---------------------------------------------------------------------------- generated policies
def rules_for_layout(
    roles: Mapping[str, str],
    *,
    initiators: tuple[str, ...] | list[str],
    coordinating_roles: tuple[str, ...],
    summary: SessionSummary | None = None,
    allow_non_dp: bool = False,
    min_key_bits: int | None = None,
) -> dict[str, ProtocolRules]:
    """Per party of ``roles`` (role -> party): the narrowest rules that admit this layout.

    Each party may hold exactly its role, the named initiators may propose, the parties
    holding coordinating roles may coordinate.  With the proposal's ``summary`` an output
    may go exactly where the session sends it and ``allow_non_dp`` follows its outputs;
    without one (deployment tools, which know no parameters) to every other participant,
    with ``allow_non_dp`` as given.  Used by ``smcdp deploy init`` and the demos.
    """
    coordinators = {roles[r] for r in coordinating_roles if r in roles}
    out = {}
    for role, party in roles.items():
        if role in coordinating_roles:  # holds no data: the data rules do not apply to it
            out[party] = ProtocolRules(
                roles=(role,), initiators=tuple(sorted(set(initiators))), min_key_bits=min_key_bits
            )
            continue
        frames = shared = None
        subgroup = None
        reveal: tuple[str, ...] | None = None
        stated: tuple[tuple[str, int], ...] | None = None
        if summary is not None:
            flows = [o for o in summary.outputs_from(role) if {roles[r] for r in o.recipients} - {party}]
            release = {roles[r] for o in flows for r in o.recipients} - {party}
            non_dp = any(not o.dp for o in flows)
            frames = summary.frames_per_round.get(role)
            shared = summary.noise_parties.get(role)
            subgroup = True if role in summary.subgroup_key else None
            reveal = tuple(summary.reveals.get(role, ())) or None
            # the layout's maker knows the data it deploys: it states what the session asks of it
            stated = tuple((b.name, b.value) for b in summary.data_bounds.get(role, ()) if not b.trivial) or None
        else:
            release, non_dp = set(roles.values()) - {party}, allow_non_dp
        out[party] = ProtocolRules(
            roles=(role,),
            initiators=tuple(sorted(set(initiators))),
            coordinators=tuple(sorted(coordinators - {party})),
            release_to=tuple(sorted(release)),
            allow_non_dp=non_dp,
            min_key_bits=min_key_bits,
            max_frames_per_round=frames if frames is not None and frames > 1 else None,
            max_noise_parties=shared if shared is not None and shared > 1 else None,
            allow_subgroup_key=subgroup,
            allow_reveal=reveal,
            data_bounds=stated,
        )
    return out


def merge_rules(a: ProtocolRules, b: ProtocolRules) -> ProtocolRules:
    """The union of two generated rule sets for one protocol (several layouts)."""

    def union(x: tuple[str, ...], y: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(sorted(set(x) | set(y)))

    return ProtocolRules(
        roles=union(a.roles, b.roles),
        initiators=union(a.initiators, b.initiators),
        coordinators=union(a.coordinators, b.coordinators),
        release_to=union(a.release_to, b.release_to),
        allow_non_dp=a.allow_non_dp or b.allow_non_dp,
        min_key_bits=a.min_key_bits,
        max_epsilon=a.max_epsilon,
        max_delta=a.max_delta,
        min_records=a.min_records,
        approval=a.approval,
        max_components=a.max_components,
        max_exact_sessions=a.max_exact_sessions,
        period_days=a.period_days,
        max_frames_per_round=max(
            (x for x in (a.max_frames_per_round, b.max_frames_per_round) if x is not None), default=None
        ),
        max_noise_parties=max((x for x in (a.max_noise_parties, b.max_noise_parties) if x is not None), default=None),
        max_key_bits=a.max_key_bits,
        max_iterations=a.max_iterations,
        max_receive_mib=a.max_receive_mib,
        min_hiding=a.min_hiding,
        key=a.key,
        min_threshold=a.min_threshold,
        allow_subgroup_key=True if (a.allow_subgroup_key or b.allow_subgroup_key) else None,
        allow_reveal=tuple(sorted(set(a.allow_reveal or ()) | set(b.allow_reveal or ()))) or None,
        # generated from layouts of one deployment's data: a statement covering both layouts' sessions; the count
        # of undeclared tests is the hand-written policy's
        data_bounds=_merge_statements(a.data_bounds, b.data_bounds),
        max_bound_tests=a.max_bound_tests,
    )


def _merge_statements(
    a: tuple[tuple[str, int], ...] | None, b: tuple[tuple[str, int], ...] | None
) -> tuple[tuple[str, int], ...] | None:
    """Two generated ``data_bounds`` as one that covers what either covers: per name the larger count of an
    "at least" bound (records), the smaller of an "at most" one (samples, speakers), the first for a name of
    unknown relation."""
    if a is None or b is None:
        return a if b is None else b
    out = dict(a)
    for name, value in b:
        if name not in out:
            out[name] = value
        elif BOUND_NAMES.get(name) == "at_least":
            out[name] = max(out[name], value)
        elif BOUND_NAMES.get(name) == "at_most":
            out[name] = min(out[name], value)
    return tuple(sorted(out.items()))


# ---------------------------------------------------------------------------- evaluation
class Refusal:
    """Mixin: the rule that refused (``exc.rule``), for the audit trail."""

    rule: str = ""


class PolicyDenied(PermissionDenied, Refusal):
    """Who or what is not allowed (PERMISSION_DENIED)."""


class OutOfBounds(PreconditionFailed, Refusal):
    """The proposal's parameters are outside this party's bounds (FAILED_PRECONDITION)."""


def refusal(cls: type[SmcdpError], party: str, session_id: str, rule: str, detail: str) -> SmcdpError:
    exc = cls(f"party {party!r} refuses session {session_id!r}: {detail} (rule {rule})")
    exc.rule = rule  # type: ignore[attr-defined]
    return exc


def _allowed(names: tuple[str, ...], party: str) -> bool:
    return ANY in names or party in names


def _listing(names: tuple[str, ...]) -> str:
    return ", ".join(names) if names else "none"


def check_seed(seed: int | None, policy: Policy | None, me: str, session_id: str) -> None:
    """DP noise never comes from a peer: a seeded proposal needs this party's allow_seeded."""
    if seed is not None and not (policy is not None and policy.allow_seeded):
        raise refusal(
            OutOfBounds,
            me,
            session_id,
            "policy.allow_seeded",
            "the proposal carries a seed, which would replace this party's own randomness "
            "(DP noise included); this party does not allow seeded sessions",
        )


def check_seeded_key(seed: int | None, summary: SessionSummary | None, me: str, session_id: str) -> None:
    """A session under a group key is never seeded, even where seeds are allowed: its releases are encrypted
    with randomness from each party's root (so that a replay re-sends them bit for bit), which a known seed
    makes public to everyone who knows it.  (The protocol refuses too, when its roles start; here nothing
    is reserved or prepared first.)"""
    if seed is not None and summary is not None and summary.key == "threshold":
        raise refusal(
            OutOfBounds,
            me,
            session_id,
            "policy.allow_seeded",
            "a session under a group key cannot be seeded: its encryption randomness comes from the "
            "parties' randomness roots, which a known seed makes public",
        )


def evaluate(
    policy: Policy | None,
    *,
    me: str,
    session_id: str,
    initiator: str,
    role: str,
    roles: Mapping[str, str],
    summary: SessionSummary | None,
    allow_insecure_keys: bool,
    receive_bytes: int | None = None,
    key_groups: Mapping[str, Iterable[str]] | None = None,
) -> None:
    """Raise a refusal unless ``policy`` admits holding ``role`` in the proposal.

    ``key_groups``: this party's stored key groups, name -> the group's parties (the default of the ``key``
    rule: threshold where one of them is exactly the session's data parties).

    ``receive_bytes``: the session's receive limit here in ``role`` (its protocol's envelope for the
    proposal's parameters, capped by the ``[limits]`` ceilings), bounded by ``max_receive_mib`` for a
    peer's proposal (None: the protocol derives no envelope; the ``[limits]`` ceilings alone apply).

    No ``[policy]`` denies by default: every peer's proposal is refused (rule ``policy``),
    only the party's own operator (``initiator == me``) may start sessions.  ``summary``
    may be None only when there are no protocol rules to evaluate (``open = true``, or the
    own operator of a party without ``[policy]``), e.g. for a plug-in without
    :meth:`~smcdp.plugins.base.ProtocolPlugin.summary`.
    """
    if policy is None:
        if initiator != me:
            raise refusal(
                PolicyDenied,
                me,
                session_id,
                "policy",
                "it has no [policy], so it joins no session a peer proposes (deny by default)",
            )
        return
    if not policy.restricts:
        return
    if summary is None:  # pragma: no cover - the caller asks the plug-in first and refuses on failure
        raise SmcdpError("a restrictive policy needs the plug-in's summary")
    rules = policy.protocols.get(summary.protocol)
    ask = _Asking(me, session_id, summary.protocol)
    if rules is None:
        raise ask.deny(ask.base, f"it does not join protocol {ask.proto!r} (its policy has no [{ask.base}] table)")
    _check_who(ask, rules, role, initiator)
    _check_keys(ask, rules, summary, allow_insecure_keys)
    if receive_bytes is not None and initiator != me:
        most = rules.max_receive_mib or DEFAULT_MAX_RECEIVE_MIB
        if receive_bytes > most << 20:
            raise ask.bound(
                f"{ask.base}.max_receive_mib",
                f"its parameters would let the session make it receive up to {receive_bytes / 2**20:,.0f} MiB as "
                f"{role}; it allows at most {most} MiB (fewer components, rounds or a smaller key, or public "
                "bounds on the sizes such as power iteration's rows, make it smaller; or raise the rule)",
            )
    if not summary.data_roles:  # a protocol on no party's data (the key ceremony): its hiding protects everyone
        _check_hiding(ask, rules, summary)
        _check_reveals(ask, rules, summary, role)  # the key ceremony's party 2 of two (smcdp.plugins.keygen)
    if role not in summary.data_roles:
        return
    _check_where_its_data_goes(ask, rules, summary, role, roles)
    _check_key_kind(ask, rules, summary, roles, key_groups or {})
    _check_how_much_it_shows(ask, rules, summary, role)
    _check_data_bounds(ask, rules, summary, role, initiator)


def untested_bounds(policy: Policy | None, protocol: str, bounds: Iterable[DataBound]) -> tuple[str, ...]:
    """The names of ``bounds`` (the proposal's on this party's data, :attr:`SessionSummary.data_bounds` of its
    role) that its policy did not declare (``data_bounds``): each a question to its data -- counted against
    ``max_bound_tests`` in a peer's session, named only in its own operator's.  None under an open policy or for
    a protocol it has no rules for (refused elsewhere)."""
    if policy is None or not policy.restricts:
        return ()
    rules = policy.protocols.get(protocol)
    if rules is None:
        return ()
    return tuple(b.name for b in bounds if not b.covered_by(rules.declared(b.name)))


def _check_data_bounds(ask: _Asking, rules: ProtocolRules, summary: SessionSummary, role: str, initiator: str) -> None:
    """``data_bounds``: a bound of the proposal on its own data that it did not declare is refused here, unless
    ``max_bound_tests`` admits some (then the gate counts them) -- a refusal that follows from its policy and
    the proposal, never from the data."""
    if initiator == ask.me or rules.max_bound_tests:
        return
    for b in summary.data_bounds.get(role, ()):
        declared = rules.declared(b.name)
        if b.covered_by(declared):
            continue
        want = "at least" if b.relation == "at_least" else "at most"
        said = "states nothing of it" if declared is None else f"states {want} {declared}"
        raise ask.bound(
            f"{ask.base}.data_bounds.{b.name}",
            f"the session needs its data to have {want} {b.value} {b.name}, and its policy {said}: whether the "
            "data meets a bound the proposer chose is a bit of the data, so it answers only what its policy "
            f"declares (data_bounds = {{ {b.name} = N }}) or max_bound_tests allows",
        )


@dataclass(frozen=True)
class _Asking:
    """A proposal being evaluated: the refusals name this party, the session and the protocol's rules."""

    me: str
    session_id: str
    proto: str

    @property
    def base(self) -> str:
        return f"policy.{self.proto}"

    def deny(self, rule: str, detail: str) -> SmcdpError:
        return refusal(PolicyDenied, self.me, self.session_id, rule, detail)

    def bound(self, rule: str, detail: str) -> SmcdpError:
        return refusal(OutOfBounds, self.me, self.session_id, rule, detail)


def _check_who(ask: _Asking, rules: ProtocolRules, role: str, initiator: str) -> None:
    """The role it would hold, and who proposes."""
    if not any(fnmatch.fnmatchcase(role, pat) for pat in rules.roles):
        raise ask.deny(
            f"{ask.base}.roles", f"it may not hold role {role!r} in {ask.proto} (allowed: {_listing(rules.roles)})"
        )
    if initiator != ask.me and not _allowed(rules.initiators, initiator):
        raise ask.deny(
            f"{ask.base}.initiators",
            f"peer {initiator!r} may not initiate {ask.proto} sessions "
            f"involving it (allowed: {_listing(rules.initiators)})",
        )


def _check_keys(ask: _Asking, rules: ProtocolRules, summary: SessionSummary, allow_insecure_keys: bool) -> None:
    """Key sizes between its floor and its ceiling, and no more rounds than it allows: the ceiling and the
    rounds bound what a session may make this party receive, whatever role it holds."""
    floor = rules.min_key_bits
    ceiling = rules.max_key_bits or DEFAULT_MAX_KEY_BITS
    rounds = rules.max_iterations or DEFAULT_MAX_ITERATIONS
    if summary.iterations is not None and summary.iterations > rounds:
        raise ask.bound(
            f"{ask.base}.max_iterations", f"the session may run {summary.iterations} rounds; it allows at most {rounds}"
        )
    if rules.min_threshold is not None and summary.threshold is not None and summary.threshold < rules.min_threshold:
        raise ask.bound(
            f"{ask.base}.min_threshold",
            f"the group key's threshold is t = {summary.threshold}: {summary.threshold + 1} of its parties together "
            f"decrypt anything encrypted under it; it requires t >= {rules.min_threshold}",
        )
    for what, bits in summary.key_bits.items():
        if bits > ceiling:
            raise ask.bound(
                f"{ask.base}.max_key_bits",
                f"the {what} key of {bits} bits is above its maximum of "
                f"{ceiling} (it sizes what the session may send it)",
            )
        if floor is not None and bits < floor:
            raise ask.bound(
                f"{ask.base}.min_key_bits", f"the {what} key of {bits} bits is below its minimum of {floor}"
            )
        if bits < SECURE_KEY_BITS and not allow_insecure_keys:
            raise ask.bound(
                "party.allow_insecure_keys",
                f"the {what} key of {bits} bits is below {SECURE_KEY_BITS} and this party does not allow insecure keys",
            )


def _check_where_its_data_goes(
    ask: _Asking, rules: ProtocolRules, summary: SessionSummary, role: str, roles: Mapping[str, str]
) -> None:
    """Who coordinates over its data, and to whom outputs computed from it go (DP or not)."""
    base = ask.base
    for r in summary.coordinator_roles:
        holder = roles.get(r)
        if holder is not None and holder != ask.me and not _allowed(rules.coordinators, holder):
            raise ask.deny(
                f"{base}.coordinators",
                f"peer {holder!r} may not hold the coordinating role {r!r} "
                f"over its data (allowed: {_listing(rules.coordinators)})",
            )
    for out in summary.outputs_from(role):
        to = _recipients(out, roles, ask.me)
        if not to:
            continue
        if not out.dp and not rules.allow_non_dp:
            raise ask.deny(
                f"{base}.allow_non_dp",
                f"output {out.name!r} is computed from its data without "
                f"differential privacy and would go to {', '.join(to)}",
            )
        refused = [p for p in to if not _allowed(rules.release_to, p)]
        if refused:
            raise ask.deny(
                f"{base}.release_to",
                f"output {out.name!r} computed from its data would go to "
                f"{', '.join(refused)} (allowed: {_listing(rules.release_to)})",
            )


def _check_key_kind(
    ask: _Asking,
    rules: ProtocolRules,
    summary: SessionSummary,
    roles: Mapping[str, str],
    key_groups: Mapping[str, Iterable[str]],
) -> None:
    """``key``: a single-key session (one party's key pair decrypts every data party's contribution) is refused
    where the policy says "threshold", and by default where this party holds a group key of exactly the
    session's data parties (then nothing justifies trusting one key holder)."""
    if summary.key != "single" or rules.key == "single":
        return
    holders = {roles[r] for r in summary.data_roles if r in roles}
    if rules.key == "threshold":
        raise ask.deny(
            f"{ask.base}.key",
            "the session encrypts its data parties' contributions under one party's key pair; it allows only a "
            "group (threshold) key"
            + ("" if summary.group_key_mode else f", and {summary.protocol} has no group-key mode for such a session"),
        )
    groups = sorted(name for name, parties in key_groups.items() if set(parties) == holders)
    if groups:
        advice = (
            "propose key_group"
            if summary.group_key_mode
            else f"{summary.protocol} has no group-key mode for such a session"
        )
        raise ask.deny(
            f"{ask.base}.key",
            f"it holds key group {groups[0]!r} of exactly the session's data parties, and the proposal uses one "
            f'party\'s key pair instead ({advice}; or key = "single" in its policy admits it)',
        )


def _check_hiding(ask: _Asking, rules: ProtocolRules, summary: SessionSummary) -> None:
    """``min_hiding``: each statistical hiding parameter at least the party's floor, else the protocol's default."""
    floors = dict(rules.min_hiding or ())
    for name, (value, default) in summary.hiding.items():
        floor = floors.get(name, default)
        if value < floor:
            raise ask.bound(
                f"{ask.base}.min_hiding.{name}",
                f"the proposal's {name} = {value:g} hides its data less than {floor:g}"
                + ("" if name in floors else " (the protocol's default; its policy names no lower floor)"),
            )


def _check_reveals(ask: _Asking, rules: ProtocolRules, summary: SessionSummary, role: str) -> None:
    """What the session shows a peer of this party's inputs (SessionSummary.reveals), by name: only what its
    ``allow_reveal`` names."""
    shown = [name for name in summary.reveals.get(role, ()) if name not in (rules.allow_reveal or ())]
    if shown:
        raise ask.deny(
            f"{ask.base}.allow_reveal",
            f"the session shows a peer its {', '.join(repr(n) for n in shown)} in the clear; it allows "
            + (", ".join(repr(n) for n in rules.allow_reveal) if rules.allow_reveal else "nothing")
            + f" (allow_reveal = [{', '.join(repr(n) for n in shown)}] admits it)",
        )


def _check_how_much_it_shows(ask: _Asking, rules: ProtocolRules, summary: SessionSummary, role: str) -> None:
    """The privacy cost, the public record bound, the components and frames per round."""
    base = ask.base
    if summary.epsilon is not None:
        if rules.max_epsilon is not None and summary.epsilon > rules.max_epsilon:
            raise ask.bound(
                f"{base}.max_epsilon",
                f"the release costs epsilon={summary.epsilon:g}, above its "
                f"per-session maximum of {rules.max_epsilon:g}",
            )
        if rules.max_delta is not None and summary.delta > rules.max_delta:
            raise ask.bound(
                f"{base}.max_delta",
                f"the release costs delta={summary.delta:g}, above its per-session maximum of {rules.max_delta:g}",
            )
    if rules.min_records is not None and (summary.record_bound is None or summary.record_bound < rules.min_records):
        have = (
            "no public record bound"
            if summary.record_bound is None
            else f"a public record bound of {summary.record_bound}"
        )
        raise ask.bound(f"{base}.min_records", f"the session declares {have}; it requires at least {rules.min_records}")
    if rules.max_components is not None and (summary.components is None or summary.components > rules.max_components):
        have = "no number of components" if summary.components is None else f"{summary.components} components"
        raise ask.bound(
            f"{base}.max_components",
            f"the session computes {have} from its data; it allows at most {rules.max_components}",
        )
    shared = summary.noise_parties.get(role)
    most = rules.max_noise_parties or 1
    # under a group key of threshold t no coalition of t data parties (with the coordinator) isolates a
    # contribution, and the protocol bounds h by n − t (docs/protocols/power-iteration.md); but t + 1 of them
    # read one carrying only σ²/h.  So h beyond max_noise_parties needs the party's own statement of the
    # coalition it must withstand, min_threshold m (t >= m is checked with the keys): then h <= n − m
    grouped = summary.key == "threshold" and rules.min_threshold is not None
    if grouped:
        assert rules.min_threshold is not None
        most = max(most, len(summary.data_roles) - rules.min_threshold)
    if shared is not None and shared > most:
        raise ask.deny(
            f"{ask.base}.max_noise_parties",
            f"the noise protecting its data would be shared among {shared} parties, each adding 1/{shared} "
            f"of it, so that {shared - 1} colluding parties could remove theirs; it allows at most "
            f"{most} (1: it adds the whole noise itself"
            + (
                ""
                if grouped or summary.key != "threshold"
                else "; under a group key, min_threshold = m in its policy admits up to n − m"
            )
            + ")",
        )
    _check_hiding(ask, rules, summary)
    if role in summary.subgroup_key and not rules.allow_subgroup_key:
        raise ask.deny(
            f"{base}.allow_subgroup_key",
            "the session protects its data with a subgroup Paillier key (fast decryption; its security rests "
            "on the subgroup assumption, and a peer re-randomises under a base whose order only the key's "
            "owner can check: docs/crypto.md, 'Subgroup keys'); it allows none (allow_subgroup_key = true "
            "admits them)",
        )
    _check_reveals(ask, rules, summary, role)
    frames = summary.frames_per_round.get(role)
    limit = rules.max_frames_per_round or 1
    if frames is not None and frames > limit:
        raise ask.bound(
            f"{base}.max_frames_per_round",
            f"the session's rounds cover {frames} frames each, "
            f"which shows more of its data than rounds of {limit}; "
            f"it allows at most {limit}",
        )


def _recipients(out: OutputFlow, roles: Mapping[str, str], me: str) -> list[str]:
    return sorted({roles[r] for r in out.recipients if r in roles} - {me})


def releases_exact(outputs: Iterable[OutputFlow], role: str, roles: Mapping[str, str], me: str) -> bool:
    """Whether holding ``role`` sends an exact (not differentially private) output computed from this
    party's data to another party: what ``allow_non_dp`` and ``max_exact_sessions`` govern."""
    return any(role in o.sources and not o.dp and _recipients(o, roles, me) for o in outputs)
