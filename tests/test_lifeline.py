"""PR_SET_PDEATHSIG through mw_env.base.lifeline: children (bootstrap's uv/verify, the probe, the trainer) die with
the process that started them, SIGKILL included; a torchrun worker whose launcher is gone does not start."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mw_env.base import lifeline
from proctools import MARKER, assert_none_left, kill_tagged, new_tag, tagged, wait_for

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not lifeline.supported(), reason="PR_SET_PDEATHSIG is Linux-only")

PARENT = textwrap.dedent(
    """
    import os, threading
    from mw_env.sources.uv import run_streaming, _run_quiet
    env = dict(os.environ)  # the test's marker included
    # Both of bootstrap's ways to run a child, one in a thread (as the doctor's probes are).
    threading.Thread(target=_run_quiet, args=(["sleep", "300"], env, 300.0)).start()
    run_streaming(["sleep", "300"], env=env, on_line=None)
    """
)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_bootstrap_children_die_with_their_parent(sig: signal.Signals) -> None:
    tag = new_tag()
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), MARKER: tag}
    parent = subprocess.Popen([sys.executable, "-c", PARENT], env=env)
    try:
        wait_for(lambda: len(tagged(tag)) == 3, 30, "the parent and its two children")
        parent.send_signal(sig)
        parent.wait(timeout=30)
        assert_none_left(tag, within=10.0)
    finally:
        parent.kill()
        kill_tagged(tag)


def test_a_torchrun_worker_without_its_launcher_exits() -> None:
    # The parent here is pytest, not a torch launcher: the worker would train alone, so it leaves at once.
    code = "from mw_env.base.lifeline import die_with_torchrun; die_with_torchrun(); print('trained')"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "TORCHELASTIC_RUN_ID": "x"}
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and "trained" not in res.stdout
    assert "this torchrun worker's launcher is gone" in res.stderr
    # Outside torchrun nothing changes.
    env.pop("TORCHELASTIC_RUN_ID")
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "trained" in res.stdout


def test_a_torchrun_worker_dies_with_its_launcher() -> None:
    tag = new_tag()
    # A stand-in launcher whose command line names torch, like torchrun's; its worker sets the signal.
    worker = "from mw_env.base.lifeline import die_with_torchrun; import time; assert die_with_torchrun(); time.sleep(300)"
    launcher = f"import subprocess, sys, time  # torch.distributed.run\nsubprocess.Popen([sys.executable, '-c', {worker!r}]); time.sleep(300)"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "TORCHELASTIC_RUN_ID": "x", MARKER: tag}
    proc = subprocess.Popen([sys.executable, "-c", launcher], env=env, start_new_session=True)
    try:
        wait_for(lambda: len(tagged(tag)) == 2, 30, "launcher and worker")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert_none_left(tag, within=10.0)
    finally:
        proc.kill()
        kill_tagged(tag)
