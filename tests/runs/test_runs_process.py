"""Detached runs with real child processes (stand-in trainers): each anomaly reproduced end to end,
with its exit code and message; start/stop/refusal and pid-reuse safety."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from mw_env.base.errors import InputError
from mw_env.rundir.runstate import read_state
from mw_env.runs.anomalies import Thresholds
from mw_env.runs.runs import (
    RunRecord,
    is_alive,
    proc_stat,
    read_exit,
    read_run,
    same_process_alive,
)
from mw_env.runs.runstatus import RunWatcher, run_status
from mw_env.runs.stop import stop_run

from .runs_helpers import wait_until

STEPS_THEN_SLEEP = """
for i, loss in enumerate(LOSSES, start=1):
    ev("step", step=i, loss=loss, lr=1e-3, tokens_per_s=1000.0, time=1000.0 + i)
ready()
time.sleep(60)
"""


def _ready(run: Path) -> bool:
    return (run / "ready").exists()


def test_start_records_the_process_and_refuses_a_second_live_run(start_child, tmp_path):
    record = start_child("ready()\ntime.sleep(60)\n", max_steps=100)
    run = tmp_path / "run"
    wait_until(lambda: _ready(run), what="child ready")
    on_disk = json.loads((run / "run.json").read_text())
    assert on_disk["pid"] == record.pid and on_disk["max_steps"] == 100
    assert on_disk["start_ticks"] == proc_stat(record.pid)[2]
    assert on_disk["log_file"] == str(run / "train.log") and on_disk["argv"][1] == "-c"
    # New session: the supervisor leads its own process group, away from our terminal.
    assert os.getpgid(record.pid) == record.pid and os.getsid(record.pid) == record.pid
    assert record.child_pid and os.getpgid(record.child_pid) == record.pid
    assert is_alive(record)
    with pytest.raises(InputError, match="already alive") as err:
        start_child("ready()\n", run_dir=run)
    assert "mw-env train stop" in err.value.hint
    status = run_status(out_dir=run)
    assert status.state == "starting" and status.alive and status.exit_code == 0


def test_a_reused_pid_is_not_the_run(tmp_path):
    me = os.getpid()
    ticks = proc_stat(me)[2]
    assert same_process_alive(me, ticks)
    assert not same_process_alive(me, ticks + 1)  # same pid, another start time: another process
    fake = RunRecord(
        run_dir=tmp_path, pid=me, start_ticks=ticks - 1, argv=("x",), log_file=tmp_path / "l", started_at=0
    )
    assert not is_alive(fake)


def test_proc_stat_parses_names_with_spaces_and_parens(tmp_path):
    (tmp_path / "42").mkdir()
    fields = ["S", "1", "7", "7"] + ["0"] * 15 + ["123456"] + ["0"] * 10
    (tmp_path / "42" / "stat").write_text("42 (my (odd) name) " + " ".join(fields) + "\n")
    assert proc_stat(42, proc=tmp_path) == ("S", 7, 123456, 1)
    assert proc_stat(43, proc=tmp_path) is None


def test_nan_loss_line(start_child, tmp_path):
    start_child("LOSSES = [2.0, 1.8, float('nan')]\n" + STEPS_THEN_SLEEP)
    run = tmp_path / "run"
    wait_until(lambda: _ready(run))
    before = {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in run.iterdir()}
    status = run_status(out_dir=run)
    RunWatcher(out_dir=run).poll()
    # status/watch never touch the run: no file written, the process untouched.
    assert {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in run.iterdir()} == before
    assert is_alive(read_run(run))
    assert status.exit_code == 10, status.anomalies
    assert status.state == "running"
    assert "non-finite loss" in status.anomalies[0].message and "step 3" in status.anomalies[0].message
    assert status.to_dict()["progress"]["loss"] == "nan"  # strict JSON: no NaN literal
    json.dumps(status.to_dict(), allow_nan=False)


def test_diverging_loss(start_child, tmp_path):
    losses = [3.0, 2.4, 2.0, 1.7, 1.5, 1.3, 1.2, 1.1, 1.0, 1.0, 2.5, 4.0, 6.0, 9.0, 13.0]
    start_child(f"LOSSES = {losses!r}\n" + STEPS_THEN_SLEEP)
    run = tmp_path / "run"
    wait_until(lambda: _ready(run))
    status = run_status(out_dir=run)
    assert [a.kind for a in status.anomalies] == ["divergence"]
    assert status.exit_code == 11
    assert "running minimum 1" in status.anomalies[0].message


HIP_OOM_CHILD = """
ev("step", step=1, loss=2.0)
print("Traceback (most recent call last):", file=sys.stderr)
print('  File "loop.py", line 88, in train_step', file=sys.stderr)
print("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
      "of 512.00 MiB of which 0 bytes is free.", file=sys.stderr)
sys.exit(1)
"""


def test_hip_oom_text(start_child, tmp_path):
    record = start_child(HIP_OOM_CHILD)
    run = tmp_path / "run"
    wait_until(lambda: read_exit(run) is not None, what="exit record")
    assert read_exit(run).returncode == 1
    status = run_status(out_dir=run)
    assert status.exit_code == 14
    assert [a.kind for a in status.anomalies] == ["oom", "vanished"]  # the traceback is the OOM itself
    assert "HIP out of memory" in status.anomalies[0].message
    assert "PYTORCH_HIP_ALLOC_CONF" in status.anomalies[0].hint
    assert "exited with code 1" in status.anomalies[1].message
    assert status.state == "dead" and not is_alive(record)


def test_python_traceback(start_child, tmp_path):
    start_child("ev('step', step=1, loss=2.0)\nraise ValueError('shard 7 has no tags column')\n")
    run = tmp_path / "run"
    wait_until(lambda: read_exit(run) is not None, what="exit record")
    status = run_status(out_dir=run)
    assert status.exit_code == 17
    assert status.anomalies[0].kind == "traceback"
    assert "ValueError: shard 7 has no tags column" in status.anomalies[0].message


def test_process_killed_with_sigkill(start_child, tmp_path):
    record = start_child("ev('step', step=1, loss=2.0)\nready()\ntime.sleep(60)\n")
    run = tmp_path / "run"
    wait_until(lambda: _ready(run))
    os.kill(record.child_pid, signal.SIGKILL)
    wait_until(lambda: read_exit(run) is not None, what="exit record")
    status = run_status(out_dir=run)
    assert status.exit_code == 12
    (anomaly,) = status.anomalies
    assert anomaly.kind == "vanished" and "killed by SIGKILL" in anomaly.message
    assert "OOM killer" in anomaly.message


def test_whole_run_killed_leaves_no_exit_record(start_child, tmp_path):
    record = start_child("ready()\ntime.sleep(60)\n")
    run = tmp_path / "run"
    wait_until(lambda: _ready(run))
    os.killpg(record.pid, signal.SIGKILL)
    wait_until(lambda: not is_alive(record), what="run gone")
    status = run_status(out_dir=run)
    assert status.exit_code == 12 and "no exit record" in status.anomalies[0].message


def test_silent_process_with_an_injected_clock(start_child, tmp_path):
    start_child("ev('step', step=1, loss=2.0)\nready()\ntime.sleep(60)\n")
    run = tmp_path / "run"
    wait_until(lambda: _ready(run))
    now = time.time()
    assert run_status(out_dir=run, clock=lambda: now + 14 * 60).exit_code == 0
    status = run_status(out_dir=run, clock=lambda: now + 16 * 60)
    assert status.exit_code == 13
    assert "no output for 16 min between steps" in status.anomalies[0].message
    # Configurable: a 5-minute limit trips sooner.
    assert (
        run_status(out_dir=run, thresholds=Thresholds(silence_s=300), clock=lambda: now + 6 * 60).exit_code
        == 13
    )


def test_silence_before_the_first_step_gets_a_longer_allowance(start_child, tmp_path):
    start_child("ready()\ntime.sleep(60)\n")
    run = tmp_path / "run"
    wait_until(lambda: _ready(run))
    now = time.time()
    assert run_status(out_dir=run, clock=lambda: now + 30 * 60).exit_code == 0
    assert run_status(out_dir=run, clock=lambda: now + 61 * 60).exit_code == 13


def test_stop_sigterm_lets_the_trainer_finish(start_child, tmp_path):
    body = """
def on_term(signum, frame):
    ev("checkpoint", step=5, phase="start", path="checkpoints/step-000000005.pt")
    ev("checkpoint", step=5, phase="done", path="checkpoints/step-000000005.pt")
    ev("finished", step=5, reason="stopped")
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
for i in range(1, 6):
    ev("step", step=i, loss=2.0 / i)
ready()
while True:
    time.sleep(0.05)
"""
    record = start_child(body)
    run = tmp_path / "run"
    wait_until(lambda: _ready(run))
    result = stop_run(out_dir=run, grace_s=20)
    assert result.was_running and not result.escalated
    assert not is_alive(record)
    assert read_exit(run).returncode == 0
    status = run_status(out_dir=run)
    assert status.state == "stopped" and status.exit_code == 0
    assert status.progress.last_checkpoint["step"] == 5
    assert read_run(run).stop["escalated"] is False
    # Stopping again is harmless.
    assert stop_run(out_dir=run).was_running is False


def test_stop_escalates_to_sigkill_of_the_process_group(start_child, tmp_path):
    # The trainer ignores SIGTERM and has a grandchild (a data-loader worker stand-in).
    body = """
import subprocess
signal.signal(signal.SIGTERM, signal.SIG_IGN)
worker = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"])
open(os.path.join(OUT, "worker.pid"), "w").write(str(worker.pid))
ready()
time.sleep(60)
"""
    record = start_child(body)
    run = tmp_path / "run"
    wait_until(lambda: _ready(run))
    worker = int((run / "worker.pid").read_text())
    result = stop_run(out_dir=run, grace_s=1.0, poll_s=0.05)
    assert result.was_running and result.escalated
    assert {record.pid, record.child_pid, worker} <= set(result.killed_pids)
    wait_until(lambda: proc_stat(worker) is None or proc_stat(worker)[0] == "Z", what="worker killed")
    assert read_run(run).stop["escalated"] is True
    status = run_status(out_dir=run)
    # The operator asked for the stop: not an anomaly, but it is visible, and so is what was lost.
    assert status.state == "killed" and status.exit_code == 0
    assert any("no report or manifest" in note for note in status.notes)
    life = read_state(run)
    assert life["state"] == "killed" and life["during"] == "running" and life["exit"]["signal"] == 9
    assert life["last_good_checkpoint"] is None and result.last_good_checkpoint is None
    assert "No complete checkpoint was written" in (run / "report" / "stop.md").read_text()


def test_restart_reports_only_the_new_runs_problems(start_child, tmp_path):
    run = tmp_path / "run"
    start_child("raise RuntimeError('first attempt broke')\n")
    wait_until(lambda: read_exit(run) is not None, what="first exit")
    assert run_status(out_dir=run).exit_code == 17
    start_child("ev('step', step=1, loss=1.0)\nev('finished', step=1, reason='max_steps')\n", run_dir=run)
    wait_until(lambda: read_exit(run) is not None, what="second exit")
    status = run_status(out_dir=run)
    assert status.state == "finished" and status.exit_code == 0, status.anomalies
    assert "first attempt broke" in (run / "train.log").read_text()  # the log keeps the history


def test_start_fails_clearly_when_the_trainer_cannot_start(tmp_path):
    from mw_env.base.errors import StepFailed
    from mw_env.runs.runs import start_run

    with pytest.raises(StepFailed, match="could not be started: /no/such/python"):
        start_run(argv=["/no/such/python", "-c", "pass"], env={}, out_dir=tmp_path / "run")


def test_status_of_a_folder_without_a_run_is_bad_input(tmp_path):
    with pytest.raises(InputError, match="no training run"):
        run_status(out_dir=tmp_path)
    (tmp_path / "run.json").write_text('{"pid": "x"}')
    with pytest.raises(InputError, match="not a valid run record"):
        run_status(out_dir=tmp_path)


def test_foreground_run_without_run_json_is_read_whole(tmp_path):
    lines = [
        {"event": "step", "step": 1, "loss": 2.0, "time": 1.0},
        {"event": "step", "step": 2, "loss": 1.0, "time": 2.0},
        {"event": "finished", "step": 2, "reason": "max_steps", "time": 3.0},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"event": "st')
    status = run_status(out_dir=tmp_path)
    assert status.state == "finished" and status.alive is None and status.exit_code == 0
    assert status.progress.step == 2 and status.progress.steps_per_s == 1.0


def test_watch_streams_events_then_ends_on_finished(start_child, tmp_path):
    body = """
for i in range(1, 5):
    ev("step", step=i, loss=2.0 / i, lr=1e-3)
    time.sleep(0.05)
ev("eval", step=4, loss=0.6, token_acc=0.8, entity_f1=0.7)
ev("checkpoint", step=4, phase="start", path="checkpoints/step-000000004.pt")
ev("checkpoint", step=4, phase="done", path="checkpoints/step-000000004.pt")
ev("skipped_step", step=5, reason="non-finite loss")
ev("finished", step=5, reason="max_steps")
"""
    start_child(body, max_steps=5)
    watcher = RunWatcher(out_dir=tmp_path / "run")
    events = list(watcher.events(poll_s=0.05))
    kinds = [e["event"] for e in events]
    assert kinds.count("progress") == 4
    assert kinds.index("eval") < kinds.index("checkpoint") < kinds.index("finished")
    anomaly = next(e for e in events if e["event"] == "anomaly")
    assert anomaly["kind"] == "nonfinite" and anomaly["code"] == 10
    assert all(json.dumps(e, allow_nan=False) for e in events)
    assert watcher.exit_code == 10


def test_cgroup_oom_kill_counter(tmp_path):
    from mw_env.runs.procinfo import cgroup_oom_kills

    proc, cg = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text("0::/user.slice/run-1.scope\n")
    assert cgroup_oom_kills(proc=proc, sys_fs=cg) is None  # nothing readable: unknown, not zero
    (cg / "user.slice" / "run-1.scope").mkdir(parents=True)
    (cg / "user.slice" / "run-1.scope" / "memory.events").write_text(
        "low 0\nhigh 0\nmax 4\noom 2\noom_kill 3\n"
    )
    assert cgroup_oom_kills(proc=proc, sys_fs=cg) == 3
    (proc / "self" / "cgroup").write_text("0::/\n")  # a container's own namespace root
    (cg / "memory.events").write_text("oom_kill 1\n")
    assert cgroup_oom_kills(proc=proc, sys_fs=cg) == 1


def test_supervisor_refuses_to_run_by_hand(capsys):
    from mw_env.runs.supervise import main as supervise_main

    assert supervise_main(["now"]) == 2
    assert "started by `mw-env train start`" in capsys.readouterr().out


def test_a_replaced_metrics_file_is_wholly_this_runs(tmp_path):
    """--fresh moves metrics.jsonl aside: the new file is judged from its first byte."""
    from mw_env.base.atomic import write_json_atomic

    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text(
        "".join(json.dumps({"event": "step", "step": i, "loss": 1.0}) + "\n" for i in range(1, 4))
    )
    old_size, old_inode = metrics.stat().st_size, metrics.stat().st_ino
    me = os.getpid()
    record = RunRecord(
        run_dir=tmp_path,
        pid=me,
        start_ticks=proc_stat(me)[2],
        argv=("trainer",),
        log_file=tmp_path / "train.log",
        started_at=time.time(),
        metrics_offset=old_size,
        metrics_inode=old_inode,
    )
    write_json_atomic(tmp_path / "run.json", record.to_dict())
    metrics.rename(tmp_path / "metrics.jsonl.old-1")
    fresh = [{"event": "step", "step": 1, "loss": None}] + [
        {"event": "step", "step": i, "loss": 2.0 / i} for i in range(2, 8)
    ]
    metrics.write_text("".join(json.dumps(e) + "\n" for e in fresh))
    assert metrics.stat().st_size > old_size and metrics.stat().st_ino != old_inode
    status = run_status(out_dir=tmp_path)
    assert status.state == "running" and [a.kind for a in status.anomalies] == ["nonfinite"]
    assert "step 1" in status.anomalies[0].message


def test_a_trainer_that_outlives_its_supervisor_is_still_the_run(start_child, tmp_path):
    body = """
def on_term(signum, frame):
    ev("finished", step=1, reason="stopped")
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
ev("step", step=1, loss=2.0)
ready()
while True:
    time.sleep(0.05)
"""
    record = start_child(body)
    run = tmp_path / "run"
    wait_until(lambda: _ready(run))
    assert record.child_start_ticks == proc_stat(record.child_pid)[2]
    os.kill(record.pid, signal.SIGKILL)  # only the supervisor
    wait_until(lambda: not same_process_alive(record.pid, record.start_ticks), what="supervisor gone")
    status = run_status(out_dir=run)
    assert status.alive and status.state == "running" and status.exit_code == 0
    result = stop_run(out_dir=run, grace_s=20)  # SIGTERM goes to the trainer itself now
    assert result.was_running and not result.escalated
    after = run_status(out_dir=run)
    assert after.state == "stopped" and after.exit_code == 0


@pytest.mark.parametrize("history", [5, "running", {"a": 1}, None])
def test_a_damaged_state_history_counts_as_none(tmp_path, history):
    # state.json is only checked for its `state` on read; a `history` that is not a list (a foreign or hand-edited
    # file) starts afresh instead of failing the trainer's next state change.
    from mw_env.rundir.runstate import record_exit, set_state

    (tmp_path / "state.json").write_text(json.dumps({"state": "running", "history": history}))
    record = set_state(tmp_path, "stopping")
    assert [h[0] for h in record["history"]] == ["stopping"]
    record = record_exit(tmp_path, returncode=0, signal=None, oom_kills=0, child_pid=None)
    assert record["state"] == "exited" and [h[0] for h in record["history"]] == ["stopping", "exited"]
