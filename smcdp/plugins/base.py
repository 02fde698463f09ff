"""How a protocol plugs into a party process.

A protocol module (one per protocol, e.g. ``smcdp.protocols.power_iteration``)
defines its roles as ``async def`` coroutines over a :class:`~smcdp.net.channel.Channel`
and exposes a :class:`ProtocolPlugin` so that ``smcdp party`` can run it when
a session is proposed.  ``smcdp.net`` never imports this package; the party
runner (``smcdp.party``) joins the two.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

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


_REGISTRY: dict[str, ProtocolPlugin] = {}


def register(plugin: ProtocolPlugin) -> ProtocolPlugin:
    if not plugin.name:
        raise ValueError("plugin needs a name")
    _REGISTRY[plugin.name] = plugin
    return plugin


def get_plugin(name: str) -> ProtocolPlugin:
    from smcdp.protocols import registry  # noqa: F401  (imports every protocol module)

    try:
        return _REGISTRY[name]
    except KeyError:
        from smcdp.errors import InvalidMessage

        raise InvalidMessage(f"unknown protocol {name!r}; known: {sorted(_REGISTRY)}") from None


def known_protocols() -> list[str]:
    from smcdp.protocols import registry  # noqa: F401

    return sorted(_REGISTRY)
