"""What this process may use of the machine: its CPUs and its free memory (stdlib only, torch-free).

The host's preflight (runs/fit.py) reads it through the Machine seam (a fake root in tests); the trainer reads
the real files to bound `runtime.threads` and `data.workers`. A container's limits are the cgroup's, not the
machine's: `os.cpu_count()` and MemTotal show the host's 64 cores and 256 GiB where the process may use 2
cores (cpu.max) and 4 GiB (memory.max). The limits of every cgroup from the process's own up to the root
apply, so each level is read and the smallest wins.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass

Read = Callable[[str], "str | None"]  # a path relative to the root -> its text, or None when unreadable

GIB = 1 << 30


def real_read(rel: str) -> str | None:
    try:
        with open("/" + rel, encoding="utf-8", errors="replace") as fh:
            return fh.read(1 << 16)
    except OSError:
        return None


def cgroup_dirs(read: Read) -> list[str]:
    """The cgroup v2 folders of this process, its own first, then each parent up to the root."""
    path = ""
    for line in (read("proc/self/cgroup") or "").splitlines():
        if line.startswith("0::"):
            path = line[3:].strip()
    parts = [p for p in path.split("/") if p and p not in (".", "..")]
    return ["/".join(["sys/fs/cgroup", *parts[:n]]) for n in range(len(parts), -1, -1)]


def _int(text: str | None) -> int | None:
    text = (text or "").strip()
    return int(text) if text.isdigit() else None


@dataclass(frozen=True)
class Cpus:
    usable: int  # the CPUs this process may keep busy: the smaller of the two limits below
    affinity: int  # os.sched_getaffinity (taskset, a container's cpuset)
    quota: float | None  # cgroup cpu.max in CPUs; None when unlimited

    def describe(self) -> str:
        quota = f"cgroup cpu.max {self.quota:g} CPUs" if self.quota is not None else "no cgroup CPU quota"
        return f"{self.affinity} CPUs in its affinity mask, {quota}"


def cpu_quota(read: Read) -> float | None:
    """The smallest cgroup v2 `cpu.max` ("quota period", or "max period" = none) on the way to the root."""
    best: float | None = None
    for folder in cgroup_dirs(read):
        fields = (read(f"{folder}/cpu.max") or "").split()
        if len(fields) != 2 or fields[0] == "max":
            continue
        quota, period = _int(fields[0]), _int(fields[1])
        if quota and period:
            best = min(best, quota / period) if best is not None else quota / period
    return best


def usable_cpus(read: Read = real_read) -> Cpus:
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = os.cpu_count() or 1
    quota = cpu_quota(read)
    usable = affinity if quota is None else min(affinity, max(1, math.ceil(quota)))
    return Cpus(usable=max(1, usable), affinity=affinity, quota=quota)


@dataclass(frozen=True)
class Memory:
    available: int | None  # bytes the process may still take; None when nothing could be read
    # which limit that is, in words ("MemAvailable", "cgroup memory.max 4.0 GiB, 3.1 GiB of it free")
    source: str


def available_memory(read: Read = real_read) -> Memory:
    """The smaller of the kernel's MemAvailable and every cgroup level's memory.max - memory.current."""
    best: int | None = None
    source = "nothing readable (/proc/meminfo, cgroup memory.max)"
    m = re.search(r"^MemAvailable:\s*(\d+)\s*kB", read("proc/meminfo") or "", re.MULTILINE)
    if m:
        best, source = int(m.group(1)) * 1024, "MemAvailable in /proc/meminfo"
    for folder in cgroup_dirs(read):
        limit = _int(read(f"{folder}/memory.max"))
        if limit is None or limit >= 1 << 60:  # "max" (none), or cgroup v1's huge "no limit" number
            continue
        free = max(0, limit - (_int(read(f"{folder}/memory.current")) or 0))
        if best is None or free < best:
            best = free
            source = f"/{folder}/memory.max {gib(limit)}, {gib(free)} of it free"
    return Memory(available=best, source=source)


def gib(n: float) -> str:
    return f"{n / GIB:,.1f} GiB" if n >= GIB / 10 else f"{n / (1 << 20):,.1f} MiB"


def bounded(name: str, wanted: int, limit: int, cpus: Cpus) -> tuple[int, str | None]:
    """`wanted` clamped to `limit`, with the warning to print when it was (None when it was not)."""
    if wanted <= limit:
        return wanted, None
    return limit, (
        f"{name}={wanted} is more than this process can run at once ({cpus.describe()}); using {limit}"
    )


__all__ = ["Cpus", "Memory", "available_memory", "bounded", "cgroup_dirs", "gib", "usable_cpus"]
