"""A run's lock is the venv as it is at launch (issue 30 #3).

The venv's own lock says what bootstrap installed; a later `pip install tqdm` is drift. A run launched in
a drifted venv must not carry that stale lock (its report's "rebuild with `bootstrap --lock RUN/...`" would
rebuild another venv): the run's lock is written from the venv now, with uv, as `mw-env lock` writes one,
and the drift is named in the console, the report and the data card. Torch-free: the launcher writes the
lock; the trainer (inside the venv) only reads the drift for its report (`venv_drift`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mw_env.venv.lock import LOCK_FILE

if TYPE_CHECKING:
    from mw_env.profiles.model import Selection


def venv_drift(venv: Path) -> list[str]:
    """What changed in `venv` since its lock was written (one line a package); [] without a readable lock."""
    from mw_env.base.errors import InputError
    from mw_env.venv.lock.drift import compare, installed
    from mw_env.venv.lock.lockfile import read_lock

    path = Path(venv) / LOCK_FILE
    if not path.is_file():
        return []
    try:
        lock = read_lock(path)
    except InputError:
        return []  # the doctor's venv.lock check says what is wrong with it
    return compare(lock, installed(Path(venv))).lines()


def drift_fact(venv: Path, run_lock_sha256: str | None) -> dict[str, object] | None:
    """The run's record of a drifted venv (the report's "Venv drift", the data card's `venv_drift`): the
    changes, and whether the run's lock holds them (written at launch) or is the venv's stale one."""
    changes = venv_drift(venv)
    if not changes:
        return None
    import hashlib

    own = hashlib.sha256((Path(venv) / LOCK_FILE).read_bytes()).hexdigest()
    held = run_lock_sha256 is not None and run_lock_sha256 != own
    return {
        "changes": changes,
        "run_lock": "written from the venv at launch: it holds these changes"
        if held
        else "the venv's own lock: it lacks these changes (`mw-env lock` writes the venv as it is)",
    }


@dataclass(frozen=True)
class LaunchLock:
    drift: tuple[str, ...] = ()  # the venv's changes since its own lock
    written: Path | None = None  # the run's lock, written from the venv as it is
    problem: str = ""  # why the run's lock is not the venv as it is

    def lines(self, *, drift_told: bool = False) -> list[str]:
        """What the console says before the run starts (nothing for a venv as locked). `drift_told`: the
        doctor's warning already listed the changes: each is said once per command (issue 40: a `train` in a
        drifted venv printed the list twice, and uv's whole error, before its first line)."""
        if not self.drift:
            return []
        out = [] if drift_told else [f"warning: the venv drifted from its lock: {'; '.join(self.drift)}"]
        if self.written is not None:
            out.append(
                f"the run's lock {self.written} was written from the venv as it is now (drift included)"
            )
        elif self.problem:
            out.append(f"warning: the run's lock is not the venv as it is: {self.problem}")
        return out


def lock_for_run(
    *, venv: Path, out_dir: Path, selection: Selection | None, env: Mapping[str, str]
) -> LaunchLock:
    """Write RUN/pylock.mw-env.toml from the venv when the venv drifted from its own lock (a run folder that
    has a lock keeps it: a resumed run carries the lock it started with, named as such)."""
    from mw_env.base.errors import MwEnvError
    from mw_env.venv.lock.make import lock_venv, write_lock

    drift = tuple(venv_drift(venv))
    if not drift:
        return LaunchLock()
    dst = Path(out_dir) / LOCK_FILE
    if dst.is_file():
        return LaunchLock(drift, problem=f"this run keeps the lock it started with ({dst})")
    try:
        lock = lock_venv(venv=venv, selection=selection, env=env)
    except MwEnvError as exc:
        from mw_env.base.shellquote import sh

        first = exc.message.split(": ", 1)[0]  # uv's whole cause is `mw-env lock`'s to say
        return LaunchLock(
            drift,
            problem=f"it could not be written ({first}: `mw-env lock --venv {sh(venv)}` says why); the run "
            "carries the venv's lock, without the drift",
        )
    dst.parent.mkdir(parents=True, exist_ok=True)
    return LaunchLock(drift, written=write_lock(lock, dst))
