"""SIGTERM (and SIGHUP, taken as SIGTERM) at every phase of a run ends in a documented outcome, exit 0.

- start-up and data discovery (before the loop, nothing to checkpoint yet): StopRequested unwinds the
  start; the run says it stopped before its first step, logs `finished` "stopped" (so `status` says
  stopped, not dead), every checkpoint already on disk is kept, and the same command starts it again;
- the steps, eval and checkpoint: the loop's own flag (lifecycle.StopFlag): finish the step, checkpoint, exit 0;
- the report and the manifest (the steps are over): the stop is noted and the report completed first; the
  run ends finished, its report complete, exit 0. A stop here cannot keep more work than finishing does.

Never an exit by signal: a signal the user sent is never taken for the out-of-memory killer. Only the
trainer's real process installs this (tests that call the trainer as a function keep their handlers).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from types import FrameType
from typing import Any

from mw_env.atomic import open_append
from mw_env.errors import InputError


class StopRequested(BaseException):
    """SIGTERM before the training loop could take it (a BaseException: no `except Exception` swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


_state: dict[str, Any] = {"phase": "startup", "pending": None, "installed": False, "received": False}


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
        ckpts = (
            sorted((out_dir / "checkpoints").glob("step-*.pt")) if (out_dir / "checkpoints").is_dir() else []
        )
        if ckpts:
            kept = f"the checkpoints are kept (newest: {ckpts[-1].name})"
        if os.environ.get("RANK", "0") in ("", "0"):
            step = int(ckpts[-1].stem.split("-")[1]) if ckpts else 0
            try:
                out_dir.mkdir(parents=True, exist_ok=True)
                with open_append(out_dir / "metrics.jsonl") as fh:
                    event = {"event": "finished", "step": step, "reason": "stopped", "phase": "start-up"}
                    fh.write(json.dumps({**event, "time": time.time()}) + "\n")
            except (OSError, InputError):  # InputError: not a regular file there
                pass  # nothing to keep: the message below still says what happened
    return (
        f"stopped by {name} during start-up, before the first step: nothing trained in this run; {kept}. "
        "Run the same command to start again."
    )
