"""The ``[policy]`` and ``[budget]`` that ``smcdp deploy init`` writes into every bundle.

A deployment says which sessions it runs::

    --roles power-iteration:trent=trent,party1=alice,party2=bob     (repeat per layout)
    --initiator power-iteration=trent       (default: the holder of the first coordinating role)
    --budget 10 --budget-delta 1e-6 --approval auto

and every party's policy then admits exactly those layouts: each party may hold the
role(s) it has in them, the named initiators may propose, the parties holding the
protocol's coordinating roles may coordinate, outputs may go to the other participants,
exact (non-DP) outputs only for protocols whose plug-in is not differentially private,
keys of at least 2048 bits (unless ``--allow-insecure-keys``).  Every party holding a
data role gets a ``[budget]`` for a data set named after itself.  Without ``--roles`` a
party joins no protocol until its operator adds ``[policy.<protocol>]`` tables.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from smcdp.cli.deploy.hosts import DeployError
from smcdp.errors import SmcdpError
from smcdp.net.server import ROLE_RE
from smcdp.plugins.base import ProtocolPlugin
from smcdp.plugins.registry import get_plugin, load_plugin_modules
from smcdp.runtime.governance.charges import BudgetConfig
from smcdp.runtime.governance.policy import (
    APPROVALS,
    SECURE_KEY_BITS,
    Policy,
    ProtocolRules,
    merge_rules,
    rules_for_layout,
)

DEFAULT_BUDGET = 10.0
DEFAULT_BUDGET_DELTA = 1e-6
_PROTOCOL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z")


def _plugin(protocol: str, plugins: Sequence[str]) -> ProtocolPlugin:
    try:
        return get_plugin(protocol)
    except SmcdpError:
        pass
    try:
        load_plugin_modules(plugins)  # a deployment's own protocol modules (--plugin)
        return get_plugin(protocol)
    except SmcdpError as exc:
        raise DeployError(f"protocol {protocol!r}: {exc}") from None


def parse_layouts(
    items: Iterable[str], parties: Sequence[str], plugins: Sequence[str] = ()
) -> dict[str, list[dict[str, str]]]:
    """``--roles PROTOCOL:ROLE=PARTY,...`` items -> {protocol: [role -> party, ...]}."""
    out: dict[str, list[dict[str, str]]] = {}
    for item in items or ():
        proto, sep, rest = item.strip().partition(":")
        if not sep or not _PROTOCOL_RE.match(proto):
            raise DeployError(f"--roles {item!r} must look like PROTOCOL:ROLE=PARTY,ROLE=PARTY,...")
        _plugin(proto, plugins)
        layout: dict[str, str] = {}
        for pair in (p.strip() for p in rest.split(",") if p.strip()):
            role, eq, party = (s.strip() for s in pair.partition("="))
            if not eq or not ROLE_RE.match(role):
                raise DeployError(f"--roles {item!r}: {pair!r} is not ROLE=PARTY")
            if party not in parties:
                raise DeployError(f"--roles {item!r} names party {party!r}, which is not in --hosts")
            if role in layout:
                raise DeployError(f"--roles {item!r} gives role {role!r} twice")
            if party in layout.values():
                raise DeployError(f"--roles {item!r}: a party holds at most one role per session ({party})")
            layout[role] = party
        if len(layout) < 2:
            raise DeployError(f"--roles {item!r} needs at least two roles")
        out.setdefault(proto, []).append(layout)
    return out


def parse_initiators(items: Iterable[str], layouts: Mapping[str, list[dict[str, str]]]) -> dict[str, list[str]]:
    """``--initiator PROTOCOL=PARTY`` items -> {protocol: [party, ...]}."""
    out: dict[str, list[str]] = {}
    for item in items or ():
        proto, eq, party = (s.strip() for s in item.partition("="))
        if not eq:
            raise DeployError(f"--initiator {item!r} must look like PROTOCOL=PARTY")
        if proto not in layouts:
            raise DeployError(f"--initiator {item!r}: no --roles layout of {proto!r}")
        if not any(party in layout.values() for layout in layouts[proto]):
            raise DeployError(f"--initiator {item!r}: {party!r} holds no role in any {proto} layout")
        out.setdefault(proto, []).append(party)
    return out


def bundle_governance(
    parties: Sequence[str],
    layouts: Mapping[str, list[dict[str, str]]],
    initiators: Mapping[str, list[str]],
    *,
    approval: str = "auto",
    allow_insecure_keys: bool = False,
    budget: float = DEFAULT_BUDGET,
    budget_delta: float = DEFAULT_BUDGET_DELTA,
    plugins: Sequence[str] = (),
) -> tuple[dict[str, Policy], dict[str, BudgetConfig]]:
    """Every party's [policy] (always written) and [budget] (parties holding a data role)."""
    if approval not in APPROVALS:
        raise DeployError(f"--approval must be one of {', '.join(APPROVALS)}")
    if not 0 < budget < float("inf"):
        raise DeployError("--budget must be a positive epsilon")
    if not 0 <= budget_delta < 1:
        raise DeployError("--budget-delta must lie in [0, 1)")
    tables: dict[str, dict[str, ProtocolRules]] = {p: {} for p in parties}
    data_parties: set[str] = set()
    for proto, proto_layouts in layouts.items():
        plugin = _plugin(proto, plugins)
        for layout in proto_layouts:
            starters = [
                s
                for s in initiators.get(proto)
                or sorted({layout[r] for r in plugin.coordinating_roles[:1] if r in layout} or set(layout.values()))
                if s in layout.values()
            ]
            if not starters:
                raise DeployError(
                    f"no --initiator of {proto} holds a role in the layout "
                    + ",".join(f"{r}={p}" for r, p in layout.items())
                )
            rules = rules_for_layout(
                layout,
                initiators=starters,
                coordinating_roles=plugin.coordinating_roles,
                allow_non_dp=not plugin.differentially_private,
                min_key_bits=None if allow_insecure_keys else SECURE_KEY_BITS,
            )
            for party, r in rules.items():
                have = tables[party].get(proto)
                tables[party][proto] = r if have is None else merge_rules(have, r)
            data_parties |= {p for role, p in layout.items() if role not in plugin.coordinating_roles}
    policies = {p: Policy(approval=approval, protocols=tables[p]) for p in parties}
    budgets = {
        p: BudgetConfig(dataset=p, epsilon=float(budget), delta=float(budget_delta))
        for p in parties
        if p in data_parties
    }
    return policies, budgets
