"""A doctor killed while its probe hangs (SIGKILL or SIGTERM: docker stop, timeout, systemd) takes the probe with
it: the probe lives in a session of its own (for the deadline's group kill), so only PR_SET_PDEATHSIG ends it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from doctor_helpers import fake_venv

from proctools import MARKER, assert_none_left, cmdline, kill_tagged, new_tag, tagged, wait_for

pytestmark = [pytest.mark.torch, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
ROOT = REPO / "tests" / "fixtures" / "machines" / "doctor-cpu-docker-shm64m"


def _hanging_venv(path: Path, marker: Path) -> Path:
    """A venv whose `import torch` says it has begun (a file), then hangs silently, like a driver that never
    returns: the probe prints nothing more, so no broken pipe ends it when the doctor is gone."""
    venv = fake_venv(path, with_torch=False)
    pkg = next((venv / "lib").glob("python*/site-packages")) / "torch"
    pkg.mkdir()
    (pkg / "version.py").write_text("__version__ = '2.13.0+cpu'\ncuda = None\nhip = None\n")
    (pkg / "__init__.py").write_text(
        f"import time\nopen({str(marker)!r}, 'w').close()\nwhile True:\n    time.sleep(0.05)\n"
    )
    return venv


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_killed_doctor_leaves_no_hung_probe(tmp_path: Path, sig: signal.Signals) -> None:
    hung = tmp_path / "hung"
    venv = _hanging_venv(tmp_path / "v", hung)
    tag = new_tag()
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), MARKER: tag}
    argv = [sys.executable, "-m", "mw_env", "doctor", "--venv", str(venv), "--root", str(ROOT)]
    argv += ["--profile", "cpu", "--offline", "--timeout", "300"]
    doctor = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: hung.exists() or doctor.poll() is not None, 60, "the probe to hang")
        assert doctor.poll() is None
        probes = [p for p in tagged(tag) if "probe_script.py" in cmdline(p)]
        # Each in its own session: no terminal signal or group kill of the doctor reaches it.
        assert probes and all(os.getsid(p) == p for p in probes)
        doctor.send_signal(sig)
        doctor.wait(timeout=30)
        assert_none_left(tag, within=10.0)
    finally:
        doctor.kill()
        kill_tagged(tag)
