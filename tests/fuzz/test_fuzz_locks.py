"""Seeded mutation of environment locks (`bootstrap --lock FILE --dry-run`) and `mw-env lock --output`.

A lock is a file a user (or a colleague, or a run folder) hands to bootstrap: every mutation ends in a plan
(exit 0) or `error: lock FILE: ...` (exit 2), never a traceback or a hang, and nothing is installed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from envlock.lock_support import lock_text

from .fuzz_support import cases, mutate, run_cli

REPO = Path(__file__).resolve().parents[2]
CPU_ONLY = REPO / "tests" / "fixtures" / "machines" / "cpu-only"


@pytest.fixture(autouse=True)
def _quiet_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    for var in ("MW_ENV_PROFILES", "MW_ENV_ROOT", "MW_ENV_PROFILE", "MW_ENV_VENV", "PIP_FIND_LINKS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(tmp_path / "xdg"))
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")


@pytest.mark.parametrize("index", range(30))
def test_locks(index: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = cases(23, 30)[index]
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"PK")
    lock = tmp_path / "pylock.fuzzed.toml"
    lock.write_bytes(mutate(rng, lock_text(wheels).encode()))
    venv = tmp_path / "venv"
    args = ["bootstrap", "--root", str(CPU_ONLY), "--lock", str(lock), "--venv", str(venv)]
    rc, _out, err = run_cli([*args, "--find-links", str(wheels), "--offline", "--dry-run"], capsys)
    assert rc in (0, 2)
    if rc == 2:
        assert str(lock) in err or "--python" in err or "Usage:" in err
    assert not venv.exists()  # a dry run, refused or not, installs nothing
