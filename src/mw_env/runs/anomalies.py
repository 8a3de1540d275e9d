"""What looks wrong with a training run: pure functions over its metrics events, log lines,
process liveness and a clock (injected, so tests can age a run without waiting).

Each kind has its own exit code for `mw-env train status` (documented in docs/runs.md). When a run
shows several, the most specific cause wins: an OOM also leaves a traceback and a dead process, and
the OOM is what the operator has to fix.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mw_env.base.textsafe import safe, safe_message
from mw_env.rundir.contract import LOG_FILE
from mw_env.runs.fit import oom_hint
from mw_env.runs.logscan import LogFinding
from mw_env.runs.procinfo import signal_name

INTERRUPTED = 130  # the trainer's exit code after a Ctrl-C (it records it in state.json)

# kind -> (exit code, short title). Dict order is the priority order for the exit code.
KINDS: dict[str, tuple[int, str]] = {
    "oom": (14, "out of memory (GPU allocator or the kernel's OOM killer)"),
    "gpu_fault": (15, "GPU fault (memory access fault, illegal access, HSA/HIP error)"),
    "comms": (16, "NCCL/RCCL collective timeout or communicator error"),
    "nonfinite": (10, "NaN/inf loss, or steps skipped as non-finite"),
    "divergence": (11, "loss far above its running minimum"),
    "traceback": (17, "Python traceback in the log"),
    "vanished": (12, "process gone without a finished event"),
    "stalled": (13, "no output for too long"),
}


def exit_code_for(anomalies: Sequence[Anomaly]) -> int:
    """0 when there is nothing wrong, else the code of the highest-priority kind present."""
    present = {a.kind for a in anomalies}
    for kind, (code, _) in KINDS.items():
        if kind in present:
            return code
    return 0


@dataclass(frozen=True)
class Anomaly:
    kind: str
    message: str
    hint: str
    evidence: str = ""  # the log line or metrics value that shows it
    step: int | None = None

    def __post_init__(self) -> None:
        # Messages and evidence quote the run's own log: shown escaped and bounded, on a terminal or in JSON.
        object.__setattr__(self, "message", safe_message(self.message))
        object.__setattr__(self, "evidence", safe(self.evidence))

    @property
    def code(self) -> int:
        return KINDS[self.kind][0]

    def to_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "code": self.code,
            "message": self.message,
            "hint": self.hint,
            "evidence": self.evidence,
            "step": self.step,
        }


@dataclass(frozen=True)
class Thresholds:
    """Limits for the heuristics; every one is a `mw-env train status` option."""

    silence_s: float = 15 * 60
    # Before the first step the process imports torch, builds the data and (on ROCm) may spend
    # minutes in MIOpen/Triton kernel searches; a checkpoint of a large model on slow disks takes a
    # while too. nvidia-resiliency-ext uses the same split (initial vs. steady heartbeat timeout).
    first_step_silence_s: float = 60 * 60
    checkpoint_silence_s: float = 45 * 60
    # Divergence: the median of the last `divergence_window` losses is above `factor` x the running
    # minimum of that median AND at least `min_delta` nats above it (so a 0.01 -> 0.05 wobble near
    # convergence is not called a divergence), after `min_steps` logged steps.
    divergence_factor: float = 3.0
    divergence_min_delta: float = 0.5
    divergence_window: int = 5
    divergence_min_steps: int = 10


@dataclass(frozen=True)
class Liveness:
    """What is known about the run's process. `alive` is None when the run has no run.json
    (a foreground `mw-env train`), so liveness cannot be judged."""

    alive: bool | None
    pid: int | None = None
    returncode: int | None = None  # from the supervisor's exit record, when there is one
    signal: int | None = None
    oom_kills: int = 0  # rise of the cgroup's memory.events oom_kill counter over the run
    exit_recorded: bool = False
    stop_requested: bool = False
    memory_need: int | None = None  # run.json: the run's estimated memory (runs/fit.py), for an OOM's hint
    memory_lower: str = ""
    # The trainer's own last words (state.json, runstate.record_failure): what a foreground run, which has no
    # train.log, printed as `error:`/`hint:` before it exited.
    error: str | None = None
    error_hint: str | None = None


# ---------------------------------------------------------------------------------------------
# Metrics


def number(value: object) -> float | None:
    """A JSON number as a float (never a bool), else None."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _as_float(value: object) -> float | None:
    """A metrics number; strings like "nan"/"inf" (some loggers write those) count too."""
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return float(value)
        return None
    return number(value)


def _finite(value: object) -> bool:
    number = _as_float(value)
    return number is not None and math.isfinite(number)


def check_numerics(events: Sequence[dict[str, Any]]) -> list[Anomaly]:
    """NaN/inf loss or grad norm in step events, steps skipped as non-finite, a nonfinite finish."""
    out: list[Anomaly] = []
    hint = (
        "lower the learning rate or warm up longer, keep grad clipping on, use bf16 instead of fp16; "
        "restart from the last good checkpoint (status lists it)"
    )
    bad = [
        e
        for e in events
        if e.get("event") == "step"
        and (("loss" in e and not _finite(e["loss"])) or ("grad_norm" in e and not _finite(e["grad_norm"])))
    ]
    if bad:
        first = bad[0]
        field_name = "loss" if "loss" in first and not _finite(first["loss"]) else "grad_norm"
        out.append(
            Anomaly(
                "nonfinite",
                f"{len(bad)} step(s) logged a non-finite {field_name} "
                f"(first at step {first.get('step')}: {field_name}={first.get(field_name)!r})",
                hint,
                evidence=f"step {first.get('step')}: {field_name}={first.get(field_name)!r}",
                step=first.get("step"),
            )
        )
    skipped = [e for e in events if e.get("event") == "skipped_step"]
    if skipped:
        last = skipped[-1]
        out.append(
            Anomaly(
                "nonfinite",
                f"{len(skipped)} step(s) skipped by the trainer (last at step {last.get('step')}: "
                f"{last.get('reason', 'no reason given')})",
                hint,
                evidence=f"skipped_step {last.get('step')}: {last.get('reason')}",
                step=last.get("step"),
            )
        )
    for e in events:
        if e.get("event") == "finished" and e.get("reason") == "nonfinite":
            out.append(
                Anomaly(
                    "nonfinite",
                    f"the trainer gave up at step {e.get('step')} after repeated non-finite steps",
                    hint,
                    evidence="finished: reason=nonfinite",
                    step=e.get("step"),
                )
            )
    return out


def check_divergence(
    events: Sequence[dict[str, Any]], thresholds: Thresholds = Thresholds()
) -> list[Anomaly]:
    """Loss (median of the last few steps) far above its running minimum."""
    steps = [e for e in events if e.get("event") == "step" and _finite(e.get("loss"))]
    window = max(1, thresholds.divergence_window)
    if len(steps) < max(thresholds.divergence_min_steps, window):
        return []
    losses = [float(e["loss"]) for e in steps]
    best, best_step = math.inf, None
    for i in range(window - 1, len(losses)):
        median = sorted(losses[i - window + 1 : i + 1])[window // 2]
        if median < best:
            best, best_step = median, steps[i].get("step")
    current = sorted(losses[-window:])[window // 2]
    if current > thresholds.divergence_factor * best and current - best >= thresholds.divergence_min_delta:
        last = steps[-1]
        return [
            Anomaly(
                "divergence",
                f"loss {current:.4g} (median of the last {window} steps, at step {last.get('step')}) is "
                f"{current / best if best > 0 else math.inf:.1f}x its running minimum {best:.4g} "
                f"(step {best_step})",
                "the run is diverging: lower the learning rate or raise warm-up; restart from a "
                "checkpoint written before the rise",
                evidence=f"running minimum {best:.4g} at step {best_step}",
                step=last.get("step"),
            )
        ]
    return []


# ---------------------------------------------------------------------------------------------
# Process and clock


def check_liveness(
    events: Sequence[dict[str, Any]],
    liveness: Liveness,
    log_name: str,
    findings: Sequence[LogFinding] = (),
) -> list[Anomaly]:
    """The process is gone but wrote no `finished` event."""
    if liveness.alive is not False or any(e.get("event") == "finished" for e in events):
        return []
    pid = f"process {liveness.pid}" if liveness.pid else "the run's process"
    restart = "restart with the same command: the run resumes from its last checkpoint"
    if liveness.signal == 9 and liveness.oom_kills > 0:
        return [
            Anomaly(
                "oom",
                f"{pid} was killed by the kernel's OOM killer (cgroup oom_kill rose by {liveness.oom_kills})",
                "the container ran out of host RAM: "
                + oom_hint(liveness.memory_need, liveness.memory_lower, restart),
                evidence=f"SIGKILL, memory.events oom_kill +{liveness.oom_kills}",
            )
        ]
    if liveness.stop_requested or (liveness.exit_recorded and liveness.returncode == INTERRUPTED):
        return []  # `mw-env train stop` or a Ctrl-C ended it; the operator chose that
    if liveness.signal is not None:
        name = signal_name(liveness.signal)
        why = " (the kernel's OOM killer sends SIGKILL, so does kill -9)" if liveness.signal == 9 else ""
        message = f"{pid} was killed by {name}{why} before writing a finished event"
        evidence = f"exit record: {name}"
    elif liveness.exit_recorded:
        message = f"{pid} exited with code {liveness.returncode} without writing a finished event"
        evidence = f"exit record: returncode {liveness.returncode}"
        errors = [f for f in findings if f.kind == "error"]
        said: tuple[str, str | None] | None = None
        if errors:
            last = errors[-1]
            hints = [f for f in findings if f.kind == "hint" and f.line_no == last.line_no + 1]
            said = (
                last.text.removeprefix("error: "),
                hints[0].text.removeprefix("hint: ") if hints else None,
            )
        elif liveness.error:  # no log (a foreground run): the words it recorded in state.json
            said = (liveness.error, liveness.error_hint)
        if said is not None:
            # The trainer said why it stopped (bad input, a refused resume): quote it, not an OOM guess, and
            # not "restart": the same command would stop on the same row.
            return [
                Anomaly(
                    "vanished",
                    f"{message}; it reported: {said[0]}",
                    (said[1] + "; then " if said[1] else "fix that, then ")
                    + "start it again (the run resumes from its last checkpoint, if any)",
                    evidence=f"error: {said[0]}",
                )
            ]
    else:
        message = f"{pid} is gone and left no finished event and no exit record (killed with its supervisor?)"
        evidence = "no exit record"
    return [
        Anomaly(
            "vanished",
            message,
            f"read the end of {log_name}; for a host OOM look for 'Killed process' in `journalctl -k` on "
            "the host; " + restart,
            evidence=evidence,
        )
    ]


def check_silence(
    events: Sequence[dict[str, Any]],
    liveness: Liveness,
    *,
    last_output: float | None,
    now: float,
    thresholds: Thresholds = Thresholds(),
) -> list[Anomaly]:
    """No new output for longer than the allowance for the run's current phase."""
    if liveness.alive is False or last_output is None:
        return []
    if any(e.get("event") == "finished" for e in events):
        return []
    allowance, phase = thresholds.silence_s, "between steps"
    if not any(e.get("event") == "step" for e in events):
        allowance, phase = thresholds.first_step_silence_s, "before the first step"
    checkpoints = [e for e in events if e.get("event") == "checkpoint"]
    if checkpoints and checkpoints[-1].get("phase") == "start":
        allowance, phase = max(allowance, thresholds.checkpoint_silence_s), "while writing a checkpoint"
    silent = now - last_output
    if silent <= allowance:
        return []
    who = "the process is alive but" if liveness.alive else "liveness unknown (no run.json);"
    return [
        Anomaly(
            "stalled",
            f"no output for {silent / 60:.0f} min {phase} (allowed {allowance / 60:.0f} min); {who} silent",
            "a hang: look at the last lines of the log; `py-spy dump --pid PID` shows where it waits; a "
            "stuck collective or GPU hang needs `mw-env train stop` and a restart",
            # Stable for one silent stretch, so `watch` reports each stretch once.
            evidence="no output since " + time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(last_output)),
        )
    ]


_LOG_HINTS = {
    "oom": "lower train.batch_size (accumulate gradients to keep the effective batch), set "
    "PYTORCH_HIP_ALLOC_CONF (ROCm) or PYTORCH_CUDA_ALLOC_CONF (CUDA) to expandable_segments:True; on a "
    "780M-class APU a tiny 'total capacity' means a kernel older than 6.10 (see `mw-env doctor`)",
    "gpu_fault": "run `mw-env doctor`: a wheel without kernels for this GPU, or HSA_OVERRIDE_GFX_VERSION on "
    "gfx1103 (page faults, esp. fp16), cause these; AMD_SERIALIZE_KERNEL=3 or CUDA_LAUNCH_BLOCKING=1 "
    "pinpoints the kernel",
    "comms": "a rank stopped taking part in a collective: read every rank's lines in the log; "
    "TORCH_NCCL_DUMP_ON_TIMEOUT=1 records what each rank waited for (RCCL is unsupported on Strix Halo)",
    "traceback": "the trainer raised an exception: read the traceback in the log, fix the cause, and restart; "
    "the run resumes from its last checkpoint",
}


def check_log(findings: Sequence[LogFinding], log_name: str) -> list[Anomaly]:
    """One anomaly per kind found in the log: the first line as evidence, the count in the message."""
    out: list[Anomaly] = []
    for kind in KINDS:
        hits = [f for f in findings if f.kind == kind]
        if not hits:
            continue
        first = hits[0] if kind != "traceback" else hits[-1]  # the newest exception is the live one
        more = f" ({len(hits)} lines like it)" if len(hits) > 1 else ""
        out.append(
            Anomaly(
                kind,
                f"{KINDS[kind][1]} in {log_name} (line {first.line_no} of this run's output){more}: {first.text}",
                _LOG_HINTS[kind],
                evidence=first.text,
            )
        )
    return out


def analyze(
    *,
    events: Sequence[dict[str, Any]],
    log_findings: Sequence[LogFinding],
    liveness: Liveness,
    last_output: float | None,
    now: float,
    thresholds: Thresholds = Thresholds(),
    log_name: str = LOG_FILE,
) -> tuple[Anomaly, ...]:
    """Every anomaly the run shows, highest priority first."""
    found = [
        *check_log(log_findings, log_name),
        *check_numerics(events),
        *check_divergence(events, thresholds),
        *check_liveness(events, liveness, log_name, log_findings),
        *check_silence(events, liveness, last_output=last_output, now=now, thresholds=thresholds),
    ]
    order = list(KINDS)
    return tuple(sorted(found, key=lambda a: order.index(a.kind)))
