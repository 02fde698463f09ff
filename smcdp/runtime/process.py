"""The party process: a :class:`~smcdp.runtime.party.Party` served until SIGTERM or SIGINT.

``smcdp party --config FILE`` and the launchers ``parties/<name>.py`` (both in :mod:`smcdp.cli.party`)
call :func:`serve`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import signal
from pathlib import Path

from smcdp.net.config import ConfigError
from smcdp.runtime.config import PartyConfig, load_config
from smcdp.runtime.logs import configure_logging
from smcdp.runtime.party import Party
from smcdp.runtime.records import write_json_atomic

log = logging.getLogger("smcdp.party")


async def _serve(config: PartyConfig, ready_file: Path | None = None) -> int:
    party = Party(config)
    await party.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if ready_file is not None:
        write_json_atomic(
            ready_file,
            {
                "party": party.name,
                "port": party.port,
                "pid": os.getpid(),
                "console": party.console.url if party.console is not None else None,
            },
        )
    # through the log, so that [logging] format = "json" gives nothing but JSON lines
    log.info("party %s serving on %s (port %d); stop with SIGTERM or Ctrl-C", party.name, config.listen, party.port)
    await stop.wait()
    log.info("party %s: shutting down", party.name)
    await party.stop()
    return 0


def _raise_open_file_limit() -> None:
    """The soft limit on open files raised to the hard one (at most 2^20): a shell's default soft limit is
    often 1,024, and the server's connection cap (``smcdp.net.server.connection_cap``) is taken from it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = 1 << 20 if hard == resource.RLIM_INFINITY else min(hard, 1 << 20)
    if soft == resource.RLIM_INFINITY or soft >= target:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:  # a container may forbid it: the cap follows the soft limit
        log.warning("cannot raise the open-file limit from %d to %d: %s", soft, target, exc)


def serve(
    config_path: str | os.PathLike,
    expect_name: str | None = None,
    ready_file: str | os.PathLike | None = None,
    log_level: str | None = None,
) -> int:
    """Run a party process until SIGTERM/SIGINT.  Returns the exit status.

    Logging follows the config's ``[logging]`` (``log_level`` from the command line wins).
    ``expect_name``: a launcher's party; a configuration of another party is refused.
    """
    config = load_config(config_path)
    if expect_name is not None and config.name != expect_name:
        raise ConfigError(f"{config_path} configures party {config.name!r}, but this launcher runs {expect_name!r}")
    configure_logging(config.logging.format, log_level or config.logging.level)
    os.umask(0o077)  # whatever this process creates is its own unless it says otherwise
    _raise_open_file_limit()
    return asyncio.run(_serve(config, Path(ready_file) if ready_file else None))
