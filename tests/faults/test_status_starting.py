"""`train status` on a live foreground run before its first event (issue 22, case 19): it says a trainer is
starting there (the holder of the run lock), not "no training run". The phase is reached by its event."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.runs.runs_helpers import wait_until

from proctools import kill_tagged, new_tag
from smokeargs import TRAIN, smoke_args

pytestmark = [pytest.mark.torch, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]


def test_status_of_a_run_that_is_starting(tmp_path: Path) -> None:
    run, hold, tag = tmp_path / "run", tmp_path / "go", new_tag()
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO / "src"),
        "MW_ENV_TEST_TAG": tag,
        "MW_ENV_TEST_HOLD": f"discovery:{hold}",
    }
    argv = [*TRAIN, *smoke_args(run, 1)]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(
            lambda: Path(f"{hold}.waiting").exists() or proc.poll() is not None,
            timeout=300,
            what="data discovery",
        )
        res = subprocess.run(
            [sys.executable, "-m", "mw_env", "train", "status", "--out-dir", str(run)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        hold.touch()
        proc.communicate(timeout=300)
    finally:
        proc.kill()
        kill_tagged(tag)
    assert "no training run" not in res.stderr, res.stderr
    assert f"a trainer is starting in {run}" in res.stderr and "pid " in res.stderr, res.stderr
    assert proc.returncode == 0
