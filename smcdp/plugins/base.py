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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from smcdp.compute.config import ComputeConfig
from smcdp.errors import InvalidMessage
from smcdp.net.channel import Channel


@dataclass
class SessionContext:
    """What a party knows locally when it runs its role in a session."""

    session_id: str
    protocol: str
    roles: Mapping[str, str]            # role -> party name
    params: Mapping[str, Any]           # validated, agreed by every participant
    inputs: Mapping[str, str] = field(default_factory=dict)   # this party's configured inputs (name -> path)
    output_dir: Path | None = None      # where this party writes durable outputs
    allow_insecure_keys: bool = False   # only test deployments set this
    seed: int | None = None             # explicit seed for experiments; None = secure randomness
    compute: ComputeConfig = field(default_factory=ComputeConfig)   # [compute]: this party's engine (issue 17)


class ProtocolPlugin(abc.ABC):
    """A protocol as the party runner sees it."""

    #: protocol name used in session specs and the CLI, e.g. "power-iteration"
    name: str = ""

    @abc.abstractmethod
    def validate_params(self, params: Mapping[str, Any], roles: Mapping[str, str]) -> dict:
        """Check a proposed session's parameters and roles; return the normalised params.

        Raise :class:`smcdp.errors.InvalidMessage` with a clear message if they are not acceptable.
        """

    @abc.abstractmethod
    async def run_role(self, role: str, ch: Channel, ctx: SessionContext) -> dict:
        """Run ``role`` and return a JSON-serialisable result for this party."""

    @staticmethod
    def input_path(ctx: SessionContext, name: str, who: str) -> str:
        """The configured input ``name`` of this party for ``ctx.protocol``, or a clear error."""
        path = ctx.inputs.get(name)
        if not path:
            raise InvalidMessage(f"{who} has no [inputs.{ctx.protocol}] {name} file configured")
        return path


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
