"""A small, valid mw-env lock for the tests that need one without a bootstrap (the shape uv writes)."""

from __future__ import annotations

from pathlib import Path

import pytest

TORCH_SHA = "6746dbcbeb526eb61330b76b41ff1b4eb848951103a892eeb080dfa2b264667b"
SYMPY_SHA = "e091cc3e99d2141a0ba2847328f5479b05d94a6635cb96148ccb3f34671bd8f5"


def quiet_wheelhouse(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No pip.conf, uv config or wheelhouse of this machine: the test's wheelhouse only."""
    home = tmp_path / "home"
    home.mkdir()
    for var in ("PIP_FIND_LINKS", "UV_FIND_LINKS", "MW_ENV_ROOT", "MW_ENV_PROFILE", "MW_ENV_VENV"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(tmp_path / "xdg"))
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    wheelhouse = tmp_path / "wheels"
    wheelhouse.mkdir()
    return wheelhouse


def needed_entries(extras: tuple[str, ...] = ("train",)) -> str:
    """An entry for each package mw-env and its `extras` require (torch aside), at the lowest version the
    requirement allows, as a complete venv's lock has them: `bootstrap --lock` installs only a whole lock
    (venv/lock/requires.py). The wheels are named as on PyPI; these tests never download them."""
    from mw_env.venv.lock.requires import marker_env, normalize, project_needs

    out = []
    for need in project_needs(None, extras, marker_env("3.11.7")):
        name = normalize(need.requirement.name)
        if name in ("torch", "sympy"):
            continue
        spec = need.requirement.specifier
        version = next((s.version for s in spec if s.operator in (">=", "==", "~=")), "1.0")
        wheel = f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
        out.append(
            f'[[packages]]\nname = "{name}"\nversion = "{version}"\nwheels = [{{ url = '
            f'"https://files.pythonhosted.org/packages/{wheel}", hashes = {{ sha256 = "{"1" * 64}" }} }}]\n'
        )
    return "\n".join(out)


def lock_text(
    wheelhouse: Path,
    *,
    profile: str = "cpu",
    build: str = "cpu",
    torch: str = "2.13.0+cpu",
    arch: str = "",
    gpu: str = "",
    env: str = "",
    whole: bool = False,
) -> str:
    """`whole`: with every package mw-env[train] needs (what `bootstrap --lock` installs); else torch and
    sympy only (what the reader's and the drift's tests need)."""
    return f"""# Written by mw-env (test sample)
lock-version = "1.0"
created-by = "uv"
requires-python = ">=3.11"

[[packages]]
name = "torch"
version = "{torch}"
wheels = [{{ url = "file://{wheelhouse}/torch-{torch}-cp311-cp311-manylinux_2_28_x86_64.whl", hashes = {{ sha256 = "{TORCH_SHA}" }} }}]

[[packages]]
name = "sympy"
version = "1.14.0"
sdist = {{ url = "https://files.pythonhosted.org/packages/83/d3/sympy-1.14.0.tar.gz", hashes = {{ sha256 = "{"0" * 64}" }} }}
wheels = [{{ url = "https://files.pythonhosted.org/packages/a2/09/sympy-1.14.0-py3-none-any.whl", hashes = {{ sha256 = "{SYMPY_SHA}" }} }}]

{needed_entries() if whole else ""}

[tool.mw-env]
format = 1
profile = "{profile}"
build = "{build}"
torch = "{torch}"
python = "3.11.7"
gpu = "{gpu}"
arch = "{arch}"

[tool.mw-env.env]
{env}
"""
