"""`mw-env train stop`: ask the trainer to stop, wait as long as stopping takes, and force only a hang.

SIGTERM makes the trainer finish its current step, checkpoint, write its report and manifest and
exit 0 (moving state.json through stopping -> finishing -> finished). How long that takes is known
from the run itself: the grace is computed from this run's measured step, checkpoint and eval times
(`stop_grace`), and each move of state.json towards the end buys the next phase its own allowance.
Only when the run is still there after that (a hung collective, a GPU hang, a trainer that ignores
SIGTERM) is everything of it SIGKILLed; then state.json says `killed` (and in which state), and
report/stop.md says what happened and which checkpoint is the last good one.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from mw_env.base.atomic import write_json_atomic, write_text_atomic
from mw_env.base.errors import InputError
from mw_env.rundir import contract as rd
from mw_env.rundir import runstate
from mw_env.rundir.contract import RUN_FILE, RUN_LOCK, checkpoints_dir, metrics_path
from mw_env.rundir.occupants import (
    cmdline,
    group_members,
    marked_processes,
    processes_of_folder,
    same_process_alive,
)
from mw_env.runs.anomalies import number
from mw_env.runs.liveness import SUPERVISOR, detached_processes
from mw_env.runs.runs import RunRecord, is_alive, read_run
from mw_env.runs.tail import recent_events

GRACE_FLOOR_S = 90.0  # never less than the old fixed grace: imports and a first step are not measured yet
REPORT_S = 60.0  # the report (figures) and the manifest (hashing every checkpoint) after the last checkpoint
STOP_REPORT = Path(rd.REPORT_DIR) / rd.STOP_NOTE


@dataclass(frozen=True)
class Grace:
    """How long a stop may take, and the measurements it comes from."""

    seconds: float
    step_s: float | None = None
    checkpoint_s: float | None = None
    eval_s: float | None = None
    overridden: bool = False

    @property
    def after_ack_s(self) -> float:
        """Allowance once the trainer said it is stopping: the checkpoint, an eval, the report."""
        return 2 * ((self.checkpoint_s or 0.0) + (self.eval_s or 0.0)) + REPORT_S

    def describe(self) -> str:
        if self.overridden:
            return f"{self.seconds:g}s (--grace)"
        parts = [
            f"{name} {value:.0f}s"
            for name, value in (
                ("step", self.step_s),
                ("checkpoint", self.checkpoint_s),
                ("eval", self.eval_s),
            )
            if value is not None
        ]
        measured = f"from the longest {', '.join(parts)}" if parts else "nothing measured yet"
        return f"{self.seconds:.0f}s ({measured}; --grace overrides)"


def stop_grace(events: Sequence[dict[str, Any]], *, override: float | None = None) -> Grace:
    """The grace for this run: two of its longest step (the stop is agreed at the end of a step, so a
    SIGTERM just after that point costs one more), twice its longest checkpoint and eval, and the report."""
    if override is not None:
        return Grace(seconds=float(override), overridden=True)
    step_s = max(
        (v for e in events if e.get("event") == "step" and (v := number(e.get("step_s")))), default=None
    )
    started: dict[Any, float] = {}
    ckpt_s = None
    step_times: dict[Any, float] = {}
    eval_s = None
    for e in events:
        t = number(e.get("time"))
        if t is None:
            continue
        kind = e.get("event")
        if kind == "step":
            step_times[e.get("step")] = t
        elif kind == "checkpoint" and e.get("phase") == "start":
            started[e.get("step")] = t
        elif kind == "checkpoint" and e.get("phase") == "done" and e.get("step") in started:
            ckpt_s = max(ckpt_s or 0.0, t - started[e.get("step")])
        elif kind == "eval" and e.get("step") in step_times:
            eval_s = max(eval_s or 0.0, t - step_times[e.get("step")])
    grace = Grace(seconds=0.0, step_s=step_s, checkpoint_s=ckpt_s, eval_s=eval_s)
    seconds = 2 * (step_s or 0.0) + grace.after_ack_s
    return replace(grace, seconds=max(GRACE_FLOOR_S, seconds))


@dataclass(frozen=True)
class StopResult:
    run_dir: Path
    was_running: bool
    escalated: bool = False  # SIGKILL was needed after the grace period
    waited_s: float = 0.0
    killed_pids: tuple[int, ...] = field(default_factory=tuple)
    grace: Grace | None = None
    last_good_checkpoint: str | None = None  # after a kill: the newest checkpoint whose sha256 checks out
    # No run.json: the processes found by their folder (MW_ENV_RUN_DIR) and stopped; `folder_kept`: only
    # run.json was gone (a detached run), the folder is the run's.
    orphans: tuple[int, ...] = ()
    folder_kept: bool = False

    def to_dict(self) -> dict[str, object]:
        return {
            "run_dir": str(self.run_dir),
            "was_running": self.was_running,
            "escalated": self.escalated,
            "waited_s": round(self.waited_s, 2),
            "killed_pids": list(self.killed_pids),
            "grace_s": round(self.grace.seconds, 1) if self.grace else None,
            "last_good_checkpoint": self.last_good_checkpoint,
            "orphans": list(self.orphans),
            "folder_kept": self.folder_kept,
        }


def stop_run(*, out_dir: Path, grace_s: float | None = None, poll_s: float = 0.2) -> StopResult:
    """SIGTERM the run and wait for it to finish its step, checkpoint and report; SIGKILL everything of
    it only if it is still there after the grace (`grace_s`, else computed from the run's events)."""
    out_dir = Path(out_dir).resolve()
    record = read_run(out_dir)
    if record is None:
        # No record: the run's processes, found by their folder (MW_ENV_RUN_DIR in their environment). Stopped
        # when the folder was deleted or replaced under them (`bare`), or when they are a detached run's
        # (`train start`) whose run.json is gone; a foreground run whose folder is intact stops with Ctrl-C.
        bare = not metrics_path(out_dir).exists() and runstate.read_state(out_dir) is None
        found = processes_of_folder(out_dir)
        if found and (bare or detached_processes(out_dir)):
            grace = stop_grace((), override=grace_s) if bare else _grace_of(out_dir, grace_s)
            return _stop_orphans(out_dir, found, grace, poll_s, record=not bare)
        running = (
            f" (a foreground run is training there: pid {', '.join(map(str, found[:8]))})" if found else ""
        )
        raise InputError(
            f"no detached run in {out_dir} (no {RUN_FILE}){running}",
            hint="runs started with `mw-env train start` can be stopped; a foreground run stops with Ctrl-C in "
            "its terminal (or SIGTERM to its `mw-env train`: the same graceful stop)",
        )
    grace = _grace_of(out_dir, grace_s)
    with runstate.flocked(out_dir / RUN_LOCK):
        if not is_alive(record):
            return StopResult(run_dir=out_dir, was_running=False)
        record = _with_stop(
            record, {"requested_at": time.time(), "escalated": False, "grace_s": grace.seconds}
        )
        # The supervisor forwards SIGTERM to the trainer; a trainer that lost its supervisor gets it directly.
        target = record.pid if same_process_alive(record.pid, record.start_ticks) else record.child_pid
        if not target or target <= 0:  # never 0 or negative: those address whole process groups
            return StopResult(run_dir=out_dir, was_running=False)
        try:
            os.kill(target, signal.SIGTERM)
        except ProcessLookupError:
            return StopResult(run_dir=out_dir, was_running=False)
        started = time.monotonic()
        if _wait(lambda: not is_alive(record) and _gone(record), out_dir, grace, poll_s):
            return StopResult(out_dir, was_running=True, waited_s=time.monotonic() - started, grace=grace)
        return _kill(record, grace, started, poll_s)


def _grace_of(out_dir: Path, grace_s: float | None) -> Grace:
    return stop_grace(recent_events(out_dir), override=grace_s)


def _wait(done: Callable[[], bool], state_of: Path | None, grace: Grace, poll_s: float) -> bool:
    """Up to the grace for `done()`; once the trainer acknowledged (state.json in `state_of` says stopping or
    finishing) its checkpoint and report get their own time."""
    deadline, seen = time.monotonic() + grace.seconds, None
    while time.monotonic() < deadline:
        if done():
            return True
        state = (runstate.read_state(state_of) or {}).get("state") if state_of is not None else None
        if state != seen and state in ("stopping", "finishing") and not grace.overridden:
            deadline, seen = max(deadline, time.monotonic() + grace.after_ack_s), state
        time.sleep(poll_s)
    return False


def _settle(done: Callable[[], bool], poll_s: float) -> None:
    """Up to 10 s after a SIGKILL: the processes gone, and the kernel has let go of the flock."""
    for _ in range(int(10 / max(poll_s, 0.01))):
        if done():
            return
        time.sleep(poll_s)


def _stop_orphans(out_dir: Path, pids: list[int], grace: Grace, poll_s: float, *, record: bool) -> StopResult:
    """A run with no record left but processes alive: SIGTERM it as `stop` does (its supervisor, which passes
    the stop on and records the end; else the trainer, or torchrun's workers), SIGKILL what is still there
    after the grace. `record`: the folder is the run's (only its run.json is gone), so a kill is recorded in
    state.json and report/stop.md as after any forced stop; otherwise nothing is written (the folder was
    deleted or replaced: it is not theirs any more)."""
    from mw_env.runs.foreground import stop_targets

    supervisors = [p for p in pids if SUPERVISOR in cmdline(p)]
    targets = supervisors or sorted(
        {t for p in pids for t in (stop_targets(p) if "torchrun" in cmdline(p) else [p])}
    )
    for pid in targets:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    started = time.monotonic()
    _wait(lambda: not processes_of_folder(out_dir), out_dir if record else None, grace, poll_s)
    left = processes_of_folder(out_dir)
    for pid in left:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    waited = time.monotonic() - started
    last_good = None
    if left and record:
        _settle(lambda: not processes_of_folder(out_dir), poll_s)
        last_good = record_kill(out_dir, grace=grace, waited_s=waited, killed=left)
    return StopResult(
        out_dir,
        was_running=True,
        escalated=bool(left),
        waited_s=waited,
        killed_pids=tuple(left),
        grace=grace,
        orphans=tuple(pids),
        last_good_checkpoint=last_good,
        folder_kept=record,
    )


def _kill(record: RunRecord, grace: Grace, started: float, poll_s: float) -> StopResult:
    # The group id is the supervisor's pid; it cannot be reused while the group has members. The workers
    # torchrun started (each in its own session) carry the run id: they are killed by pid, alike.
    members = tuple(_members(record))
    if group_members(record.pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(record.pid, signal.SIGKILL)
    for pid in marked_processes(record.run_id or ""):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    _with_stop(record, {**(record.stop or {}), "escalated": True, "killed": list(members)})
    _settle(lambda: _gone(record), poll_s)
    waited = time.monotonic() - started
    last_good = record_kill(record.run_dir, grace=grace, waited_s=waited, killed=members)
    return StopResult(
        record.run_dir,
        was_running=True,
        escalated=True,
        waited_s=waited,
        killed_pids=members,
        grace=grace,
        last_good_checkpoint=last_good,
    )


def last_good_checkpoint(run_dir: Path) -> Path | None:
    """The newest checkpoint whose sha256 matches its sidecar (written after the checkpoint was
    complete); without torch, so `stop` can name it after a kill."""
    from mw_env.rundir.contract import sha256_file

    folder = checkpoints_dir(run_dir)
    found = (
        sorted(p for p in folder.iterdir() if rd.CHECKPOINT_RE.fullmatch(p.name)) if folder.is_dir() else []
    )
    for path in reversed(found):
        with contextlib.suppress(OSError, IndexError):
            recorded = path.with_name(path.name + rd.SIDECAR_SUFFIX).read_text().split()[0].lower()
            if recorded == sha256_file(path):
                return path
    return None


def record_kill(run_dir: Path, *, grace: Grace, waited_s: float, killed: Sequence[int]) -> str | None:
    """After a SIGKILL: state.json `killed` and report/stop.md, both naming the last good checkpoint."""
    previous = runstate.read_state(run_dir) or {}
    during = str(previous.get("state") or "running")
    good = last_good_checkpoint(run_dir)
    rel = good.relative_to(run_dir).as_posix() if good else None
    runstate.set_state(
        run_dir,
        "killed",
        during=during,
        last_good_checkpoint=rel,
        grace_s=round(grace.seconds, 1),
        waited_s=round(waited_s, 1),
        killed_pids=list(killed),
        exit={"returncode": None, "signal": signal.SIGKILL, "oom_kills": 0, "time": time.time()},
    )
    stamp = time.strftime("%Y-%m-%d %H:%M:%S %z")
    resume = (
        f"The last good checkpoint is `{rel}` (its sha256 matches its sidecar): `mw-env train start` with the "
        "same config resumes there and writes the full report when it finishes."
        if rel
        else "No complete checkpoint was written: a new start begins at step 0."
    )
    text = (
        f"# Run stopped by force\n\n"
        f"{stamp}: `mw-env train stop` sent SIGTERM; the run was still {during} after "
        f"{waited_s:.0f} s (grace {grace.describe()}), so every process of it was killed with SIGKILL "
        f"(pids {', '.join(map(str, killed)) or 'none left'}).\n\n"
        f"The report and MANIFEST.sha256 of this attempt were not written (any there are from an earlier "
        f"finish). {resume}\n"
    )
    with contextlib.suppress(OSError):
        (Path(run_dir) / STOP_REPORT).parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(Path(run_dir) / STOP_REPORT, text)
    return rel


def _members(record: RunRecord) -> list[int]:
    """Every live process of the run: its supervisor's process group and each process with its run id."""
    return sorted(set(group_members(record.pid)) | set(marked_processes(record.run_id or "")))


def _gone(record: RunRecord) -> bool:
    """No process of the run is left and the run folder's lock is free: a `train start` right after the stop
    is not refused. A killed trainer shows in /proc until the kernel has torn down its memory (torch's
    gigabytes take a while on a loaded machine), and drops its flock only after that."""
    from mw_env.rundir import runlock

    if _members(record):
        return False
    try:
        runlock.check_free(record.run_dir)
    except InputError:
        return False
    return True


def _with_stop(record: RunRecord, stop: dict[str, Any]) -> RunRecord:
    updated = replace(record, stop=stop)
    write_json_atomic(record.run_dir / RUN_FILE, updated.to_dict())
    return updated
