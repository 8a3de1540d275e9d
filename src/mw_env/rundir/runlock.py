"""The run folder's lock: one trainer at a time writes a run folder (torch-free; the trainer and mw-env use it).

The running trainer (rank 0) holds an exclusive flock(2) on `<run>/.lock` for its whole life and records its
pid, host and command line in it. A second trainer on the same folder is refused at once, naming the holder,
instead of training beside it (two writers interleaving metrics.jsonl and rotating each other's checkpoints).
The kernel drops the lock when the holder dies, however it dies, so a killed trainer leaves no stale lock: the
file's text only says who held it last. `mw-env train` and `train start` probe the lock before they run the
doctor, so the refusal comes before any work. flock works on local disks and on NFSv4 (where Linux maps it to
a POSIX lock the server sees), so a shared run folder is protected across nodes too.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mw_env.base.atomic import open_regular
from mw_env.base.errors import InputError
from mw_env.base.shellquote import sh
from mw_env.rundir.contract import LOCK_NAME

_TRIES = 10


@dataclass
class RunLock:
    """A held lock; `release()` (or the process's death) frees it."""

    path: Path
    fd: int | None

    def release(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)  # closing drops the flock
            self.fd = None


def lock_path(run_dir: Path) -> Path:
    return Path(run_dir) / LOCK_NAME


def holder(run_dir: Path) -> dict[str, Any] | None:
    """What the lock file says about its (last) holder, None when it says nothing readable."""
    try:
        data = json.loads(lock_path(run_dir).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # torn, not JSON, or nested past the stack
        return None
    return data if isinstance(data, dict) else None


def describe(info: dict[str, Any] | None) -> str:
    if not info:
        return "holder unknown"
    command = " ".join(str(a) for a in info.get("argv") or []) or "?"
    return f"pid {info.get('pid')} on {info.get('host')}, since {info.get('started')}: {command[:500]}"


def refusal(run_dir: Path) -> InputError:
    run_dir = Path(run_dir)
    return InputError(
        f"the run folder {run_dir} is in use by another trainer ({describe(holder(run_dir))})",
        hint=f"wait for it or stop it (`mw-env train stop --out-dir {sh(run_dir)}` for a detached run, Ctrl-C or "
        "SIGTERM for a foreground one), or train into another runtime.out_dir",
    )


def acquire(run_dir: Path, *, argv: list[str] | None = None) -> RunLock:
    """Take the lock for this process; InputError naming the holder when another process has it."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = lock_path(run_dir)
    fd = open_regular(path, os.O_RDWR | os.O_CREAT, 0o600)  # a FIFO here: refused, not hung on
    # A few tries over half a second: check_free() of a starting `mw-env train` holds a shared lock for
    # microseconds, which must not pass for a live trainer.
    for attempt in range(_TRIES):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if attempt == _TRIES - 1:
                os.close(fd)
                raise refusal(run_dir) from None
            time.sleep(0.05)
        except OSError:
            os.close(fd)
            raise
    info = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "argv": list(argv if argv is not None else getattr(sys, "orig_argv", sys.argv)),
    }
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
    return RunLock(path=path, fd=fd)


def check_free(run_dir: Path) -> None:
    """Raise the refusal when a live trainer holds `run_dir`'s lock (probe only: the lock is not kept)."""
    path = lock_path(run_dir)
    if not path.exists():
        return
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return  # unreadable: the trainer's own attempt will tell
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise refusal(Path(run_dir)) from None
    except OSError:
        return
    finally:
        os.close(fd)
