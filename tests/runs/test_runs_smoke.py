"""The real trainer, detached: started, watched, stopped with SIGTERM (checkpoint written), restarted,
finished; then `status` exits 0. Goes through the CLI exactly as a user would."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from mw_env.cli import main
from mw_env.runs.runs import read_exit, read_run
from mw_env.runs.runstatus import RunWatcher, run_status
from smokeargs import smoke_args

from .runs_helpers import wait_until

pytestmark = [pytest.mark.torch, pytest.mark.slow]


def _start(run: Path, max_steps: int, capsys) -> str:
    code = main(
        [
            "train",
            "start",
            *smoke_args(run, max_steps, "runtime.checkpoint_every=100000", "runtime.eval_every=100000"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    return out


def test_detached_smoke_run_stop_restart_finish(tmp_path, capsys):
    run = tmp_path / "smoke"
    out = _start(run, 100000, capsys)
    assert f"mw-env train status {run}" in out
    record = read_run(run)
    assert record is not None and record.max_steps == 100000

    # Watch until the trainer is a few steps in.
    watcher = RunWatcher(out_dir=run)
    seen: list[dict] = []
    deadline = time.monotonic() + 240
    while not any(e["event"] == "progress" and e["step"] >= 3 for e in seen):
        assert time.monotonic() < deadline, f"no progress; log:\n{(run / 'train.log').read_text()[-3000:]}"
        assert not watcher.done, f"run ended early: {seen}\n{(run / 'train.log').read_text()[-3000:]}"
        seen += watcher.poll()
        time.sleep(0.2)
    progress = [e for e in seen if e["event"] == "progress"]
    assert all(json.dumps(e, allow_nan=False) for e in seen)
    assert {"loss", "lr", "tokens_per_s", "eta_s"} <= set(progress[-1])
    status = run_status(out_dir=run)
    assert status.state == "running" and status.exit_code == 0, status.anomalies

    # SIGTERM: the trainer finishes its step, checkpoints, logs finished/stopped, exits 0.
    assert main(["train", "stop", "--out-dir", str(run), "--grace", "120"]) == 0
    assert "stopped after" in capsys.readouterr().out
    assert read_exit(run).returncode == 0
    stopped = run_status(out_dir=run)
    assert stopped.state == "stopped" and stopped.exit_code == 0, stopped.anomalies
    ckpt = stopped.progress.last_checkpoint
    assert ckpt and ckpt["step"] >= 3 and Path(ckpt["path"]).is_file()
    k = ckpt["step"]

    # Restart into the same folder with a near end: it resumes from step k and finishes.
    _start(run, k + 3, capsys)
    wait_until(lambda: read_exit(run) is not None, timeout=240, what="the restarted run to end")
    assert read_exit(run).returncode == 0, (run / "train.log").read_text()[-3000:]
    events = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    resumed = [e for e in events if e["event"] == "resumed"]
    assert resumed and resumed[-1]["step"] == k
    finished = run_status(out_dir=run)
    assert finished.state == "finished" and finished.progress.step == k + 3
    assert main(["train", "status", "--out-dir", str(run)]) == 0
    assert "no anomalies" in capsys.readouterr().out
    assert main(["train", "status", "--out-dir", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "finished"

    # watch on a finished run replays this run's events and ends with `finished`.
    assert main(["train", "watch", "--out-dir", str(run), "--poll", "0.1"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines[0]["event"] == "progress" and lines[0]["step"] == k + 1
    assert lines[-1] == {**lines[-1], "event": "finished", "reason": "max_steps", "step": k + 3}
