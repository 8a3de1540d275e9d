"""The CLI layer of detached runs: output, --json purity, exit codes."""

from __future__ import annotations

import json
import time

from mw_env.cli import main
from mw_env.runs.runs import read_exit
from mw_env.runs.runstatus import RunWatcher
from smokeargs import smoke_args

from .runs_helpers import wait_until

NAN_RUN = """
ev("step", step=1, loss=2.0, lr=1e-3, tokens_per_s=500.0)
ev("checkpoint", step=1, phase="start", path="checkpoints/step-000000001.pt")
ev("checkpoint", step=1, phase="done", path="checkpoints/step-000000001.pt")
ev("step", step=2, loss=None, lr=1e-3)
ev("skipped_step", step=2, reason="non-finite loss")
ready()
time.sleep(60)
"""


def test_status_text_and_json(start_child, tmp_path, capsys):
    start_child(NAN_RUN, max_steps=10)
    run = tmp_path / "run"
    wait_until(lambda: (run / "ready").exists())
    assert main(["train", "status", "--out-dir", str(run)]) == 10
    out = capsys.readouterr().out
    assert f"run {run.resolve()}: running" in out
    assert "step 2/10 (20%)" in out and "last checkpoint: step 1" in out
    assert "[nonfinite, 10]" in out and "fix: " in out
    assert main(["train", "status", "--out-dir", str(run), "--json"]) == 10
    data = json.loads(capsys.readouterr().out)  # stdout is only JSON
    assert data["exit_code"] == 10 and data["state"] == "running" and data["alive"] is True
    assert {a["kind"] for a in data["anomalies"]} == {"nonfinite"}
    assert data["progress"]["max_steps"] == 10 and data["progress"]["last_checkpoint"]["step"] == 1


def test_status_of_nothing_is_exit_2(tmp_path, capsys):
    assert main(["train", "status", "--out-dir", str(tmp_path)]) == 2
    assert "no training run" in capsys.readouterr().err
    assert main(["train", "stop", "--out-dir", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert "no detached run" in captured.err and "stopping the run" not in captured.err


def test_status_of_a_foreground_run_names_no_missing_log(tmp_path, capsys):
    finished = [
        {"event": "step", "step": 2, "loss": 1.5, "lr": 1e-3, "tokens_per_s": 10.0, "time": time.time()},
        {"event": "eval", "step": 2, "entity_f1": 0.5, "f1_mode": "strict", "time": time.time()},
        {"event": "finished", "step": 2, "reason": "max_steps", "time": time.time()},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in finished))
    assert main(["train", "status", "--out-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "finished (no run.json: a foreground run)" in out and "step 2" in out
    assert "last eval: step 2: entity_f1 (strict) 0.5" in out  # which F1 it is, named
    assert "train.log" not in out  # a foreground run writes none


def test_watch_cli_streams_json_lines_and_exits_with_the_anomaly_code(start_child, tmp_path, capsys):
    start_child("ev('step', step=1, loss=2.0)\ntime.sleep(0.3)\nraise KeyError('tags')\n")
    run = tmp_path / "run"
    assert main(["train", "watch", "--out-dir", str(run), "--poll", "0.1"]) == 17
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert events[0]["event"] == "progress" and events[0]["step"] == 1
    kinds = {e.get("kind") for e in events if e["event"] == "anomaly"}
    assert kinds == {"traceback", "vanished"}
    tb = next(e for e in events if e.get("kind") == "traceback")
    assert "KeyError: 'tags'" in tb["message"] and tb["code"] == 17


def test_watch_reports_a_stall_once_per_silent_stretch(start_child, tmp_path):
    start_child("ev('step', step=1, loss=2.0)\nready()\ntime.sleep(60)\n")
    run = tmp_path / "run"
    wait_until(lambda: (run / "ready").exists())
    now = [time.time()]
    watcher = RunWatcher(out_dir=run, clock=lambda: now[0])
    assert [e["event"] for e in watcher.poll()] == ["progress"]
    now[0] += 16 * 60
    stalls = [e for e in watcher.poll() if e["event"] == "anomaly"]
    assert [e["kind"] for e in stalls] == ["stalled"] and stalls[0]["code"] == 13
    now[0] += 60
    assert watcher.poll() == []  # the same stretch is not reported again
    assert not watcher.done and watcher.exit_code == 13


def test_stop_cli_on_a_finished_run(start_child, tmp_path, capsys):
    start_child("ev('step', step=1, loss=2.0)\nev('finished', step=1, reason='max_steps')\n")
    run = tmp_path / "run"
    wait_until(lambda: read_exit(run) is not None)
    assert main(["train", "stop", "--out-dir", str(run)]) == 0
    assert "no live run" in capsys.readouterr().out
    assert main(["train", "stop", "--out-dir", str(run), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["was_running"] is False and data["state"] == "finished"


def test_start_refuses_a_folder_with_a_live_run(start_child, tmp_path, capsys):
    start_child("ready()\ntime.sleep(60)\n")
    run = tmp_path / "run"
    wait_until(lambda: (run / "ready").exists())
    code = main(["train", "start", *smoke_args(run)])
    assert code == 2
    err = capsys.readouterr().err
    assert "a run is already alive" in err and "mw-env train stop --out-dir" in err
