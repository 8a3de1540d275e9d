"""Detached training runs: start one in its own session under a supervisor (supervise.py) and know
whether it is still the same process (stopping one: stop.py). run.json says who the run is; state.json
(runstate.py) where it is in its life and how it ended.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shlex
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mw_env.base.atomic import open_regular, write_json_atomic
from mw_env.base.errors import InputError, StepFailed, os_fault
from mw_env.base.shellquote import sh
from mw_env.rundir import runstate
from mw_env.rundir.contract import LOG_FILE, METRICS_FILE, RUN_FILE, RUN_LOCK
from mw_env.rundir.occupants import DETACHED_ENV, RUN_DIR_ENV, RUN_ID_ENV, proc_stat, same_process_alive
from mw_env.runs.logscan import RUN_HEADER

SPAWN_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class RunRecord:
    """run.json: who the detached run is and where its output goes."""

    run_dir: Path
    pid: int  # the supervisor: session and process-group leader
    start_ticks: int  # /proc/<pid>/stat field 22, so a reused pid is never taken for the run
    argv: tuple[str, ...]
    log_file: Path
    started_at: float
    child_pid: int | None = None  # the trainer itself (for py-spy and friends)
    child_start_ticks: int | None = None
    metrics_offset: int = 0  # metrics.jsonl / train.log sizes at start: this run's part begins there
    log_offset: int = 0
    max_steps: int | None = None
    cwd: str | None = None
    stop: dict[str, Any] | None = None  # set by `stop`: requested_at, escalated
    # metrics.jsonl's inode at start: a different file later (--fresh moves the old one aside)
    # is wholly this run's, whatever its size.
    metrics_inode: int | None = None
    run_id: str | None = None  # MW_ENV_RUN_ID in the environment of each of the run's processes
    # The memory the run was estimated to need (bytes, runs/fit.py) and what lowers it: an OOM kill's hint.
    memory_need: int | None = None
    memory_lower: str = ""

    def to_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["run_dir"], data["log_file"], data["argv"] = (
            str(self.run_dir),
            str(self.log_file),
            list(self.argv),
        )
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, run_dir: Path) -> RunRecord:
        where = run_dir / RUN_FILE
        try:
            return cls(
                run_dir=run_dir,
                pid=int(data["pid"]),
                start_ticks=int(data["start_ticks"]),
                argv=tuple(str(a) for a in data["argv"]),
                log_file=Path(data.get("log_file") or run_dir / LOG_FILE),
                started_at=float(data["started_at"]),
                child_pid=int(data["child_pid"]) if data.get("child_pid") is not None else None,
                child_start_ticks=_int_or_none(data.get("child_start_ticks")),
                metrics_offset=int(data.get("metrics_offset", 0)),
                log_offset=int(data.get("log_offset", 0)),
                max_steps=int(data["max_steps"]) if data.get("max_steps") is not None else None,
                cwd=data.get("cwd"),
                stop=dict(data["stop"]) if data.get("stop") else None,
                metrics_inode=int(data["metrics_inode"]) if data.get("metrics_inode") is not None else None,
                run_id=str(data["run_id"]) if data.get("run_id") else None,
                memory_need=_int_or_none(data.get("memory_need")),
                memory_lower=str(data.get("memory_lower") or ""),
            )
        except (KeyError, TypeError, ValueError, OverflowError) as exc:  # int(1e400): OverflowError
            raise InputError(
                f"{where} is not a valid run record ({exc.__class__.__name__}: {exc})",
                hint="it needs pid, start_ticks, argv and started_at; delete it if no run is alive there",
            ) from exc


def _int_or_none(value: Any) -> int | None:
    return int(value) if value is not None else None


@dataclass(frozen=True)
class ExitRecord:
    """state.json once the supervisor saw the trainer end."""

    returncode: int | None
    signal: int | None
    oom_kills: int
    time: float


# ---------------------------------------------------------------------------------------------
# Processes


def is_alive(record: RunRecord) -> bool:
    """The run's supervisor is running, or the trainer outlived it (killed alone: the run goes on,
    unsupervised), and the trainer has not been seen to end.

    The supervisor writes the exit record just before it exits itself: once the record is there
    the run is over, whatever the supervisor's last milliseconds look like.
    """
    if read_exit(record.run_dir) is not None:
        return False
    if same_process_alive(record.pid, record.start_ticks):
        return True
    child, ticks = record.child_pid, record.child_start_ticks
    return child is not None and ticks is not None and same_process_alive(child, ticks)


# ---------------------------------------------------------------------------------------------
# Files


def read_run(out_dir: Path) -> RunRecord | None:
    """The run record in `out_dir`, None when there is none; InputError when it is unreadable."""
    from mw_env.base import userfile, userjson

    path = Path(out_dir) / RUN_FILE
    if not os.path.lexists(path):
        return None
    try:  # bounded and non-blocking: a FIFO or a binary file here is an error, not a hang
        data = userjson.load_json(userfile.read_text(path, what="run record"), source="the run record")
    except (InputError, ValueError, RecursionError) as exc:
        why = exc.message if isinstance(exc, InputError) else str(exc)
        raise InputError(f"cannot read {path}: {why}", hint="delete it if no run is alive there") from None
    if not isinstance(data, dict):
        raise InputError(f"{path} holds {type(data).__name__}, not a JSON object", hint="delete it")
    return RunRecord.from_dict(data, run_dir=Path(out_dir))


def read_exit(out_dir: Path) -> ExitRecord | None:
    """How the trainer process ended (state.json's `exit`), None while it has not been seen to end."""
    data = runstate.exit_facts(runstate.read_state(Path(out_dir)))
    if data is None:
        return None
    try:
        return ExitRecord(
            returncode=data.get("returncode"),
            signal=data.get("signal"),
            oom_kills=int(data.get("oom_kills") or 0),
            time=float(data.get("time") or 0.0),
        )
    except (ValueError, TypeError, OverflowError):  # a NaN or 1e400 where a count belongs
        return None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


# ---------------------------------------------------------------------------------------------
# start


def start_run(
    *,
    argv: Sequence[str],
    env: Mapping[str, str],
    out_dir: Path,
    cwd: Path | None = None,
    max_steps: int | None = None,
    memory_need: int | None = None,
    memory_lower: str = "",
) -> RunRecord:
    """Start `argv` detached (new session) with stdout+stderr appended to <out_dir>/train.log."""
    if not argv:
        raise InputError("nothing to run: the trainer command line is empty")
    out_dir = Path(out_dir).resolve()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(
            f"cannot create the run folder {out_dir}: {exc}", hint="choose a writable --out-dir"
        ) from exc
    # Start and stop one at a time in a folder: two `start`s cannot both see "no live run".
    with runstate.flocked(out_dir / RUN_LOCK):
        old = read_run(out_dir)
        if old is not None and is_alive(old):
            raise InputError(
                f"a run is already alive in {out_dir} (pid {old.pid}, started "
                f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(old.started_at))})",
                hint=f"`mw-env train status --out-dir {sh(out_dir)}`; stop it with `mw-env train stop --out-dir "
                f"{sh(out_dir)}`, or start into another folder",
            )
        runstate.clear(out_dir)  # the previous run's ending is not this run's
        log_file = out_dir / LOG_FILE
        metrics_offset, log_offset = _size(out_dir / METRICS_FILE), _size(log_file)
        try:
            metrics_inode: int | None = (out_dir / METRICS_FILE).stat().st_ino
        except OSError:
            metrics_inode = None
        # Detached: said in the environment of the supervisor and the trainer, so the run is known for one by
        # its processes even when run.json is gone (`train stop`, `train status`: rundir/occupants.py).
        env = {**env, DETACHED_ENV: "1"}
        spec = {
            "argv": list(argv),
            "env": dict(env),
            "cwd": str(cwd) if cwd else None,
            "run_dir": str(out_dir),
        }
        report_r, report_w = os.pipe()
        super_env = dict(os.environ)
        # The supervisor must import mw_env whatever the trainer's env (PYTHONPATH etc.) says.
        pkg_root = str(Path(__file__).resolve().parents[2])
        super_env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, os.environ.get("PYTHONPATH")) if p)
        super_env.update({k: env[k] for k in (RUN_ID_ENV, RUN_DIR_ENV, DETACHED_ENV) if k in env})
        with os.fdopen(open_regular(log_file), "ab") as log:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S %z")
            # One line, whatever argv holds (a `-c` program would otherwise plant fake log lines).
            command = shlex.join(argv).replace("\r", "\\r").replace("\n", "\\n")
            log.write(f"{RUN_HEADER}{stamp}: {command[:2000]}\n".encode())
            log.flush()
            log_offset = log.tell()  # the run's own output starts after our header line
            try:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "mw_env.runs.supervise", str(report_w)],
                    stdin=subprocess.PIPE,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=super_env,
                    cwd=str(cwd) if cwd else None,
                    start_new_session=True,  # no controlling terminal: a closed shell cannot SIGHUP it
                    pass_fds=(report_w,),
                )
            finally:
                os.close(report_w)
        # Our child: its /proc entry stays (as a zombie at worst) until we reap it.
        stat = proc_stat(proc.pid)
        start_ticks = stat.start_ticks if stat else None
        try:
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(spec).encode())
            proc.stdin.close()
            report = _read_report(report_r, proc)
        finally:
            os.close(report_r)
        child_pid = report.get("child_pid")
        child_stat = proc_stat(child_pid) if isinstance(child_pid, int) else None
        child_ticks = child_stat.start_ticks if child_stat else None
        if "error" in report or start_ticks is None:
            raise StepFailed(
                f"the trainer could not be started: {report.get('error', 'the supervisor vanished')}",
                hint=f"see {log_file}",
            )
        record = RunRecord(
            run_dir=out_dir,
            pid=proc.pid,
            start_ticks=start_ticks,
            argv=tuple(argv),
            log_file=log_file,
            started_at=time.time(),
            child_pid=child_pid,
            child_start_ticks=child_ticks,
            metrics_offset=metrics_offset,
            log_offset=log_offset,
            max_steps=max_steps,
            cwd=str(cwd) if cwd else None,
            metrics_inode=metrics_inode,
            run_id=env.get(RUN_ID_ENV) or None,
            memory_need=memory_need,
            memory_lower=memory_lower,
        )
        try:
            write_json_atomic(out_dir / RUN_FILE, record.to_dict())
        except OSError as exc:
            # Without run.json nobody can find, stop or judge the run: end it (it is still starting, so
            # nothing is lost) rather than say "failed" while it trains on unseen.
            _abandon(proc, out_dir)
            err = os_fault(exc, "write", out_dir / RUN_FILE)
            raise StepFailed(
                err.message, hint=f"{err.hint} (the run was stopped while it started: nothing to keep)"
            ) from None
        return record


def _abandon(proc: subprocess.Popen[bytes], out_dir: Path) -> None:
    """End a just-started run: its supervisor's process group (the trainer or torchrun; torchrun's workers
    die with torchrun), then forget its state."""
    import signal

    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    with contextlib.suppress(OSError):
        runstate.clear(out_dir)


def _read_report(fd: int, proc: subprocess.Popen[bytes]) -> dict[str, Any]:
    """The supervisor's one-line report: {"child_pid": N} or {"error": "..."}."""
    buf = b""
    deadline = time.monotonic() + SPAWN_TIMEOUT_S
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            buf += chunk
            if b"\n" in buf:
                break
        elif proc.poll() is not None:
            break
    try:
        data = json.loads(buf.decode().strip() or "{}")
    except json.JSONDecodeError:
        data = {}
    if not data:
        return {"error": f"the supervisor exited with code {proc.poll()} before starting the trainer"}
    return data
