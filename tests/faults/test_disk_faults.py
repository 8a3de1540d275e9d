"""ENOSPC, EIO and EACCES at each write a run makes, injected through the one writer's seam (mw_env.base.atomic,
MW_ENV_FAULTS): inside the write, after some bytes went out, as a disk that fills up does (torch's zip
writer then wraps the OSError in its RuntimeError, as on a real full disk). The trainer runs in-process
(`python -m mw_env.trainer run` as a function), so each case costs the steps, not a torch import.

Outcome of every case: exit 1, `error:` naming the fault and the file, a `hint:`, every earlier checkpoint
intact, no temporary left; for ENOSPC the same command, once the disk has room, finishes the run with a
report that `train verify` accepts.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.faults.fault_support import WORDS, checkpoints_intact, record, run_args, table_path

pytestmark = [pytest.mark.torch, pytest.mark.slow]

# (phase, the write, its MW_ENV_FAULTS pattern, the name the error must show)
WRITES = [
    ("checkpoint", "first checkpoint", "step-*.pt", "step-000000002.pt"),
    ("checkpoint", "later checkpoint", "step-*.pt#2", "step-000000004.pt"),
    ("checkpoint", "checkpoint sidecar", "step-*.pt.sha256", "step-000000002.pt"),
    ("steps", "metrics line", "metrics.jsonl#4", "metrics.jsonl"),
    ("report", "data card", "data_card.json", "data_card.json"),
    ("report", "figure", "*.png", ".png"),
    ("report", "report page", "report.html", "report.html"),
    ("report", "hyperparameters", "hyperparameters.json", "hyperparameters.json"),
    ("report", "environment", "environment.json", "environment.json"),
    ("report", "package list", "packages.txt", "packages.txt"),
    ("manifest", "manifest", "MANIFEST.sha256", "MANIFEST.sha256"),
]
# After these the same command is run again and must finish (one per phase: CI time).
RESUMED = ("later checkpoint", "metrics line", "report page", "manifest")
# ENOSPC at every write; EIO and EACCES at every other one (alternating), so each errno meets each phase.
CASES = [("ENOSPC", *w) for w in WRITES] + [
    ("EIO" if i % 2 == 0 else "EACCES", *w) for i, w in enumerate(WRITES)
]


def _train(run: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    from mw_env.trainer.__main__ import main

    capsys.readouterr()
    rc = main(["run", *run_args(run, *extra)])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize(
    ("code", "phase", "write", "pattern", "shown"), CASES, ids=[f"{c[0]}-{c[2]}" for c in CASES]
)
def test_a_fault_at_each_write(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    code: str,
    phase: str,
    write: str,
    pattern: str,
    shown: str,
) -> None:
    run = tmp_path / "run"
    monkeypatch.setenv("MW_ENV_FAULTS", f"{code}:{pattern}")
    extra = ("--set", "runtime.report_figures=true") if write == "figure" else ()
    rc, _out, err = _train(run, capsys, *extra)
    assert rc == 1, err
    assert "Traceback" not in err and err.count("error: ") == 1 and "hint: " in err, err
    assert WORDS[code] in err.lower() or WORDS[code] in err, err
    assert shown in err, err
    kept = checkpoints_intact(run)
    # `train status` tells the run's end in the trainer's own words (state.json; a foreground run has no log).
    from mw_env.runs.runstatus import run_status

    told = run_status(out_dir=run)
    if phase in ("report", "manifest"):  # the steps had finished: a note, with the error, not an anomaly
        assert any("ended while writing its report (it reported: " in n and shown in n for n in told.notes), (
            told
        )
    else:
        assert told.exit_code == 12 and shown in told.anomalies[0].message, told
        assert "killed with its supervisor" not in told.anomalies[0].message
    if phase in ("report", "manifest"):
        assert "step-000000004.pt" in kept  # the run's work is on disk before its report
    monkeypatch.delenv("MW_ENV_FAULTS")
    resumed = "not tried"
    if code == "ENOSPC" and write in RESUMED:  # the disk has room again: the same command completes the run
        from mw_env.rundir.manifest import verify_manifest

        rc, _out, err = _train(run, capsys)
        assert rc == 0, err
        assert (run / "report" / "report.md").is_file() and verify_manifest(run).ok
        resumed = "same command finishes (verify ok)"
    record(
        table_path(),
        fault=code,
        phase=phase,
        write=write,
        mode="single",
        launch="in-process",
        outcome="exit 1, error names the fault and file",
        resume=resumed,
    )


def test_a_full_disk_at_a_detached_runs_record(tmp_path: Path) -> None:
    """`train start` cannot write run.json (ENOSPC, after the supervisor started): exit 1 naming the file and
    the full disk, and the just-started run is ended with it: no trainer left training unseen (without
    run.json no `status` or `stop` could find it)."""
    import os
    import subprocess
    import sys

    from tests.proctools import assert_none_left, kill_tagged, new_tag

    run, tag = tmp_path / "run", new_tag()
    env = {**os.environ, "MW_ENV_FAULTS": "ENOSPC:run.json", "MW_ENV_TEST_TAG": tag, "OMP_NUM_THREADS": "1"}
    argv = [
        sys.executable,
        "-m",
        "mw_env",
        "train",
        "start",
        "--venv",
        sys.prefix,
        "--skip-doctor",
        *run_args(run),
    ]
    try:
        res = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)
        assert res.returncode == 1, res.stdout + res.stderr
        assert (
            "Traceback" not in res.stderr
            and f"error: cannot write {run / 'run.json'}: the disk is full" in (res.stderr)
        ), res.stderr
        assert "hint: " in res.stderr and "nothing to keep" in res.stderr, res.stderr
        assert_none_left(tag, within=10.0)
        assert not (run / "run.json").exists() and not (run / "state.json").exists()
    finally:
        kill_tagged(tag)
    record(
        table_path(),
        fault="ENOSPC",
        phase="start-up",
        write="run record (train start)",
        mode="single",
        launch="detached",
        outcome="exit 1, error names the fault and file; the started run ended",
        resume="same command",
    )


def test_a_full_disk_at_a_checkpoint_of_two_processes(tmp_path: Path) -> None:
    """The write faults with `--nproc-per-node 2` (a foreground run under torchrun): rank 0's full disk is the
    one error (rank 1, left waiting at the barrier, said a peer was lost and to restart every node: its echo
    now goes to torchrun.log), exit 1, the checkpoints intact, no process left."""
    import os
    import subprocess
    import sys

    from tests.proctools import assert_none_left, kill_tagged, new_tag

    run, tag = tmp_path / "run", new_tag()
    env = {
        **os.environ,
        "MW_ENV_FAULTS": "ENOSPC:step-*.pt#2",
        "MW_ENV_TEST_TAG": tag,
        "OMP_NUM_THREADS": "1",
    }
    argv = [sys.executable, "-m", "mw_env", "train", "--venv", sys.prefix, "--skip-doctor", *run_args(run)]
    argv += ["--set", "runtime.threads=1", "--nproc-per-node", "2"]
    try:
        res = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)
        assert_none_left(tag, within=10.0)
    finally:
        kill_tagged(tag)
    assert res.returncode == 1, res.stdout + res.stderr
    err = res.stderr
    assert "Traceback" not in err and err.count("error: ") == 1 and "the disk is full" in err, err
    assert "restart every node" not in err and "step-000000004.pt" in err, err
    assert checkpoints_intact(run) == ["step-000000002.pt"]
    record(
        table_path(),
        fault="ENOSPC",
        phase="checkpoint",
        write="later checkpoint",
        mode="ddp",
        launch="foreground",
        outcome="exit 1, error names the fault and file",
        resume="not tried",
    )
