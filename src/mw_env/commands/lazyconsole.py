"""A rich Console built as idle work when nothing is drawn: bootstrap's lines, printed in order, off its path.

Why: importing rich and building a Console costs bootstrap ~15 ms of its critical path, before its first uv
call. Off a terminal (a pipe, a CI log, `--json`'s stderr) nothing is drawn live, so the lines can wait a few
milliseconds: they are queued and printed, in order, by the idle thread while the main thread waits on uv
(base/idle.py), or by whoever calls flush() first. On a terminal (or where rich is told to act as one) the
real Console is built at once: its spinner is live output.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

from mw_env.base import idle

if TYPE_CHECKING:
    from rich.console import Console

# The variables with which rich treats any stream as a terminal (rich.console.Console.is_terminal).
_TERMINAL_HINTS = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")


class LazyConsole:
    """The part of rich's Console bootstrap uses off a terminal: print() queued, is_terminal False."""

    is_terminal = False

    def __init__(self, **options: object) -> None:
        self._options = options
        self._console: Console | None = None
        self._queue: list[tuple[tuple[object, ...], dict[str, object]]] = []
        self._lock = threading.Lock()
        idle.soon(self.flush)

    def print(self, *objects: object, **options: object) -> None:
        with self._lock:
            if self._console is None:
                self._queue.append((objects, options))
                return
            self._console.print(*objects, **options)  # type: ignore[arg-type]  # rich's own keyword types

    def flush(self) -> None:
        """Build the console if it is not yet, and print what is queued (before anything else writes)."""
        with self._lock:
            if self._console is None:
                from rich.console import Console

                self._console = Console(**self._options)  # type: ignore[arg-type]  # as given to rich
            queued, self._queue = self._queue, []
            for objects, options in queued:
                self._console.print(*objects, **options)  # type: ignore[arg-type]


def console_for(
    *, stderr: bool, env: Mapping[str, str] | None = None, **options: object
) -> Console | LazyConsole:
    """rich's Console for a terminal, a LazyConsole elsewhere; `options` as rich's Console takes them."""
    stream = sys.stderr if stderr else sys.stdout
    environ = os.environ if env is None else env
    try:
        drawn = stream.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream: as rich, not a terminal
        drawn = False
    if drawn or any(k in environ for k in _TERMINAL_HINTS):
        from rich.console import Console

        return Console(stderr=stderr, **options)  # type: ignore[arg-type]
    return LazyConsole(stderr=stderr, **options)


def flush(console: object) -> None:
    """What a LazyConsole holds, printed now (a rich Console prints at once: nothing to do)."""
    if isinstance(console, LazyConsole):
        console.flush()
