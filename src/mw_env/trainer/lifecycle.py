"""The trainer's moves in the run's state record (runs/runstate.py), and the test hook that holds it.

Rank 0 writes state.json: `running` when the loop starts, `stopping` when a SIGTERM was agreed (a
checkpoint and the report follow), `finishing` when the loop ended, and `finished` only after the
report and MANIFEST.sha256 are complete, so `status`, `watch` and `verify` never take a run that is
still writing its report for a finished one.

MW_ENV_TEST_HOLD=POINT:PATH[,POINT:PATH] (tests only) holds the trainer at POINT until PATH exists,
having first created PATH.waiting. POINT is `step-N` (before computing the step after N done steps),
`report` (state `finishing`, before the report is written), or one of the fault harness's phases
(tests/faults/test_signals.py): `startup` (config read; before torch, the process group and the corpus),
`discovery` (before the corpus is opened), `eval`, `checkpoint` (before the write), `manifest`. A test gets a step or a report phase
as long as it needs on the real trainer by waiting for events instead of for time (a slow step on a
slow machine, without sleeps).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from mw_env.runs import runstate
from mw_env.trainer import stopping

HOLD_ENV = "MW_ENV_TEST_HOLD"


def mark(out_dir: Path, state: str, *, main: bool = True, **fields: Any) -> None:
    """Move the run to `state` (rank 0 only). A state that cannot be written (a full disk) is said on
    stderr; it never costs the run."""
    if not main:
        return
    try:
        runstate.set_state(out_dir, state, pid=os.getpid(), **fields)
    except OSError as exc:
        print(f"warning: could not record the run state {state!r} in {out_dir}: {exc}", file=sys.stderr)


def hold(point: str) -> None:
    """The test hook: block at `point` until the file named for it in MW_ENV_TEST_HOLD appears."""
    spec = os.environ.get(HOLD_ENV)
    if not spec:
        return
    for item in spec.split(","):
        at, _, path = item.partition(":")
        if at == point and path:
            Path(f"{path}.waiting").touch()
            # A stop signal lets go too: the harness need not guess when a forwarded signal arrived.
            while not Path(path).exists() and not stopping.received():
                time.sleep(0.02)  # the SIGTERM handler runs between these waits, as between kernels


class StopFlag:
    """SIGTERM: finish the current step, checkpoint, log `finished` reason "stopped", exit 0."""

    def __init__(self) -> None:
        self.requested = False
        self._old: Any = None

    def __enter__(self) -> StopFlag:
        with contextlib.suppress(ValueError):  # not the main thread (tests): no handler
            self._old = signal.signal(signal.SIGTERM, self._handle)
        stopping.enter("steps")
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.requested = True
        stopping.note()

    def __exit__(self, *exc: object) -> None:
        stopping.enter("finishing")  # a SIGTERM from here on waits for the report (trainer/stopping.py)
        if self._old is not None:
            signal.signal(signal.SIGTERM, self._old)


__all__ = ["HOLD_ENV", "StopFlag", "hold", "mark"]
