"""Fixtures for the installer tests: real uv, local package indexes built by wheelfactory, hermetic env."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from wheelfactory import build_wheel, fake_torch, flat_dir, pip_wheel, simple_index, write_project

from .provision_support import Indexes, find_uv_binary


@pytest.fixture(scope="session")
def uv_bin() -> str:
    uv = find_uv_binary()
    if uv is None:
        pytest.skip("uv is not installed")
    return uv


@pytest.fixture(scope="session")
def indexes(tmp_path_factory: pytest.TempPathFactory) -> Indexes:
    base = tmp_path_factory.mktemp("indexes")
    dist = base / "dist"
    rocm = fake_torch(dist / "rocm", "2.9.1+rocm6.4", hip="6.4.43482")
    triton = build_wheel(dist / "rocm", "pytorch-triton-rocm", "3.5.1")
    trap_old = fake_torch(dist / "default", "2.9.1", cuda="12.8")
    trap_new = fake_torch(dist / "default", "2.10.0", cuda="13.0")
    needs = build_wheel(dist / "default", "needs-newer-torch", "1.0", requires=["torch>=2.10"])
    helper = build_wheel(dist / "default", "demo-helper", "1.0")
    bad = fake_torch(dist / "bad", "2.9.1+rocm6.4", cuda="12.8")
    cpu = fake_torch(dist / "cpu", "2.10.0+cpu")
    pip = pip_wheel()
    if pip is None:
        pytest.skip("no bundled pip wheel (ensurepip) to seed venvs offline")
    return Indexes(
        rocm=simple_index(base / "rocm-index", [rocm, triton]),
        default=simple_index(base / "default-index", [trap_old, trap_new, needs, helper]),
        bad_rocm=simple_index(base / "bad-index", [bad]),
        cpu_links=flat_dir(base / "cpu-wheelhouse", [cpu]),
        tools=flat_dir(base / "tools", [pip]),
        project=write_project(base / "demo", extras={"train": ["torch>=2.4", "demo-helper"], "dev": []}),
    )


@pytest.fixture(scope="session")
def uv_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("uv-cache")


@pytest.fixture
def hermetic_env(
    tmp_path: Path, uv_bin: str, uv_cache: Path, indexes: Indexes, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    """No pip.conf, uv.toml or index variables of this machine leak in; the "default index" is the trap.

    Nor does this machine's free disk: the loopback indexes serve wheels of a few KB, but the preflight asks
    for the real source's figure (~29 GB for a ROCm profile), so a plan executed in this process would fail
    on any machine with less free. A test about the disk check sets its own `free_bytes` after this one."""
    from mw_env.venv import venvinfo

    monkeypatch.setattr(venvinfo, "free_bytes", lambda _path: 1024**4)
    home = tmp_path / "home"
    home.mkdir()
    return {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(home),
        "XDG_CONFIG_DIRS": str(tmp_path / "xdg"),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "UV": uv_bin,
        "UV_CACHE_DIR": str(uv_cache),
        "UV_NO_CONFIG": "1",
        "UV_PYTHON_DOWNLOADS": "never",
        "PIP_INDEX_URL": indexes.default.as_uri(),
        "UV_DEFAULT_INDEX": indexes.default.as_uri(),
        "PIP_FIND_LINKS": str(indexes.tools),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "LANG": "C.UTF-8",
    }
