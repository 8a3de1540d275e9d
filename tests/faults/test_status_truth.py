"""Status tells the truth for every ending (issue 29, class 7).

- A SIGTERM while a detached `--nproc-per-node 2` run's torchrun still imports torch was `dead`/`vanished`,
  exit 12, with out-of-memory advice; the fault table says "stopped before the first step", exit 0.
- A foreground run killed with SIGKILL was `dead` with exit 0; docs/runs.md says `vanished` (12).
The state logic is tested on folders built here; one real detached DDP start is stopped at the phase, found
by its processes (torchrun alive, no worker yet), never by time."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.runs.runs_helpers import wait_until

from mw_env.cli import main
from mw_env.rundir.occupants import children, proc_stat
from mw_env.runs.runstatus import run_status
from mw_env.runs.startup import stopped_at_start_up
from proctools import kill_tagged, new_tag
from smokeargs import TRAIN, smoke_args

REPO = Path(__file__).resolve().parents[2]


def _events(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_a_stop_before_the_trainer_could_take_it_is_a_stop_before_the_first_step(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "step-000000004.pt").write_bytes(b"x")
    earlier = {"event": "finished", "step": 4, "reason": "max_steps", "time": 100.0}  # an earlier attempt
    (run / "metrics.jsonl").write_text(json.dumps(earlier) + "\n")
    said = stopped_at_start_up(run, since=1000.0)
    assert said is not None and "before the first step" not in said and "nothing trained" in said
    last = _events(run)[-1]
    assert last["event"] == "finished" and last["reason"] == "stopped" and last["phase"] == "start-up"
    assert last["step"] == 4  # the newest checkpoint, kept
    # A run that took a step (or wrote its own `finished`) since it started is judged as before.
    stepped = tmp_path / "stepped"
    stepped.mkdir()
    (stepped / "metrics.jsonl").write_text(json.dumps({"event": "step", "step": 1, "time": 2000.0}) + "\n")
    assert stopped_at_start_up(stepped, since=1000.0) is None
    assert len(_events(stepped)) == 1
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "metrics.jsonl")
    assert stopped_at_start_up(fifo, since=1000.0) is None  # never opened: it would block


def test_a_foreground_run_whose_trainer_vanished_is_vanished_not_dead_and_ok(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])  # not waited for: a zombie, as a killed trainer
    wait_until(lambda: (proc_stat(gone.pid) or ("Z",))[0] == "Z", what="the child to end")
    try:
        life = {"state": "running", "pid": gone.pid, "time": time.time(), "history": []}
        (run / "state.json").write_text(json.dumps(life))
        step = {"event": "step", "step": 3, "loss": 1.0, "time": time.time()}
        (run / "metrics.jsonl").write_text(json.dumps(step) + "\n")
        status = run_status(out_dir=run)
        assert status.state == "dead" and status.alive is False
        assert [a.kind for a in status.anomalies] == ["vanished"] and status.exit_code == 12
        assert main(["train", "status", "--out-dir", str(run)]) == 12
        # Alive (this process as the trainer): running, nothing wrong.
        (run / "state.json").write_text(json.dumps({**life, "pid": os.getpid()}))
        assert run_status(out_dir=run).state == "running" and run_status(out_dir=run).exit_code == 0
        # A run that finished is not judged by its pid.
        (run / "state.json").write_text(json.dumps({**life, "state": "finished", "reason": "max_steps"}))
        assert run_status(out_dir=run).exit_code == 0
    finally:
        gone.wait()


@pytest.mark.slow
@pytest.mark.torch
def test_sigterm_while_torchrun_imports_is_stopped_before_the_first_step(tmp_path: Path) -> None:
    run, tag = tmp_path / "run", new_tag()
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "MW_ENV_TEST_TAG": tag}
    start = [*TRAIN[:-1], "train", "start", "--nproc-per-node", "2", *smoke_args(run, 2)]
    try:
        subprocess.run(start, env=env, check=True, capture_output=True, text=True, timeout=300)
        record = json.loads((run / "run.json").read_text())
        supervisor, torchrun = record["pid"], record["child_pid"]
        # The phase: torchrun alive and still importing (no worker started yet).
        assert proc_stat(torchrun) is not None and not children(torchrun), (
            "torchrun started its workers already"
        )
        os.kill(supervisor, signal.SIGTERM)
        wait_until(lambda: proc_stat(supervisor) is None, timeout=300, what="the supervisor to end")
    finally:
        kill_tagged(tag)
    life = json.loads((run / "state.json").read_text())
    assert life["exit"]["returncode"] == 0, life
    res = subprocess.run(
        [*TRAIN, "status", "--out-dir", str(run)], env=env, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0 and "stopped" in res.stdout, (res.stdout, res.stderr)
    assert "out of memory" not in res.stdout + res.stderr
    assert "before the trainer could take it" in (run / "train.log").read_text()


def test_only_the_stops_own_signal_makes_a_start_up_stop() -> None:
    from mw_env.runs.startup import signal_ended
    from mw_env.runs.torchrun_output import TorchrunStderr

    assert signal_ended(-15, None)  # the trainer itself, killed by the SIGTERM
    assert not signal_ended(1, None) and not signal_ended(1, TorchrunStderr())  # an exit 1 with nothing said
    summary = [
        "Traceback (most recent call last):",
        '  File "torchrun", line 8, in <module>',
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "Root Cause (first observed failure):",
        "[0]:",
        "  exitcode  : -15 (pid: 4242)",
    ]
    workers_killed = TorchrunStderr()
    for line in summary:
        workers_killed.feed(line)
    assert signal_ended(1, workers_killed)
    failed = TorchrunStderr()  # a worker's own failure before torchrun's summary: kept as it is
    for line in ["error: cannot read shard x.parquet", "hint: restore it", *summary]:
        failed.feed(line)
    assert not signal_ended(1, failed)
