"""Issue 40 with the real torch: torch/version.py edited in place in one venv. uv links installed files from its
cache, so the edit is in the cache too, and every NEW venv failed its verify with the same file ("re-run: the
torch step is redone", which linked it again). Now the new venv's torch step finds the file against torch's
RECORD, cleans uv's cache entry and installs torch again; the doctor of the first venv names the file. A
private uv cache (this test damages it); the wheel from this machine's wheelhouse. Two bootstraps of the real
torch (~20 s each under load): the first venv's own re-run, which repairs it, and a package's lost files are
tests/provision/test_venv_damage.py's, with fake wheels and the same uv."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.provision.provision_support import find_uv_binary

from mw_env.sources.wheelhouse import discover, matching_torch, wheels_in
from mw_env.venv.integrity import scan_venv

pytestmark = [pytest.mark.torch, pytest.mark.slow]


def _mw_env(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mw_env", *args], env=env, capture_output=True, text=True, timeout=900
    )


def test_a_real_torch_file_edited_in_place_is_found_in_uvs_cache_and_repaired(tmp_path: Path) -> None:
    good, _ = matching_torch(
        wheels_in(discover(env=os.environ).find_links, "torch"), local_tag="+cpu", specifier=">=2.9,<2.15"
    )
    uv = find_uv_binary()
    if not good or uv is None:
        pytest.skip("no wheelhouse holds a CPU torch wheel (or uv is missing)")
    env = {
        **os.environ,
        "UV": uv,
        "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    env.pop("VIRTUAL_ENV", None)

    def bootstrap(venv: Path) -> subprocess.CompletedProcess[str]:
        return _mw_env(
            env,
            "bootstrap",
            "--profile",
            "cpu",
            "--venv",
            str(venv),
            "--yes",
            "--no-doctor",
            "--no-adopt-torch",
        )

    first, second = tmp_path / "first", tmp_path / "second"
    res = bootstrap(first)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    (site,) = (first / "lib").glob("python3*/site-packages")
    edited = site / "torch" / "version.py"
    assert os.stat(edited).st_nlink > 1  # linked from the (private) uv cache
    with open(edited, "a", encoding="utf-8") as fh:
        fh.write("# edited in place\n")

    res = bootstrap(second)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "torch/version.py" in res.stdout and "uv cache clean torch" in res.stdout, res.stdout
    assert (
        "edited in place"
        not in next((second / "lib").glob("python3*/site-packages/torch/version.py")).read_text()
    )

    doctor = _mw_env(env, "doctor", "--profile", "cpu", "--venv", str(first), "--quick", "--json")
    checks = {c["id"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert doctor.returncode == 1 and checks["files.record"]["status"] == "fail", checks["files.record"]
    assert "torch/version.py" in checks["files.record"]["detail"]
    assert [d.name for d in scan_venv(first).damaged] == ["torch"] and scan_venv(second).damaged == ()
