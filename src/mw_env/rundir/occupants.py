"""Who is in a run folder: the live processes of every launch into it, found by their environment.

`mw-env train` and `train start` (runs/launch.py) put MW_ENV_RUN_DIR (the run folder, absolute) and MW_ENV_RUN_ID
(one id per launch) in the environment of every process they start: the supervisor's child, torchrun and each
of its workers (torchrun puts them in sessions of their own, so neither the process group nor the parent chain
finds them all; their environment does). So a run is found by its processes when its files are not there to
say so: run.json deleted (`train stop`, `train status`), the folder's lock files deleted (a second trainer is
refused: rundir/runlock.py), the folder itself deleted or replaced. Read from /proc: this user's processes
only (another user's environ is unreadable, and their runs are not ours to judge). Stdlib only.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

PROC = Path("/proc")
# Set by runs.launch in the environment of every process of one launch.
RUN_ID_ENV = "MW_ENV_RUN_ID"
RUN_DIR_ENV = "MW_ENV_RUN_DIR"
# Set by `train start` (runs.runs) in the environment of the supervisor and of the trainer it starts: a
# detached run is told from a foreground one by its processes too (its run.json gone).
DETACHED_ENV = "MW_ENV_DETACHED"


class Stat(NamedTuple):
    """Fields 3, 5, 22 and 4 of /proc/<pid>/stat."""

    state: str
    pgrp: int
    start_ticks: int  # with the pid, names one process: a pid is reused, never with the same start
    ppid: int

    @property
    def alive(self) -> bool:
        return self.state not in ("Z", "X", "x")  # not a zombie, not dead


def proc_stat(pid: int, *, proc: Path = PROC) -> Stat | None:
    """The process's Stat, or None when there is no such pid."""
    try:
        text = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    rest = text[text.rfind(")") + 2 :].split()
    try:
        return Stat(rest[0], int(rest[2]), int(rest[19]), int(rest[1]))
    except (IndexError, ValueError):
        return None


def live_processes(*, proc: Path = PROC) -> Iterator[tuple[int, Stat]]:
    """Every live process (pid, Stat), of any user; none where /proc cannot be read."""
    for entry in proc.iterdir() if proc.is_dir() else ():
        if entry.name.isdigit() and (stat := proc_stat(int(entry.name), proc=proc)) and stat.alive:
            yield int(entry.name), stat


def same_process_alive(pid: int, start_ticks: int, *, proc: Path = PROC) -> bool:
    """True while `pid` is running and is the process that started at `start_ticks` (not a zombie)."""
    stat = proc_stat(pid, proc=proc)
    return stat is not None and stat.alive and stat.start_ticks == start_ticks


def group_members(pgid: int, *, proc: Path = PROC) -> list[int]:
    return [pid for pid, stat in live_processes(proc=proc) if stat.pgrp == pgid]


def children(pid: int) -> list[int]:
    return [child for child, stat in live_processes() if stat.ppid == pid]


def environ(pid: int, *, proc: Path = PROC) -> dict[str, str] | None:
    """A live process's environment (None: gone, a zombie, or not ours to read)."""
    try:
        raw = (proc / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    stat = proc_stat(pid, proc=proc)
    if stat is None or not stat.alive:
        return None
    out = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            out[key.decode(errors="replace")] = value.decode(errors="replace")
    return out


def marked_processes(value: str, *, key: str = RUN_ID_ENV, proc: Path = PROC) -> list[int]:
    """Live processes (of this user: others' environ is unreadable) whose environment holds key=value."""
    if not value:
        return []
    needle = f"{key}={value}".encode()
    found = []
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in env.split(b"\0"):
            stat = proc_stat(int(entry.name), proc=proc)
            if stat and stat.alive:
                found.append(int(entry.name))
    return found


def processes_of_folder(run_dir: Path, *, proc: Path = PROC) -> list[int]:
    """Live processes of this user started for `run_dir` (its supervisor, trainer, torchrun and workers)."""
    return marked_processes(str(Path(run_dir).resolve()), key=RUN_DIR_ENV, proc=proc)


def other_launches(run_dir: Path, *, mine: str | None, proc: Path = PROC) -> dict[int, dict[str, str]]:
    """The live processes of `run_dir` that belong to another launch than `mine` (a run id; None: any
    launch), with their environments."""
    out = {}
    for pid in processes_of_folder(run_dir, proc=proc):
        env = environ(pid, proc=proc)
        if env is not None and (mine is None or env.get(RUN_ID_ENV) != mine):
            out[pid] = env
    return out


def cmdline(pid: int, *, proc: Path = PROC) -> str:
    try:
        return (
            (proc / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        )
    except OSError:
        return ""
