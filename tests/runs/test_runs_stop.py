"""`stop`'s grace comes from the run's own measured times (issue 20 #2: an address-tagger step of ~87 s on a
CPU was SIGKILLed by the fixed 90 s grace, with no report and no manifest)."""

from __future__ import annotations

from mw_env.runs.stop import GRACE_FLOOR_S, REPORT_S, stop_grace


def _events(step_s: float, ckpt_s: float, eval_s: float) -> list[dict]:
    t = 1000.0
    out = []
    for step in (1, 2):
        t += step_s
        out.append({"event": "step", "step": step, "step_s": step_s, "time": t})
    out.append({"event": "eval", "step": 2, "time": t + eval_s})
    out.append({"event": "checkpoint", "step": 2, "phase": "start", "time": t + eval_s})
    out.append({"event": "checkpoint", "step": 2, "phase": "done", "time": t + eval_s + ckpt_s})
    return out


def test_the_grace_covers_two_of_the_longest_steps_the_checkpoint_eval_and_report():
    grace = stop_grace(_events(step_s=87.0, ckpt_s=12.0, eval_s=30.0))
    assert grace.step_s == 87.0 and grace.checkpoint_s == 12.0 and grace.eval_s == 30.0
    assert grace.seconds == 2 * 87 + 2 * (12 + 30) + REPORT_S  # 318 s where the old default was 90
    assert grace.after_ack_s == 2 * (12 + 30) + REPORT_S
    assert "step 87s, checkpoint 12s, eval 30s" in grace.describe() and "--grace" in grace.describe()


def test_a_fast_or_unmeasured_run_keeps_the_floor_and_an_override_wins():
    assert stop_grace([]).seconds == GRACE_FLOOR_S
    assert stop_grace(_events(step_s=0.1, ckpt_s=0.1, eval_s=0.1)).seconds == GRACE_FLOOR_S
    given = stop_grace(_events(step_s=87.0, ckpt_s=12.0, eval_s=30.0), override=5)
    assert given.seconds == 5 and given.overridden and given.describe() == "5s (--grace)"


def test_bad_values_in_the_events_are_not_measurements():
    events = [
        {"event": "step", "step": 1, "step_s": "slow", "time": 1.0},
        {"event": "step", "step": 2, "step_s": True, "time": "x"},
        {"event": "checkpoint", "step": 2, "phase": "done", "time": 5.0},  # no start: not a duration
    ]
    grace = stop_grace(events)
    assert grace.seconds == GRACE_FLOOR_S and grace.step_s is None and grace.checkpoint_s is None


def test_verify_refuses_an_unfinished_run_and_judges_an_old_one_by_its_manifest(tmp_path):
    import json

    import pytest

    from mw_env.base.errors import InputError
    from mw_env.rundir.runstate import record_exit, set_state
    from mw_env.runs.liveness import check_verifiable

    run = tmp_path / "run"
    run.mkdir()
    (run / "state.json").write_text(json.dumps({"state": "exited", "returncode": 0, "signal": None}))
    check_verifiable(run)  # a record from before states: not refused
    set_state(run, "running", pid=2**22 + 12345)  # a pid no process has
    set_state(run, "finishing", pid=2**22 + 12345, reason="max_steps", step=3)
    record_exit(run, returncode=None, signal=9, oom_kills=0, child_pid=None)
    with pytest.raises(InputError, match="ended without finishing \\(it was finishing\\)"):
        check_verifiable(run)
    set_state(run, "finished", reason="max_steps", step=3)
    check_verifiable(run)


def test_watch_says_a_run_that_died_writing_its_report_is_incomplete(tmp_path):
    import json

    from mw_env.rundir.runstate import record_exit, set_state
    from mw_env.runs.runstatus import RunWatcher, run_status

    run = tmp_path / "run"
    run.mkdir()
    events = [
        {"event": "step", "step": 1, "loss": 1.0, "time": 1.0},
        {"event": "finished", "step": 1, "time": 2.0},
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    set_state(run, "finishing", pid=2**22 + 12345, reason="max_steps", step=1)
    record_exit(run, returncode=None, signal=9, oom_kills=0, child_pid=None)
    out = RunWatcher(out_dir=run).poll()
    assert out[-1]["event"] == "finished" and out[-1]["complete"] is False
    status = run_status(out_dir=run)
    assert status.state == "unknown" and any("ended while writing its report" in n for n in status.notes)


def test_a_foreground_run_is_judged_by_the_pid_its_state_record_names(tmp_path):
    import json
    import os

    from mw_env.rundir.runstate import set_state
    from mw_env.runs.runstatus import run_status

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(
        json.dumps({"event": "step", "step": 1, "loss": 1.0, "time": 1.0}) + "\n"
    )
    set_state(run, "running", pid=os.getpid())  # this process: alive
    assert run_status(out_dir=run).state == "running"
    set_state(run, "running", pid=2**22 + 12345)  # no such process: the foreground trainer is gone
    assert run_status(out_dir=run).state == "dead"


def test_stop_counts_a_run_as_gone_only_once_its_folder_lock_is_free(tmp_path):
    """A killed trainer shows in /proc until its memory is torn down and drops its flock only after that: stop
    waits for the lock too, so a `train start` right after it is not refused (seen in a full CI run)."""
    import subprocess
    import sys

    from mw_env.runs.runs import RunRecord
    from mw_env.runs.stop import _gone

    run = tmp_path / "run"
    run.mkdir()
    # No process of the run left: a supervisor pid above any pid_max (no group), no run id.
    record = RunRecord(
        run_dir=run, pid=2**22 + 7, start_ticks=0, argv=(), log_file=run / "train.log", started_at=0.0
    )
    assert _gone(record)  # no lock file at all: nothing holds the folder
    code = "import sys; from mw_env.rundir import runlock; runlock.acquire(sys.argv[1]); print('held', flush=True)"
    holder = subprocess.Popen(
        [sys.executable, "-c", code + "; sys.stdin.read()", str(run)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        assert not _gone(record)  # the lock of a trainer still tearing down: not gone yet
    finally:
        holder.communicate("")  # it exits, and its flock goes with it
    assert _gone(record)
