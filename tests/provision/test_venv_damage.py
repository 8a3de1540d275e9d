"""Issue 40: a damaged venv is called complete, and a damaged file spreads. Tried as a user who edits or loses
files in a venv (fake wheels, real uv; a private uv cache wherever the cache is damaged):

- a package's files deleted (its dist-info kept): `bootstrap` said "already complete" and the doctor passed;
  now the doctor fails naming the files, and the re-run reinstalls exactly that package, torch untouched;
- torch/version.py edited in place: uv links installed files from its cache, so the cache and every venv
  linked to it changed, and every NEW venv failed its verify with the same file; now the new venv's torch
  step finds it, cleans uv's cache entry (`uv cache clean torch`) and installs torch again, the doctor of the
  first venv names the file and the cache, and its re-run repairs it.

A package absent entirely (`uv pip uninstall`) is the extras step's (tests/provision/test_fixes_converge.py,
venv.requirements_unmet). The same with the real torch: tests/faults/test_damaged_cache_real.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mw_env.base.errors import StepFailed
from mw_env.provision import repair
from mw_env.provision.model import Plan, Step
from mw_env.sources import uv as uvmod
from mw_env.sources.wheelhouse import Sources
from mw_env.venv.integrity import Damaged, FileFault, scan_venv

from .provision_support import cpu_bootstrap_args


def _bootstrap(venv: Path, env: dict[str, str], indexes, root: Path) -> subprocess.CompletedProcess[str]:
    extra = ["--find-links", str(indexes.cpu_links), "--offline", "--no-adopt-torch", "--no-doctor"]
    args = cpu_bootstrap_args(venv, indexes, root, *extra)
    return subprocess.run(
        [sys.executable, "-m", "mw_env", *args], env=env, capture_output=True, text=True, timeout=600
    )


def _doctor(venv: Path, env: dict[str, str], root: Path) -> dict[str, dict[str, str]]:
    argv = ["doctor", "--root", str(root), "--profile", "cpu", "--venv", str(venv), "--quick", "--json"]
    res = subprocess.run([sys.executable, "-m", "mw_env", *argv], env=env, capture_output=True, text=True)
    assert res.returncode in (0, 1), res.stderr
    return {c["id"]: c for c in json.loads(res.stdout)["checks"]}


def _site(venv: Path) -> Path:
    (site,) = (venv / "lib").glob("python3*/site-packages")
    return site


@pytest.fixture
def world(tmp_path: Path, hermetic_env: dict[str, str]) -> tuple[dict[str, str], Path]:
    root = tmp_path / "root"
    root.mkdir()
    # A uv cache of this test's own: the cases below damage it.
    env = {
        **hermetic_env,
        "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    return env, root


@pytest.mark.slow
def test_a_packages_lost_files_are_found_and_exactly_that_package_reinstalled(tmp_path, world, indexes):
    env, root = world
    venv = tmp_path / "venv"
    assert _bootstrap(venv, env, indexes, root).returncode == 0
    lost = _site(venv) / "demo_helper" / "__init__.py"
    lost.unlink()

    found = _doctor(venv, env, root)["files.record"]
    assert found["status"] == "fail", found
    assert "demo_helper 1.0: demo_helper/__init__.py missing" in found["detail"], found
    assert f"mw-env bootstrap --venv {venv}" in found["fix"]

    again = _bootstrap(venv, env, indexes, root)
    assert again.returncode == 0, again.stdout + again.stderr
    out = again.stdout
    assert "Reinstall the packages whose installed files are damaged" in out and "already complete" not in out
    assert "demo_helper/__init__.py missing: reinstalled demo_helper==1.0" in out, out
    assert "· Install torch" in out  # torch untouched: already done
    assert lost.is_file() and scan_venv(venv, full=True).damaged == ()  # what the doctor's check reads
    assert "already complete, nothing changed" in _bootstrap(venv, env, indexes, root).stdout

    # Bytes appended to a file (as a CA bundle is extended for a proxy): a change made on purpose, said and kept.
    with open(lost, "a") as fh:
        fh.write("EXTRA = 1\n")
    kept = _doctor(venv, env, root)["files.record"]
    assert kept["status"] == "pass" and "kept as changed on purpose" in kept["detail"], kept
    assert "already complete, nothing changed" in _bootstrap(venv, env, indexes, root).stdout
    assert lost.read_text().endswith("EXTRA = 1\n")


@pytest.mark.slow
def test_a_torch_file_edited_in_place_is_found_in_the_cache_and_in_each_venv(tmp_path, world, indexes):
    env, root = world
    first, second = tmp_path / "first", tmp_path / "second"
    assert _bootstrap(first, env, indexes, root).returncode == 0
    edited = _site(first) / "torch" / "version.py"
    assert os.stat(edited).st_nlink > 1  # linked from uv's cache
    with open(edited, "a") as fh:  # an edit in place: the cache's copy is this very file
        fh.write("hip = '6.4'  # edited\n")

    # A NEW venv: uv links the edited file from its cache; the torch step finds it and repairs the cache.
    new = _bootstrap(second, env, indexes, root)
    assert new.returncode == 0, new.stdout + new.stderr
    assert "torch/version.py" in new.stdout and "uv cache clean torch" in new.stdout, new.stdout
    assert "edited" not in (_site(second) / "torch" / "version.py").read_text()
    assert scan_venv(second).damaged == ()

    # The first venv still holds the edit (its own inode now): the doctor says so, the re-run repairs it.
    found = _doctor(first, env, root)["files.record"]
    assert found["status"] == "fail" and "torch/version.py" in found["detail"], found
    again = _bootstrap(first, env, indexes, root)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "torch/version.py" in again.stdout and "edited" not in edited.read_text()
    assert scan_venv(first, full=True).damaged == ()  # what the doctor's check reads, every file hashed


# -- the pieces, without uv ---------------------------------------------------------------------------------


def _plan(venv: Path, **kw: object) -> Plan:
    base: dict[str, object] = {
        "profile": "cpu",
        "venv": venv,
        "build_venv": venv,
        "steps": (),
        "build": "cpu",
        "local_tag": "+cpu",
        "version_spec": "==2.10.0+cpu",
        "python": None,
        "torch": None,
        "uv": "uv",
        "sources": Sources(find_links=("/wheels",)),
        "runtime_env": {},
        "project_args": ("mw-env[train]==0.3.0",),
        "companions": ("pytorch-triton-rocm",),
    }
    return Plan(**{**base, **kw})  # type: ignore[arg-type]


def _damaged(name: str, version: str, *, shared: bool = False) -> Damaged:
    return Damaged(name, version, f"{name}-{version}.dist-info", (FileFault(f"{name}/x.py", "size", shared),))


def test_the_repair_reinstalls_exactly_the_damaged_packages_with_torch_pinned(tmp_path):
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / "mw-env-constraints.txt").write_text("torch==2.10.0+cpu\n")
    p = _plan(venv)
    argv = repair.repair_command(p, (_damaged("numpy", "2.4.6"), _damaged("mw_env", "0.3.0")))
    assert argv[:3] == ("uv", "pip", "install") and "--no-deps" in argv
    assert ["--constraint", str(venv / "mw-env-constraints.txt")] == list(
        argv[argv.index("--constraint") :][:2]
    )
    flags = [argv[i + 1] for i, a in enumerate(argv) if a == "--reinstall-package"]
    assert flags == ["mw_env", "numpy"]
    assert argv[-2:] == ("numpy==2.4.6", "mw-env[train]==0.3.0")  # the project as bootstrap installs it
    assert "--find-links" in argv
    assert repair.torch_family(p) == {"torch", "pytorch-triton-rocm"}


def test_a_package_still_damaged_after_a_cleaned_reinstall_fails_naming_the_cache(tmp_path):
    venv = tmp_path / "venv"
    site = venv / "lib" / "python3.11" / "site-packages"
    (site / "numpy-2.4.6.dist-info").mkdir(parents=True)
    (site / "numpy-2.4.6.dist-info" / "RECORD").write_text("numpy/version.py,sha256=x,10\n")
    (site / "numpy-2.4.6.dist-info" / "METADATA").write_text("Name: numpy\n")
    ran: list[tuple[str, ...]] = []

    def command(argv: tuple[str, ...]) -> uvmod.CommandRun:
        ran.append(argv)
        return uvmod.CommandRun(argv=argv, returncode=0, output="", duration_s=0.0)

    with pytest.raises(StepFailed) as exc:
        repair.after_install(
            Step("repair", "repair", None, False),
            _plan(venv),
            ["numpy"],
            run_command=command,
            reinstall=lambda names: command(("reinstall", *names)),
        )
    # Reinstalled, then the cache cleaned and reinstalled once more, then a sentence: never a loop.
    assert ran == [("reinstall", "numpy"), ("uv", "cache", "clean", "numpy"), ("reinstall", "numpy")]
    assert "numpy/version.py missing" in exc.value.message and "still differ" in exc.value.message
    assert "uv cache clean numpy" in (exc.value.hint or "") and "--link-mode copy" in (exc.value.hint or "")
