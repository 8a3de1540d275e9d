"""The run folder's lock: one holder, refused others named by pid and command, gone with its holder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mw_env.base.errors import InputError
from mw_env.rundir import runlock

REPO = Path(__file__).resolve().parents[2]
HOLDER = textwrap.dedent(
    """
    import sys, time
    from mw_env.rundir.runlock import acquire
    acquire(sys.argv[1], argv=["python", "-m", "mw_env.trainer", "run", "--config", "smoke"])
    print("held", flush=True)
    time.sleep(300)
    """
)


def test_a_second_holder_is_refused_with_the_first_ones_pid_and_command(tmp_path: Path) -> None:
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(run)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(InputError) as err:
            runlock.acquire(run)
        assert f"in use by another trainer (pid {holder.pid} on" in err.value.message
        assert "python -m mw_env.trainer run --config smoke" in err.value.message
        assert "mw-env train stop --out-dir" in (err.value.hint or "")
        with pytest.raises(InputError, match=f"pid {holder.pid}"):
            runlock.check_free(run)
        assert (run / ".lock").stat().st_mode & 0o777 == 0o600
    finally:
        holder.kill()
        holder.wait(timeout=30)
    # The kernel dropped the lock with its holder: free again, and ours now.
    runlock.check_free(run)
    lock = runlock.acquire(run, argv=["me"])
    assert json.loads((run / ".lock").read_text())["pid"] == os.getpid()
    lock.release()
    lock.release()  # twice is harmless


def test_a_probe_never_keeps_the_lock(tmp_path: Path) -> None:
    runlock.check_free(tmp_path)  # no lock file: free
    lock = runlock.acquire(tmp_path)
    lock.release()
    runlock.check_free(tmp_path)
    runlock.acquire(tmp_path).release()
    assert runlock.describe(None) == "holder unknown"
