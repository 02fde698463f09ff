"""Progress people can watch: a bar with rate and ETA on a terminal, plain lines otherwise.

Long work -- demos, experiments, benchmarks, key generation, table building,
sessions waited on from the CLI -- reports through this one module, so every
command looks the same::

    from smcdp.progress import task, track

    for run in track(range(runs), "exp 003: runs", unit="run"):
        ...
    with task("session s-1", total=None, unit="round") as t:
        t.update(completed=3, description="session s-1: round 3 (combine)")

Everything goes to **stderr** (never stdout, where commands print their JSON).
The display is chosen per process (``SMCDP_PROGRESS``, default ``auto``):

* ``bar`` -- a live :mod:`rich` bar: description, bar, done/total, rate
  (``… it/s``), elapsed and ``ETA``; used when the stream is a terminal;
* ``plain`` -- one plain line per task at most every ``interval`` seconds
  (default 10, ``SMCDP_PROGRESS_INTERVAL``) and a last line when it ends;
  used when the stream is not a terminal (CI logs, pipes, files);
* ``off`` -- nothing.

Tasks opened while another is live (an experiment's runs inside
``make experiments``) join the same display: one live bar area per process,
as rich requires.  The module sits in the bottom layer (it imports nothing
from smcdp), so any layer may report progress.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import IO, Any, TypeVar

T = TypeVar("T")

MODES = ("auto", "bar", "plain", "off")
MODE_ENV = "SMCDP_PROGRESS"
INTERVAL_ENV = "SMCDP_PROGRESS_INTERVAL"
DEFAULT_INTERVAL = 10.0


def _fmt_seconds(s: float | None) -> str:
    if s is None or s != s or s == float("inf"):
        return "-:--:--"
    s = int(round(max(0.0, s)))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _fmt_rate(rate: float | None, unit: str) -> str:
    if rate is None:
        return f"? {unit}/s"
    if rate >= 100:
        return f"{rate:.0f} {unit}/s"
    if rate >= 1:
        return f"{rate:.2f} {unit}/s"
    if rate > 0:
        return f"{rate:.3g} {unit}/s"
    return f"0 {unit}/s"


def resolve_mode(mode: str | None = None, stream: IO[str] | None = None) -> str:
    """``bar``, ``plain`` or ``off`` for ``stream`` (auto: a bar on a terminal, plain lines elsewhere)."""
    mode = (mode or os.environ.get(MODE_ENV) or "auto").strip().lower()
    if mode not in MODES:
        raise ValueError(f"{MODE_ENV}={mode!r}: expected one of {', '.join(MODES)}")
    if mode != "auto":
        return mode
    stream = stream if stream is not None else sys.stderr
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):  # a closed or odd stream
        tty = False
    return "bar" if tty and os.environ.get("TERM", "") != "dumb" else "plain"


def _interval(interval: float | None) -> float:
    if interval is not None:
        return interval
    try:
        return float(os.environ.get(INTERVAL_ENV, DEFAULT_INTERVAL))
    except ValueError:
        return DEFAULT_INTERVAL


class Task:
    """One piece of long work on the current display: ``advance(n)`` / ``update(...)``."""

    def __init__(self, display: _Display, description: str, total: float | None, unit: str) -> None:
        self._display = display
        self.description = description
        self.total = total
        self.unit = unit
        self.completed = 0.0
        self.started = time.monotonic()
        self.finished_at: float | None = None
        self._handle: Any = None
        self._last_line = 0.0
        self._lock = threading.Lock()  # advance() from several threads (concurrent sessions)

    @property
    def elapsed(self) -> float:
        return (self.finished_at or time.monotonic()) - self.started

    @property
    def rate(self) -> float | None:
        """Units per second since the task started (None before the first unit)."""
        el = self.elapsed
        return self.completed / el if self.completed and el > 0 else None

    @property
    def eta(self) -> float | None:
        """Seconds left at the mean rate so far (None without a total or a rate)."""
        r = self.rate
        if self.total is None or not r:
            return None
        return max(0.0, (self.total - self.completed) / r)

    def advance(self, n: float = 1) -> None:
        with self._lock:
            self.completed += n
        self._display.changed(self)

    def update(
        self, *, completed: float | None = None, total: float | None = None, description: str | None = None
    ) -> None:
        if completed is not None:
            self.completed = completed
        if total is not None:
            self.total = total
        if description is not None:
            self.description = description
        self._display.changed(self)

    def line(self) -> str:
        """The plain-text line for this task now (what the non-terminal display prints)."""
        done = f"{self.completed:g}"
        if self.total:
            pct = 100.0 * self.completed / self.total
            head = f"{self.description}: {done}/{self.total:g} {self.unit} ({pct:.0f}%)"
        else:
            head = f"{self.description}: {done} {self.unit}"
        tail = f"{_fmt_rate(self.rate, self.unit)}, elapsed {_fmt_seconds(self.elapsed)}"
        if self.finished_at is not None:
            return f"{head} done, {tail}"
        if self.total:
            tail += f", ETA {_fmt_seconds(self.eta)}"
        return f"{head}, {tail}"


class _Display:
    def __init__(self, stream: IO[str], interval: float) -> None:
        self.stream = stream
        self.interval = interval
        self.tasks: list[Task] = []

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def add(self, t: Task) -> None:
        self.tasks.append(t)

    def changed(self, t: Task) -> None: ...

    def finish(self, t: Task, keep: bool) -> None:
        if t in self.tasks:
            self.tasks.remove(t)


class _Off(_Display):
    pass


class _Plain(_Display):
    """A line per task at most every ``interval`` seconds, a heartbeat while nothing moves, a last line."""

    def __init__(self, stream: IO[str], interval: float) -> None:
        super().__init__(stream, interval)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _print(self, t: Task) -> None:
        t._last_line = time.monotonic()
        try:
            print(t.line(), file=self.stream, flush=True)
        except (OSError, ValueError):  # stderr closed under us: progress is never worth a crash
            pass

    def start(self) -> None:
        self._thread = threading.Thread(target=self._beat, name="smcdp-progress", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(min(1.0, max(0.05, self.interval / 4))):
            now = time.monotonic()
            with self._lock:
                for t in list(self.tasks):
                    if now - t._last_line >= self.interval:
                        self._print(t)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)

    def add(self, t: Task) -> None:
        with self._lock:
            super().add(t)
            t._last_line = time.monotonic()  # the first line after one interval, not at once

    def changed(self, t: Task) -> None:
        with self._lock:
            if t in self.tasks and time.monotonic() - t._last_line >= self.interval:
                self._print(t)

    def finish(self, t: Task, keep: bool) -> None:
        with self._lock:
            super().finish(t, keep)
            self._print(t)


class _Bar(_Display):
    """rich.progress on a terminal: description, bar, done/total, rate, elapsed, ETA."""

    def __init__(self, stream: IO[str], interval: float, console: Any = None) -> None:
        super().__init__(stream, interval)
        # rich is imported only when a terminal shows a bar (plain lines and `off` do without it)
        from rich.console import Console
        from rich.progress import (  # rich: as above
            BarColumn,
            Progress,
            ProgressColumn,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )
        from rich.text import Text  # rich: as above

        class RateColumn(ProgressColumn):
            def render(self, task):  # noqa: ANN001 - rich's Task
                t: Task = task.fields["smcdp"]
                return Text(_fmt_rate(t.rate, t.unit), style="progress.data.speed")

        class EtaColumn(ProgressColumn):
            def render(self, task):  # noqa: ANN001
                t: Task = task.fields["smcdp"]
                if t.finished_at is not None:
                    return Text("done", style="progress.elapsed")
                if not t.total:
                    return Text("")
                return Text(f"ETA {_fmt_seconds(t.eta)}", style="progress.remaining")

        class CountColumn(ProgressColumn):
            def render(self, task):  # noqa: ANN001
                t: Task = task.fields["smcdp"]
                if t.total:
                    return Text(f"{t.completed:g}/{t.total:g} {t.unit}", style="progress.download")
                return Text(f"{t.completed:g} {t.unit}", style="progress.download")

        self.console = console if console is not None else Console(file=stream)
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            CountColumn(),
            RateColumn(),
            TimeElapsedColumn(),
            EtaColumn(),
            console=self.console,
            refresh_per_second=4,
        )

    def start(self) -> None:
        self.progress.start()

    def stop(self) -> None:
        self.progress.stop()

    def add(self, t: Task) -> None:
        super().add(t)
        t._handle = self.progress.add_task(t.description, total=t.total, smcdp=t)

    def changed(self, t: Task) -> None:
        if t._handle is not None:
            self.progress.update(t._handle, completed=t.completed, total=t.total, description=t.description)

    def finish(self, t: Task, keep: bool) -> None:
        super().finish(t, keep)
        if t._handle is None:
            return
        if keep:
            self.progress.update(
                t._handle, completed=t.completed, total=t.total or t.completed or None, description=t.description
            )
            self.progress.stop_task(t._handle)
        else:
            self.progress.remove_task(t._handle)


_lock = threading.RLock()
_active: _Display | None = None
_depth = 0


@contextmanager
def _display(
    stream: IO[str] | None, mode: str | None, interval: float | None, console: Any
) -> Iterator[tuple[_Display, bool]]:
    global _active, _depth
    with _lock:
        outer = _active is None
        if outer:
            stream = stream if stream is not None else sys.stderr
            m = "bar" if console is not None else resolve_mode(mode, stream)
            iv = _interval(interval)
            d: _Display = (
                _Bar(stream, iv, console) if m == "bar" else _Plain(stream, iv) if m == "plain" else _Off(stream, iv)
            )
            d.start()
            _active = d
        _depth += 1
        disp = _active
        assert disp is not None  # made above, or by the outermost caller still inside
    try:
        yield disp, outer
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _active is not None:
                _active.stop()
                _active = None


@contextmanager
def task(
    description: str,
    total: float | None = None,
    unit: str = "it",
    *,
    stream: IO[str] | None = None,
    mode: str | None = None,
    interval: float | None = None,
    console: Any = None,
) -> Iterator[Task]:
    """A task on the display (opened for it if none is live); yields a :class:`Task`.

    ``total=None`` for work of unknown length (shows count, rate and elapsed).
    ``stream`` (default stderr), ``mode`` (default ``SMCDP_PROGRESS`` or auto),
    ``interval`` and ``console`` (a rich Console, forcing the bar; tests) apply
    only when this task opens the display.
    """
    with _display(stream, mode, interval, console) as (disp, outer):
        t = Task(disp, description, total, unit)
        disp.add(t)
        try:
            yield t
        finally:
            t.finished_at = time.monotonic()
            disp.finish(t, keep=outer)


def track(
    iterable: Iterable[T], description: str, total: float | None = None, unit: str = "it", **kw: Any
) -> Iterator[T]:
    """Iterate ``iterable``, advancing a task by one per item (total from ``len()`` when it has one)."""
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)  # type: ignore[arg-type]
    with task(description, total, unit, **kw) as t:
        for item in iterable:
            yield item
            t.advance()


__all__ = ["INTERVAL_ENV", "MODES", "MODE_ENV", "Task", "resolve_mode", "task", "track"]
