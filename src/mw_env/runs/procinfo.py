"""What the kernel says about how a run's process ended: the signal's name and the cgroup's OOM-kill count.

One leaf for both judges of an ended trainer: the supervisor of a detached run (supervise.py) and a
foreground `mw-env train` (foreground.py), and the anomaly report that words it (anomalies.py).
"""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path

PROC = Path("/proc")


def signal_name(signum: int, *, number: bool = False) -> str:
    """ "SIGKILL" (with `number`: "SIGKILL (9)"); "signal 64" for a number that names no signal."""
    try:
        name = signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
    return f"{name} ({signum})" if number else name


def cgroup_oom_kills(*, proc: Path = PROC, sys_fs: Path = Path("/sys/fs/cgroup")) -> int | None:
    """The oom_kill counter of this process's cgroup (v2), or None where it cannot be read (the one OOM
    counter: the supervisor of a detached run and a foreground `mw-env train` both compare it)."""
    paths = [sys_fs / "memory.events"]
    with contextlib.suppress(OSError):
        for line in (proc / "self" / "cgroup").read_text().splitlines():
            if line.startswith("0::"):
                paths.insert(0, sys_fs / line[3:].strip("/") / "memory.events")
    for path in paths:
        with contextlib.suppress(OSError, ValueError):
            for line in path.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
    return None
