"""Who gets a stop under torchrun, and how its end is judged (issue 22: the flaky `report x SIGINT x ddp x
detached` cell, exit 1 once in the full matrix).

The cause fixed here: torchrun ends 1 after a stop reached it (itself, or a worker it then found ended by
the signal) even when every worker stopped or finished cleanly; the foreground judged that by the run's
last event (`ended_cleanly`), the detached supervisor recorded the 1. Now both judge it the same way, and
both send the stop to the workers torchrun runs (never to torchrun while one runs: it would SIGKILL rank 0's
report 30 s later once rank 1 has ended).

A fake `torchrun` (a script of that name) stands in for the real one: no torch, no timing; the test waits
for the file it writes once its signal handler is installed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tests.runs.runs_helpers import wait_until

FAKE = """#!{python}
import json, signal, sys, time
from pathlib import Path
run, clean = Path(sys.argv[2]), sys.argv[3] == "clean"
def stop(signum, frame):
    if clean:  # what a worker's graceful stop leaves as the run's last event
        with open(run / "metrics.jsonl", "a") as fh:
            fh.write(json.dumps({{"event": "finished", "step": 2, "reason": "stopped"}}) + "\\n")
    sys.exit(1)  # torchrun's exit after a signal reached it
signal.signal(signal.SIGTERM, stop)
(run / "ready").touch()
while True:
    signal.pause()
"""


def _fake_torchrun(tmp_path: Path) -> Path:
    path = tmp_path / "bin" / "torchrun"
    path.parent.mkdir()
    path.write_text(FAKE.format(python=sys.executable))
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("to", ["supervisor", "torchrun"])  # train stop / a scheduler killing torchrun
@pytest.mark.parametrize("clean", [True, False], ids=["workers-ended-cleanly", "a-real-failure"])
def test_a_detached_torchrun_that_ends_1_after_a_stop(tmp_path: Path, clean: bool, to: str) -> None:
    from mw_env.runs.runs import read_exit, start_run

    run = tmp_path / "run"
    argv = [str(_fake_torchrun(tmp_path)), "--nproc-per-node=2", str(run), "clean" if clean else "fail"]
    record = start_run(argv=argv, env=dict(os.environ), out_dir=run)
    try:
        wait_until(lambda: (run / "ready").exists(), 60, "the fake torchrun's handler")
        if to == "supervisor":
            os.kill(record.pid, signal.SIGINT)  # as the test harness stops a detached run
        else:
            assert record.child_pid is not None
            os.kill(record.child_pid, signal.SIGTERM)
        wait_until(lambda: read_exit(run) is not None, 60, "the supervisor's record")
    finally:  # nothing outlives the test, passed or failed
        for pid in (record.pid, record.child_pid):
            with contextlib.suppress(ProcessLookupError, TypeError):
                os.kill(pid, signal.SIGKILL)
    ended = read_exit(run)
    assert ended is not None
    assert ended.returncode == (0 if clean else 1), ended
    log = (run / "train.log").read_text()
    assert ("every worker ended cleanly" in log) == clean, log


def test_a_stop_goes_to_the_workers_torchrun_runs_now(tmp_path: Path) -> None:
    """Never to torchrun while a worker runs (it would SIGKILL rank 0's report 30 s later once rank 1 has
    ended); to torchrun itself before it started any."""
    from mw_env.runs.foreground import stop_targets

    # A parent with one child, standing in for torchrun with one worker left (rank 0 writing the report).
    code = (
        "import subprocess, sys\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import sys; sys.stdin.read()'], stdin=subprocess.PIPE)\n"
        "print(p.pid, flush=True)\n"
        "sys.stdin.read()\n"
        "p.stdin.close(); p.wait()\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        worker = int(parent.stdout.readline())
        assert stop_targets(parent.pid) == [worker]
    finally:
        parent.communicate("", timeout=60)
    lone = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        assert stop_targets(lone.pid) == [lone.pid]  # no worker yet: torchrun itself
    finally:
        lone.communicate(b"", timeout=60)
