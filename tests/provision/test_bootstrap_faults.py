"""Issue 40: bootstrap's own faults from the campaign, each one sentence with the documented exit code, never a
traceback:

- a non-ASCII --venv under LC_ALL=C with Python's UTF-8 mode off: refused before anything is made, naming
  the locale (was: a UnicodeEncodeError traceback once torch was installed);
- a deleted working directory: the folder named (was: "cannot use: no such file or folder");
- a truncated torch wheel in --find-links: the file named, and that it is damaged (was: "no torch of this
  build matches");
- a 2 MB filesystem, empty or full: the preflight's disk sentence (was: "cannot use: the disk is full",
  naming nothing, from the lock's holder line); a full disk mid-step: the step, the file and the fault.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from wheelfactory import fake_torch, flat_dir

from .provision_support import cpu_bootstrap_args


def _run(
    args: list[str], env: dict[str, str], *, cwd: Path | None = None, shell_prefix: str = ""
) -> subprocess.CompletedProcess[str]:
    env = {**env, "PYTHONPATH": os.pathsep.join(sys.path)}
    argv = [sys.executable, "-m", "mw_env", *args]
    if shell_prefix:  # a shell that changes its state first (a working folder removed under it)
        import shlex

        argv = ["/bin/sh", "-c", f"{shell_prefix} exec {shlex.join(argv)}"]
    return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)


def _said(res: subprocess.CompletedProcess[str], code: int) -> str:
    said = res.stdout + res.stderr  # a failed step's lines are bootstrap's report (stdout), others stderr
    assert res.returncode == code, (res.returncode, said[-3000:])
    assert "Traceback" not in said and "error: " in said and "hint: " in said, said
    return said


def _args(venv: Path, indexes, root: Path, *extra: str) -> list[str]:
    return cpu_bootstrap_args(venv, indexes, root, "--offline", "--no-adopt-torch", "--no-doctor", *extra)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    root.mkdir()
    return root


def test_a_non_ascii_venv_under_a_c_locale_is_refused_naming_the_locale(
    tmp_path, hermetic_env, indexes, root
):
    venv = tmp_path / "Münch€n"
    env = {**hermetic_env, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    err = _said(_run(_args(venv, indexes, root, "--find-links", str(indexes.cpu_links)), env), 2)
    assert "LC_ALL=C" in err and "C.UTF-8" in err and "not valid UTF-8" not in err, err
    assert not venv.exists() and not any(p.name.endswith(".mw-env.lock") for p in tmp_path.iterdir())
    # With the locale's UTF-8 (or Python's UTF-8 mode, which a plain LC_ALL=C turns on) the same path works:
    # the refusal is the locale's, not the path's (tests/provision/test_shell_paths.py builds such venvs).


def test_a_deleted_working_folder_is_named(tmp_path, hermetic_env, indexes, root):
    gone = tmp_path / "gone"
    gone.mkdir()
    venv = tmp_path / "venv"
    res = _run(
        _args(venv, indexes, root, "--find-links", str(indexes.cpu_links)),
        hermetic_env,
        cwd=gone,
        shell_prefix=f"cd {gone} && rmdir {gone} &&",
    )
    err = _said(res, 2)
    assert f"the current folder {gone} no longer exists" in err and "cd ~" in err, err


def test_a_truncated_torch_wheel_in_the_wheelhouse_is_named_as_damaged(tmp_path, hermetic_env, indexes, root):
    good = fake_torch(tmp_path / "dist", "2.10.0+cpu")
    house = flat_dir(tmp_path / "wheelhouse", [good])
    wheel = house / good.name
    wheel.write_bytes(wheel.read_bytes()[: wheel.stat().st_size // 2])  # a copy that stopped half-way
    res = _run(_args(tmp_path / "venv", indexes, root, "--find-links", str(house)), hermetic_env)
    err = _said(res, 1)
    assert f"the wheelhouse's torch {wheel} is damaged: it is not a whole zip file" in err, err
    assert "no torch of this build matches" not in err and "copy the wheel again" in err


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.decode(errors='replace').strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, check=False)


def test_a_2_mb_filesystem_empty_or_full_gets_the_preflights_sentence(tmpfs, hermetic_env, indexes, root):
    args = _args(tmpfs / "venv", indexes, root, "--find-links", str(indexes.cpu_links))
    err = _said(_run(args, hermetic_env), 1)
    assert "not enough disk space for" in err and f"{tmpfs}/venv" in err, err
    with open(tmpfs / "fill", "wb") as fh:  # every byte taken: the lock's holder line cannot be written
        try:
            while True:
                fh.write(b"\0" * 65536)
        except OSError:
            pass
    (tmpfs / ".venv.mw-env.lock").unlink(missing_ok=True)
    err = _said(_run(args, hermetic_env), 1)
    assert "not enough disk space for" in err and "0.0 GiB free" in err, err


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fault", "said"),
    [
        (
            "ENOSPC:mw-env-constraints.txt",
            "step pin-torch: cannot write {venv}/mw-env-constraints.txt: the disk is full",
        ),
        (
            "ENOSPC:.mw-env-state.json#4",
            "cannot record bootstrap's progress in {venv}/.mw-env-state.json: the disk is full",
        ),
    ],
)
def test_a_full_disk_mid_step_names_the_step_the_file_and_the_fault(
    tmp_path, hermetic_env, indexes, root, fault, said
):
    venv = tmp_path / "venv"
    env = {**hermetic_env, "MW_ENV_FAULTS": fault}
    err = _said(_run(_args(venv, indexes, root, "--find-links", str(indexes.cpu_links)), env), 1)
    assert said.format(venv=venv) in err and "free space" in err, err
    if fault.startswith("ENOSPC:.mw-env-state.json"):
        # Once there is room the same command finishes (once: a run whose progress could not be recorded).
        again = _run(_args(venv, indexes, root, "--find-links", str(indexes.cpu_links)), hermetic_env)
        assert again.returncode == 0, again.stdout[-1500:] + again.stderr[-1500:]
