"""Finding a test's processes by a marker in their environment, and free TCP ports (shared by several suites).

Every process a test starts (and all their descendants, whatever session they move to) inherits the test's
marker variable, so "no process of theirs is left" is a scan of /proc for it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
import uuid
from collections.abc import Callable
from pathlib import Path

MARKER = "MW_ENV_TEST_TAG"


def new_tag() -> str:
    return uuid.uuid4().hex


def tagged(tag: str) -> list[int]:
    """Live processes (not zombies) whose environment holds MW_ENV_TEST_TAG=tag."""
    needle = f"{MARKER}={tag}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if stat[stat.rfind(")") + 2 :].split()[0] not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def cmdline(pid: int) -> str:
    try:
        return (
            (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def assert_none_left(tag: str, *, within: float = 10.0) -> None:
    """Every tagged process ends within `within` seconds (what is left is killed, then named)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not tagged(tag):
            return
        time.sleep(0.1)
    left = tagged(tag)
    names = {pid: cmdline(pid)[:200] for pid in left}
    kill_tagged(tag)
    raise AssertionError(f"processes left {within}s later: {names}")


def kill_tagged(tag: str) -> None:
    """Test cleanup: nothing of a test outlives it."""
    for pid in tagged(tag):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def free_port() -> int:
    """A free port for a server a test starts later (torchrun's rendezvous store), chosen outside the kernel's
    ephemeral range. A port the kernel gave for a bind to 0 and that is released at once can be given again to
    the next bind to 0: another test's loopback server, in the other xdist worker, got it first in a full run;
    torchrun's agent then could not bind its store, took that server for another node's store and timed out
    (a flake seen once in CI). Outside the range no bind to 0 can land on it."""
    import random

    low, high = _ephemeral_range()
    candidates = [p for p in range(10000, 65535) if not low <= p <= high]
    for port in random.sample(candidates, 200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use: the next candidate
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # everything taken: the kernel's choice
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def hang_report(tag: str) -> str:
    """What each tagged process is doing, for a test that timed out waiting for one to end: its signal
    dispositions and masks (an inherited SIG_IGN or a blocked SIGINT explains a Ctrl-C that did nothing) and
    where each thread sleeps. Then SIGABRT each, so a Python started with PYTHONFAULTHANDLER=1 writes every
    thread's stack to its stderr (which the caller then reads)."""
    keys = ("State", "SigQ", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt")
    lines = []
    pids = tagged(tag)
    for pid in pids:
        proc = Path("/proc") / str(pid)
        try:
            status = dict(
                ln.split(":\t", 1) for ln in (proc / "status").read_text().splitlines() if ":\t" in ln
            )
        except OSError:
            continue
        fields = " ".join(f"{k}={status.get(k, '?').strip()}" for k in keys)
        lines.append(f"pid {pid} ppid {status.get('PPid', '?').strip()} {fields}: {cmdline(pid)[:160]}")
        with contextlib.suppress(OSError):
            for task in sorted((proc / "task").iterdir()):
                with contextlib.suppress(OSError):
                    name = (task / "comm").read_text().strip()
                    wchan = (task / "wchan").read_text().strip()
                    tstatus = (task / "status").read_text()
                    blk = next((ln.split()[1] for ln in tstatus.splitlines() if ln.startswith("SigBlk")), "?")
                    pnd = next((ln.split()[1] for ln in tstatus.splitlines() if ln.startswith("SigPnd")), "?")
                    lines.append(f"  thread {task.name} {name} wchan={wchan} SigBlk={blk} SigPnd={pnd}")
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGABRT)
    return "\n".join(lines) or "no tagged process left"
