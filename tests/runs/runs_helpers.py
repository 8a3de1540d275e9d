"""Shared helpers for the run-supervision tests: stand-in trainers as real child processes."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

from mw_env.rundir.occupants import group_members
from mw_env.runs.runs import RunRecord, start_run

# Prelude of every stand-in trainer: `ev(...)` appends one metrics event like the real trainer.
PRELUDE = textwrap.dedent(
    """
    import json, os, signal, sys, time
    OUT = os.environ["RUN_DIR"]
    def ev(event, **fields):
        fields = {"event": event, **fields}
        fields.setdefault("time", time.time())
        with open(os.path.join(OUT, "metrics.jsonl"), "a") as fh:
            fh.write(json.dumps(fields) + "\\n")
    def ready():
        open(os.path.join(OUT, "ready"), "w").close()
    """
)


def child_code(body: str) -> str:
    return PRELUDE + textwrap.dedent(body)


def launch(run_dir: Path, body: str, **kwargs) -> RunRecord:
    env = dict(os.environ, RUN_DIR=str(run_dir), PYTHONUNBUFFERED="1")
    return start_run(argv=[sys.executable, "-c", child_code(body)], env=env, out_dir=run_dir, **kwargs)


def wait_until(predicate: Callable[[], bool], timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def kill_group(record: RunRecord) -> None:
    """Test cleanup: make sure nothing of a stand-in run outlives its test."""
    if group_members(record.pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(record.pid, signal.SIGKILL)
