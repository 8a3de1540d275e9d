"""The lock's view of what a venv holds, read from its dist-info folders (make.read_installed), against real
`uv pip freeze` on real venvs that uv built: a wheel from a wheelhouse, a wheel installed by its path, an
editable folder, a VCS install's direct_url.json. Where the reader cannot be exact (a legacy .egg-info, a
left-over "~name" folder, an unreadable direct_url.json) it answers None and the lock asks uv."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import zipfile
from pathlib import Path

import pytest

from mw_env.venv.lock.make import parse_freeze, read_installed
from mw_env.venv.venvinfo import site_packages
from provision.provision_support import find_uv_binary

UV = find_uv_binary()
pytestmark = pytest.mark.skipif(UV is None, reason="uv is not installed")


def _wheel(folder: Path, name: str, version: str) -> Path:
    """A minimal valid pure-Python wheel, as a build backend writes one."""
    dist = f"{name}-{version}"
    files = {
        f"{name}/__init__.py": f"VERSION = {version!r}\n".encode(),
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    rows = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{path},sha256={digest},{len(data)}")
    rows.append(f"{dist}.dist-info/RECORD,,")
    files[f"{dist}.dist-info/RECORD"] = ("\n".join(rows) + "\n").encode()
    path = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name_in_zip, data in files.items():
            zf.writestr(name_in_zip, data)
    return path


def _uv(*args: str) -> str:
    res = subprocess.run([UV, *args], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    """A uv venv holding a wheelhouse wheel (`alpha`) and a wheel installed by its path (`beta`)."""
    house = tmp_path / "house dir"
    house.mkdir()
    _wheel(house, "alpha_pkg", "1.2.0")
    beta = _wheel(tmp_path, "beta", "0.3.post1")
    venv = tmp_path / "venv"
    _uv("venv", "-q", str(venv))
    python = str(venv / "bin" / "python")
    _uv(
        "pip",
        "install",
        "-q",
        "--offline",
        "--no-index",
        "--find-links",
        str(house),
        "--python",
        python,
        "alpha-pkg",
    )
    _uv("pip", "install", "-q", "--offline", "--no-index", "--python", python, str(beta))
    return venv


def _uv_says(venv: Path):
    return parse_freeze(_uv("pip", "freeze", "--python", str(venv / "bin" / "python")))


def test_the_reader_says_what_uv_pip_freeze_says(venv):
    mine = read_installed(venv)
    assert mine is not None and mine == _uv_says(venv)
    assert mine.pins == {"alpha-pkg": "1.2.0", "beta": "0.3.post1"}
    assert mine.wheel_dirs == (str(venv.parent),)  # beta's folder, searched like a wheelhouse by the lock


def test_a_vcs_install_is_left_out_as_uv_leaves_it_out(venv):
    site = site_packages(venv)
    assert site is not None
    (site / "alpha_pkg-1.2.0.dist-info" / "direct_url.json").write_text(
        json.dumps(
            {
                "url": "https://example.invalid/alpha.git",  # PEP 610: the scheme is in vcs_info
                "vcs_info": {"vcs": "git", "commit_id": "ab" * 20},
            }
        )
    )
    mine = read_installed(venv)
    assert mine is not None and mine == _uv_says(venv)
    assert "alpha-pkg" not in mine.pins and mine.skipped == (
        f"alpha-pkg @ git+https://example.invalid/alpha.git@{'ab' * 20}",
    )


def test_an_editable_folder_is_the_project_line(venv):
    site = site_packages(venv)
    assert site is not None
    (site / "beta-0.3.post1.dist-info" / "direct_url.json").write_text(
        json.dumps({"url": "file:///src/beta", "dir_info": {"editable": True}})
    )
    mine = read_installed(venv)
    assert mine is not None and mine == _uv_says(venv)
    assert mine.skipped == ("-e file:///src/beta",)


@pytest.mark.parametrize(
    "make",
    [
        lambda site: (site / "legacy-1.0.egg-info").mkdir(),
        lambda site: (site / "legacy.egg-link").write_text("/src/legacy\n"),
        lambda site: (site / "~lpha_pkg-1.2.0.dist-info").mkdir(),
        lambda site: (site / "gamma-not_a_version.dist-info").mkdir(),
        lambda site: (site / "beta-0.3.post1.dist-info" / "direct_url.json").write_text("{not json"),
        lambda site: (site / "beta-0.3.post1.dist-info" / "direct_url.json").write_text('{"no_url": 1}'),
    ],
    ids=["egg-info", "egg-link", "pip-leftover", "bad-version", "bad-json", "no-url"],
)
def test_what_the_reader_cannot_take_exactly_is_left_to_uv(venv, make):
    site = site_packages(venv)
    assert site is not None
    make(site)
    assert read_installed(venv) is None


def test_no_site_packages_is_left_to_uv(tmp_path):
    assert read_installed(tmp_path / "nothing") is None
