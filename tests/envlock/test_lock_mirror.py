"""Issue 40: locks in the users' world. A pip.conf names a company mirror as an extra index (as corporate
setups do); `pip install pandas` in the venv takes pandas 2.2.3 from PyPI, the mirror holding only older ones.
The lock resolves each package the way it was installed (pip: the best version of all indexes), a lock that
cannot be written says uv's cause whole and once, and what to run; a bootstrap whose lock fails says so in
one line and sets the stale lock aside (the doctor had offered a `--recreate` from it that would remove the
new packages). Offline: loopback indexes answering as PyPI (JSON or HTML) and a mirror (HTML only) do."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from indexserver import MIRROR, serve
from mw_env.venv.lock import LOCK_FILE, STALE_LOCK
from provision.provision_support import find_uv_binary
from wheelfactory import build_wheel, fake_torch, flat_dir, pip_wheel, write_project


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    base = tmp_path_factory.mktemp("mirror")
    d = base / "dist"
    pypi = [
        build_wheel(d / "pypi", "pandas", "2.2.3", requires=["pytz>=2020.1"]),
        build_wheel(d / "pypi", "pandas", "2.2.0", requires=["pytz>=2020.1"]),
        build_wheel(d / "pypi", "pytz", "2024.1"),
        build_wheel(d / "pypi", "pytz", "2023.3"),
        build_wheel(d / "pypi", "demo-helper", "1.0"),
        build_wheel(d / "pypi", "extra-tool", "1.0"),
    ]
    # The mirror lags: pandas and pytz at older versions only, and the company's own package.
    mirror = [
        build_wheel(d / "mirror", "pandas", "2.2.0", requires=["pytz>=2020.1"]),
        build_wheel(d / "mirror", "pytz", "2023.3"),
        build_wheel(d / "mirror", "corp-tools", "1.0"),
    ]
    from wheelfactory import simple_index

    roots = {"pypi": simple_index(base / "pypi", pypi), "mirror": simple_index(base / "mirror", mirror)}
    wheelhouse = flat_dir(base / "wheelhouse", [fake_torch(d / "torch", "2.10.0+cpu"), pip_wheel()])
    project = write_project(
        base / "demo", extras={"train": ["torch>=2.4", "demo-helper"], "more": ["extra-tool"]}
    )
    with serve(roots, {"mirror": MIRROR}) as srv:
        yield base, srv, wheelhouse, project


@pytest.fixture
def user(world, tmp_path):
    """A user whose pip.conf names the mirror as an extra index, with a bootstrapped CPU venv."""
    base, srv, wheelhouse, project = world
    uv_bin = find_uv_binary()
    if uv_bin is None:
        pytest.skip("uv is not installed")
    home = tmp_path / "home"
    (home / ".config" / "pip").mkdir(parents=True)
    (home / ".config" / "pip" / "pip.conf").write_text(f"[global]\nextra-index-url = {srv.url('mirror')}\n")
    root = tmp_path / "root"
    root.mkdir()
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(home),
        "XDG_CONFIG_DIRS": str(tmp_path / "xdg"),
        "UV": uv_bin,
        "UV_CACHE_DIR": str(base / "uv-cache"),
        "UV_NO_CONFIG": "1",
        "UV_PYTHON_DOWNLOADS": "never",
        "PIP_INDEX_URL": srv.url("pypi"),  # "PyPI": the default index of pip and uv
        "UV_DEFAULT_INDEX": srv.url("pypi"),
        "PIP_FIND_LINKS": str(wheelhouse),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "MW_ENV_ROOT": str(root),
        "MW_ENV_PROFILE": "cpu",
        "MW_ENV_STATE_DIR": str(tmp_path / "state"),
        "PYTHONPATH": os.pathsep.join(sys.path),
        "LANG": "C.UTF-8",
    }
    venv = tmp_path / "venv"
    boot = ["bootstrap", "--venv", str(venv), "--python", sys.executable, "--project", str(project)]
    boot += ["--no-adopt-torch", "--no-doctor"]
    res = _mw_env(env, *boot)
    assert res.returncode == 0, res.stdout + res.stderr
    return env, venv, boot


def _mw_env(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mw_env", *args], env=env, capture_output=True, text=True, timeout=600
    )


def world_mirror(env: dict[str, str]) -> str:
    """The mirror's URL (the server's other root)."""
    return env["UV_DEFAULT_INDEX"].replace("/pypi/", "/mirror/")


def _locked(venv: Path) -> dict[str, str]:
    """name -> the wheel URL the venv's lock holds."""
    data = tomllib.loads((venv / LOCK_FILE).read_text())
    return {p["name"]: p["wheels"][0]["url"] for p in data["packages"]}


@pytest.mark.slow
def test_pandas_from_pypi_beside_a_mirror_is_locked_from_pypi(user, world):
    env, venv, _ = user
    srv = world[1]
    pip = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "pandas"], env=env, capture_output=True, text=True
    )
    assert pip.returncode == 0 and "pandas-2.2.3" in pip.stdout, pip.stdout + pip.stderr
    res = _mw_env(env, "lock", "--venv", str(venv))
    assert res.returncode == 0, res.stdout + res.stderr
    urls = _locked(venv)
    assert urls["pandas"].startswith(srv.url("pypi")) and "pandas-2.2.3" in urls["pandas"]
    assert urls["pytz"].startswith(srv.url("pypi")) and "pytz-2024.1" in urls["pytz"]


@pytest.mark.slow
def test_a_lock_that_cannot_be_written_says_uvs_cause_once_and_what_to_run(user):
    env, venv, _ = user
    # uv, told to take the best version of all indexes, installs what its default strategy cannot lock.
    python = str(venv / "bin" / "python")
    installed = subprocess.run(
        [env["UV"], "pip", "install", "--python", python, "--index-strategy", "unsafe-best-match", "pandas"],
        env={**env, "UV_INDEX": world_mirror(env)},
        capture_output=True,
        text=True,
    )
    assert installed.returncode == 0, installed.stderr
    res = _mw_env(env, "lock", "--venv", str(venv))
    assert res.returncode == 1, res.stdout + res.stderr
    error, hint = res.stderr.split("\nhint: ", 1)
    # uv's cause whole: its hint to the last sentence (it was cut at "(123 more)").
    assert "`pandas` was found on" in error and "regardless of the order in which they were defined." in error
    assert "more)" not in error and "…" not in error
    assert hint.count("\n") <= 1 and "UV_INDEX_STRATEGY=unsafe-best-match mw-env lock --venv" in hint, hint
    # What it says to run works.
    command = shlex.split(hint[hint.index("`") + 1 : hint.index("`", hint.index("`") + 1)])
    again = subprocess.run(
        [sys.executable, "-m", "mw_env", *command[2:]],
        env={**env, command[0].split("=")[0]: command[0].split("=")[1]},
        capture_output=True,
        text=True,
    )
    assert again.returncode == 0, again.stdout + again.stderr


@pytest.mark.slow
def test_a_bootstrap_whose_lock_fails_says_one_line_and_sets_the_stale_lock_aside(user):
    env, venv, boot = user
    before = (venv / LOCK_FILE).read_text()
    python = str(venv / "bin" / "python")
    subprocess.run(
        [env["UV"], "pip", "install", "--python", python, "--index-strategy", "unsafe-best-match", "pandas"],
        env={**env, "UV_INDEX": world_mirror(env)},
        capture_output=True,
        check=True,
    )
    i = boot.index("--no-doctor")
    res = _mw_env(env, *boot[:i], "--extras", "train,more", *boot[i:])
    assert res.returncode == 0, res.stdout + res.stderr
    (line,) = [ln for ln in res.stdout.splitlines() if "no lock written" in ln]
    assert "uv could not lock the venv's packages" in line and f"kept as {STALE_LOCK}" in line
    assert "`mw-env lock --venv" in line and "cause:" not in line
    assert not (venv / LOCK_FILE).exists() and (venv / STALE_LOCK).read_text() == before
    # The doctor no longer calls the new extras drift nor offers a --recreate from the stale lock.
    doctor = _mw_env(env, "doctor", "--venv", str(venv), "--quick", "--json")
    check = next(c for c in json.loads(doctor.stdout)["checks"] if c["id"] == "venv.lock")
    assert check["status"] == "skip" and "--recreate" not in json.dumps(check), check
    assert "could not write one" in check["detail"]
    # A run in that venv has no drift to warn about.
    from mw_env.venv.lock.atlaunch import lock_for_run

    assert lock_for_run(venv=venv, out_dir=venv.parent / "run", selection=None, env=env).lines() == []


def test_uvs_cause_is_kept_whole_and_each_sentence_said_once():
    from mw_env.venv.lock.lockfail import cause

    advice = (
        "By default, uv will only consider versions that are published on the first index that contains a "
        "given package, to avoid dependency confusion attacks. If all indexes are equally trusted, use "
        "`--index-strategy unsafe-best-match` to consider all versions from all indexes, regardless of the "
        "order in which they were defined."
    )
    hints = "".join(
        f"\n      hint: `{name}` was found on http://m/, but not at the requested version ({name}=={v}). "
        f"A compatible version may be available on a subsequent index (e.g., http://p/). {advice}\n"
        for name, v in (("pandas", "2.2.3"), ("pytz", "2024.1"))
    )
    output = (
        "Using Python 3.11.7 environment at: /v\n  × No solution found when resolving dependencies:\n"
        "  ╰─▶ Because there is no version of pandas==2.2.3 and you require pandas==2.2.3, we can conclude "
        "that your requirements are unsatisfiable.\n" + hints
    )
    said = cause(output)
    assert said.startswith("× No solution found") and "Using Python" not in said and "╰─▶" not in said
    assert "`pandas` was found" in said and "`pytz` was found" in said and "(pytz==2024.1)" in said
    assert said.count("By default, uv will only consider") == 1 and said.count("A compatible version") == 1
    assert said.endswith("regardless of the order in which they were defined.")


def test_a_run_says_the_drift_once_when_the_doctor_said_it():
    from mw_env.venv.lock.atlaunch import LaunchLock

    lock = LaunchLock(drift=("pandas 2.2.3 (added, not in the lock)",), problem="it could not be written (…)")
    assert len(lock.lines()) == 2 and "pandas 2.2.3" in lock.lines()[0]
    (only,) = lock.lines(drift_told=True)  # the doctor's venv.lock warning listed the changes
    assert "pandas" not in only and "could not be written" in only
