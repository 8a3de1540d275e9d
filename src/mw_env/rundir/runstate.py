"""state.json: the one record of where a run is in its life, written by whoever moves it on.

    running    the supervisor started the trainer                      (supervise.py)
    stopping   the trainer saw SIGTERM; it checkpoints after this step  (trainer, rank 0)
    finishing  the loop ended (`reason`): report and manifest being written  (trainer, rank 0)
    finished   report/ and MANIFEST.sha256 are complete; `reason` says why it ended (trainer, rank 0)
    exited     the trainer process ended without reaching `finished`    (supervise.py; the trainer itself
               when it stops on an error of its own: `error` and `hint` say it, as its log would)
    killed     `mw-env train stop` had to SIGKILL it after its grace     (runs/stop.py)

When the process ends, the supervisor adds `exit` ({returncode, signal, oom_kills, time}) and keeps
the state: a run that reached `finished` stays finished; any other becomes `exited`, with `during`
naming the state it died in (`finishing`: the report or manifest may be incomplete). `history`
lists every state with its time. A run is verifiable (`train verify`) only once it is `finished`:
MANIFEST.sha256 is the last file the trainer writes.

Every change is a read-modify-write under a lock (`.state.lock`), so the supervisor's "running" and
the trainer's first state cannot overwrite each other. Stdlib only: the supervisor runs this under
mw-env's interpreter, the trainer under the venv's.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mw_env.base.atomic import open_append, write_json_atomic
from mw_env.rundir.contract import STATE_FILE, STATE_LOCK

STATES = ("running", "stopping", "finishing", "finished", "exited", "killed")
READ_LIMIT = 1 << 20  # a state record is small; anything bigger is not one


def read_state(run_dir: Path) -> dict[str, object] | None:
    """The record, or None when there is none or it is not one (a FIFO, a foreign file, bad JSON)."""
    path = Path(run_dir) / STATE_FILE
    try:
        # O_NONBLOCK: a FIFO planted here must not hang `status`; a regular file ignores the flag.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        import stat

        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = json.loads(os.read(fd, READ_LIMIT).decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    finally:
        os.close(fd)
    return data if isinstance(data, dict) and isinstance(data.get("state"), str) else None


@contextlib.contextmanager
def flocked(path: Path) -> Iterator[None]:
    """An exclusive flock on `path` (made if missing) for the block: closing the file drops it."""
    with open_append(path) as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def set_state(run_dir: Path, state: str, **fields: object) -> dict[str, object]:
    """Move the run to `state` (with its facts), keeping child_pid, exit and the history."""
    if state not in STATES:
        raise ValueError(f"unknown run state {state!r}")
    run_dir = Path(run_dir)
    now = time.time()
    with flocked(run_dir / STATE_LOCK):
        old = read_state(run_dir) or {}
        # A new life ("running") starts without the previous one's exit facts.
        kept: dict[str, object] = {
            k: old[k] for k in ("child_pid", "exit") if k in old and not (k == "exit" and state == "running")
        }
        history = _history(old)
        record: dict[str, object] = {
            **kept,
            "state": state,
            **fields,
            "time": now,
            "history": [*history, [state, now]],
        }
        write_json_atomic(run_dir / STATE_FILE, record, default=str)
        return record


def record_exit(
    run_dir: Path, *, returncode: int | None, signal: int | None, oom_kills: int, child_pid: int | None
) -> dict[str, object]:
    """The supervisor saw the trainer end: keep `finished`, else `exited` (during the state it was in)."""
    run_dir = Path(run_dir)
    now = time.time()
    with flocked(run_dir / STATE_LOCK):
        old = read_state(run_dir) or {}
        was = str(old.get("state") or "running")
        state = was if was in ("finished", "killed") else "exited"
        exit_facts = {"returncode": returncode, "signal": signal, "oom_kills": oom_kills, "time": now}
        record = {**old, "state": state, "exit": exit_facts, "child_pid": child_pid}
        # Top-level copies: the record's shape before states had names (readers of older runs use them).
        record.update(returncode=returncode, signal=signal, oom_kills=oom_kills, time=now)
        if state == "exited" and was != "exited":  # the trainer recorded its own end first: its `during`
            record["during"] = was
        history = _history(old)
        if state != was:
            history.append([state, now])
        record["history"] = history
        write_json_atomic(run_dir / STATE_FILE, record, default=str)
        return record


def record_failure(
    run_dir: Path, *, returncode: int, error: str, hint: str | None, during: str, pid: int
) -> dict[str, object]:
    """The trainer ends on an error of its own (bad data, a full disk): `exited` with its words and code, so
    `train status` tells a foreground run (no train.log) as it tells a detached one. A supervisor's record
    of the same end, after this one, keeps them."""
    run_dir = Path(run_dir)
    now = time.time()
    with flocked(run_dir / STATE_LOCK):
        old = read_state(run_dir) or {}
        exit_facts = {"returncode": returncode, "signal": None, "oom_kills": 0, "time": now}
        record: dict[str, object] = {
            **{k: old[k] for k in ("child_pid",) if k in old},
            "state": "exited",
            "during": during,
            "pid": pid,
            "error": error,
            "hint": hint,
            "exit": exit_facts,
            "time": now,
            "history": [*_history(old), ["exited", now]],
        }
        write_json_atomic(run_dir / STATE_FILE, record, default=str)
        return record


def _history(record: dict[str, object]) -> list[list[object]]:
    """The record's last 50 [state, time] entries (a foreign or damaged `history` counts as none)."""
    history = record.get("history")
    return [h for h in history if isinstance(h, list)][-50:] if isinstance(history, list) else []


def exit_facts(record: dict[str, Any] | None) -> dict[str, Any] | None:
    """{returncode, signal, oom_kills, time} once the process is known to have ended, else None."""
    if not record:
        return None
    if isinstance(record.get("exit"), dict):
        return dict(record["exit"])
    if record.get("state") == "exited":  # the record as older supervisors wrote it
        return {k: record.get(k) for k in ("returncode", "signal", "oom_kills", "time")}
    return None


def clear(run_dir: Path) -> None:
    """A new start: the previous run's ending is not this run's."""
    with contextlib.suppress(FileNotFoundError):
        (Path(run_dir) / STATE_FILE).unlink()
