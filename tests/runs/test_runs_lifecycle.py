"""A run's life told truthfully (issue 20 #1, #2, #8), on the real trainer with the smoke config.

The trainer is held at a step or before its report by MW_ENV_TEST_HOLD (trainer/lifecycle.py): each
test waits for the trainer to reach the point (a `.waiting` file), looks, and releases it by creating
the gate file. No sleeps, no timed assertions: a slow machine only makes the waits longer.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from mw_env.cli import main
from mw_env.rundir.runstate import read_state
from mw_env.runs.runs import read_exit, read_run
from mw_env.runs.runstatus import RunWatcher, run_status
from smokeargs import smoke_args

from .runs_helpers import wait_until

pytestmark = [pytest.mark.torch, pytest.mark.slow]

WAIT = (
    300.0  # the bound on each wait for the trainer (imports on a loaded machine); never reached when it works
)


def _train_args(run: Path, max_steps: int, checkpoint_every: int = 100000) -> list[str]:
    return smoke_args(
        run, max_steps, f"runtime.checkpoint_every={checkpoint_every}", "runtime.eval_every=100000"
    )


def _start(run: Path, capsys, **kwargs) -> None:
    code = main(["train", "start", *_train_args(run, **kwargs)])
    captured = capsys.readouterr()
    assert code == 0, captured.out + captured.err  # a refusal says why on stderr


def _reached(gate: Path, run: Path) -> None:
    waiting = gate.with_name(gate.name + ".waiting")
    wait_until(
        lambda: waiting.exists() or read_exit(run) is not None,
        timeout=WAIT,
        what=f"the trainer at {gate.name}",
    )
    assert waiting.exists(), (run / "train.log").read_text()[-3000:]


def _log(run: Path) -> str:
    return (run / "train.log").read_text()[-3000:]


def test_finishing_until_report_and_manifest_are_written_then_verify_passes(tmp_path, capsys, monkeypatch):
    run, gate = tmp_path / "run", tmp_path / "report-gate"
    monkeypatch.setenv("MW_ENV_TEST_HOLD", f"report:{gate}")
    _start(run, capsys, max_steps=2)
    _reached(gate, run)

    # The loop has ended (metrics.jsonl has `finished`), the report is not written: not finished yet.
    assert any(
        json.loads(line)["event"] == "finished" for line in (run / "metrics.jsonl").read_text().splitlines()
    )
    status = run_status(out_dir=run)
    assert status.state == "finishing", (status, _log(run))
    assert any("being written" in note for note in status.notes)
    watcher = RunWatcher(out_dir=run)
    kinds = [e["event"] for e in watcher.poll()]
    assert "finishing" in kinds and "finished" not in kinds and not watcher.done
    assert main(["train", "verify", str(run)]) == 2
    assert "still finishing" in capsys.readouterr().err
    assert main(["train", "status", str(run)]) == 0
    assert f"run {run}: finishing" in capsys.readouterr().out

    gate.touch()
    wait_until(lambda: read_exit(run) is not None, timeout=WAIT, what="the run to end")
    assert read_exit(run).returncode == 0, _log(run)
    life = read_state(run)
    assert life["state"] == "finished" and life["reason"] == "max_steps" and life["step"] == 2
    assert [h[0] for h in life["history"]][-3:] == ["running", "finishing", "finished"]
    assert run_status(out_dir=run).state == "finished"
    # #11: the smoke config's 2 warmup steps cover the whole 2-step run: said at start, in the run's log.
    assert "warning: optim.warmup_steps (2) >= runtime.max_steps (2)" in (run / "train.log").read_text()
    assert main(["train", "verify", str(run)]) == 0  # right after: nothing is still being written
    assert capsys.readouterr().out.startswith("ok: ")
    while not watcher.done:
        events = watcher.poll()
        kinds += [e["event"] for e in events]
    assert kinds[-1] == "finished" and events[-1]["report"].endswith("report.md")

    # #8: the same command again says the run is finished and how to start again; nothing runs.
    before = (run / "metrics.jsonl").read_text()
    assert main(["train", *_train_args(run, max_steps=2)]) == 0
    err = capsys.readouterr().err
    assert "note: the run in" in err and "already finished at step 2" in err and "--fresh" in err, err
    assert (run / "metrics.jsonl").read_text() == before


def test_stop_leaves_a_truthful_state_killed_or_finished(tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    gate2, gate3 = tmp_path / "step-2", tmp_path / "step-3"
    monkeypatch.setenv("MW_ENV_TEST_HOLD", f"step-2:{gate2}")
    _start(run, capsys, max_steps=100000, checkpoint_every=1)
    _reached(gate2, run)  # steps 1 and 2 done and checkpointed; the third step never ends

    # A step longer than the grace (here 0 s, given): killed, and the record says so and what is left.
    assert main(["train", "stop", str(run), "--grace", "0"]) == 1
    out = capsys.readouterr().out
    assert "killed with SIGKILL" in out and "last good checkpoint: checkpoints/step-000000002.pt" in out, out
    life = read_state(run)
    assert life["state"] == "killed" and life["during"] == "running"
    assert life["last_good_checkpoint"] == "checkpoints/step-000000002.pt"
    assert "checkpoints/step-000000002.pt" in (run / "report" / "stop.md").read_text()
    status = run_status(out_dir=run)
    assert status.state == "killed" and status.exit_code == 0
    assert main(["train", "verify", "--out-dir", str(run)]) == 2
    assert "was killed by `mw-env train stop`" in capsys.readouterr().err

    # Started again, it resumes at step 2; stopped with the computed grace while a step is held, it
    # finishes that step, checkpoints, writes its report and manifest, and exits 0.
    monkeypatch.setenv("MW_ENV_TEST_HOLD", f"step-3:{gate3}")
    _start(run, capsys, max_steps=100000, checkpoint_every=1)
    _reached(gate3, run)
    codes: list[int] = []
    stopper = threading.Thread(target=lambda: codes.append(main(["train", "stop", str(run)])))
    stopper.start()
    wait_until(lambda: (read_run(run).stop or {}).get("requested_at") is not None, timeout=WAIT, what="stop")
    gate3.touch()  # the held step ends only now, after stop has sent SIGTERM
    stopper.join(timeout=WAIT)
    assert codes == [0], capsys.readouterr()
    life = read_state(run)
    assert life["state"] == "finished" and life["reason"] == "stopped", (life, _log(run))
    assert [h[0] for h in life["history"]][-4:] == ["running", "stopping", "finishing", "finished"]
    assert run_status(out_dir=run).state == "stopped"
    assert (run / "report" / "report.md").is_file() and not (run / "report" / "stop.md").exists()
    assert read_run(run).stop["escalated"] is False
    capsys.readouterr()
    assert main(["train", "verify", str(run)]) == 0
    assert capsys.readouterr().out.startswith("ok: ")
