"""When bootstrap's own uv commands ran: a file whose mtime falls inside one was written by that install.

venv/integrity.py hashes a file whose mtime is later than its package's METADATA (an edit after the unpack).
uv unpacks a wheel's files in parallel (uv-extract's `unzip`, one rayon task per file, mtimes left as written),
so on a venv it has just made a share of every package's files is later than its METADATA: 265 of torch's
files, 468 MB, hashed on every fresh install, every re-run and every doctor. uv then hard-links (or clones,
or copies) the cache's files into the venv, keeping the cache's mtimes for a hard link. A file written while
one of bootstrap's uv commands ran was written by it (unpacked into the cache, or copied): it is trusted
without a hash. What issue 40 found still moves a file's mtime outside every window: an edit in place after
the install (in the venv, or in uv's cache and every venv linked to it) and an edit of a cache file before a
NEW venv links it (the cache entry was unpacked by an earlier command, the edit came between).

The windows are kept in the state folder beside `last-venv` (venv/record.py), for every venv and every
later scan (a re-run's plan, the doctor, a new venv from the same cache); best effort: without them a file
is hashed as before.
"""

from __future__ import annotations

import json
import os
import time
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from mw_env.base.atomic import write_text_atomic
from mw_env.venv.record import last_venv_file

FILE = "install-windows.json"
KEEP = 256  # the newest windows: a cache entry unpacked before them is hashed again, as before
# Before the start: a file's mtime is the kernel's coarse clock, a few ms behind time.time_ns().
SLACK_NS = 100_000_000

InstallTime = tuple[int, int]


def _path() -> str:
    return str(last_venv_file().parent / FILE)


def load() -> tuple[InstallTime, ...]:
    """The windows recorded, sorted and merged (none where the file is missing or not ours)."""
    try:
        with open(_path(), encoding="utf-8") as fh:
            data = json.load(fh)
        pairs = [(int(a), int(b)) for a, b in data["windows"]]
    except (OSError, ValueError, TypeError, KeyError, RecursionError):
        return ()
    return _merged(pairs)


def _merged(pairs: Sequence[InstallTime]) -> tuple[InstallTime, ...]:
    out: list[InstallTime] = []
    for start, end in sorted(p for p in pairs if p[0] <= p[1]):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return tuple(out)


def within(mtime_ns: int, windows: Sequence[InstallTime]) -> bool:
    """The mtime falls inside a window (`windows` sorted and merged, as `load` gives them)."""
    i = bisect_right(windows, (mtime_ns, 1 << 63)) - 1
    return i >= 0 and mtime_ns <= windows[i][1]


@contextmanager
def recorded() -> Iterator[None]:
    """Record the time the body runs (a uv command of bootstrap's) as a window, once it has ended."""
    start = time.time_ns() - SLACK_NS
    try:
        yield
    finally:
        add((start, time.time_ns()))


def add(window: InstallTime) -> None:
    """Best effort: a state folder that cannot be written only costs later scans their hashes."""
    path = _path()
    windows = _merged([*load(), window])[-KEEP:]
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_text_atomic(path, json.dumps({"windows": [list(w) for w in windows]}) + "\n", durable=False)
    except OSError:
        pass
