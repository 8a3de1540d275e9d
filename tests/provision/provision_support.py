"""Shared helpers of the installer tests (a uniquely named module: several test folders have a conftest)."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def find_uv_binary() -> str | None:
    for cand in (os.environ.get("UV"), str(REPO / ".tools" / "bin" / "uv"), shutil.which("uv")):
        if cand and os.path.isfile(cand):
            return cand
    return None


@dataclass(frozen=True)
class FakeSource:
    """A TorchSource as the profiles module makes them (only what the installer reads)."""

    build: str
    index_url: str | None
    version: str
    local_tag: str
    companions: tuple[str, ...] = ()


@dataclass(frozen=True)
class Indexes:
    rocm: Path  # PEP 503 index: torch 2.9.1+rocm6.4 (hip set)
    default: Path  # the "PyPI": trap CUDA torch 2.9.1 and 2.10.0, needs-newer-torch, demo deps
    bad_rocm: Path  # an index whose +rocm6.4 torch is really a CUDA build (the verify trap)
    cpu_links: Path  # a wheelhouse: torch 2.10.0+cpu
    tools: Path  # find-links with pip (to seed pip offline)
    project: Path  # demo project with [train] = torch>=2.4


ROCM = FakeSource(build="rocm", index_url=None, version="==2.9.1", local_tag="+rocm6.4")


def offline_options(venv: Path, project: Path, **overrides: object):
    """BootstrapOptions for the offline tests: this interpreter, the demo project, no adoption, no doctor."""
    import sys

    from mw_env.provision.plan import BootstrapOptions

    base: dict[str, object] = {
        "venv": venv,
        "python": sys.executable,
        "python_explicit": True,
        "project": project,
        "adopt": False,
        "doctor": False,
    }
    return BootstrapOptions(**{**base, **overrides})


def cpu_bootstrap_args(venv: Path, indexes, root: Path, *extra: str) -> list[str]:
    """`mw-env bootstrap` for the CPU profile on fake root `root`, this interpreter and the test project."""
    base = [
        "bootstrap",
        "--root",
        str(root),
        "--profile",
        "cpu",
        "--venv",
        str(venv),
        "--python",
        sys.executable,
    ]
    return [*base, "--project", str(indexes.project), *extra]
