"""Issue 40: unmet requirements are told by who can meet them (checks/venv.py `_requirements`): against the
torch pin (nothing installs both: remove the package or take an older one), the project's own (bootstrap's
extras step), another package's (uv, under the pin). Fake dist-info folders; the real loop is run in
tests/provision/test_fixes_converge.py."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from types import SimpleNamespace

from mw_env.checks.catalogue import load_catalogue
from mw_env.checks.venv import _requirements


def _dist(site: Path, name: str, version: str, *requires: str, folder: bool = False) -> None:
    d = site / f"{name}-{version}.dist-info"
    d.mkdir(parents=True)
    lines = [f"Name: {name}", f"Version: {version}", *(f"Requires-Dist: {r}" for r in requires)]
    (d / "METADATA").write_text("\n".join(lines) + "\n\nbody\n")
    if folder:
        (d / "direct_url.json").write_text('{"url": "file:///src/demo", "dir_info": {"editable": true}}')


def _ctx(venv: Path, extras=("train",)) -> SimpleNamespace:
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\nversion_info = 3.11.7\n")
    (venv / "mw-env-constraints.txt").write_text("# pin\ntorch==2.10.0+cpu\n")
    cat = load_catalogue()
    return SimpleNamespace(
        venv=venv,
        python=venv / "bin" / "python",
        record=SimpleNamespace(extras=extras, constraints_file=str(venv / "mw-env-constraints.txt")),
        fix=cat.fix_for,
        bootstrap_command=lambda recreate=False: f"`mw-env bootstrap --venv {venv}`",
    )


def _site(venv: Path) -> Path:
    return venv / "lib" / "python3.11" / "site-packages"


def test_a_package_against_the_pin_names_it_the_torch_it_needs_and_the_two_ways_out(tmp_path):
    site = _site(tmp_path)
    _dist(site, "torch", "2.10.0+cpu")
    _dist(site, "addon", "2.0", "torch>=2.11")
    found = _requirements(_ctx(tmp_path))
    assert found.status == "fail"
    assert "addon 2.0 requires torch>=2.11" in found.detail and "torch==2.10.0+cpu" in found.detail
    assert "ModuleNotFoundError" not in found.detail and "bootstrap" not in found.fix.replace("`mw-env", "")
    commands = [shlex.split(c) for c in re.findall(r"`([^`]+)`", found.fix)]
    assert commands[0][:3] == ["uv", "pip", "uninstall"] and commands[0][-1] == "addon"
    assert commands[1][-3:] == ["--constraint", str(tmp_path / "mw-env-constraints.txt"), "addon<2.0"]


def test_the_projects_missing_packages_are_bootstraps_and_another_packages_are_uvs(tmp_path):
    site = _site(tmp_path)
    _dist(site, "torch", "2.10.0+cpu")
    _dist(site, "demo", "0.1", "numpy>=2; extra == 'train'", folder=True)
    _dist(site, "pandas", "2.2.3", "pytz>=2020.1", "numpy>=1.26")
    _dist(site, "numpy", "1.25.0")
    found = _requirements(_ctx(tmp_path))
    # The project's own (numpy for demo[train]): bootstrap; an older numpy is a version, not a missing module.
    assert "demo 0.1[train]" in found.detail and "ModuleNotFoundError" not in found.detail
    assert "`mw-env bootstrap --venv" in found.fix
    # pandas' pytz: bootstrap never installs it; uv does, under the pin.
    assert "pytz is missing (pandas 2.2.3 needs pytz>=2020.1)" in found.detail
    (install,) = [shlex.split(c) for c in re.findall(r"`(uv pip install[^`]+)`", found.fix)]
    # numpy is the project's (its need comes first): bootstrap's upgrade serves pandas' numpy>=1.26 too.
    assert install[-3:] == ["--constraint", str(tmp_path / "mw-env-constraints.txt"), "pytz>=2020.1"]


def test_a_missing_package_of_the_project_says_the_import_fails(tmp_path):
    site = _site(tmp_path)
    _dist(site, "torch", "2.10.0+cpu")
    _dist(site, "demo", "0.1", "numpy; extra == 'train'", folder=True)
    found = _requirements(_ctx(tmp_path))
    assert "numpy is missing" in found.detail and "ModuleNotFoundError" in found.detail
