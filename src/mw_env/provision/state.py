"""Bootstrap state (which steps finished, for which inputs) and the per-venv lock."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat as stat_mod
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from mw_env.base import userfile
from mw_env.base.atomic import write_text_atomic as write_atomic
from mw_env.base.errors import InputError, MwEnvError, StepFailed, os_words
from mw_env.base.textsafe import redact
from mw_env.venv.record import STATE_FILE
from mw_env.venv.venvinfo import real_venv

__all__ = ["STATE_FILE", "State", "lock_path", "venv_lock"]


@dataclass
class State:
    """Per-step status kept in `<venv>/.mw-env-state.json`; written after every change, atomically.

    A step is recorded as "started" before it runs and "done" (with the key of its inputs) after, so a
    run killed in the middle leaves "started" behind and the next run redoes that step.
    """

    path: Path
    steps: dict[str, dict]

    @classmethod
    def load(cls, venv: Path) -> State:
        path = Path(venv) / STATE_FILE
        try:
            data = json.loads(userfile.read_text(path, what="bootstrap state")) if path.exists() else None
            steps = data.get("steps") if isinstance(data, dict) else None
        except (InputError, ValueError, RecursionError):
            steps = None  # missing, torn or not ours: every step re-checks itself
        return cls(path=path, steps=steps if isinstance(steps, dict) else {})

    def is_done(self, step: str, key: str) -> bool:
        entry = self.steps.get(step) or {}
        return entry.get("status") == "done" and entry.get("key") == key

    def was_started(self, step: str) -> bool:
        """Whether the step began and never finished (killed, interrupted, or its result was rejected)."""
        return (self.steps.get(step) or {}).get("status") in ("started", "interrupted")

    def mark(self, step: str, status: str, key: str = "", **extra: object) -> None:
        self.steps[step] = {"status": status, "key": key, "time": round(time.time(), 3), **extra}
        self.save()

    def save(self) -> None:
        if not self.path.parent.is_dir():
            return  # the venv does not exist yet (before the venv step)
        # Not durable (no fsync): a state lost in a power cut only makes the next run check its steps again
        # (load() takes a missing or torn file as "nothing done"), and each of bootstrap's dozen marks would
        # otherwise wait for the writeback of the gigabytes uv has just written.
        text = json.dumps({"steps": self.steps}, indent=2, sort_keys=True) + "\n"
        try:
            write_atomic(self.path, text, durable=False)
        except OSError as exc:  # a full disk between the steps is a sentence too, naming the file
            raise StepFailed(
                f"cannot record bootstrap's progress in {self.path}: {os_words(exc)}",
                hint="free space on that filesystem, then run the same command again: finished steps are kept",
            ) from exc


def lock_path(venv: Path) -> Path:
    """Beside the venv's own folder (a link's target), not inside it: it must exist before the venv does and
    survive a swap, and one venv has one lock whatever path leads to it (a symbolic link alias included)."""
    real = real_venv(venv)
    return real.parent / f".{real.name}.mw-env.lock"


@contextlib.contextmanager
def venv_lock(venv: Path, *, argv: list[str] | None = None) -> Iterator[Path]:
    """Hold an exclusive lock on `venv` for one bootstrap; a second one is refused, naming the holder.

    flock() is released by the kernel when the holder dies, so a killed bootstrap never leaves a
    stale lock; the file's text only says who holds it.
    """
    path = lock_path(venv)
    path.parent.mkdir(parents=True, exist_ok=True)
    # 0600: the holder's argv is only for its own user (an --torch-index may carry a token, redacted
    # anyway). fchmod fixes a lock file an older mw-env created 0644.
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), 0o600)
        if not stat_mod.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise IsADirectoryError(21, "not a regular file")
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):  # a full disk is said as the preflight would say it
            raise MwEnvError(
                f"cannot create the bootstrap lock {path}: {os_words(exc)}, so nothing can be installed there",
                hint=f"free space on the filesystem of {path.parent}, or pass --venv on a bigger disk",
            ) from None
        raise MwEnvError(
            f"cannot create the bootstrap lock {path}: {exc.strerror or exc}",
            hint=f"remove {path} if it is not a regular file, or check the permissions of {path.parent}",
        ) from None
    locked = False
    try:
        with contextlib.suppress(OSError):
            os.fchmod(fd, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(path)
            real = real_venv(venv)
            same = f" (the venv at {real}, which {venv} leads to)" if real != Path(venv).absolute() else ""
            raise MwEnvError(
                f"another bootstrap of {venv}{same} is running ({holder})",
                hint="wait for it to finish, or stop that process; the lock is released when it exits",
            ) from None
        locked = True
        info = {
            "pid": os.getpid(),
            "host": os.uname().nodename,  # gethostname(), without importing socket
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "argv": [redact(str(a)) for a in argv or []],
        }
        # Who holds it, for a second bootstrap's refusal; the flock is the lock. On a full disk (issue 40: a 2 MB
        # filesystem ended in "cannot use: the disk is full" naming nothing) the text is left out and the
        # preflight's disk check says what is wrong, with the figures.
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
        yield path
    finally:
        if locked:
            # Emptied, not removed: unlinking a flock()ed file lets a waiter lock the old inode while a
            # newcomer creates and locks a new one. An empty lock file says nobody holds it.
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
        os.close(fd)  # closing releases the flock


def _read_holder(path: Path) -> str:
    try:
        info = json.loads(userfile.read_text(path, what="lock file", max_bytes=1024 * 1024))
        return f"pid {info.get('pid')} on {info.get('host')}, started {info.get('started')}: " + " ".join(
            info.get("argv") or []
        )
    except (InputError, ValueError, RecursionError, AttributeError, TypeError):
        return "holder unknown"
