"""The trainer's one signal story and its moves in the run's state record (rundir/runstate.py).

SIGTERM (and SIGHUP, taken as SIGTERM) at every phase of a run ends in a documented outcome, exit 0
(docs/training.md has the table): at start-up StopRequested unwinds the start (nothing to checkpoint yet);
during the steps the loop's StopFlag finishes the step and checkpoints; during the report and the manifest
the stop is noted and the report completed first. Never an exit by signal: a signal the user sent is never
taken for the out-of-memory killer. Only the trainer's real process installs the start-up handler.

Rank 0 writes state.json: `running`, `stopping` (a SIGTERM agreed), `finishing` (the loop ended), and
`finished` only after the report and MANIFEST.sha256 are complete, so `status`, `watch` and `verify` never
take a run still writing its report for a finished one.

MW_ENV_TEST_HOLD=POINT:PATH[,POINT:PATH] (tests only) holds the trainer at POINT until PATH exists,
having first created PATH.waiting. POINT is `step-N` (before computing the step after N done steps),
`report` (state `finishing`, before the report is written), or one of the fault harness's phases
(tests/faults/test_signals.py): `startup` (config read; before torch, the process group and the corpus),
`discovery` (before the corpus is opened), `eval`, `checkpoint` (before the write), `manifest`; and
`predict` (`train predict`/`evaluate`: the first batch tagged, the output's temporary file open). A test gets a step or a report phase
as long as it needs on the real trainer by waiting for events instead of for time (a slow step on a
slow machine, without sleeps).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from mw_env.base.atomic import open_append
from mw_env.base.errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    InputError,
    MwEnvError,
    os_error_in,
    os_fault,
)
from mw_env.rundir import runstate
from mw_env.rundir.contract import CHECKPOINT_GLOB, checkpoints_dir, metrics_path


class StopRequested(BaseException):
    """SIGTERM before the training loop could take it (a BaseException: no `except Exception` swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


_state: dict[str, Any] = {
    "phase": "startup",
    "pending": None,
    "installed": False,
    "received": False,
    "out_dir": None,  # the run folder this process holds the lock of (rank 0), for its last words
    "marked": None,  # the state it last moved the run to
}


def note() -> None:
    """A stop signal reached this process (the loop's flag calls this too): the test hook lets go."""
    _state["received"] = True


def received() -> bool:
    return bool(_state["received"])


def install() -> None:
    """Take SIGTERM from now on (the trainer process, before it imports torch or opens the corpus)."""
    signal.signal(signal.SIGTERM, _handle)
    _state["installed"] = True


def _handle(signum: int, _frame: FrameType | None) -> None:
    note()
    if _state["phase"] == "startup":
        raise StopRequested(signum)
    _state["pending"] = signum  # after the steps: the report and manifest are finished first


def enter(phase: str) -> None:
    """`steps` while the loop's flag holds SIGTERM; `finishing` once the steps are over."""
    _state["phase"] = phase


def pending() -> int | None:
    """The signal that came while the report was written, if one did."""
    return _state["pending"]


def stopped_before_start(out_dir: Path | None, signum: int) -> str:
    """Log the stop (rank 0) and return what to say: nothing trained, what is kept, how to start again."""
    name = signal.Signals(signum).name if signum in signal.Signals._value2member_map_ else str(signum)
    kept = "no checkpoint yet"
    if out_dir is not None:
        ckpts = sorted(checkpoints_dir(out_dir).glob(CHECKPOINT_GLOB))  # none in a folder not made yet
        if ckpts:
            kept = f"the checkpoints are kept (newest: {ckpts[-1].name})"
        if os.environ.get("RANK", "0") in ("", "0"):
            step = int(ckpts[-1].stem.split("-")[1]) if ckpts else 0
            try:
                out_dir.mkdir(parents=True, exist_ok=True)
                with open_append(metrics_path(out_dir)) as fh:
                    event = {"event": "finished", "step": step, "reason": "stopped", "phase": "start-up"}
                    fh.write(json.dumps({**event, "time": time.time()}) + "\n")
            except (OSError, InputError):  # InputError: not a regular file there
                pass  # nothing to keep: the message below still says what happened
    return (
        f"stopped by {name} during start-up, before the first step: nothing trained in this run; {kept}. "
        "Run the same command to start again."
    )


HOLD_ENV = "MW_ENV_TEST_HOLD"


def mark(out_dir: Path, state: str, *, main: bool = True, **fields: Any) -> None:
    """Move the run to `state` (rank 0 only). A state that cannot be written (a full disk) is said on
    stderr; it never costs the run."""
    if not main:
        return
    _state["marked"] = state
    try:
        runstate.set_state(out_dir, state, pid=os.getpid(), **fields)
    except OSError as exc:
        print(f"warning: could not record the run state {state!r} in {out_dir}: {exc}", file=sys.stderr)


def own(out_dir: Path | None) -> None:
    """This process holds `out_dir`'s run lock (rank 0), from now until `own(None)`: its end is its to record."""
    _state["out_dir"] = out_dir
    if out_dir is None:
        _state["marked"] = None


def fault_error(exc: OSError) -> MwEnvError:
    """A fault of the machine during a run (a full disk at any write) in words: exit 1 whatever the errno."""
    import errno

    writing = exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO)
    err = os_fault(exc, "write" if writing else "use")
    return MwEnvError(err.message, hint=f"{err.hint}: it resumes from the newest checkpoint (all are kept)")


def record_end(exc: BaseException) -> None:
    """The run ends on `exc` (rank 0, still holding the folder's lock): state.json `exited` with the words the
    trainer prints for it, so `train status` tells a foreground run (no train.log) as it tells a detached one.
    Never in a folder deleted under the run; a stop (StopRequested) writes its own `finished`."""
    out_dir = _state.get("out_dir")
    if out_dir is None or not Path(out_dir).is_dir() or isinstance(exc, StopRequested):
        return
    if isinstance(exc, MwEnvError):
        code, message, hint = exc.exit_code, exc.message, exc.hint
    elif isinstance(exc, KeyboardInterrupt):
        code, message = EXIT_INTERRUPTED, "interrupted (Ctrl-C)"
        hint = "run the same command: it resumes from the newest checkpoint"
    elif isinstance(exc, Exception) and (cause := os_error_in(exc)) is not None:
        err = fault_error(cause)
        code, message, hint = EXIT_FAILED, err.message, err.hint
    else:
        code, message, hint = EXIT_FAILED, f"the trainer failed: {type(exc).__name__}: {exc}"[:500], None
    from mw_env.base.textsafe import safe_message

    with contextlib.suppress(OSError, InputError):  # a full disk: the words are on stderr, status says less
        runstate.record_failure(
            out_dir,
            returncode=code,
            error=safe_message(message),
            hint=safe_message(hint) if hint else None,
            during=str(_state.get("marked") or "starting"),
            pid=os.getpid(),
        )


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
            while not Path(path).exists() and not received():
                time.sleep(0.02)  # the SIGTERM handler runs between these waits, as between kernels


class StopFlag:
    """SIGTERM: finish the current step, checkpoint, log `finished` reason "stopped", exit 0."""

    def __init__(self) -> None:
        self.requested = False
        self._old: Any = None

    def __enter__(self) -> StopFlag:
        with contextlib.suppress(ValueError):  # not the main thread (tests): no handler
            self._old = signal.signal(signal.SIGTERM, self._handle)
        enter("steps")
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.requested = True
        note()

    def __exit__(self, *exc: object) -> None:
        enter("finishing")  # a SIGTERM from here on waits for the report (the phases above)
        if self._old is not None:
            signal.signal(signal.SIGTERM, self._old)
