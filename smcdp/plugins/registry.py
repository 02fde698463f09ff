"""The built-in protocol plug-ins and the lookup the runtime uses."""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from smcdp.errors import InvalidMessage
from smcdp.plugins.base import ProtocolPlugin, register, registered
from smcdp.plugins.dp_aggregate import DPAggregatePlugin
from smcdp.plugins.keygen import KeyCeremonyPlugin
from smcdp.plugins.keyword import KeywordPlugin
from smcdp.plugins.power_iteration import PowerIterationPlugin
from smcdp.plugins.speaker import SpeakerIdentifyPlugin, SpeakerVerifyPlugin

BUILTIN: tuple[ProtocolPlugin, ...] = (
    PowerIterationPlugin(),
    DPAggregatePlugin(),
    KeywordPlugin(),
    SpeakerVerifyPlugin(),
    SpeakerIdentifyPlugin(),
    KeyCeremonyPlugin(),
)
for _plugin in BUILTIN:
    register(_plugin)


class PluginError(InvalidMessage):
    """A configured plug-in module could not be imported."""


def load_plugin_modules(modules: Sequence[str]) -> None:
    """Import a deployment's extra plug-in modules (each calls :func:`~smcdp.plugins.base.register`)."""
    for m in modules:
        try:
            importlib.import_module(m)
        except Exception as exc:  # noqa: BLE001 - any import failure is a configuration error
            raise PluginError(f"cannot import protocol module {m!r}: {type(exc).__name__}: {exc}") from exc


def get_plugin(name: str) -> ProtocolPlugin:
    plugins = registered()
    try:
        return plugins[name]
    except KeyError:
        raise InvalidMessage(f"unknown protocol {name!r}; known: {sorted(plugins)}") from None


def known_protocols() -> list[str]:
    return sorted(registered())
