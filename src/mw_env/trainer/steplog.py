"""The `step` events: each step's metrics, read from the device only on log steps.

A step leaves its metrics on the device (trainer/step.py `StepOutcome.stats`); reading them is a host
synchronisation, so this holds them and reads all the steps since the last read in one copy, on log
steps (`runtime.log_every`, and step 1), and before anything that must come after them in metrics.jsonl
or needs their values: an evaluation, a checkpoint, a skipped step's event and message, the loop's end
(steps that wait for the device anyway). Also when FLUSH_S have passed since the last read: `train
status`/`watch` judge a run stalled by its files' silence (runs/anomalies.py, 15 min), and a large
log_every times a slow step must not look like a hang (one read a minute costs nothing). Each event keeps
its own step's end time, so steps/s and the ETA are computed as when every event was written at once.
Host-side figures (step time, data wait) need no read: the slow-CPU warning at step 2 is taken from
them when the step ends, and so are the progress figures (step/total, steps/s, rows/s, ETA) that each log
step's line ends with and that a terminal also gets every PROGRESS_S in between.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from time import monotonic, time

import torch

from mw_env.base.textsafe import duration
from mw_env.trainer.metrics import MetricsWriter
from mw_env.trainer.step import StepOutcome, read_host
from mw_env.trainspec.advice import cpu_warning

FLUSH_S = 60.0  # the longest a step's event waits for a log step
# On a terminal, a progress line (step/total, rate, ETA) at least this often between the log steps' lines: a
# person watching sees the run move, however large log_every (a detached run's log gets the log steps only).
PROGRESS_S = 10.0


@dataclass(frozen=True)
class _Pending:
    step: int
    out: StepOutcome
    waited: float
    step_s: float
    time: float  # unix seconds at the step's end


@dataclass(kw_only=True)
class StepLog:
    metrics: MetricsWriter
    say: Callable[[str], None]
    log_every: int
    max_steps: int
    device: str
    parameters: Callable[[], int]  # the model's parameter count (for the slow-CPU warning)
    rows_per_step: int = 0  # rows a step reads, all processes (the rows/s of the progress)
    progress_every: float | None = None  # PROGRESS_S on a terminal: the time-based progress lines
    losses: list[float] = field(default_factory=list)  # every read step's loss, in step order
    _pending: list[_Pending] = field(default_factory=list)
    _last_read: float = field(default_factory=monotonic)
    _last_said: float = field(default_factory=monotonic)
    _rate_from: tuple[int, float] | None = (
        None  # (step, monotonic time) after the first step: its warm-up out
    )

    def add(self, step: int, out: StepOutcome, waited: float, step_s: float) -> None:
        """Step `step` (1-based) ended: hold its metrics; read them (and those held) on a log step."""
        self._pending.append(_Pending(step, out, waited, step_s, time()))
        if self._rate_from is None:
            self._rate_from = (step, monotonic())
        log_step = step % self.log_every == 0 or step == 1
        if (
            self.progress_every is not None
            and not log_step
            and monotonic() - self._last_said >= self.progress_every
        ):
            self._say(
                f"step {step}/{self.max_steps} ({100 * step / self.max_steps:.0f}%)  {self.progress(step)}"
            )
        if step == 2:  # the first step pays for warm-up; the second is the one to extrapolate from
            left = self.max_steps - step
            slow = cpu_warning(
                device=self.device, parameters=self.parameters(), step_s=step_s, steps_left=left
            )
            if slow:
                self.say(f"warning: {slow}")
        if log_step or monotonic() - self._last_read >= FLUSH_S:
            self.flush()

    def flush(self) -> dict[str, object] | None:
        """Read every held step's metrics in one copy and log them; the last step's event (None if none)."""
        if not self._pending:
            return None
        held, self._pending = self._pending, []
        self._last_read = monotonic()
        values = read_host(torch.stack([p.out.stats for p in held]))
        record = None
        for p, (loss_sum, norm, words, tokens) in zip(held, values, strict=True):
            loss = loss_sum / max(words, 1.0)
            self.losses.append(loss)
            tokens_per_s = tokens / max(p.step_s, 1e-9)
            record = self.metrics.log(
                "step",
                step=p.step,
                loss=loss,
                lr=p.out.lr,
                grad_norm=norm,
                tokens_per_s=tokens_per_s,  # input tokens (all processes) per second
                words_per_s=words / max(p.step_s, 1e-9),  # labelled words per second
                data_wait_s=p.waited,
                step_s=p.step_s,
                at=p.time,
            )
            if p.step % self.log_every == 0 or p.step == 1:
                self._say(
                    f"step {p.step}/{self.max_steps}  loss {loss:.4f}  lr {p.out.lr:.2e}  grad_norm {norm:.3f}  "
                    f"tok/s {tokens_per_s:,.0f}  data wait {100 * p.waited / max(p.step_s, 1e-9):.0f}%"
                    + (f"  {self.progress(p.step)}" if p.step > 1 else "")
                )
        return record

    def progress(self, step: int) -> str:
        """The rate since the first step ended (steps/s, rows/s) and the time left at it."""
        begun = self._rate_from
        if begun is None or step <= begun[0]:
            return "ETA after the next step"
        rate = (step - begun[0]) / max(monotonic() - begun[1], 1e-9)
        rows = f", {rate * self.rows_per_step:,.0f} rows/s" if self.rows_per_step else ""
        return f"{rate:.2f} steps/s{rows}, ETA {duration((self.max_steps - step) / rate)}"

    def _say(self, line: str) -> None:
        self._last_said = monotonic()
        self.say(line)

    def nonfinite_reason(self) -> str:
        """Why the last step was skipped (its metrics read now: a skipped step is said at once)."""
        record = self.flush()
        loss = record.get("loss") if record else None
        return f"non-finite {'loss' if not (isinstance(loss, float) and math.isfinite(loss)) else 'gradient norm'}"
