"""SIGTERM, SIGINT and SIGHUP at each phase of a real run (issue 22, cases 12-14), single-process and
`--nproc-per-node 2`, foreground (`mw-env train`) and detached (`mw-env train start`).

Each phase is reached by its event, never by time: MW_ENV_TEST_HOLD=POINT:FILE holds the trainer at POINT
(trainer/lifecycle.py) after creating FILE.waiting; the test waits for that file, sends the signal, then
creates FILE to let the trainer go on. The outcome must be the documented one for the phase and signal:

- SIGTERM/SIGHUP before the first step (start-up, data discovery): exit 0, "stopped ... before the first
  step" (or before the trainer started), nothing to keep, the same command starts again;
- SIGTERM/SIGHUP during the steps, an eval or a checkpoint: exit 0, a stop checkpoint, "to resume, run the
  same command";
- SIGTERM/SIGHUP during the report or the manifest: exit 0, finished, the report complete, verify ok;
- SIGINT (Ctrl-C, to the process group; to the supervisor when detached): exit 130 "interrupted", every
  checkpoint intact;
- SIGHUP to a detached run's supervisor: ignored by design (a closed terminal), the run finishes.
Never a traceback, never "memory" in the words.

CI runs a covering set (every phase, signal, mode and launch at least once); MW_FAULT_MATRIX=full runs
every cell (the docs' fault table was measured so).
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tests.faults.fault_support import checkpoints_intact, record, table_path
from tests.runs.runs_helpers import wait_until

from proctools import assert_none_left, hang_report, kill_tagged, new_tag

pytestmark = [pytest.mark.torch, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
VENV = Path(sys.executable).parent.parent
TIMEOUT = 300

POINTS = {
    "start-up": "startup",
    "data discovery": "discovery",
    "steps": "step-2",
    "eval": "eval",
    "checkpoint": "checkpoint",
    "report": "report",
    "manifest": "manifest",
}
SIGNALS = {"TERM": signal.SIGTERM, "INT": signal.SIGINT, "HUP": signal.SIGHUP}

# The covering set CI runs: each phase, signal, mode and launch at least once, the cases among them.
COVER = [
    ("start-up", "TERM", "single", "foreground"),  # case 13
    ("data discovery", "HUP", "single", "detached"),  # case 13, detached
    ("steps", "INT", "single", "foreground"),
    ("eval", "TERM", "single", "detached"),
    ("checkpoint", "HUP", "single", "foreground"),
    ("report", "TERM", "single", "foreground"),  # case 12
    ("manifest", "INT", "single", "detached"),
    ("start-up", "TERM", "ddp", "foreground"),  # case 13, two processes
    ("report", "TERM", "ddp", "foreground"),  # case 12, two processes
    ("steps", "HUP", "ddp", "detached"),
]
FULL = list(itertools.product(POINTS, SIGNALS, ("single", "ddp"), ("foreground", "detached")))
CASES = FULL if os.environ.get("MW_FAULT_MATRIX") == "full" else COVER


def expected(phase: str, sig: str, launch: str) -> str:
    if launch == "detached" and sig == "HUP":
        return "finished"  # the supervisor ignores SIGHUP: a detached run outlives its terminal
    if sig == "INT" and launch == "foreground":
        return "interrupted"  # Ctrl-C; a detached run has none: its supervisor takes SIGINT as SIGTERM
    if phase in ("start-up", "data discovery"):
        return "stopped before the first step"
    if phase in ("steps", "eval", "checkpoint"):
        return "stopped"
    return "finished"


def _argv(run: Path, mode: str, launch: str) -> list[str]:
    argv = [sys.executable, "-m", "mw_env", "train", *(["start"] if launch == "detached" else [])]
    argv += ["--config", "smoke", "--venv", str(VENV), "--skip-doctor", "--profile", "cpu"]
    for item in (
        f"runtime.out_dir={run}",
        "runtime.max_steps=4",
        "runtime.checkpoint_every=2",
        "runtime.eval_every=2",
        "runtime.eval_batches=1",
        "runtime.eval_samples=1",
        "runtime.threads=1",
        "data.synthetic_rows=96",
        "data.synthetic_val_rows=16",
        "optim.batch_size=8",
        "dist.timeout_s=60",
        "runtime.report_figures=false",  # a report without figures is still the report the phases hold
    ):
        argv += ["--set", item]
    return argv + (["--nproc-per-node", "2"] if mode == "ddp" else [])


def _events(run: Path) -> list[dict]:
    import json

    try:
        return [
            json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines() if ln.startswith("{")
        ]
    except OSError:
        return []


@pytest.mark.parametrize(("phase", "sig", "mode", "launch"), CASES, ids=["-".join(c) for c in CASES])
def test_a_signal_at_a_phase(tmp_path: Path, phase: str, sig: str, mode: str, launch: str) -> None:
    from mw_env.rundir.manifest import verify_manifest
    from mw_env.runs.runs import read_exit, read_run

    run, hold, tag = tmp_path / "run", tmp_path / "go", new_tag()
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(REPO / "src"),
        "MW_ENV_TEST_TAG": tag,
        "MW_ENV_TEST_HOLD": f"{POINTS[phase]}:{hold}",
        "PYTHONFAULTHANDLER": "1",  # a hang's report (proctools.hang_report) gets every thread's stack
    }
    waiting = Path(f"{hold}.waiting")
    proc = None
    try:
        if launch == "foreground":
            proc = subprocess.Popen(
                _argv(run, mode, launch),
                cwd=REPO,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,  # its own group: SIGINT to the group is a Ctrl-C
            )
            target = proc.pid
        else:
            res = subprocess.run(
                _argv(run, mode, launch),
                cwd=REPO,
                env=env,
                capture_output=True,
                text=True,
                timeout=TIMEOUT,
                check=False,
            )
            assert res.returncode == 0, res.stdout + res.stderr
            rec = read_run(run)
            assert rec is not None
            target = rec.pid  # the supervisor, as `train stop` signals it
        wait_until(
            lambda: waiting.exists() or (proc is not None and proc.poll() is not None),
            timeout=TIMEOUT,
            what=f"the {phase} phase",
        )
        assert waiting.exists(), proc.communicate() if proc else ""
        if sig == "INT" and launch == "foreground":
            os.killpg(target, signal.SIGINT)
        else:
            os.kill(target, SIGNALS[sig])
        if launch == "detached" and sig == "HUP":
            hold.touch()  # ignored by the supervisor by design: nothing reaches the trainer, let it go on
        # Otherwise the trainer lets go of the phase when the signal reaches it (trainer/lifecycle.hold):
        # released by the event itself, never before the signal arrived.
        if proc is not None:
            try:
                out, err = proc.communicate(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                report = hang_report(tag)
                out, err = proc.communicate()
                raise AssertionError(f"no end {TIMEOUT}s after the signal:\n{report}\n{out}\n{err}") from None
            rc = proc.returncode
        else:
            wait_until(lambda: read_exit(run) is not None, timeout=TIMEOUT, what="the run's end")
            ended = read_exit(run)
            assert ended is not None
            rc = ended.returncode
            out, err = "", (run / "train.log").read_text(errors="replace")
    finally:
        if proc is not None:
            proc.kill()
        kill_tagged(tag)
    text = out + err
    want = expected(phase, sig, launch)
    if (
        launch == "detached"
    ):  # train.log is the log (torchrun's own lines may be there); never mw-env's traceback
        assert "mw_env/" not in "".join(text.split("Traceback")[1:]), text[-3000:]
    else:
        assert "Traceback" not in text, text[-3000:]
    assert "memory" not in text, text[-3000:]
    ends = [e for e in _events(run) if e.get("event") == "finished"]
    if want == "interrupted":
        assert rc == 130 and "interrupted" in text, (rc, text[-3000:])
        checkpoints_intact(run)
    elif want == "stopped before the first step":
        assert rc == 0 and "before the" in text and "same command" in text, (rc, text[-3000:])
        assert not list((run / "checkpoints").glob("step-*.pt")) if (run / "checkpoints").exists() else True
    elif want == "stopped":
        assert rc == 0 and ends and ends[-1]["reason"] == "stopped", (rc, ends, text[-3000:])
        assert checkpoints_intact(run), "a stop checkpoint"
        if launch == "foreground":
            assert "to resume, run the same command" in text, text[-3000:]
    else:
        assert rc == 0 and ends and ends[-1]["reason"] != "stopped", (rc, ends, text[-3000:])
        assert (run / "report" / "report.md").is_file() and verify_manifest(run).ok
    assert_none_left(tag, within=10.0)
    record(
        table_path(),
        fault=f"SIG{sig}",
        phase=phase,
        write="-",
        mode=mode,
        launch=launch,
        outcome=want,
        resume="-" if want == "finished" else "same command",
    )


def test_sigterm_to_torchrun_itself(tmp_path: Path) -> None:
    """Case 14: SIGTERM to torchrun (the child of `mw-env train`): the workers stop cleanly, exit 0."""
    from mw_env.rundir.occupants import children

    run, hold, tag = tmp_path / "run", tmp_path / "go", new_tag()
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(REPO / "src"),
        "MW_ENV_TEST_TAG": tag,
        "MW_ENV_TEST_HOLD": f"step-2:{hold}",
    }
    proc = subprocess.Popen(
        _argv(run, "ddp", "foreground"),
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(
            lambda: Path(f"{hold}.waiting").exists() or proc.poll() is not None,
            timeout=TIMEOUT,
            what="step 2",
        )
        torchrun = children(proc.pid)
        assert len(torchrun) == 1, torchrun
        os.kill(torchrun[0], signal.SIGTERM)  # the workers let go when torchrun's SIGTERM reaches them
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        proc.kill()
        kill_tagged(tag)
    text = out + err
    assert proc.returncode == 0, text[-3000:]
    assert "Traceback" not in text and "memory" not in text
    assert "every worker stopped cleanly" in text, text[-3000:]
    assert checkpoints_intact(run)
    record(
        table_path(),
        fault="SIGTERM to torchrun",
        phase="steps",
        write="-",
        mode="ddp",
        launch="foreground",
        outcome="stopped",
        resume="same command",
    )


def test_sigint_to_mw_env_train_alone_interrupts_the_run(tmp_path: Path) -> None:
    """Issue 30 #5: `kill -INT` of the `mw-env train` process alone (not its group) was swallowed: the trainer
    ran to its last step and the command then said "interrupted", exit 130. Now it is passed on."""
    run, hold, tag = tmp_path / "run", tmp_path / "go", new_tag()
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(REPO / "src"),
        "MW_ENV_TEST_TAG": tag,
        "MW_ENV_TEST_HOLD": f"step-2:{hold}",
    }
    waiting = Path(f"{hold}.waiting")
    argv = _argv(run, "single", "foreground")
    proc = subprocess.Popen(
        argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_until(lambda: waiting.exists() or proc.poll() is not None, timeout=TIMEOUT, what="step 2")
        assert waiting.exists(), proc.communicate()
        os.kill(proc.pid, signal.SIGINT)  # the process alone: the trainer gets it only if it is passed on
        try:
            out, err = proc.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            report = hang_report(tag)
            raise AssertionError(f"no end {TIMEOUT}s after the signal:\n{report}") from None
    finally:
        proc.kill()
        kill_tagged(tag)
    text = out + err
    assert proc.returncode == 130 and "interrupted" in text and "Traceback" not in text, text[-3000:]
    steps = [e["step"] for e in _events(run) if e.get("event") == "step"]
    assert max(steps, default=0) < 4 and not [e for e in _events(run) if e.get("event") == "finished"]
    checkpoints_intact(run)
    assert_none_left(tag, within=10.0)
