"""Interrupted, concurrent and failed runs: state is kept, the lock holds, a working venv is never lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from mw_env.provision.execute import execute
from mw_env.provision.plan import build_path, installed_version, plan
from mw_env.venv.record import read_record
from proctools import hang_report, new_tag

from .provision_support import ROCM, cpu_bootstrap_args, offline_options


def _cli(args: list[str], env: dict[str, str], **kw) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "mw_env", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def _args(venv: Path, indexes, root: Path) -> list[str]:
    extra = ["--find-links", str(indexes.cpu_links), "--offline", "--no-adopt-torch", "--no-doctor"]
    return cpu_bootstrap_args(venv, indexes, root, *extra)


def _slow_uv(tmp_path: Path, real_uv: str) -> tuple[Path, Path]:
    """A uv that stalls in the torch install (so the test can kill or race it there), else real uv."""
    marker = tmp_path / "in-torch-step"
    wrapper = tmp_path / "slow-uv"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'case "$*" in *"torch=="*)\n'
        "  trap 'kill $! 2>/dev/null; exit 143' TERM INT\n"  # take the sleeper down with us
        f'  touch "{marker}"; sleep 60 & wait $!;;\n'
        "esac\n"
        f'exec "{real_uv}" "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper, marker


def _wait_for(path: Path, proc: subprocess.Popen[str], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"bootstrap ended early: {proc.communicate()}")
        if time.monotonic() > deadline:
            raise AssertionError("the torch step never started")
        time.sleep(0.05)


@pytest.mark.slow
def test_killed_in_torch_step_then_rerun_completes_and_lock_refuses_a_second(tmp_path, hermetic_env, indexes):
    venv = tmp_path / "venv"
    root = tmp_path / "root"
    root.mkdir()
    env = {**hermetic_env, "PYTHONPATH": os.pathsep.join(sys.path)}
    wrapper, marker = _slow_uv(tmp_path, hermetic_env["UV"])
    first = _cli(_args(venv, indexes, root), {**env, "UV": str(wrapper)}, start_new_session=True)
    try:
        _wait_for(marker, first)
        # A second bootstrap of the same venv is refused and names the holder.
        second = _cli(_args(venv, indexes, root), env)
        out, err = second.communicate(timeout=60)
        assert second.returncode == 1, (out, err)
        assert "another bootstrap" in err and f"pid {first.pid}" in err
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # like a lost SSH session: no cleanup runs
        first.wait()
    state = json.loads((venv / ".mw-env-state.json").read_text())
    assert state["steps"]["torch"]["status"] == "started"
    assert installed_version(venv, "torch") is None

    again = _cli(_args(venv, indexes, root), env)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, (out, err)
    assert installed_version(venv, "torch") == "2.10.0+cpu"
    assert "already done" in out  # the venv step was kept, not redone
    assert read_record(venv).torch_version == "2.10.0+cpu"


@pytest.mark.slow
def test_failed_recreate_leaves_the_old_venv_working(tmp_path, hermetic_env, indexes):
    venv = tmp_path / "venv"
    good = replace(ROCM, index_url=indexes.rocm.as_uri())
    options = offline_options(venv, indexes.project)
    assert execute(plan(profile="gfx1103", torch=good, runtime_env={}, options=options, env=hermetic_env)).ok
    record = (venv / "mw-env.json").read_text()

    bad = replace(ROCM, index_url=indexes.bad_rocm.as_uri())
    failed = execute(
        plan(
            profile="gfx1103",
            torch=bad,
            runtime_env={},
            options=replace(options, recreate=True),
            env=hermetic_env,
        )
    )
    assert not failed.ok and failed.failed_step == "verify-torch"
    assert (venv / "mw-env.json").read_text() == record
    check = subprocess.run(
        [venv / "bin" / "python", "-c", "import torch; print(torch.version.hip)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert check.stdout.strip() == "6.4.43482"
    assert build_path(venv).exists()  # the half-built successor is kept for the next attempt

    redo = plan(
        profile="gfx1103",
        torch=good,
        runtime_env={"X": "1"},
        options=replace(options, recreate=True),
        env=hermetic_env,
    )
    assert execute(redo).ok
    assert not build_path(venv).exists()
    assert read_record(venv).env == {"X": "1"}
    # The swapped venv works from its new place (relocatable venv; pip's launcher too).
    pip = subprocess.run([venv / "bin" / "pip", "--version"], capture_output=True, text=True, check=False)
    assert pip.returncode == 0 and str(venv) in pip.stdout


@pytest.mark.slow
def test_ctrl_c_in_the_cli_exits_130_and_stops_uv(tmp_path, hermetic_env, indexes):
    venv = tmp_path / "venv"
    root = tmp_path / "root"
    root.mkdir()
    env = {**hermetic_env, "PYTHONPATH": os.pathsep.join(sys.path)}
    wrapper, marker = _slow_uv(tmp_path, hermetic_env["UV"])
    tag = new_tag()
    diag = {"MW_ENV_TEST_TAG": tag, "PYTHONFAULTHANDLER": "1"}  # a hang's report names what each one does
    proc = _cli(_args(venv, indexes, root), {**env, **diag, "UV": str(wrapper)})
    _wait_for(marker, proc)
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        report = hang_report(tag)
        out, err = proc.communicate()
        raise AssertionError(f"no end 60s after Ctrl-C:\n{report}\n{out}\n{err}") from None
    assert proc.returncode == 130, (out, err)
    assert "re-run" in out and "resume" in out
    assert f"--venv {venv}" in out  # the resume command keeps the venv it was given
    state = json.loads((venv / ".mw-env-state.json").read_text())
    assert state["steps"]["torch"]["status"] == "interrupted"
    assert (venv / "pyvenv.cfg").exists()  # the venv step's work is kept


@pytest.mark.slow
def test_another_profile_over_a_finished_venv_needs_recreate(tmp_path, hermetic_env, indexes):
    from mw_env.base.errors import InputError

    venv = tmp_path / "venv"
    rocm = replace(ROCM, index_url=indexes.rocm.as_uri())
    options = offline_options(venv, indexes.project)
    assert execute(plan(profile="gfx1103", torch=rocm, runtime_env={}, options=options, env=hermetic_env)).ok
    cpu = replace(ROCM, build="cpu", version=">=2.9", local_tag="+cpu", index_url=None)
    cpu_opts = replace(options, find_links=(str(indexes.cpu_links),))
    with pytest.raises(InputError, match="profile gfx1103") as info:
        plan(profile="cpu", torch=cpu, runtime_env={}, options=cpu_opts, env=hermetic_env)
    assert "--recreate" in info.value.hint
    rebuilt = plan(
        profile="cpu", torch=cpu, runtime_env={}, options=replace(cpu_opts, recreate=True), env=hermetic_env
    )
    assert execute(rebuilt).ok
    assert installed_version(venv, "torch") == "2.10.0+cpu" and read_record(venv).profile == "cpu"
