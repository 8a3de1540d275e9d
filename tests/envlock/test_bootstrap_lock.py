"""`mw-env bootstrap --lock`: refused before anything is installed when the lock is for other hardware,
names a missing wheel with where it was looked for, and reads hostile locks as bad input (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mw_env.cli import main

from .lock_support import lock_text, quiet_wheelhouse

REPO = Path(__file__).resolve().parents[2]
MACHINES = REPO / "tests" / "fixtures" / "machines"


@pytest.fixture
def quiet_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No pip.conf, uv config or wheelhouse of this machine: the test's wheelhouse only."""
    return quiet_wheelhouse(monkeypatch, tmp_path)


def _bootstrap(capsys, *args: str) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(["bootstrap", *args])
    out = capsys.readouterr()
    return rc, out.out + out.err


@pytest.mark.parametrize(
    ("machine", "here"),
    [
        ("incus-780m", "profile gfx1103 (AMD Radeon 780M, gfx1103)"),
        ("strix-halo-8060s", "profile gfx1151 (AMD Radeon 8060S, gfx1151)"),
    ],
)
def test_a_cpu_lock_is_refused_on_amd_machines_naming_both(quiet_env, tmp_path, capsys, machine, here):
    lock = tmp_path / "pylock.cpu.toml"
    lock.write_text(lock_text(quiet_env, whole=True))
    venv = tmp_path / "venv"
    rc, text = _bootstrap(
        capsys,
        *("--root", str(MACHINES / machine), "--lock", str(lock), "--venv", str(venv)),
        *("--find-links", str(quiet_env), "--dry-run"),
    )
    assert rc == 2, text
    assert f"was made for profile cpu (no GPU); this machine is {here}: another profile" in text
    assert "--force" in text and "mw-env lock" in text
    assert not venv.exists()


def test_a_missing_wheel_is_named_with_where_it_was_looked_for(quiet_env, tmp_path, capsys):
    lock = tmp_path / "pylock.cpu.toml"
    lock.write_text(lock_text(quiet_env, whole=True))
    rc, text = _bootstrap(
        capsys,
        *("--root", str(MACHINES / "cpu-only"), "--lock", str(lock), "--venv", str(tmp_path / "venv")),
        *("--find-links", str(quiet_env), "--dry-run"),
    )
    assert rc == 2, text
    assert f"the wheel of torch is missing: {quiet_env}/torch-2.13.0+cpu" in text.replace("\n", "")


def test_a_lock_with_a_wheel_outside_the_wheelhouse_is_bad_input(quiet_env, tmp_path, capsys):
    lock = tmp_path / "pylock.cpu.toml"
    lock.write_text(lock_text(tmp_path / "elsewhere", whole=True))
    rc, text = _bootstrap(
        capsys,
        *("--root", str(MACHINES / "cpu-only"), "--lock", str(lock), "--venv", str(tmp_path / "venv")),
        *("--find-links", str(quiet_env), "--dry-run"),
    )
    assert rc == 2 and "outside the wheelhouse" in text, text


def test_an_explicit_python_other_than_the_locks_is_refused(quiet_env, tmp_path, capsys):
    (quiet_env / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"not checked here")
    lock = tmp_path / "pylock.cpu.toml"
    lock.write_text(lock_text(quiet_env, whole=True))
    rc, text = _bootstrap(
        capsys,
        *("--root", str(MACHINES / "cpu-only"), "--lock", str(lock), "--venv", str(tmp_path / "venv")),
        *("--find-links", str(quiet_env), "--python", "3.12", "--dry-run"),
    )
    assert rc == 2 and "--python 3.12: the lock was made with Python 3.11.7" in text, text


def _rocm_lock(tmp_path: Path, wheelhouse: Path) -> Path:
    torch = "2.9.1+rocm6.4"
    (wheelhouse / f"torch-{torch}-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"PK")
    lock = tmp_path / "pylock.gfx1103.toml"
    lock.write_text(
        lock_text(
            wheelhouse,
            profile="gfx1103",
            build="rocm",
            torch=torch,
            arch="gfx1103",
            gpu="AMD Radeon 780M",
            whole=True,
        )
    )
    return lock


@pytest.mark.parametrize(
    ("machine", "refused"),
    [
        ("incus-780m", None),  # the machine it was made for
        ("cpu-only", None),  # a `docker build`: no GPU in sight, the named profile is the hardware
        ("strix-halo-8060s", "another GPU arch (gfx1103; this GPU is gfx1151)"),
    ],
)
def test_a_gfx1103_lock_with_its_profile_named(quiet_env, tmp_path, capsys, machine, refused):
    lock = _rocm_lock(tmp_path, quiet_env)
    rc, text = _bootstrap(
        capsys,
        *("--root", str(MACHINES / machine), "--profile", "gfx1103", "--lock", str(lock)),
        *("--venv", str(tmp_path / "venv"), "--find-links", str(quiet_env), "--offline", "--dry-run"),
    )
    said = " ".join(text.split())
    if refused is None:
        assert rc == 0, text
        assert "Install the lock's packages exactly, torch 2.9.1+rocm6.4 among them" in said
        assert f"--preview-features pylock -r {tmp_path / 'venv' / 'pylock.mw-env.toml'}" in said
    else:
        assert rc == 2 and refused in said, text


def test_mw_env_lock_of_a_folder_bootstrap_did_not_make_is_bad_input(quiet_env, tmp_path, capsys):
    capsys.readouterr()
    rc = main(["lock", "--root", str(MACHINES / "cpu-only"), "--venv", str(tmp_path), "--output", "x.toml"])
    err = capsys.readouterr().err
    assert rc == 2 and f"{tmp_path} is not a venv made by mw-env bootstrap" in " ".join(err.split()), err
    assert not (tmp_path / "x.toml").exists()
