"""A real full disk: a small tmpfs as the run folder (root only; skipped where mounting is not allowed).
The run goes through `mw-env train` as a user starts it, fills the disk at a checkpoint, and must end in
exit 1 with `error: ... the disk is full` and the earlier checkpoints intact; once the disk has room the
same command resumes from the newest checkpoint and finishes with a report that `train verify` accepts."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.faults.fault_support import checkpoints_intact, record, table_path

pytestmark = [pytest.mark.torch, pytest.mark.slow]
VENV = Path(sys.executable).parent.parent


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1300k", "tmpfs", str(mnt)], capture_output=True, check=False
    )
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.decode(errors='replace').strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, check=False)


def _train(run: Path) -> subprocess.CompletedProcess[str]:
    args = [
        sys.executable,
        "-m",
        "mw_env",
        "train",
        "--venv",
        str(VENV),
        "--skip-doctor",
        "--profile",
        "cpu",
        "--config",
        "smoke",
    ]
    for kv in (
        f"runtime.out_dir={run}",
        "runtime.max_steps=10",
        "runtime.checkpoint_every=2",
        "runtime.keep_last=3",
        "runtime.eval_every=100",
        "runtime.threads=1",
        "data.synthetic_rows=96",
        "data.synthetic_val_rows=16",
        "optim.batch_size=8",
        # Bytes only: the word path's tables make a smoke checkpoint ~7.5 MB, more than the whole 1300 KiB
        # tmpfs; this test is about a disk that fills after the first checkpoints fit, not about the model.
        "model.words=none",
    ):
        args += ["--set", kv]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(args, capture_output=True, text=True, timeout=600, env=env, check=False)


def test_a_tmpfs_that_fills_during_the_run(tmpfs: Path) -> None:
    run = tmpfs / "run"
    res = _train(run)
    assert res.returncode == 1, res.stdout[-2000:] + res.stderr[-2000:]
    err = res.stderr
    assert "Traceback" not in err and "error: " in err and "the disk is full" in err and "hint: " in err, err
    assert "memory" not in err  # a full disk is never explained as OOM
    kept = checkpoints_intact(run)
    assert kept, "the first checkpoints fit"
    subprocess.run(["mount", "-o", "remount,size=50m", str(tmpfs)], check=True)
    again = _train(run)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert f"resumed from {run}/checkpoints/{kept[-1]}" in again.stdout + again.stderr
    from mw_env.rundir.manifest import verify_manifest

    assert verify_manifest(run).ok
    record(
        table_path(),
        fault="ENOSPC (real tmpfs)",
        phase="checkpoint",
        write="checkpoint",
        mode="single",
        launch="foreground",
        outcome="exit 1, the disk is full",
        resume="same command finishes (verify ok)",
    )
