"""A run is bound to its folder (issue 29, class 6): a trainer whose run folder is deleted or replaced stops
within seconds without recreating it, and `train status`/`stop` find a run by its processes (MW_ENV_RUN_DIR in
their environment) when the folder holds no record of it. Waits are for events (a marker, a process state)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from tests.runs.runs_helpers import wait_until

from mw_env.cli import main
from mw_env.rundir.occupants import RUN_DIR_ENV, proc_stat
from mw_env.trainer import folderwatch
from proctools import kill_tagged, new_tag
from smokeargs import TRAIN, smoke_args

REPO = Path(__file__).resolve().parents[2]


def test_lost_tells_deleted_replaced_and_the_same_folder_apart(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    ident = folderwatch.identity(run)
    assert folderwatch.lost(run, ident) is None
    (run / "metrics.jsonl").write_text("{}\n")  # its contents may change freely
    assert folderwatch.lost(run, ident) is None
    run.rename(tmp_path / "moved")
    assert folderwatch.lost(run, ident) == "was deleted or moved away"
    run.mkdir()  # another folder of the same name
    assert "was replaced by another folder (inode" in (folderwatch.lost(run, ident) or "")
    run.rmdir()
    run.write_text("x")
    assert folderwatch.lost(run, ident) is not None


def test_the_watcher_reports_a_deleted_folder_and_ends_with_its_block(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    seen: list[str] = []
    noticed = threading.Event()

    def on_lost(folder: Path, what: str) -> None:
        seen.append(what)
        noticed.set()

    done = folderwatch.watch(run, interval=0.05, on_lost=on_lost)
    shutil.rmtree(run)
    assert noticed.wait(60), "the watcher did not notice"
    assert seen == ["was deleted or moved away"] and not run.exists()
    done.set()
    text = folderwatch.message(run, seen[0])
    assert text.startswith(f"error: the run folder {run} was deleted") and "\nhint: " in text
    assert "not recreated" in text
    # `watching` stops its thread at the block's end: a folder deleted afterwards ends nothing.
    run.mkdir()
    with folderwatch.watching(run):
        pass
    shutil.rmtree(run)


def test_status_and_stop_find_a_run_by_its_processes_when_its_folder_is_gone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, tag = tmp_path / "run", new_tag()
    env = {**os.environ, RUN_DIR_ENV: str(run.resolve()), "MW_ENV_TEST_TAG": tag}
    # A stand-in for a trainer whose folder was deleted: alive, marked as every process of a launch is.
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], env=env, stdin=subprocess.PIPE
    )
    try:
        wait_until(lambda: _marked(proc.pid, run), what="the process to start")
        assert main(["train", "status", "--out-dir", str(run)]) == 2
        err = capsys.readouterr().err
        assert "no run record in" in err and str(proc.pid) in err and "mw-env train stop" in err
        assert main(["train", "watch", "--out-dir", str(run)]) == 2
        assert str(proc.pid) in capsys.readouterr().err
        assert main(["train", "stop", str(run), "--grace", "60"]) == 0
        out = capsys.readouterr().out
        assert "has no record there" in out and str(proc.pid) in out and "stopped" in out
        assert proc.wait(timeout=60) == -15  # the SIGTERM `stop` sent
        assert not run.exists()  # nothing written for it
    finally:
        proc.kill()
        kill_tagged(tag)
    assert main(["train", "stop", str(run)]) == 2  # nothing left: no run there
    assert "no detached run" in capsys.readouterr().err


def _marked(pid: int, run: Path) -> bool:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return f"{RUN_DIR_ENV}={run.resolve()}".encode() in environ


@pytest.mark.slow
@pytest.mark.torch
def test_a_trainer_whose_folder_is_deleted_stops_and_does_not_recreate_it(tmp_path: Path) -> None:
    run, gate, tag = tmp_path / "run", tmp_path / "step-2", new_tag()
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO / "src"),
        "MW_ENV_TEST_TAG": tag,
        "MW_ENV_TEST_HOLD": f"step-2:{gate}",  # held inside step 2 (checkpoints of step 1 written)
    }
    argv = [*TRAIN, *smoke_args(run, 50, "runtime.checkpoint_every=1")]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(
            lambda: Path(f"{gate}.waiting").exists() or proc.poll() is not None, timeout=300, what="step 2"
        )
        assert proc.poll() is None, proc.communicate()
        shutil.rmtree(run)
        out, err = proc.communicate(timeout=300)  # ends by itself: the gate is never opened
    finally:
        proc.kill()
        kill_tagged(tag)
    assert proc.returncode == 1, (out, err)
    assert f"error: the run folder {run} was deleted or moved away" in err and "Traceback" not in err
    assert not run.exists()  # no checkpoints/, report or state record in a new folder of the same name
    assert proc_stat(proc.pid) is None


def test_stop_leaves_a_foreground_run_whose_folder_is_intact_to_its_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    run, tag = tmp_path / "run", new_tag()
    run.mkdir()
    env = {**os.environ, RUN_DIR_ENV: str(run.resolve()), "MW_ENV_TEST_TAG": tag}
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], env=env, stdin=subprocess.PIPE
    )
    try:
        wait_until(lambda: _marked(proc.pid, run), what="the process to start")
        (run / "state.json").write_text(json.dumps({"state": "running", "pid": proc.pid, "history": []}))
        assert main(["train", "stop", str(run)]) == 2
        assert "a foreground run stops with Ctrl-C" in capsys.readouterr().err
        assert proc.poll() is None  # not signalled
    finally:
        proc.kill()
        proc.wait()
        kill_tagged(tag)
