"""Run a bootstrap plan: step by step under the venv lock, recording each step so a re-run resumes.

The executor never prints: it reports through an `Events` object (the command layer renders it).
A failing step stops the run with a result naming the step and the error; Ctrl-C marks the step
interrupted, leaves everything on disk, and re-raises. What a step does, and whether it may overlap the
steps after it, is its StepSpec's (provision/table.py): no step is known here by name.
"""

from __future__ import annotations

import dataclasses
import errno
import itertools
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mw_env.base.errors import MwEnvError, StepFailed, os_words
from mw_env.base.textsafe import redact
from mw_env.provision import keys
from mw_env.provision.events import DoctorHook, Events, NoEvents, Status, StepResult, StepWarning
from mw_env.provision.model import Plan, Step
from mw_env.provision.state import State, venv_lock
from mw_env.provision.steps import Run, recover_swap
from mw_env.provision.table import spec_of
from mw_env.provision.verifystep import BackgroundVerify
from mw_env.venv.record import VenvRecord, read_record

if TYPE_CHECKING:
    from mw_env.checks.model import DoctorReport


@dataclass(frozen=True)
class BootstrapResult:
    plan: Plan
    outcomes: tuple[StepResult, ...]
    ok: bool
    total_s: float
    torch_version: str | None = None
    error: MwEnvError | None = None
    failed_step: str | None = None
    doctor_report: DoctorReport | None = None
    record: VenvRecord | None = None
    changed: bool = False  # whether any step did work (False: a no-op re-run)

    def to_dict(self) -> dict[str, object]:
        return {
            "profile": self.plan.profile,
            "venv": str(self.plan.venv),
            "ok": self.ok,
            "torch": self.torch_version,
            "total_s": round(self.total_s, 3),
            "failed_step": self.failed_step,
            "error": redact(self.error.message) if self.error else None,
            "hint": redact(self.error.hint) if self.error and self.error.hint else None,
            "steps": [
                {
                    "id": o.id,
                    "status": o.status.value,
                    "duration_s": round(o.duration_s, 3),
                    "detail": redact(o.detail),
                }
                for o in self.outcomes
            ],
            "warnings": list(self.plan.warnings),
            "doctor": self.doctor_report.to_dict() if self.doctor_report is not None else None,
        }


def execute(
    plan: Plan,
    *,
    events: Events | None = None,
    doctor: DoctorHook | None = None,
    argv: list[str] | None = None,
) -> BootstrapResult:
    """Run the steps that are not done yet; return how each went. Raises only MwEnvError for the lock."""
    start = time.monotonic()
    plan.venv.parent.mkdir(parents=True, exist_ok=True)
    with venv_lock(plan.venv, argv=argv):
        recover_swap(plan.venv)
        # Every action is idempotent, so a step another bootstrap finished between our planning and
        # our locking is merely redone (uv finds it satisfied).
        state = State.load(plan.build_venv)
        for step in plan.steps:  # what a step may begin now, on a core the first steps leave idle
            early = spec_of(step).early
            if early is not None and not step.done:
                early(plan)
        runner = _Runner(Run(plan=plan, state=state, events=events or NoEvents(), uv=plan.uv, doctor=doctor))
        try:
            for i, step in enumerate(plan.steps):
                failed = runner.step(step, plan.steps[i + 1 :])
                if failed is not None:
                    return runner.result(start, failed)
            failed = runner.join()
            if failed is not None:
                return runner.result(start, failed)
        finally:
            runner.stop()  # interrupted, or an unexpected error: leave no child behind
            from mw_env.sources import wheelhash

            wheelhash.stop()  # a hash begun for a lock step that did not come
        return runner.result(start, None)


@dataclass
class _Failure:
    step: Step
    error: MwEnvError


class _Runner:
    """The outcomes so far, and the one step whose background part may be running beside the next ones."""

    def __init__(self, run: Run) -> None:
        self.run, self.events, self.plan = run, run.events, run.plan  # run.plan moves with the venv
        self.outcomes: list[StepResult] = []
        self.changed = False
        self.pending: tuple[Step, BackgroundVerify, int] | None = None

    def step(self, step: Step, following: tuple[Step, ...]) -> _Failure | None:
        spec = spec_of(step)
        if step.done:
            self._finished(step, Status.SKIPPED, 0.0, "already done")
            return None
        if spec.overlap and step.command and _may_overlap(following):
            self.pending = (step, spec.overlap.start(self.run, step), len(self.outcomes))
            self.changed = True
            return None
        if not spec.beside:
            failed = self.join()
            if failed is not None:
                return failed
        self.events.step_started(step)
        t0 = time.monotonic()
        try:
            try:
                returned = spec.action(self.run, step)
            except OSError as exc:  # writing a file, renaming the venv: name the path and the cause
                raise _os_failure(step, exc) from exc
        except KeyboardInterrupt:
            self.run.state.mark(step.id, Status.INTERRUPTED.value)
            outcome = StepResult(id=step.id, status=Status.INTERRUPTED, duration_s=time.monotonic() - t0)
            self.events.step_finished(step, outcome)
            raise
        except MwEnvError as exc:
            # A wrong torch build (the background part's verdict) explains a failing step best.
            return self.join() or self._failed(step, exc, t0)
        self.changed = self.changed or spec.changes
        warned = isinstance(returned, StepWarning)
        detail = returned.message if isinstance(returned, StepWarning) else returned or ""
        self._finished(step, Status.WARN if warned else Status.DONE, time.monotonic() - t0, detail)
        return None

    def join(self) -> _Failure | None:
        """Wait for the background part, judge it, and report its step in its place in the plan's order."""
        if self.pending is None:
            return None
        step, bg, at = self.pending
        self.pending = None
        self.events.step_started(step)
        overlap = spec_of(step).overlap
        assert overlap is not None
        try:
            detail = overlap.finish(self.run, step, bg.output())
        except MwEnvError as exc:
            return self._failed(step, exc, bg.started, at)
        self._finished(step, Status.DONE, time.monotonic() - bg.started, detail, at)
        return None

    def stop(self) -> None:
        if self.pending is not None:
            self.pending[1].stop()

    def _finished(
        self, step: Step, status: Status, duration: float, detail: str, at: int | None = None
    ) -> None:
        outcome = StepResult(id=step.id, status=status, duration_s=duration, detail=detail)
        self.events.step_finished(step, outcome)
        self.outcomes.insert(len(self.outcomes) if at is None else at, outcome)

    def _failed(self, step: Step, exc: MwEnvError, t0: float, at: int | None = None) -> _Failure:
        outcome = StepResult(
            id=step.id,
            status=Status.FAILED,
            duration_s=time.monotonic() - t0,
            detail=exc.message,
            output_tail=_tail(self.run.outputs.get(step.id, "")),
        )
        self.events.step_finished(step, outcome)
        self.outcomes.insert(len(self.outcomes) if at is None else at, outcome)
        return _Failure(step, exc)

    def result(self, start: float, failed: _Failure | None) -> BootstrapResult:
        plan, run = self.plan, self.run
        return BootstrapResult(
            plan=plan,
            outcomes=tuple(self.outcomes),
            ok=failed is None,
            total_s=time.monotonic() - start,
            torch_version=keys.current_torch(_final(plan)),
            error=failed.error if failed else None,
            failed_step=failed.step.id if failed else None,
            doctor_report=run.doctor_report,
            record=read_record(plan.venv) if failed is None else None,
            changed=self.changed or failed is not None,
        )


def _may_overlap(following: tuple[Step, ...]) -> bool:
    """A step's background part may run beside the steps after it that allow it, all of them still to do."""
    beside = list(itertools.takewhile(lambda s: spec_of(s).beside, following))
    return bool(beside) and not any(s.done for s in beside)


def _final(plan: Plan) -> Plan:
    """The plan pointing at wherever the venv is now (a step that moves the venv may have run)."""
    moved = any(spec_of(s).moves_venv for s in plan.steps) and not plan.build_venv.exists()
    return dataclasses.replace(plan, build_venv=plan.venv) if moved else plan


def _os_failure(step: Step, exc: OSError) -> StepFailed:
    if exc.errno in (
        errno.ENOSPC,
        errno.EDQUOT,
    ):  # a full disk mid-step: the file and the fault, one sentence
        where = f" {exc.filename}" if exc.filename else ""
        return StepFailed(
            f"step {step.id}: cannot write{where}: {os_words(exc)}",
            hint="free space (or use --venv / UV_CACHE_DIR on a bigger disk), then run the same command again: "
            "finished steps are kept",
        )
    where = f" ({exc.filename})" if exc.filename else ""
    if exc.errno == errno.ENOSPC:
        hint = "the disk is full: free space (or use --venv / UV_CACHE_DIR on a bigger disk) and re-run"
    elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        hint = "no permission to write there: fix the ownership/mount, or pass another --venv"
    else:
        hint = "fix the cause and re-run `mw-env bootstrap`; finished steps are kept"
    return StepFailed(f"step {step.id}: {exc.strerror or exc}{where}", hint=hint)


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])
