"""A party's log lines and private directories (docs/security.md, 'Logs, records and files').

Logs
    ``[logging] format = "text"`` (default) writes one line per record;
    ``"json"`` writes one JSON object per line (``time``, ``level``,
    ``logger``, ``message``, and ``exception`` when there is one), for log
    shippers.  In both, a record's message is one line: every character that
    could start a new line or steer a terminal is escaped
    (:func:`smcdp._text.printable`), whoever supplied it -- defence in depth
    behind the escaping of peer-supplied text where it enters (abort messages,
    refusal details).  A traceback in text format follows on lines that start
    with ``  | ``, so no text inside it can pose as a log line of its own.

Files
    :func:`private_dir` creates a directory under the data directory with mode
    0700 (every missing component up to the data directory, which is made
    0700 too); files there are written 0600 by their writers.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

from smcdp._files import fsync_dir
from smcdp._text import printable


class _OneLine(logging.Formatter):
    """Text lines: the message escaped to one line, tracebacks prefixed."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        record = logging.makeLogRecord(record.__dict__)
        record.msg = printable(record.getMessage(), 20_000)
        record.args = None
        exc_text = None
        if record.exc_info:
            exc_text = self.formatException(record.exc_info)
        record.exc_info = None
        record.exc_text = None
        line = super().format(record)
        if exc_text:
            line += "\n" + "\n".join("  | " + printable(x, 20_000) for x in exc_text.splitlines())
        return line


class JsonLines(logging.Formatter):
    """One JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        obj = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}",
            "level": record.levelname,
            "logger": record.name,
            "message": printable(record.getMessage(), 20_000),
        }
        if record.exc_info:
            obj["exception"] = self.formatException(record.exc_info)
        return json.dumps(obj, ensure_ascii=True)


def formatter(fmt: str) -> logging.Formatter:
    if fmt == "json":
        return JsonLines()
    if fmt == "text":
        return _OneLine()
    raise ValueError(f"log format must be 'text' or 'json', got {fmt!r}")


def configure_logging(fmt: str = "text", level: str = "INFO") -> None:
    """The party process's root logger: one stderr handler in ``fmt`` at ``level``."""
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(fmt))
    root.addHandler(handler)
    root.setLevel(getattr(logging, str(level).upper(), logging.INFO))


def private_dir(path: Path, data_dir: Path) -> Path:
    """``path`` (inside ``data_dir``) and every missing directory up to ``data_dir``, mode 0700.

    Existing directories on the way are narrowed to 0700 too (the data
    directory holds session records and protocol outputs, which are the
    party's alone).  A directory made here has its name synced in its
    parent: a power cut must not lose ``sessions/`` with the checkpoints
    in it (whose own names are synced there).
    """
    path, data_dir = Path(path), Path(data_dir)
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    chain = [path]
    if path != data_dir:
        chain = [p for p in [path, *path.parents] if data_dir in p.parents or p == data_dir]
    for d in reversed(chain):
        try:
            d.mkdir(mode=0o700)
        except FileExistsError:
            pass
        else:
            fsync_dir(d.parent)
        if os.stat(d).st_mode & 0o077:
            try:
                os.chmod(d, 0o700)
            except PermissionError:  # not ours (a mount point): the directories below still are 0700
                logging.getLogger("smcdp.party").warning("cannot make %s private (mode 0700)", d)
    return path
