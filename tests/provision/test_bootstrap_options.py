"""Bootstrap options end to end: --source, an unusable torch source in the plan, bad --python and --root."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from mw_env.base.errors import InputError
from mw_env.provision.execute import execute
from mw_env.provision.plan import BootstrapOptions, plan
from mw_env.venv.record import read_record

from .provision_support import ROCM, offline_options

MACHINES = Path(__file__).resolve().parents[1] / "fixtures" / "machines"


def _mw(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mw_env", *args], env=env, capture_output=True, text=True, check=False
    )


def _env(hermetic_env: dict[str, str]) -> dict[str, str]:
    return {**hermetic_env, "PYTHONPATH": ":".join(sys.path)}


def _closed_port() -> int:
    with socket.socket() as s:  # bound, never listening: a connection to it is refused
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torch_step(data: dict) -> dict:
    return next(s for s in data["steps"] if s["id"] == "torch")


def _dry_run(tmp_path: Path, env: dict[str, str], indexes, *extra: str) -> subprocess.CompletedProcess[str]:
    args = [
        "bootstrap",
        "--root",
        str(MACHINES / "incus-780m"),
        "--venv",
        str(tmp_path / "venv"),
        "--python",
        sys.executable,
        "--project",
        str(indexes.project),
        "--no-adopt-torch",
        "--dry-run",
        "--json",
        *extra,
    ]
    return _mw(args, env)


@pytest.mark.slow
def test_source_option_and_env_pick_the_profiles_named_source(tmp_path, hermetic_env, indexes):
    env = _env(hermetic_env)
    res = _dry_run(tmp_path, env, indexes, "--offline", "--source", "therock-gfx110x")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["profile"] == "gfx1103" and data["torch_source"] == "therock-gfx110x"
    cmd = _torch_step(data)["command"]
    # Offline and no wheelhouse holds it: the plan still shows the exact command for the chosen source.
    assert data["indexes"][0]["url"] == "https://repo.amd.com/rocm/whl/gfx110X-all/"  # the step's uv.toml
    assert data["indexes"][0]["ignore_error_codes"] == [403] and "--config-file" in cmd
    assert "torch==2.11.0+rocm7.13.0" in cmd and "--offline" in cmd
    assert "--offline" in data["problem"]

    by_env = _dry_run(tmp_path, {**env, "MW_ENV_TORCH_SOURCE": "therock-gfx110x"}, indexes, "--offline")
    assert by_env.returncode == 0, by_env.stderr
    assert json.loads(by_env.stdout)["torch_source"] == "therock-gfx110x"

    default = json.loads(_dry_run(tmp_path, env, indexes, "--offline").stdout)
    assert default["torch_source"] == "amd-multiarch" and default["device_packages"] == [
        "amd-torch-device-gfx1103"
    ]
    # One GPU's kernels: the 780M's device extra on torch, nothing else.
    assert "torch[device-gfx1103]>=2.12,<2.15" in _torch_step(default)["command"]
    every = json.loads(_dry_run(tmp_path, env, indexes, "--offline", "--all-devices").stdout)
    assert "torch[device-all]>=2.12,<2.15" in _torch_step(every)["command"] and every["device_packages"] == []

    bad = _dry_run(tmp_path, env, indexes, "--offline", "--source", "nope")
    assert bad.returncode == 2 and bad.stdout == ""
    assert "no torch source 'nope'" in bad.stderr and "rocm6.4, therock-gfx110x" in bad.stderr


@pytest.mark.slow
def test_unreachable_index_plan_never_shows_a_bare_torch_install(tmp_path, hermetic_env, indexes):
    """The seed's trap in a dry run: `uv pip install torch` without the profile's index would get CUDA torch."""
    index = f"http://127.0.0.1:{_closed_port()}/simple"
    res = _dry_run(tmp_path, _env(hermetic_env), indexes, "--torch-index", index, "--source", "rocm6.4")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert "refused" in data["problem"] and index in data["problem"]
    cmd = _torch_step(data)["command"]
    assert data["indexes"][0]["url"] == index and data["indexes"][0]["role"] == "torch"
    assert "torch==2.9.1+rocm6.4" in cmd and "torch" not in cmd and "torch==2.9.1" not in cmd

    # Run for real: preflight stops with the reason and the two ways out, before anything is made.
    args = ["bootstrap", "--root", str(MACHINES / "incus-780m"), "--venv", str(tmp_path / "venv")]
    args += ["--python", sys.executable, "--project", str(indexes.project), "--no-adopt-torch"]
    real = _mw([*args, "--torch-index", index], _env(hermetic_env))
    assert real.returncode == 1, real.stdout + real.stderr
    assert "refused" in real.stdout and "--find-links" in real.stdout and "firewall" in real.stdout
    assert not (tmp_path / "venv").exists()


@pytest.mark.parametrize("python", ["2.7", "3.9", "/nonexistent/python3"])
def test_unusable_explicit_python_is_bad_input(tmp_path, hermetic_env, indexes, python):
    options = BootstrapOptions(
        venv=tmp_path / "venv", python=python, python_explicit=True, project=indexes.project, adopt=False
    )
    with pytest.raises(InputError) as err:
        plan(profile="gfx1103", torch=ROCM, runtime_env={}, options=options, env=hermetic_env)
    assert f"--python {python}" in err.value.message and err.value.exit_code == 2
    assert "--python" in err.value.hint
    if python != "/nonexistent/python3":
        assert ">=" in err.value.message  # names the project's requires-python
    assert not (tmp_path / "venv").exists()


@pytest.mark.slow
def test_cli_exit_codes_for_bad_python_and_root(tmp_path, hermetic_env):
    env = _env(hermetic_env)
    res = _mw(["bootstrap", "--venv", str(tmp_path / "v"), "--python", "2.7", "--profile", "cpu"], env)
    assert res.returncode == 2 and "error: --python 2.7" in res.stderr and "hint:" in res.stderr
    assert "Traceback" not in res.stderr
    missing = tmp_path / "no-such-root"
    for cmd in (["detect"], ["bootstrap", "--dry-run"], ["env", "--venv", str(tmp_path / "v")]):
        res = _mw([*cmd, "--root", str(missing)], env)
        assert res.returncode == 2, (cmd, res.stderr)
        assert f"--root {missing}: does not exist" in res.stderr and "Traceback" not in res.stderr
    res = _mw(["detect"], {**env, "MW_ENV_ROOT": str(missing)})
    assert res.returncode == 2 and "MW_ENV_ROOT" in res.stderr


def test_explicit_torch_index_skipped_for_the_wheelhouse_says_so(tmp_path, hermetic_env, indexes):
    from .provision_support import FakeSource

    cpu = FakeSource(
        build="cpu", index_url="https://download.pytorch.org/whl/cpu", version=">=2.9", local_tag="+cpu"
    )
    options = BootstrapOptions(
        venv=tmp_path / "venv",
        python=sys.executable,
        python_explicit=True,
        project=indexes.project,
        find_links=(str(indexes.cpu_links),),
        torch_index="https://mirror.example/whl/cpu",
        adopt=False,
    )
    p = plan(profile="cpu", torch=cpu, runtime_env={}, options=options, env=hermetic_env)
    assert p.torch.origin == "wheelhouse"
    assert any(
        "--torch-index https://mirror.example/whl/cpu is not contacted" in w and "--find-links" in w
        for w in p.warnings
    ), p.warnings


@dataclass(frozen=True)
class NamedSource:
    """A TorchSource with the id a profile gives it."""

    id: str
    build: str
    index_url: str | None
    version: str
    local_tag: str


def test_another_source_over_a_finished_venv_needs_recreate(tmp_path, hermetic_env, indexes):
    venv = tmp_path / "venv"
    first = NamedSource("rocm6.4", "rocm", indexes.rocm.as_uri(), "==2.9.1", "+rocm6.4")
    options = offline_options(venv, indexes.project)
    assert execute(plan(profile="gfx1103", torch=first, runtime_env={}, options=options, env=hermetic_env)).ok
    assert read_record(venv).torch_source == "rocm6.4"  # doctor and train can select the same source
    # Same profile and build, another source (another torch): never swapped in place.
    other = replace(first, id="therock-gfx110x", version="==2.11.0", local_tag="+rocm7.13.0")
    with pytest.raises(InputError, match=r"source rocm6\.4") as err:
        plan(profile="gfx1103", torch=other, runtime_env={}, options=options, env=hermetic_env)
    assert "--recreate" in err.value.hint
    # The same source again is the no-op re-run.
    again = plan(profile="gfx1103", torch=first, runtime_env={}, options=options, env=hermetic_env)
    assert all(s.done for s in again.steps)


def test_python_behind_a_broken_pyenv_shim_is_found(tmp_path):
    """uv stops at the first broken python3.12 on PATH (a pyenv shim of an unselected version)."""
    from mw_env.sources.uv import find_python

    def exe(path: Path, body: str) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
        return path

    fake_uv = exe(tmp_path / "bin" / "uv", "echo 'error: Failed to inspect Python interpreter' >&2; exit 2")
    for version in ("3.12.1", "3.12.10", "3.13.0"):
        exe(tmp_path / "pyenv" / "versions" / version / "bin" / f"python{version[:4]}", "exit 0")
    env = {"PATH": str(tmp_path / "bin"), "HOME": str(tmp_path), "PYENV_ROOT": str(tmp_path / "pyenv")}
    assert find_python(str(fake_uv), "3.12", env) == str(tmp_path / "pyenv/versions/3.12.10/bin/python3.12")
    assert find_python(str(fake_uv), "3.11", env) is None
    assert find_python(str(fake_uv), "3.12", {**env, "PYENV_ROOT": str(tmp_path / "none")}) is None


def test_users_uv_routing_settings_cannot_move_torch_off_the_profiles_index(tmp_path, hermetic_env, indexes):
    """UV_INDEX_STRATEGY=unsafe-best-match would take the default index's newer CUDA torch for a range spec."""
    from mw_env.provision.plan import installed_version
    from mw_env.sources.uv import uv_env

    assert "UV_TORCH_BACKEND" not in uv_env({"UV_TORCH_BACKEND": "auto", "PATH": "/bin"})
    ranged = NamedSource("rocm6.4", "rocm", indexes.rocm.as_uri(), ">=2.9,<2.11", "+rocm6.4")
    env = {**hermetic_env, "UV_INDEX_STRATEGY": "unsafe-best-match"}
    options = BootstrapOptions(
        venv=tmp_path / "venv",
        python=sys.executable,
        python_explicit=True,
        project=indexes.project,
        adopt=False,
        doctor=False,
    )
    p = plan(profile="rocm", torch=ranged, runtime_env={}, options=options, env=env)
    cmd = p.step("torch").command
    assert cmd[cmd.index("--index-strategy") + 1] == "first-index"
    result = execute(p)
    assert result.ok, result.to_dict()
    assert installed_version(tmp_path / "venv", "torch") == "2.9.1+rocm6.4"  # not the trap's 2.10.0


def test_a_foreign_venv_with_another_torch_is_not_rebuilt_in_place(tmp_path, hermetic_env, indexes):
    from mw_env.provision.plan import installed_version

    venv = tmp_path / "theirs"
    uv = hermetic_env["UV"]
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], env=hermetic_env, check=True)
    py = str(venv / "bin" / "python")
    subprocess.run(
        [uv, "pip", "install", "-q", "--python", py, "torch==2.10.0"], env=hermetic_env, check=True
    )
    source = replace(ROCM, index_url=indexes.rocm.as_uri())
    options = offline_options(venv, indexes.project)
    with pytest.raises(InputError, match="mw-env did not make") as err:
        plan(profile="gfx1103", torch=source, runtime_env={}, options=options, env=hermetic_env)
    assert "--recreate" in err.value.hint and "2.10.0" in err.value.message
    assert installed_version(venv, "torch") == "2.10.0"
    rebuilt = execute(
        plan(
            profile="gfx1103",
            torch=source,
            runtime_env={},
            options=replace(options, recreate=True),
            env=hermetic_env,
        )
    )
    assert rebuilt.ok, rebuilt.to_dict()
    assert installed_version(venv, "torch") == "2.9.1+rocm6.4"


def test_new_extras_over_a_finished_venv_are_installed_and_recorded(tmp_path, hermetic_env, indexes):
    venv = tmp_path / "venv"
    source = NamedSource("rocm6.4", "rocm", indexes.rocm.as_uri(), "==2.9.1", "+rocm6.4")
    options = offline_options(venv, indexes.project)
    assert execute(
        plan(profile="gfx1103", torch=source, runtime_env={}, options=options, env=hermetic_env)
    ).ok
    assert read_record(venv).extras == ("train",)
    more = replace(options, extras=("train", "dev"))
    again = plan(profile="gfx1103", torch=source, runtime_env={}, options=more, env=hermetic_env)
    pending = {s.id for s in again.steps if not s.done}
    assert {"extras", "env"} <= pending and "torch" not in pending  # torch stays; extras and record redo
    assert execute(again).ok
    assert read_record(venv).extras == ("train", "dev")


@pytest.mark.slow
def test_bootstrap_lines_are_never_broken_mid_phrase(tmp_path, hermetic_env, indexes):
    """Issue 20 #15: rich wrapped bootstrap's lines at the (pipe's) width, breaking a sentence or a command in two.
    Long lines are now the terminal's to wrap: with COLUMNS=50 the plan still has lines longer than 50."""
    env = {**_env(hermetic_env), "COLUMNS": "50"}
    args = ["bootstrap", "--root", str(MACHINES / "incus-780m"), "--venv", str(tmp_path / "venv")]
    args += ["--python", sys.executable, "--project", str(indexes.project), "--no-adopt-torch", "--dry-run"]
    res = _mw([*args, "--offline", "--source", "therock-gfx110x"], env)
    assert res.returncode == 0, res.stderr
    profile = next(line for line in res.stdout.splitlines() if line.startswith("profile gfx1103: "))
    assert len(profile) > 50 and profile.rstrip().endswith("so no HSA_OVERRIDE_GFX_VERSION"), res.stdout
