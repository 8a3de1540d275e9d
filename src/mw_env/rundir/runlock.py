"""The run folder's lock: one trainer at a time writes a run folder (torch-free; the trainer and mw-env use it).

The running trainer (rank 0) holds an exclusive flock(2) on `<run>/.lock` for its whole life and records its
pid, host and command line in it. A second trainer on the same folder is refused at once, naming the holder,
instead of training beside it (two writers interleaving metrics.jsonl and rotating each other's checkpoints).
The kernel drops the lock when the holder dies, however it dies, so a killed trainer leaves no stale lock: the
file's text only says who held it last. `mw-env train` and `train start` probe the lock before they run the
doctor, so the refusal comes before any work. flock works on local disks and on NFSv4 (where Linux maps it to
a POSIX lock the server sees), so a shared run folder is protected across nodes too.

A lock file can be deleted under its holder (`rm RUN/.lock`, a clean-up script): the holder keeps a lock on a
file nobody can open any more, and a second trainer made a new one, took it and trained into the live folder.
So the lock is two facts, each enough: the flock, and the live processes of another launch into the folder
(rundir/occupants.py, by MW_ENV_RUN_DIR in their environment; not across the nodes of one multi-node run,
which share the folder by design). And the holder makes its lock file again when it finds it gone
(`RunLock.keep`, from the trainer's folder watcher, once it stayed missing for a whole look while the folder's
other files stayed: not inside a folder being deleted), so a trainer started by other means meets the flock too.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mw_env.base.atomic import open_regular
from mw_env.base.errors import InputError
from mw_env.base.shellquote import sh
from mw_env.rundir.contract import LOCK_NAME
from mw_env.rundir.occupants import RUN_ID_ENV, cmdline, other_launches

_TRIES = 10


@dataclass
class RunLock:
    """A held lock; `release()` (or the process's death) frees it."""

    path: Path
    fd: int | None
    info: dict[str, object] | None = None  # what the lock file says of its holder
    # keep() runs in the folder watcher's thread, release() in the trainer's: one at a time on the fd.
    _mutex: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    # The folder's entry count at the last look that found the lock file missing (keep()).
    _missing: int | None = field(default=None, repr=False, compare=False)

    def keep(self) -> str | None:
        """The lock file is still the one held; one deleted or replaced is made (and locked) again. What
        happened, in words (None: nothing did)."""
        with self._mutex:
            if self.fd is None:
                return None
            try:
                held = os.fstat(self.fd)
                now = os.stat(self.path)
                if (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
                    self._missing = None
                    return None
            except FileNotFoundError:
                # Made again only once it stayed missing for a whole look while the folder's other entries stayed:
                # `rm -rf RUN` removes them too, and a lock file made again inside a folder being deleted made its
                # last rmdir fail (ENOTEMPTY) while the watcher then ends the run on the folder being gone.
                entries = _entry_count(self.path.parent)
                before, self._missing = self._missing, entries
                if before is None or not entries or entries < before:
                    return None  # the next look decides
            except OSError:
                return None  # unreadable for a moment: the next look decides
            try:
                fd = open_regular(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            except (OSError, InputError) as exc:
                return f"the run folder's lock file {self.path} is gone and cannot be made again ({exc})"
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                return (
                    f"the run folder's lock file {self.path} was replaced, and another process holds the new one "
                    f"({describe(holder(self.path.parent))}): two trainers may be writing this folder"
                )
            _write_info(fd, self.info or {})
            os.close(self.fd)  # its lock was on a file nobody can open any more
            self.fd, self._missing = fd, None
            return (
                f"the run folder's lock file {self.path} was deleted; this trainer made it again and holds it"
            )

    def release(self) -> None:
        with self._mutex:
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


def refusal(
    run_dir: Path, found: dict[int, dict[str, str]] | None = None, *, lock_gone: bool | None = None
) -> InputError:
    run_dir = Path(run_dir)
    who = describe(holder(run_dir))
    if found:
        pids = sorted(found)
        gone = not lock_path(run_dir).exists() if lock_gone is None else lock_gone
        gone_words = f"; its lock file {lock_path(run_dir)} is gone" if gone else ""
        who = (
            f"pid{'s' if len(pids) > 1 else ''} {', '.join(map(str, pids[:8]))}: {cmdline(pids[0])[:300]}; "
            f"found by its processes, MW_ENV_RUN_DIR in their environment{gone_words}"
        )
    return InputError(
        f"the run folder {run_dir} is in use by another trainer ({who})",
        hint=f"wait for it or stop it (`mw-env train stop --out-dir {sh(run_dir)}` for a detached run, Ctrl-C or "
        "SIGTERM for a foreground one), or train into another runtime.out_dir",
    )


def others(run_dir: Path, *, mine: str | None) -> dict[int, dict[str, str]]:
    """Live processes of another launch into `run_dir` than `mine` (a run id): a trainer there, whatever its
    lock file says. None on a node of a multi-node run (MW_ENV_NODE_RANK): its nodes share the folder, and
    rank 0's flock decides."""
    if os.environ.get("MW_ENV_NODE_RANK"):
        return {}
    return other_launches(Path(run_dir), mine=mine)


def acquire(run_dir: Path, *, argv: list[str] | None = None) -> RunLock:
    """Take the lock for this process; InputError naming the holder when another process has it."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = lock_path(run_dir)
    existed = os.path.lexists(path)
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
    found = others(run_dir, mine=os.environ.get(RUN_ID_ENV))
    if found:  # a live trainer whose lock file was deleted: the flock alone said "free"
        os.close(fd)
        raise refusal(run_dir, found, lock_gone=not existed)
    info = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "argv": list(argv if argv is not None else getattr(sys, "orig_argv", sys.argv)),
    }
    _write_info(fd, info)
    return RunLock(path=path, fd=fd, info=info)


def _write_info(fd: int, info: dict[str, object]) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)


def check_free(run_dir: Path, *, processes: bool = True) -> None:
    """Raise the refusal when a live trainer holds `run_dir`'s lock (naming the holder the lock file names), or
    (`processes`) lives there without it (its lock file deleted): probe only, nothing is kept. Before a launch
    every process of the folder is another's."""
    if _flock_held(run_dir):
        raise refusal(Path(run_dir))
    found = others(run_dir, mine=None) if processes else {}
    if found:
        raise refusal(Path(run_dir), found)


def in_use(run_dir: Path) -> bool:
    """A live trainer is in `run_dir`: its flock is held, or live processes of a launch into it are there (its lock
    file deleted). Probe only, nothing is kept; for readers of the folder (a checkpoint newer than its sidecar is
    being written only while a trainer is there)."""
    return _flock_held(run_dir) or bool(others(run_dir, mine=None))


def _entry_count(folder: Path) -> int | None:
    try:
        with os.scandir(folder) as entries:
            return sum(1 for _ in entries)
    except OSError:
        return None


def _flock_held(run_dir: Path) -> bool:
    path = lock_path(run_dir)
    if not path.exists():
        return False
    try:
        # O_NONBLOCK: a FIFO planted at the lock's name is opened at once, not waited on for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False  # unreadable: the trainer's own attempt will tell
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return False
