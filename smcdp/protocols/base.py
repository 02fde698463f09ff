"""What every protocol module shares: public parameters and role checks.

A protocol module (one per protocol) defines, in the paper's words, its
public ``*Params`` dataclass (validated by ``validate()``), its roles as
``async def`` coroutines over a :class:`~smcdp.net.channel.Channel`, and its
results.  Nothing here knows about sessions, files or the transport.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from typing import Any, ClassVar, Self

from smcdp.errors import InvalidMessage


class ProtocolParams:
    """Mixin for a protocol's parameters dataclass: ``from_mapping`` refuses unknown keys."""

    #: the protocol's name in messages (e.g. "power-iteration")
    protocol_name: ClassVar[str] = "protocol"

    def validate(self) -> Self:  # pragma: no cover - every subclass overrides
        return self

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any]) -> Self:
        if not is_dataclass(cls):  # pragma: no cover - the mixin is for dataclasses only
            raise TypeError(f"{cls.__name__} must be a dataclass")
        unknown = set(m) - {f.name for f in fields(cls)}
        if unknown:
            raise InvalidMessage(f"unknown {cls.protocol_name} parameters: {sorted(unknown)}")
        return cls(**dict(m)).validate()


def check_roles(protocol: str, roles: Mapping[str, str], expected: set[str]) -> None:
    """``roles`` (role -> party) names exactly ``expected``, each held by a different party."""
    if set(roles) != set(expected):
        raise InvalidMessage(f"{protocol} needs exactly the roles {sorted(expected)}, got {sorted(roles)}")
    if len(set(roles.values())) != len(roles):
        raise InvalidMessage(f"each role of {protocol} must be held by a different party")
