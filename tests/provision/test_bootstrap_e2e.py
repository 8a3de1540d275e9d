"""A real bootstrap of the CPU profile with the real torch wheel from this machine's wheelhouse, then the doctor.

Skipped cleanly where no configured wheelhouse (--find-links, PIP_FIND_LINKS, pip.conf) holds a CPU torch.
Uses the machine's real pip/uv configuration and uv cache: this is what `make bootstrap` does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mw_env.sources.wheelhouse import discover, matching_torch, wheels_in

from .provision_support import find_uv_binary


def _cpu_wheel():
    sources = discover(env=os.environ)
    good, _ = matching_torch(
        wheels_in(sources.find_links, "torch"), local_tag="+cpu", specifier=">=2.9,<2.15"
    )
    return good[0] if good else None


@pytest.mark.slow
@pytest.mark.torch
def test_real_cpu_bootstrap_from_wheelhouse_then_doctor(tmp_path):
    wheel = _cpu_wheel()
    uv = find_uv_binary()
    if wheel is None or uv is None:
        pytest.skip("no wheelhouse holds a CPU torch wheel (or uv is missing)")
    venv = tmp_path / "training-venv"
    env = {**os.environ, "UV": uv, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("VIRTUAL_ENV", None)
    args = [sys.executable, "-m", "mw_env", "bootstrap", "--profile", "cpu", "--venv", str(venv), "--yes"]
    first = subprocess.run(args, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "Run the doctor" in first.stdout
    # The wheelhouse satisfies the profile: no index lookup, so no warning about download.pytorch.org.
    assert "warning:" not in first.stdout and "download.pytorch.org" not in first.stdout, first.stdout
    # The closing line is runnable as written: the venv has its own mw-env.
    assert f"next: source {venv}/bin/activate && mw-env train" in first.stdout
    # ... and names the config `mw-env train` would use on this hardware: the cpu profile's own default.
    assert "then --config address-tagger-cpu for the real model" in first.stdout, first.stdout
    assert (venv / "bin" / "mw-env").is_file()
    # Recorded as the venv bootstrap built last (conftest points MW_ENV_STATE_DIR at this test's own folder).
    assert (Path(env["MW_ENV_STATE_DIR"]) / "last-venv").read_text().strip() == str(venv)
    record = json.loads((venv / "mw-env.json").read_text())
    assert record["torch_version"] == wheel.version and record["torch_build"] == "cpu"
    # The venv's own python runs the real torch and mw-env (editable from this checkout).
    probe = subprocess.run(
        [venv / "bin" / "python", "-c", "import torch, mw_env; print(torch.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip() == wheel.version
    # A re-run changes nothing.
    again = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert again.returncode == 0 and "nothing changed" in again.stdout, again.stdout + again.stderr
    # The doctor, run on its own without --venv (the README's "Then:" block), checks that venv, says so, passes.
    doctor = subprocess.run(
        [sys.executable, "-m", "mw_env", "doctor", "--profile", "cpu", "--json"],
        env={**env, "HOME": str(tmp_path / "home")},  # whatever ~/training-venv holds is not the one built
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert json.loads(doctor.stdout)["ok"] is True
    assert f"using {venv}" in doctor.stderr and "built last" in doctor.stderr
