"""`status` and `watch` of a training run: read its folder, never touch its process.

The run's own part of metrics.jsonl and train.log starts at the offsets run.json recorded at start,
so a traceback or a NaN from an earlier, restarted run in the same folder is not reported again.
A foreground run (no run.json) is read whole, and its liveness is unknown.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mw_env.base.errors import InputError
from mw_env.base.shellquote import sh
from mw_env.base.textsafe import safe_message
from mw_env.rundir import runstate
from mw_env.rundir.contract import LOG_FILE, METRICS_FILE
from mw_env.runs.anomalies import (
    INTERRUPTED,
    Anomaly,
    Liveness,
    Thresholds,
    analyze,
    exit_code_for,
    number,
)
from mw_env.runs.liveness import detached_processes, life_alive, orphan_run
from mw_env.runs.liveness import liveness as read_liveness
from mw_env.runs.logscan import LogScanner
from mw_env.runs.runs import RunRecord, read_run
from mw_env.runs.tail import MetricsTail, Tail

LOG_SCAN_MAX = 64 * 1024 * 1024  # a huge log is scanned from its last 64 MiB
RATE_WINDOW = 20  # step events used for steps/s and the ETA
WATCH_EVENTS = {"step": "progress", "eval": "eval", "checkpoint": "checkpoint", "finished": "finished"}
# state.json moves that `watch` reports as events of their own (the run's end is `finished`, sent once
# the report and manifest are complete).
WATCH_STATES = ("stopping", "finishing", "killed")


@dataclass(frozen=True)
class Progress:
    step: int | None = None
    max_steps: int | None = None
    loss: float | None = None
    lr: float | None = None
    tokens_per_s: float | None = None
    steps_per_s: float | None = None
    eta_s: float | None = None
    last_checkpoint: dict[str, Any] | None = None
    last_eval: dict[str, Any] | None = None
    last_event_time: float | None = None

    def to_dict(self) -> dict[str, object]:
        return json_safe(dict(self.__dict__))


def json_safe(value: Any) -> Any:
    """NaN/inf as the strings "nan"/"inf"/"-inf": strict JSON has no literal for them."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def _finite(value: object) -> float | None:
    """A step, a count or a time: a finite number (Python's json reads NaN, Infinity and 1e400 too; a loss
    may be NaN, a step may not)."""
    found = number(value)
    return found if found is not None and math.isfinite(found) else None


def compute_progress(events: Sequence[dict[str, Any]], *, max_steps: int | None) -> Progress:
    """Latest step, loss, lr, tokens/s; steps/s over the last few steps; ETA when max_steps is known."""
    steps = [e for e in events if e.get("event") == "step"]
    if not steps:
        return Progress(max_steps=max_steps, **_last_markers(events))
    last = steps[-1]
    max_steps = max_steps or (int(last["max_steps"]) if _finite(last.get("max_steps")) else None)
    rate = None
    recent = [
        e
        for e in steps[-RATE_WINDOW:]
        if _finite(e.get("time")) is not None and _finite(e.get("step")) is not None
    ]
    if len(recent) >= 2 and recent[-1]["time"] > recent[0]["time"]:
        rate = (recent[-1]["step"] - recent[0]["step"]) / (recent[-1]["time"] - recent[0]["time"])
    step = int(last["step"]) if _finite(last.get("step")) is not None else None
    eta = None
    if rate and rate > 0 and max_steps is not None and step is not None:
        eta = max(0.0, (max_steps - step) / rate)
    loss = number(last.get("loss"))
    return Progress(
        step=step,
        max_steps=max_steps,
        loss=loss,
        lr=number(last.get("lr")),
        tokens_per_s=number(last.get("tokens_per_s")),
        steps_per_s=rate,
        eta_s=eta,
        **_last_markers(events),
    )


def _last_markers(events: Sequence[dict[str, Any]]) -> dict[str, Any]:
    checkpoints = [e for e in events if e.get("event") == "checkpoint" and e.get("phase", "done") == "done"]
    evals = [e for e in events if e.get("event") == "eval"]
    times = [e["time"] for e in events if _finite(e.get("time")) is not None]
    return {
        "last_checkpoint": {k: checkpoints[-1].get(k) for k in ("step", "path", "time")}
        if checkpoints
        else None,
        "last_eval": {k: v for k, v in evals[-1].items() if k != "event"} if evals else None,
        "last_event_time": max(times) if times else None,
    }


@dataclass(frozen=True)
class RunStatus:
    run_dir: Path
    # starting | running | stopping | finishing | finished | stopped | interrupted | failed | killed | dead
    # | unknown
    state: str
    alive: bool | None
    pid: int | None
    child_pid: int | None
    started_at: float | None
    log_file: Path
    progress: Progress
    anomalies: tuple[Anomaly, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)
    # A detached run whose run.json is gone: its live processes (found by their environment), else empty.
    detached_pids: tuple[int, ...] = ()

    @property
    def exit_code(self) -> int:
        return exit_code_for(self.anomalies)

    def to_dict(self) -> dict[str, object]:
        return {
            "run_dir": str(self.run_dir),
            "state": self.state,
            "alive": self.alive,
            "pid": self.pid,
            "child_pid": self.child_pid,
            "started_at": self.started_at,
            "log_file": str(self.log_file),
            "progress": self.progress.to_dict(),
            "anomalies": [a.to_dict() for a in self.anomalies],
            "exit_code": self.exit_code,
            "notes": list(self.notes),
            "detached_pids": list(self.detached_pids),
        }


def _state(
    events: Sequence[dict[str, Any]],
    liveness: Liveness,
    record: RunRecord | None,
    life: dict[str, Any] | None,
) -> str:
    """The run's state: state.json's where the trainer moved it on, else what the events say."""
    life = life or {}
    current = life.get("state")
    if current == "finished":
        return {"stopped": "stopped", "nonfinite": "failed"}.get(str(life.get("reason")), "finished")
    if current == "killed":
        return "killed"
    if current in ("stopping", "finishing") and life_alive(life, liveness):
        return str(current)
    finished = [e for e in events if e.get("event") == "finished"]
    # Ended while writing its report: the supervisor saw it exit then (detached), or state.json still says
    # `finishing` and its writer is gone (a foreground run whose report hit a full disk): not finished.
    died_finishing = current == "finishing" or (current == "exited" and life.get("during") == "finishing")
    if finished and not died_finishing:
        reason = finished[-1].get("reason")
        return {"stopped": "stopped", "nonfinite": "failed"}.get(str(reason), "finished")
    alive = liveness.alive
    if alive is None and current in ("running", "stopping", "finishing"):
        alive = life_alive(life, liveness)  # a foreground run: its trainer's pid, from state.json
    if alive:
        return "running" if any(e.get("event") == "step" for e in events) else "starting"
    if alive is False:
        if current == "exited" and liveness.exit_recorded and liveness.returncode == INTERRUPTED:
            return "interrupted"  # a foreground run's Ctrl-C, recorded by the trainer itself
        return "stopped" if record and record.stop and not finished else "dead"
    return "unknown"


def _life_notes(state: str, life: dict[str, Any] | None) -> list[str]:
    """What state.json adds that the state word cannot say."""
    if not life:
        return []
    if state == "finishing":
        return ["the loop has ended; the report and MANIFEST.sha256 are being written (not verifiable yet)"]
    if state == "killed":
        return [
            f"killed by `mw-env train stop` while {(life or {}).get('during', 'running')}, after its grace of "
            f"{life.get('grace_s')}s: no report or manifest for this attempt (report/stop.md says what "
            f"happened); last good checkpoint: {life.get('last_good_checkpoint') or 'none'}"
        ]
    if state == "interrupted":
        return ["interrupted (Ctrl-C): the same command resumes from the newest checkpoint"]
    if state != "finishing" and (
        life.get("state") == "finishing"
        or (life.get("state") == "exited" and life.get("during") == "finishing")
    ):
        error = life.get("error")
        said = f" (it reported: {safe_message(error)})" if isinstance(error, str) and error else ""
        return [
            f"the trainer ended while writing its report{said}: report/ and MANIFEST.sha256 may be incomplete; "
            "`mw-env train start` with the same config writes them"
        ]
    return []


def _last_output(paths: Sequence[Path], started_at: float | None) -> float | None:
    times = [started_at] if started_at else []
    for path in paths:
        with contextlib.suppress(OSError):
            times.append(path.stat().st_mtime)
    return max(times) if times else None


class RunWatcher:
    """Reads a run folder incrementally; `poll()` returns the new watch events since the last call."""

    def __init__(
        self,
        *,
        out_dir: Path,
        thresholds: Thresholds | None = None,
        clock: Callable[[], float] = time.time,
        replay: bool = True,
    ) -> None:
        self.out_dir = Path(out_dir).resolve()
        self.record = read_run(self.out_dir)
        metrics_path = self.out_dir / METRICS_FILE
        log_path = self.record.log_file if self.record else self.out_dir / LOG_FILE
        bare = self.record is None and not metrics_path.exists() and not log_path.exists()
        # A trainer that stopped on an error before its first event (bad data found at the start) still left
        # its own words in state.json: that is a run to report, not "no run".
        if bare and runstate.read_state(self.out_dir) is None:
            from mw_env.rundir.runlock import check_free, describe, holder

            try:
                check_free(self.out_dir, processes=False)  # the flock: processes alone are orphan_run's
            except InputError:  # a live trainer holds the folder: a run starting, not "no run"
                raise InputError(
                    f"a trainer is starting in {self.out_dir} ({describe(holder(self.out_dir))}); it has not "
                    f"logged its first event to {METRICS_FILE} yet",
                    hint="run the same status command again in a moment (a foreground run prints its progress in "
                    "its own terminal)",
                ) from None
            orphan_run(self.out_dir)
            raise InputError(
                f"no training run in {self.out_dir}: no run.json, {METRICS_FILE} or {LOG_FILE}",
                hint="pass the run's --out-dir (runtime.out_dir of its config)",
            )
        self.thresholds = thresholds or Thresholds()
        self.clock = clock
        self.log_path, self.metrics_path = log_path, metrics_path
        self.history = MetricsTail(Tail(metrics_path, root=self.out_dir))  # everything, for progress
        read = self.history.read_events()
        self.all_events: list[dict[str, Any]] = [event for _, event in read]
        seg_start = self.record.metrics_offset if self.record else 0
        # A file shorter than the recorded offset, or another file (--fresh moved the old one
        # aside), was written since the start: all of it is this run's.
        if self.history.tail.offset < seg_start or self._replaced(metrics_path):
            seg_start = 0
        self.segment = [event for offset, event in read if offset >= seg_start]
        self.scanner = LogScanner()
        self.log_tail = Tail(
            log_path,
            offset=self.record.log_offset if self.record else 0,
            limit=LOG_SCAN_MAX,
            root=self.out_dir,
        )
        self.scanner.feed(self.log_tail.read_lines())
        self._pending = [*self.segment] if replay else []
        self._seen: set[tuple[str, str]] = set()
        self._recent: deque[dict[str, Any]] = deque(maxlen=RATE_WINDOW)
        self.done = False
        self.anomalies: tuple[Anomaly, ...] = ()
        self.life: dict[str, Any] | None = None
        self._held: list[dict[str, Any]] = []  # `finished` events, sent when the run really is finished
        self._said: set[str] = set()

    def _replaced(self, path: Path) -> bool:
        if self.record is None or self.record.metrics_inode is None:
            return False
        try:
            return path.stat().st_ino != self.record.metrics_inode
        except OSError:
            return False

    def snapshot(self) -> RunStatus:
        """The run's status now: liveness, then whatever was written up to then, then the anomalies."""
        liveness, _ = self._refresh()
        notes = []
        if self.history.bad_lines:
            notes.append(f"{self.history.bad_lines} line(s) of {METRICS_FILE} are not JSON events (ignored)")
        for tail in (self.history.tail, self.log_tail):
            if tail.outside:
                notes.append(
                    f"{tail.path} leads out of the run folder (not read: run-folder data names its own files)"
                )
        if self.log_tail.skipped_bytes:
            notes.append(f"only the last {LOG_SCAN_MAX // 2**20} MiB of {self.log_path.name} were scanned")
        max_steps = self.record.max_steps if self.record else None
        state = _state(self.segment, liveness, self.record, self.life)
        notes = _life_notes(state, self.life) + notes
        detached = tuple(detached_processes(self.out_dir)) if self.record is None else ()
        if detached:
            notes.insert(
                0,
                f"run.json is gone, but this is a detached run (`train start`): its processes {', '.join(map(str, detached))} "
                f"are alive (found by their environment); `mw-env train stop --out-dir {sh(self.out_dir)}` stops it",
            )
        return RunStatus(
            run_dir=self.out_dir,
            state=state,
            alive=liveness.alive,
            pid=self.record.pid if self.record else None,
            child_pid=self.record.child_pid if self.record else None,
            started_at=self.record.started_at if self.record else None,
            log_file=self.log_path,
            progress=compute_progress(self.all_events, max_steps=max_steps),
            anomalies=self.anomalies,
            notes=tuple(notes),
            detached_pids=detached,
        )

    def _refresh(self) -> tuple[Liveness, list[dict[str, Any]]]:
        # Liveness first, then the files: a process seen dead has flushed everything it wrote,
        # so its `finished` event cannot be missed and taken for a vanished run.
        liveness = read_liveness(self.record, self.out_dir)
        self.life = runstate.read_state(self.out_dir)
        new = [event for _, event in self.history.read_events()]
        self.all_events += new
        self.segment += new
        self.scanner.feed(self.log_tail.read_lines())
        self._analyze(liveness)
        return liveness, new

    def _analyze(self, liveness: Liveness) -> None:
        self.anomalies = analyze(
            events=self.segment,
            log_findings=self.scanner.findings,
            liveness=liveness,
            last_output=_last_output(
                [self.metrics_path, self.log_path], self.record.started_at if self.record else None
            ),
            now=self.clock(),
            thresholds=self.thresholds,
            log_name=self.log_path.name,
        )

    def poll(self) -> list[dict[str, Any]]:
        """New events: metrics events as watch events, state moves, then anomalies not reported before.

        The trainer's `finished` event is held back until state.json says `finished` (the report and
        manifest are complete) or the process is gone: a monitor acting on it finds a verifiable run."""
        liveness, new = self._refresh()
        out: list[dict[str, Any]] = []
        max_steps = self.record.max_steps if self.record else None
        for event in [*self._pending, *new]:
            kind = WATCH_EVENTS.get(str(event.get("event")))
            if kind is None:
                continue
            item = {**event, "event": kind}
            if kind == "progress":
                self._recent.append(event)
                eta = compute_progress(list(self._recent), max_steps=max_steps).eta_s
                if eta is not None:
                    item["eta_s"] = round(eta, 1)
            if kind == "finished":
                self._held.append(item)
                continue
            out.append(json_safe(item))
        self._pending = []
        life = self.life or {}
        current = str(life.get("state"))
        if current in WATCH_STATES and current not in self._said:
            self._said.add(current)
            keys = ("step", "reason", "last_checkpoint", "during", "last_good_checkpoint")
            facts = {k: life[k] for k in keys if k in life}
            out.append(json_safe({"event": current, **facts, "time": life.get("time")}))
        gone = liveness.alive is False or (liveness.alive is None and not life_alive(life, liveness))
        if self._held and (current == "finished" or gone or not life):
            # Finished with its report and manifest, or (the process gone before that) said to be incomplete.
            extra = (
                {k: life.get(k) for k in ("report", "manifest")}
                if current == "finished"
                else {"complete": False}
                if life
                else {}
            )
            out += [
                json_safe({**item, **{k: v for k, v in extra.items() if v is not None}})
                for item in self._held
            ]
            self._held = []
            self.done = True
        for anomaly in self.anomalies:
            key = (anomaly.kind, anomaly.evidence)
            if key not in self._seen:
                self._seen.add(key)
                out.append(json_safe({"event": "anomaly", "time": self.clock(), **anomaly.to_dict()}))
        if liveness.alive is False or current in ("finished", "killed"):
            self.done = True
        return out

    @property
    def exit_code(self) -> int:
        return exit_code_for(self.anomalies)

    def events(
        self, *, poll_s: float = 1.0, sleep: Callable[[float], None] = time.sleep
    ) -> Iterator[dict[str, Any]]:
        """Yield watch events until the run has finished or its process is gone."""
        while True:
            yield from self.poll()
            if self.done:
                return
            sleep(poll_s)


def run_status(
    *, out_dir: Path, thresholds: Thresholds | None = None, clock: Callable[[], float] = time.time
) -> RunStatus:
    """Progress and anomalies of the run in `out_dir`. Reads files and /proc only."""
    return RunWatcher(out_dir=out_dir, thresholds=thresholds, clock=clock).snapshot()
