"""A lock is checked whole (issue 29, class 2).

`bootstrap --lock` installed a lock without numpy ("111 packages as locked"), the `train` extra's step showed
✓, the doctor was green and `mw-env train` died on `import numpy`; `--dry-run` also said yes to locks the real
run refused in uv (a version changed beside its unchanged wheel; `[tool.mw-env] python = "3.12.4"` over cp311
wheels). Each such lock is now refused, naming what is wrong, before anything is installed, by the dry run
and the real run alike (both read it through envlock.rebuild.load_for_bootstrap; envlock.requires holds the
rule); and the doctor reads the venv's own requirements (`venv.requirements`), not only the lock's list.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checks.doctor_helpers import by_id, fake_venv, hardware, run, selection
from conftest import fake_machine
from mw_env.cli import main

from .lock_support import lock_text, quiet_wheelhouse

MACHINES = Path(__file__).resolve().parents[1] / "fixtures" / "machines"

TORCH_WHEEL = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"


@pytest.fixture
def quiet_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    return quiet_wheelhouse(monkeypatch, tmp_path)


def _without(text: str, name: str) -> str:
    blocks = text.split("[[packages]]")
    return "[[packages]]".join(b for b in blocks if f'name = "{name}"' not in b)


CASES = {
    # what is changed in a whole lock -> the words that name it
    "numpy removed": (lambda t: _without(t, "numpy"), "numpy is missing (mw-env[train] needs numpy>=1.24)"),
    "a version beside its old wheel": (
        lambda t: t.replace('name = "sympy"\nversion = "1.14.0"', 'name = "sympy"\nversion = "1.13.0"'),
        "sympy 1.13.0: its wheel sympy-1.14.0-py3-none-any.whl is sympy 1.14.0",
    ),
    "python 3.12.4 over cp311 wheels": (
        lambda t: t.replace('python = "3.11.7"', 'python = "3.12.4"'),
        "torch 2.13.0+cpu: its wheel is for cp311-cp311, not Python 3.12.4",
    ),
    "a version the project does not allow": (
        lambda t: t.replace('name = "numpy"\nversion = "1.24"', 'name = "numpy"\nversion = "1.20"').replace(
            "numpy-1.24-py3", "numpy-1.20-py3"
        ),
        "numpy 1.20 does not satisfy numpy>=1.24 (mw-env[train])",
    ),
    "the lock's own graph names a package it lacks": (
        lambda t: t.replace(
            'name = "sympy"\nversion = "1.14.0"',
            'name = "sympy"\nversion = "1.14.0"\ndependencies = [{ name = "mpmath" }]',
        ),
        "mpmath is missing (sympy 1.14.0 needs mpmath)",
    ),
}


def _bootstrap(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(["bootstrap", *args])
    out = capsys.readouterr()
    return rc, out.out + out.err


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_dry_run_and_the_real_run_refuse_the_same_lock_before_installing(
    quiet_env: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    (quiet_env / TORCH_WHEEL).write_bytes(b"not read: refused before")
    change, words = CASES[case]
    lock = tmp_path / "pylock.toml"
    lock.write_text(change(lock_text(quiet_env, whole=True)))
    venv = tmp_path / "venv"
    said = []
    for extra in (["--dry-run"], [], ["--dry-run", "--json"]):
        rc, text = _bootstrap(
            capsys,
            *("--root", str(MACHINES / "cpu-only"), "--lock", str(lock), "--venv", str(venv)),
            *("--find-links", str(quiet_env), "--offline", *extra),
        )
        assert rc == 2, text
        first = next(ln for ln in text.splitlines() if ln.startswith("error: "))
        assert f"lock {lock} is not whole: " in first and words in " ".join(text.split()), text
        said.append(first)
        assert not venv.exists()  # nothing installed, not even a venv
    assert said[0] == said[1] == said[2]


def test_a_whole_lock_passes_and_more_extras_than_it_holds_do_not(
    quiet_env: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (quiet_env / TORCH_WHEEL).write_bytes(b"PK")
    lock = tmp_path / "pylock.toml"
    lock.write_text(lock_text(quiet_env, whole=True))
    args = ("--root", str(MACHINES / "cpu-only"), "--lock", str(lock), "--venv", str(tmp_path / "v"))
    rc, text = _bootstrap(capsys, *args, "--find-links", str(quiet_env), "--offline", "--dry-run")
    assert rc == 0, text
    rc, text = _bootstrap(
        capsys, *args, "--find-links", str(quiet_env), "--offline", "--dry-run", "--extras", "train,export"
    )
    assert rc == 2 and "onnx is missing (mw-env[export] needs onnx>=1.16)" in text, text
    assert "--extras train,export" in " ".join(text.split())


def _dist(site: Path, name: str, version: str, requires: list[str], *, folder: bool = False) -> None:
    d = site / f"{name}-{version}.dist-info"
    d.mkdir()
    lines = [f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"]
    lines += [f"Requires-Dist: {r}\n" for r in requires]
    (d / "METADATA").write_text("".join(lines) + "\nA long description.\nRequires-Dist: not-a-header\n")
    if folder:
        (d / "direct_url.json").write_text(json.dumps({"url": "file:///src", "dir_info": {"editable": True}}))


@pytest.mark.parametrize(
    ("numpy", "words"),
    [
        (None, "numpy is missing (mw-env 0.1.0[train] needs numpy>=1.24)"),
        ("1.20", "numpy 1.20 does not satisfy numpy>=1.24 (mw-env 0.1.0[train])"),
        ("2.0", None),
    ],
)
def test_the_doctor_reads_the_venvs_requirements(
    tmp_path: Path, numpy: str | None, words: str | None
) -> None:
    venv = fake_venv(tmp_path / "v", version="2.13.0+cpu", record={"profile": "cpu", "extras": ["train"]})
    site = next(venv.glob("lib/python3*/site-packages"))
    _dist(
        site,
        "mw_env",
        "0.1.0",
        ['numpy>=1.24; extra == "train"', 'onnx>=1.16; extra == "export"'],
        folder=True,
    )
    _dist(site, "pandas", "2.2.0", ["numpy>=1.22", 'tzdata; sys_platform == "win32"'])
    if numpy is not None:
        _dist(site, "numpy", numpy, [])
    hw = hardware(None, container="docker")
    machine = fake_machine("doctor-cpu-docker-shm64m")
    check = by_id(run(machine, selection(hw, None), venv, hw=hw, quick=True))["venv.requirements"]
    if words is None:
        assert check.status == "pass", check
        return
    assert check.status == "fail" and words in check.detail, check
    assert "onnx" not in check.detail and "tzdata" not in check.detail  # extras not installed, markers false
    assert f"mw-env bootstrap --venv {venv}" in check.fix


def test_packages_of_an_adopted_site_count_as_installed(tmp_path: Path) -> None:
    """A base image's torch (bootstrap adopts it with a .pth) is installed for the venv's python too."""
    from mw_env.venv.venvinfo import ADOPT_PTH

    venv = fake_venv(tmp_path / "v", version="2.13.0+cpu", record={"profile": "cpu", "extras": ["train"]})
    site = next(venv.glob("lib/python3*/site-packages"))
    _dist(
        site,
        "mw_env",
        "0.1.0",
        ['torch>=2.4; extra == "train"', 'numpy>=1.24; extra == "train"'],
        folder=True,
    )
    base = tmp_path / "image-site"
    base.mkdir()
    _dist(base, "torch", "2.13.0+cpu", [])
    _dist(base, "numpy", "2.0", [])
    (site / ADOPT_PTH).write_text(f"{base}\n")
    hw = hardware(None, container="docker")
    check = by_id(run(fake_machine("doctor-cpu-docker-shm64m"), selection(hw, None), venv, hw=hw, quick=True))
    assert check["venv.requirements"].status == "pass", check["venv.requirements"]
