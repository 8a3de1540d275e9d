"""The step events' reads (trainer/steplog.py), on a clock of the test's own: metrics held until a log step,
or until a minute has passed (so a large log_every with slow steps does not look like a stalled run), then
read in one copy, each event with its own step's time."""

from __future__ import annotations

from pathlib import Path

import pytest

from .helpers import events

pytestmark = pytest.mark.torch


def test_held_steps_are_read_on_log_steps_and_after_a_minute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    import mw_env.trainer.steplog as steplog
    from mw_env.trainer.metrics import MetricsWriter
    from mw_env.trainer.step import StepOutcome

    now = [1000.0]  # the test's clock: monotonic and wall time both read it
    monkeypatch.setattr(steplog, "monotonic", lambda: now[0])
    monkeypatch.setattr(steplog, "time", lambda: now[0])
    reads: list[int] = []
    real = steplog.read_host
    monkeypatch.setattr(steplog, "read_host", lambda t: reads.append(t.shape[0]) or real(t))
    said: list[str] = []
    metrics = MetricsWriter(tmp_path)
    log = steplog.StepLog(
        metrics=metrics, say=said.append, log_every=10, max_steps=100, device="cpu", parameters=lambda: 1000
    )

    def step(n: int, seconds: float) -> None:
        now[0] += seconds
        stats = torch.tensor([2.0 * n, 0.5, 4.0, 40.0], dtype=torch.float64)  # loss sum, norm, words, tokens
        log.add(n, StepOutcome(finite=True, lr=1e-3, stats=stats), waited=0.0, step_s=seconds)

    step(1, 1.0)  # step 1 is a log step
    for n in range(2, 7):
        step(n, 1.0)
    assert reads == [1] and [e["step"] for e in events(tmp_path, "step")] == [1]
    step(7, 60.0)  # a minute since the last read: read now, though 7 is no log step
    assert reads == [1, 6]
    for n in range(8, 11):
        step(n, 1.0)  # 10 is a log step
    assert reads == [1, 6, 3] and log.flush() is None  # nothing held
    metrics.close()
    got = events(tmp_path, "step")
    assert [e["step"] for e in got] == list(range(1, 11))
    assert [e["time"] for e in got] == [1001.0 + n for n in range(6)] + [1066.0, 1067.0, 1068.0, 1069.0]
    assert [e["loss"] for e in got] == [n / 2 for n in range(1, 11)] == log.losses
    assert [line.split()[1] for line in said] == ["1/100", "10/100"]  # the echoed lines: log steps only
    # Step 10's line ends with the rate since step 1 ended (9 steps in 68 s) and the time left at it.
    assert said[1].endswith("0.13 steps/s, ETA 11 min 20 s"), said[1]


def test_a_terminal_gets_step_total_rate_and_eta_between_log_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    import mw_env.trainer.steplog as steplog
    from mw_env.trainer.metrics import MetricsWriter
    from mw_env.trainer.step import StepOutcome

    now = [1000.0]
    monkeypatch.setattr(steplog, "monotonic", lambda: now[0])
    monkeypatch.setattr(steplog, "time", lambda: now[0])
    said: list[str] = []
    log = steplog.StepLog(
        metrics=MetricsWriter(tmp_path),
        say=said.append,
        log_every=50,
        max_steps=1500,
        device="cpu",
        parameters=lambda: 1000,
        rows_per_step=32,
        progress_every=10.0,
    )
    stats = torch.tensor([2.0, 0.5, 4.0, 40.0], dtype=torch.float64)
    for n in range(1, 14):
        now[0] += 3.0  # a step every 3 s: a line at least every 10 s, none between
        log.add(n, StepOutcome(finite=True, lr=1e-3, stats=stats), waited=0.0, step_s=3.0)
    assert said[0].startswith("step 1/1500  loss ")
    progress = said[1:]
    assert [line.split()[1] for line in progress] == ["5/1500", "9/1500", "13/1500"]
    assert progress[-1] == "step 13/1500 (1%)  0.33 steps/s, 11 rows/s, ETA 1 h 14 min"
