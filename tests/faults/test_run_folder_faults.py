"""The run folder's own records lost or cut short (issue 40): a trainer whose lock files vanish, a detached run whose
run.json is gone, a foreground run that stopped on its own error. Each is found by what is left, the live
processes (MW_ENV_RUN_DIR in their environment) or the trainer's last words in state.json, and told as what it is.

Stand-in processes (plain python, no torch) for the rules; one real detached run, held inside a step, for the
whole story: its lock files deleted, a second `mw-env train` and a bare trainer refused, its lock file made
again, its run.json deleted, `status` calling it detached, `stop` stopping it. And one real foreground run
stopped by a full disk mid-run, told by `status` with its own words.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.runs.runs_helpers import wait_until

from mw_env.base.errors import InputError
from mw_env.cli import main
from mw_env.rundir import runlock, runstate
from mw_env.rundir.occupants import DETACHED_ENV, RUN_DIR_ENV, RUN_ID_ENV
from mw_env.runs.runstatus import run_status
from mw_env.runs.stop import stop_run
from proctools import MARKER, assert_none_left, kill_tagged, new_tag, tagged
from smokeargs import TRAIN, smoke_args

REPO = Path(__file__).resolve().parents[2]

# A stand-in trainer: says it is ready, then waits for SIGTERM (the graceful stop) and ends 0.
STAND_IN = (
    "import os, signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
    "open(sys.argv[1], 'w').close()\n"
    "while True:\n    time.sleep(0.05)\n"
)


def _stand_in(run: Path, tag: str, **env: str) -> subprocess.Popen[bytes]:
    ready = run / "ready"
    full = {**os.environ, MARKER: tag, RUN_DIR_ENV: str(run.resolve()), RUN_ID_ENV: "other-launch", **env}
    proc = subprocess.Popen([sys.executable, "-c", STAND_IN, str(ready)], env=full)
    wait_until(lambda: ready.exists(), what="the stand-in trainer")
    return proc


# ---------------------------------------------------------------------------------------------------------------
# A foreground run's own last error


def test_status_quotes_the_error_a_foreground_run_stopped_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The trainer records its `error:`/`hint:` in state.json (runstate.record_failure) as it exits: status
    quotes them (no train.log to read), not "killed with its supervisor?", an OOM or "restart: it resumes"."""
    run = tmp_path / "run"
    run.mkdir()
    step = {"event": "step", "step": 12, "loss": 1.0, "time": time.time()}
    (run / "metrics.jsonl").write_text(json.dumps(step) + "\n")
    runstate.set_state(run, "running", pid=os.getpid(), step=0)
    runstate.record_failure(
        run,
        returncode=2,
        error="shard rows.jsonl line 301: 10 tokens but 9 tags",
        hint="every token needs exactly one BIO tag",
        during="running",
        pid=2**22 + 17,
    )
    status = run_status(out_dir=run)
    assert status.state == "dead" and status.exit_code == 12
    (found,) = status.anomalies
    assert "exited with code 2" in found.message and "line 301: 10 tokens but 9 tags" in found.message
    assert found.hint.startswith("every token needs exactly one BIO tag; then start it again")
    assert main(["train", "status", "--out-dir", str(run)]) == 12
    out = capsys.readouterr().out
    for wrong in ("killed with its supervisor", "journalctl", "restart with the same command", "OOM"):
        assert wrong not in out, out
    # A supervisor's record of the same end afterwards (a detached run) keeps the words and where it was.
    runstate.record_exit(run, returncode=2, signal=None, oom_kills=0, child_pid=None)
    life = runstate.read_state(run) or {}
    assert life["error"] and life["during"] == "running" and life["state"] == "exited"


def test_a_foreground_run_stopped_with_ctrl_c_is_interrupted_not_vanished(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"event": "step", "step": 3, "time": 1.0}) + "\n")
    runstate.record_failure(
        run, returncode=130, error="interrupted (Ctrl-C)", hint=None, during="running", pid=2**22 + 17
    )
    status = run_status(out_dir=run)
    assert status.state == "interrupted" and status.exit_code == 0 and not status.anomalies
    assert any("the same command resumes" in n for n in status.notes)


def test_a_trainer_that_failed_before_its_first_event_is_still_a_run(tmp_path: Path) -> None:
    """Bad data found at the start: no metrics.jsonl yet, but the trainer's words in state.json."""
    run = tmp_path / "run"
    run.mkdir()
    runstate.record_failure(
        run, returncode=2, error="bad row", hint="fix it", during="starting", pid=2**22 + 17
    )
    status = run_status(out_dir=run)
    assert status.exit_code == 12 and "it reported: bad row" in status.anomalies[0].message


# ---------------------------------------------------------------------------------------------------------------
# Lock files deleted under a live trainer


def test_a_live_trainer_without_its_lock_file_still_holds_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run, tag = tmp_path / "run", new_tag()
    run.mkdir()
    proc = _stand_in(run, tag)
    try:
        assert not runlock.lock_path(run).exists()  # no lock file at all: only its process says it is there
        with pytest.raises(
            InputError, match=rf"(?s)in use by another trainer \(pid {proc.pid}: .*found by its processes"
        ):
            runlock.check_free(run)
        with pytest.raises(InputError, match=r"its lock file .*\.lock is gone"):
            runlock.acquire(run)
        assert not runlock.lock_path(run).exists() or runlock.holder(run) is None
        # Its own launch (the same run id) is not another trainer; nor, on a node of a multi-node run, a node
        # sharing the folder (the flock decides there).
        monkeypatch.setenv(RUN_ID_ENV, "other-launch")
        runlock.acquire(run).release()
        monkeypatch.delenv(RUN_ID_ENV)
        monkeypatch.setenv("MW_ENV_NODE_RANK", "1")
        runlock.acquire(run).release()
        monkeypatch.delenv("MW_ENV_NODE_RANK")
    finally:
        proc.kill()
        proc.wait()
        kill_tagged(tag)
    runlock.check_free(run)  # gone: free again


def test_the_holder_makes_its_deleted_lock_file_again(tmp_path: Path) -> None:
    run = tmp_path / "run"
    lock = runlock.acquire(run, argv=["trainer", "A"])
    for name in ("metrics.jsonl", "checkpoints"):  # what a run has written by then
        (run / name).touch()
    try:
        assert lock.keep() is None
        runlock.lock_path(run).unlink()
        # Missing at one look: the next decides (a whole folder being deleted loses its other files too).
        assert lock.keep() is None and not runlock.lock_path(run).exists()
        said = lock.keep()
        assert said is not None and "was deleted; this trainer made it again" in said
        assert (runlock.holder(run) or {}).get("argv") == ["trainer", "A"]
        # The new file is really held: another process's flock on it fails.
        probe = subprocess.run(
            [
                sys.executable,
                "-c",
                "import fcntl,sys; f=open(sys.argv[1]); fcntl.flock(f, fcntl.LOCK_EX|fcntl.LOCK_NB)",
                str(runlock.lock_path(run)),
            ],
            capture_output=True,
        )
        assert probe.returncode != 0 and b"BlockingIOError" in probe.stderr
        assert lock.keep() is None
    finally:
        lock.release()


def test_a_lock_file_is_not_made_again_inside_a_folder_being_deleted(tmp_path: Path) -> None:
    """`rm -rf RUN` under a live trainer: the watcher made the deleted lock file again before rm's last rmdir,
    which failed with 'Directory not empty' (the folder then stayed, holding only the new lock file)."""
    run = tmp_path / "run"
    lock = runlock.acquire(run, argv=["trainer", "A"])
    for name in ("metrics.jsonl", "train.log", "checkpoints"):
        (run / name).touch()
    try:
        runlock.lock_path(run).unlink()
        assert lock.keep() is None
        (run / "metrics.jsonl").unlink()  # the deletion goes on between two looks
        assert lock.keep() is None and not runlock.lock_path(run).exists()
        for name in ("train.log", "checkpoints"):
            (run / name).unlink()
        assert lock.keep() is None and lock.keep() is None  # nothing left: never made again
        run.rmdir()  # rm's last step succeeds
    finally:
        lock.release()


# ---------------------------------------------------------------------------------------------------------------
# A detached run whose run.json is gone


def test_stop_finds_a_detached_run_by_its_processes_when_run_json_is_gone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, tag = tmp_path / "run", new_tag()
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"event": "step", "step": 5, "time": time.time()}) + "\n")
    proc = _stand_in(run, tag, **{DETACHED_ENV: "1"})
    try:
        status = run_status(out_dir=run)
        assert status.detached_pids == (proc.pid,) and status.state == "running" and status.alive
        assert any("run.json is gone, but this is a detached run" in n for n in status.notes)
        assert main(["train", "status", "--out-dir", str(run)]) == 0
        assert "a foreground run" not in capsys.readouterr().out
        result = stop_run(out_dir=run, grace_s=60)
        assert result.was_running and not result.escalated and result.folder_kept
        assert result.orphans == (proc.pid,)
        assert proc.wait(timeout=30) == 0  # the graceful stop's own end
    finally:
        kill_tagged(tag)
    # A foreground run (no DETACHED mark) is not stopped by `train stop`: the refusal names its pid.
    proc = _stand_in(run, tag)
    try:
        with pytest.raises(InputError, match=rf"a foreground run is training there: pid {proc.pid}"):
            stop_run(out_dir=run, grace_s=1)
    finally:
        proc.kill()
        proc.wait()
        kill_tagged(tag)


# ---------------------------------------------------------------------------------------------------------------
# The real thing


def _env(tag: str, **more: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1", MARKER: tag, **more}


@pytest.mark.slow
@pytest.mark.torch
def test_a_detached_run_whose_lock_files_and_run_json_are_deleted(tmp_path: Path) -> None:
    run, tag, hold = tmp_path / "run", new_tag(), tmp_path / "go"
    args = smoke_args(run, 1000, "runtime.threads=1", "runtime.log_every=1")
    env = _env(tag, MW_ENV_TEST_HOLD=f"step-2:{hold}")
    try:
        subprocess.run([*TRAIN, "start", *args], env=env, check=True, capture_output=True, timeout=300)
        wait_until(lambda: Path(f"{hold}.waiting").exists(), timeout=300, what="the run held after step 2")
        for name in (".lock", ".run.lock", ".state.lock"):
            (run / name).unlink(missing_ok=True)
        # A second `mw-env train` into the live folder: refused at once (was: it trained beside the first), by
        # the first one's processes or, once the first made its lock file again (within two looks of its watcher), by its flock.
        second = subprocess.run([*TRAIN, *args], env=_env(tag), capture_output=True, text=True, timeout=300)
        assert second.returncode == 2 and "in use by another trainer" in second.stderr, second.stderr
        # The holder made its lock file again: a trainer started by other means (no MW_ENV_RUN_DIR) meets it.
        wait_until(lambda: runlock.lock_path(run).exists(), timeout=60, what="the lock file made again")
        bare_env = {k: v for k, v in _env(tag).items() if k != "MW_ENV_TEST_HOLD"}
        bare = subprocess.run(
            [
                sys.executable,
                "-m",
                "mw_env.trainer",
                "run",
                "--config",
                "smoke",
                "--set",
                f"runtime.out_dir={run}",
            ],
            env=bare_env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert bare.returncode == 2 and "in use by another trainer" in bare.stderr, bare.stderr
        assert "Traceback" not in second.stderr + bare.stderr
        # run.json deleted: status says it is detached (not a foreground run), stop stops it.
        (run / "run.json").unlink()
        status = subprocess.run(
            [*TRAIN, "status", "--out-dir", str(run)],
            env=_env(tag),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert status.returncode == 0 and "detached, run.json gone" in status.stdout, status.stdout
        stop = subprocess.run(
            [*TRAIN, "stop", "--out-dir", str(run)],
            env=_env(tag),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert stop.returncode == 0 and "has no run.json; its processes" in stop.stdout, (
            stop.stdout,
            stop.stderr,
        )
        assert_none_left(tag, within=60)
    finally:
        kill_tagged(tag)
    life = runstate.read_state(run) or {}
    assert life.get("state") == "finished" and life.get("reason") == "stopped", life
    assert not tagged(tag)


@pytest.mark.slow
@pytest.mark.torch
def test_a_run_that_stopped_on_bad_data_is_told_by_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The campaign's case: a row whose tags do not match its words. The trainer (in-process, as
    `python -m mw_env.trainer run` is) says it and records it; status quotes it, exit 12, with the fix, never
    "restart: it resumes" (the same command would stop on the same row)."""
    from tests.trainer.helpers import synthetic_rows

    from mw_env.trainer.__main__ import main as trainer

    rows = synthetic_rows(64)
    rows[40]["tags"] = rows[40]["tags"][:-1]
    corpus = tmp_path / "rows.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = tmp_path / "run"
    sets = [
        "data.source=files",
        f"data.train_files=[{corpus}]",
        "data.val_fraction=0.25",
        f"runtime.out_dir={run}",
    ]
    sets += ["runtime.max_steps=4", "optim.batch_size=8", "runtime.threads=1"]
    code = trainer(["run", "--config", "smoke", *[a for item in sets for a in ("--set", item)]])
    err = capsys.readouterr().err
    assert code == 2 and "rows.jsonl line 41" in err, err
    status = run_status(out_dir=run)
    assert status.exit_code == 12, status
    (found,) = status.anomalies
    assert (
        "rows.jsonl line 41" in found.message
        and "restart" not in found.hint
        and "journalctl" not in found.hint
    )
