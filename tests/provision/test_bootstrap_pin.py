"""The core promise with the real resolver: the profile's torch first, and it stays through later installs."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from mw_env.provision.execute import execute
from mw_env.provision.plan import BootstrapOptions, installed_version, plan

from .provision_support import ROCM, offline_options


def _bootstrap(venv: Path, env: dict[str, str], indexes, companions: tuple[str, ...] = (), **opts):
    source = replace(ROCM, index_url=indexes.rocm.as_uri())
    options = BootstrapOptions(
        venv=venv,
        python=sys.executable,
        python_explicit=True,
        project=indexes.project,
        adopt=False,
        doctor=False,
        **opts,
    )
    the_plan = plan(
        profile="gfx1103",
        torch=source,
        runtime_env={"HSA_OVERRIDE_GFX_VERSION": "11.0.0"},
        options=options,
        env=env,
        companions=companions,
    )
    return the_plan, execute(the_plan)


def _sh(cmd: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", cmd], env=env, capture_output=True, text=True, check=False)


@pytest.mark.slow
def test_rocm_torch_installed_first_and_kept_by_pip_and_uv(tmp_path, hermetic_env, indexes):
    venv = tmp_path / "venv"
    the_plan, result = _bootstrap(venv, hermetic_env, indexes)
    assert result.ok, result.to_dict()
    assert [s.id for s in the_plan.steps][:4] == ["preflight", "uv", "venv", "torch"]
    # The default index offers newer CUDA torches; the profile's ROCm build won anyway.
    assert installed_version(venv, "torch") == "2.9.1+rocm6.4"
    assert installed_version(venv, "demo_train") == "0.1.0"
    assert (venv / "bin" / "pip").exists()

    # pip inside the venv (activated or not) reads <venv>/pip.conf: it must refuse, not swap.
    pip = _sh(f"{venv}/bin/pip install needs-newer-torch", hermetic_env)
    assert pip.returncode != 0
    assert "torch" in pip.stdout + pip.stderr
    assert installed_version(venv, "torch") == "2.9.1+rocm6.4"
    # Same for `uv pip install` typed in an activated shell (UV_CONSTRAINT from the activate script).
    uv = _sh(f'source {venv}/bin/activate && "$UV" pip install needs-newer-torch', hermetic_env)
    assert uv.returncode != 0, uv.stdout + uv.stderr
    assert "torch==2.9.1+rocm6.4" in uv.stderr
    assert installed_version(venv, "torch") == "2.9.1+rocm6.4"
    # The activate script carries the profile's runtime env, and deactivate removes it again.
    # MW_ENV_VENV points `mw-env train`/`doctor` in that shell at this venv, whatever its path.
    shown = _sh(
        f'source {venv}/bin/activate && echo "$HSA_OVERRIDE_GFX_VERSION $MW_ENV_VENV" && deactivate && '
        'echo "[${HSA_OVERRIDE_GFX_VERSION:-}${UV_CONSTRAINT:-}${MW_ENV_VENV:-}]"',
        hermetic_env,
    )
    assert shown.stdout.split() == ["11.0.0", str(venv), "[]"], shown.stderr


@pytest.mark.slow
def test_without_the_pin_the_same_installs_swap_torch(tmp_path, hermetic_env, indexes):
    """The control: proves the trap is real, so the test above can fail."""
    uv = hermetic_env["UV"]
    for tool in ("pip", "uv"):
        venv = tmp_path / f"plain-{tool}"
        subprocess.run(
            [uv, "venv", "-q", "--python", sys.executable, str(venv)], env=hermetic_env, check=True
        )
        subprocess.run(
            [
                uv,
                "pip",
                "install",
                "-q",
                "--python",
                str(venv / "bin" / "python"),
                "--index",
                indexes.rocm.as_uri(),
                "--find-links",
                str(indexes.tools),
                "torch==2.9.1+rocm6.4",
                "pip",
            ],
            env=hermetic_env,
            check=True,
        )
        assert installed_version(venv, "torch") == "2.9.1+rocm6.4"
        cmd = (
            f"{venv}/bin/pip install needs-newer-torch"
            if tool == "pip"
            else f'source {venv}/bin/activate && "$UV" pip install needs-newer-torch'
        )
        res = _sh(cmd, hermetic_env)
        assert res.returncode == 0, res.stdout + res.stderr
        assert installed_version(venv, "torch") == "2.10.0"  # swapped for the CUDA trap


def test_rerun_is_a_noop_and_dry_run_shows_done(tmp_path, hermetic_env, indexes):
    venv = tmp_path / "venv"
    _, first = _bootstrap(venv, hermetic_env, indexes, companions=("pytorch-triton-rocm",))
    assert first.ok and first.changed
    # Companions come from the torch index with torch, and are pinned with it.
    assert installed_version(venv, "pytorch_triton_rocm") == "3.5.1"
    pins = (venv / "mw-env-constraints.txt").read_text().splitlines()
    assert "torch==2.9.1+rocm6.4" in pins and "pytorch-triton-rocm==3.5.1" in pins
    before = (venv / "mw-env.json").read_text()
    again, second = _bootstrap(venv, hermetic_env, indexes, companions=("pytorch-triton-rocm",))
    assert all(s.done for s in again.steps), [s.id for s in again.steps if not s.done]
    assert second.ok and not second.changed
    assert {o.status for o in second.outcomes} == {"skipped"}
    assert (venv / "mw-env.json").read_text() == before


def test_wrong_build_after_install_stops_with_clear_error(tmp_path, hermetic_env, indexes):
    """The seed's trap: a wheel that calls itself +rocm6.4 but is a CUDA build."""
    venv = tmp_path / "venv"
    source = replace(ROCM, index_url=indexes.bad_rocm.as_uri())
    options = offline_options(venv, indexes.project)
    result = execute(plan(profile="gfx1103", torch=source, runtime_env={}, options=options, env=hermetic_env))
    assert not result.ok
    assert result.failed_step == "verify-torch"
    assert "cuda build" in result.error.message and "not rocm" in result.error.message
    assert "wrong index" in result.error.hint
    # State kept: the venv and its torch stay for inspection, and nothing after the failed step ran.
    assert installed_version(venv, "torch") == "2.9.1+rocm6.4"
    assert not (venv / "mw-env.json").exists()
