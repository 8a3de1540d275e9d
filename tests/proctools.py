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
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
