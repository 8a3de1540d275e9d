"""Reading a growing file from where the last read stopped: complete lines only, never blocking.

`status` and `watch` read a live run's train.log and metrics.jsonl with these; a FIFO or device
planted in the run folder is never read (it would block or never end), nor a file that leads out of the run
folder (a train.log linked to /etc/shadow, or run.json naming it as the log: its lines would be quoted).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mw_env.rundir.contract import METRICS_FILE


@dataclass
class Tail:
    """Complete lines appended to a file since the last read (a partial last line waits)."""

    path: Path
    offset: int = 0
    limit: int | None = None  # read at most this many bytes on a first, large read
    skipped_bytes: int = 0
    root: Path | None = None  # the run folder: a path whose target is outside it is not read
    outside: bool = False  # set when that refused a read

    def read_lines(self) -> list[str]:
        return [line for _, line in self.read_with_offsets()]

    def read_with_offsets(self) -> list[tuple[int, str]]:
        """(byte offset where the line starts, line) for each new complete line."""
        try:
            st = self.path.stat()
            if self.root is not None and not _within(self.root, self.path):
                self.outside = True
                return []
        except (OSError, RuntimeError):  # RuntimeError: pathlib's symlink loop
            return []
        if not stat.S_ISREG(st.st_mode):
            return []  # a FIFO or device in the run folder would block or never end: nothing to read
        size = st.st_size
        if size < self.offset:  # rewritten or truncated: start over
            self.offset = 0
        if self.limit is not None and size - self.offset > self.limit:
            self.skipped_bytes += size - self.limit - self.offset
            self.offset = size - self.limit
        with open(self.path, "rb") as fh:
            fh.seek(self.offset)
            data = fh.read(size - self.offset)
        cut = data.rfind(b"\n")
        if cut < 0:
            return []
        out, pos = [], self.offset
        for raw in data[:cut].split(b"\n"):
            out.append((pos, raw.decode("utf-8", errors="replace").rstrip("\r")))
            pos += len(raw) + 1
        self.offset += cut + 1
        return out


def _within(root: Path, path: Path) -> bool:
    top, target = root.resolve(), path.resolve()
    return target == top or top in target.parents


@dataclass
class MetricsTail:
    tail: Tail
    bad_lines: int = 0

    def read_events(self) -> list[tuple[int, dict[str, Any]]]:
        """(byte offset, event) for each new event line; other lines are counted as bad."""
        events = []
        for offset, line in self.tail.read_with_offsets():
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except (ValueError, RecursionError):  # torn JSON, nesting past the stack, a 5000-digit number
                self.bad_lines += 1
                continue
            if isinstance(event, dict) and isinstance(event.get("event"), str):
                events.append((offset, event))
            else:
                self.bad_lines += 1
        return events


def recent_events(run_dir: Path, limit: int = 4 << 20) -> list[dict[str, Any]]:
    """The events in the last `limit` bytes of metrics.jsonl (a stop measures its steps and checkpoints there,
    earlier attempts' too); none where it cannot be read (a FIFO planted there is never opened)."""
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():  # a FIFO planted there would block the open
        return []
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - limit))
            lines = fh.read(limit).split(b"\n")[1 if size > limit else 0 :]
    except OSError:
        return []
    events = []
    for line in lines:
        with contextlib.suppress(ValueError, RecursionError):
            event = json.loads(line)
            if isinstance(event, dict):
                events.append(event)
    return events
