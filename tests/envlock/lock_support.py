"""A small, valid mw-env lock for the tests that need one without a bootstrap (the shape uv writes)."""

from __future__ import annotations

from pathlib import Path

TORCH_SHA = "6746dbcbeb526eb61330b76b41ff1b4eb848951103a892eeb080dfa2b264667b"
SYMPY_SHA = "e091cc3e99d2141a0ba2847328f5479b05d94a6635cb96148ccb3f34671bd8f5"


def lock_text(
    wheelhouse: Path,
    *,
    profile: str = "cpu",
    build: str = "cpu",
    torch: str = "2.13.0+cpu",
    arch: str = "",
    gpu: str = "",
    env: str = "",
) -> str:
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
