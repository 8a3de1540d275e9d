"""No process left behind, whoever is killed: the real trainer under `mw-env train` (python or torchrun) and
detached under `train start`. Every process a test starts carries MW_ENV_TEST_TAG in its environment (and so
does every descendant, in whatever session torchrun puts it), so "none left" is a scan of /proc.

Also: a second trainer on a live run folder is refused at once, naming the holder's pid.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mw_env.cli import main
from mw_env.trainer.report.figure_pool import FIGURE_WORKERS
from proctools import MARKER, assert_none_left, cmdline, kill_tagged, new_tag, tagged, wait_for

pytestmark = [pytest.mark.torch, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
VENV = Path(sys.executable).parent.parent  # the test venv: real torch and torchrun, this mw-env importable
FOREVER = (
    "data.synthetic_rows=64",
    "data.synthetic_val_rows=8",
    "optim.batch_size=4",
    "runtime.max_steps=1000000",
    "runtime.eval_every=1000000",
    "runtime.checkpoint_every=1000000",
    "runtime.log_every=1000000",
    "runtime.threads=1",
)


def _args(run: Path, *extra: str, figures: bool = False) -> list[str]:
    """A never-ending smoke run. `figures`: its rank 0 starts the report's figure pool (three processes that
    import matplotlib, a few CPU seconds): only the SIGKILL cases, which show those die with their trainer."""
    args = ["--config", "smoke", "--venv", str(VENV), "--skip-doctor", "--profile", "cpu"]
    for item in (*FOREVER, f"runtime.out_dir={run}", f"runtime.report_figures={str(figures).lower()}"):
        args += ["--set", item]
    return args + list(extra)


def _stepping(run: Path) -> bool:
    try:
        return '"event": "step"' in (run / "metrics.jsonl").read_text()
    except OSError:
        return False


def _trainers(tag: str) -> list[int]:
    # `-m mw_env.trainer` itself: not torchrun, and not the report's figure pool
    # (`-m mw_env.trainer.report.figure_pool`), which a run of 100 steps or more starts beside its trainer.
    return [p for p in tagged(tag) if "mw_env.trainer" in cmdline(p).split() and "torchrun" not in cmdline(p)]


def _figure_pool(tag: str) -> list[int]:
    return [p for p in tagged(tag) if "mw_env.trainer.report.figure_pool" in cmdline(p).split()]


@pytest.fixture
def tag() -> str:
    value = new_tag()
    yield value
    kill_tagged(value)


def _foreground(
    run: Path, tag: str, *extra: str, session: bool = False, figures: bool = False
) -> subprocess.Popen[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO / "src"), MARKER: tag}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mw_env", "train", *_args(run, *extra, figures=figures)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=session,  # its own process group, as a terminal's foreground job has
    )
    try:
        wait_for(lambda: _stepping(run) or proc.poll() is not None, 120, "the first step")
    except AssertionError:
        proc.kill()
        raise
    assert proc.poll() is None, proc.communicate(timeout=30)[1][-3000:]
    return proc


@pytest.mark.parametrize(
    ("nproc", "victim"),
    [("1", "mw-env train"), ("2", "mw-env train"), ("2", "torchrun")],
)
def test_sigkill_leaves_no_process(tmp_path: Path, tag: str, nproc: str, victim: str) -> None:
    run = tmp_path / "run"
    proc = _foreground(run, tag, "--nproc-per-node", nproc, figures=True)
    wait_for(lambda: len(_trainers(tag)) == int(nproc), 30, f"{nproc} trainer process(es)")
    wait_for(lambda: len(_figure_pool(tag)) == FIGURE_WORKERS, 30, "rank 0's figure pool")
    if victim == "torchrun":
        (pid,) = [p for p in tagged(tag) if "torchrun" in cmdline(p)]
    else:
        pid = proc.pid
    os.kill(pid, signal.SIGKILL)
    assert_none_left(tag, within=10.0)
    proc.communicate(timeout=30)
    if victim == "torchrun":
        assert proc.returncode == 1  # `mw-env train` saw its trainer killed, said so, and ended


def test_sigterm_of_mw_env_train_stops_the_trainer_gracefully_and_a_second_trainer_is_refused(
    tmp_path: Path, tag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from mw_env.base.errors import InputError
    from mw_env.trainer.loop import train
    from mw_env.trainspec.config import find_config, resolve_config

    run = tmp_path / "run"
    proc = _foreground(run, tag)
    (trainer,) = _trainers(tag)
    # A second `mw-env train` on the live folder: refused before its doctor runs, naming the holder.
    assert main(["train", *_args(run)]) == 2
    err = capsys.readouterr().err
    assert f"error: the run folder {run} is in use by another trainer (pid {trainer} on" in err
    assert "mw_env.trainer run" in err and "hint:" in err
    # A trainer started by other means (no mw-env in front) is refused by the lock itself.
    resolved = resolve_config(path=find_config("smoke"), overrides=(*FOREVER, f"runtime.out_dir={run}"))
    with pytest.raises(InputError, match=f"in use by another trainer \\(pid {trainer} on"):
        train(resolved=resolved, echo=lambda _m: None)
    assert (run / ".lock").stat().st_mode & 0o777 == 0o600

    # SIGTERM of `mw-env train` (docker stop, systemd): forwarded; the trainer checkpoints and ends, exit 0.
    os.kill(proc.pid, signal.SIGTERM)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    assert '"reason": "stopped"' in (run / "metrics.jsonl").read_text()
    assert list((run / "checkpoints").glob("step-*.pt"))
    assert_none_left(tag, within=10.0)
    # The lock went with its holder: the folder is free again.
    from mw_env.rundir.runlock import check_free

    check_free(run)


def test_train_stop_of_a_two_process_run_leaves_no_process(
    tmp_path: Path, tag: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from mw_env.runs.runs import read_run
    from mw_env.runs.stop import stop_run

    run = tmp_path / "run"
    monkeypatch.setenv(MARKER, tag)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.chdir(REPO)
    assert main(["train", "start", *_args(run, "--nproc-per-node", "2")]) == 0, capsys.readouterr()
    record = read_run(run)
    assert record is not None and record.run_id
    wait_for(lambda: _stepping(run), 120, "the first step")
    workers = _trainers(tag)
    assert len(workers) == 2
    # Workers that ignore SIGTERM (stopped here; a hung collective in life): the escalation must reach them,
    # though torchrun started each in a session of its own, outside the supervisor's process group.
    for pid in workers:
        assert os.getsid(pid) != record.pid
        os.kill(pid, signal.SIGSTOP)
    result = stop_run(out_dir=run, grace_s=1.0)
    assert result.was_running and result.escalated
    assert set(workers) <= set(result.killed_pids)
    assert_none_left(tag, within=10.0)


def test_a_closed_terminal_stops_a_two_process_run_gracefully(tmp_path: Path, tag: str) -> None:
    """SIGHUP to the whole foreground job (mw-env train and torchrun, as a terminal's hangup sends it):
    torchrun passes it to its workers, which take it as SIGTERM; `mw-env train` forwards its own as SIGTERM;
    the run checkpoints and `mw-env train` exits 0 without torchrun's traceback."""
    run = tmp_path / "run"
    proc = _foreground(run, tag, "--nproc-per-node", "2", session=True)
    wait_for(lambda: len(_trainers(tag)) == 2, 30, "the trainers")
    os.killpg(proc.pid, signal.SIGHUP)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    assert "Traceback" not in err and "SignalException" not in err
    assert '"reason": "stopped"' in (run / "metrics.jsonl").read_text()
    assert_none_left(tag, within=10.0)
