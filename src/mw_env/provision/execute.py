"""Run a bootstrap plan: step by step under the venv lock, recording each step so a re-run resumes.

The executor never prints: it reports through an `Events` object (the command layer renders it).
A failing step stops the run with a result naming the step and the error; Ctrl-C marks the step
interrupted, leaves everything on disk, and re-raises.
"""

from __future__ import annotations

import dataclasses
import errno
import time
from dataclasses import dataclass
from typing import Any

from mw_env.errors import MwEnvError, StepFailed
from mw_env.provision import stepdefs
from mw_env.provision.events import DoctorHook, Events, NoEvents, StepOutcome, StepWarning
from mw_env.provision.model import Plan, Step
from mw_env.provision.record import VenvRecord, read_record
from mw_env.provision.state import State, venv_lock
from mw_env.provision.steps import HANDLERS, BackgroundVerify, Run, recover_swap, verify_after_extras
from mw_env.textsafe import redact


@dataclass(frozen=True)
class BootstrapResult:
    plan: Plan
    outcomes: tuple[StepOutcome, ...]
    ok: bool
    total_s: float
    torch_version: str | None = None
    error: MwEnvError | None = None
    failed_step: str | None = None
    doctor_report: Any = None
    record: VenvRecord | None = None
    changed: bool = False  # whether any step did work (False: a no-op re-run)

    def to_dict(self) -> dict[str, Any]:
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
                    "status": o.status,
                    "duration_s": round(o.duration_s, 3),
                    "detail": redact(o.detail),
                }
                for o in self.outcomes
            ],
            "warnings": list(self.plan.warnings),
            "doctor": self.doctor_report.to_dict() if hasattr(self.doctor_report, "to_dict") else None,
        }


def execute(
    plan: Plan,
    *,
    events: Events | None = None,
    doctor: DoctorHook | None = None,
    argv: list[str] | None = None,
) -> BootstrapResult:
    """Run the steps that are not done yet; return how each went. Raises only MwEnvError for the lock."""
    events = events or NoEvents()
    start = time.monotonic()
    outcomes: list[StepOutcome] = []
    plan.venv.parent.mkdir(parents=True, exist_ok=True)
    with venv_lock(plan.venv, argv=argv):
        recover_swap(plan.venv)
        # Every handler is idempotent, so a step another bootstrap finished between our planning and
        # our locking is merely redone (uv finds it satisfied).
        run = Run(plan=plan, state=State.load(plan.build_venv), events=events, uv=plan.uv, doctor=doctor)
        changed = False
        # The verify step's build check overlaps the pin and the extras install (see BackgroundVerify); its
        # verdict (and an `import torch`, which must wait for the extras) comes before the env file and record.
        pending: tuple[Step, BackgroundVerify, int] | None = None

        def fail(step: Step, exc: MwEnvError, t0: float, at: int | None = None) -> BootstrapResult:
            outcome = StepOutcome(
                id=step.id,
                status="failed",
                duration_s=time.monotonic() - t0,
                detail=exc.message,
                output_tail=_tail(run.outputs.get(step.id, "")),
            )
            events.step_finished(step, outcome)
            outcomes.insert(len(outcomes) if at is None else at, outcome)
            return BootstrapResult(
                plan=plan,
                outcomes=tuple(outcomes),
                ok=False,
                total_s=time.monotonic() - start,
                torch_version=stepdefs.current_torch(_final(plan, step.id)),
                error=exc,
                failed_step=step.id,
                doctor_report=run.doctor_report,
                changed=True,
            )

        def join() -> BootstrapResult | None:
            nonlocal pending
            if pending is None:
                return None
            vstep, bg, at = pending
            pending = None
            events.step_started(vstep)
            try:
                detail = verify_after_extras(run, vstep, bg.output())
            except MwEnvError as exc:
                return fail(vstep, exc, bg.started, at)
            outcome = StepOutcome(
                id=vstep.id, status="done", duration_s=time.monotonic() - bg.started, detail=detail
            )
            events.step_finished(vstep, outcome)
            outcomes.insert(at, outcome)
            return None

        try:
            for i, step in enumerate(plan.steps):
                if step.done:
                    outcome = StepOutcome(id=step.id, status="skipped", detail="already done")
                    events.step_finished(step, outcome)
                    outcomes.append(outcome)
                    continue
                if step.id == "verify-torch" and _overlaps(plan.steps[i + 1 : i + 3]) and step.command:
                    pending = (step, BackgroundVerify(run, step), len(outcomes))
                    changed = True
                    continue
                if pending is not None and step.id not in ("pin-torch", "extras"):
                    failed = join()
                    if failed is not None:
                        return failed
                events.step_started(step)
                t0 = time.monotonic()
                try:
                    try:
                        returned = HANDLERS[step.id](run, step)
                    except OSError as exc:  # writing a file, renaming the venv: name the path and the cause
                        raise _os_failure(step, exc) from exc
                except KeyboardInterrupt:
                    run.state.mark(step.id, "interrupted")
                    interrupted = StepOutcome(
                        id=step.id, status="interrupted", duration_s=time.monotonic() - t0
                    )
                    events.step_finished(step, interrupted)
                    raise
                except MwEnvError as exc:
                    if pending is not None:
                        failed = join()  # a wrong torch build explains a failing extras install best
                        if failed is not None:
                            return failed
                    return fail(step, exc, t0)
                changed = changed or step.id != "preflight"
                warned = isinstance(returned, StepWarning)
                outcome = StepOutcome(
                    id=step.id,
                    status="warn" if warned else "done",
                    duration_s=time.monotonic() - t0,
                    detail=returned.message if isinstance(returned, StepWarning) else (returned or ""),
                )
                events.step_finished(step, outcome)
                outcomes.append(outcome)
            failed = join()
            if failed is not None:
                return failed
        finally:
            if pending is not None:  # interrupted, or an unexpected error: leave no child behind
                pending[1].stop()
        final = _final(plan, "doctor")
        return BootstrapResult(
            plan=plan,
            outcomes=tuple(outcomes),
            ok=True,
            total_s=time.monotonic() - start,
            torch_version=stepdefs.current_torch(final),
            doctor_report=run.doctor_report,
            record=read_record(plan.venv),
            changed=changed,
        )


def _overlaps(following: tuple[Step, ...]) -> bool:
    """Whether the verify step can run alongside the steps after it: the pin and the extras, both to do."""
    return [s.id for s in following] == ["pin-torch", "extras"] and not any(s.done for s in following)


def _final(plan: Plan, step_id: str) -> Plan:
    """The plan pointing at wherever the venv is after `step_id` (the swap moves it)."""
    swapped = any(s.id == "swap" for s in plan.steps) and not plan.build_venv.exists()
    return dataclasses.replace(plan, build_venv=plan.venv) if swapped else plan


def _os_failure(step: Step, exc: OSError) -> StepFailed:
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
