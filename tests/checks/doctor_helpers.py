"""Builders for doctor tests: hardware facts, selections from the shipped profiles, and fake venvs.

A fake venv is a real venv (pyvenv.cfg + bin/python -> the base interpreter) whose site-packages holds a
small `torch` package. Its version.py carries the fake build (what `--quick` reads without importing);
its __init__ imports the REAL torch of the test venv, then patches what the broken state needs:
versions, arch flags, and a matmul that is wrong, hangs or crashes. So the probe runs real kernels on the
CPU and only the fault under test is made up.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

from mw_env.hardware.facts import ContainerInfo, Gpu, Hardware, OsInfo

GIB = 1024**3
REAL_TORCH = importlib.util.find_spec("torch")
REAL_SITE = str(Path(REAL_TORCH.origin).parent.parent) if REAL_TORCH and REAL_TORCH.origin else None

GPU_780M = Gpu(
    index=0,
    vendor="amd",
    name="AMD Radeon 780M",
    pci_id="1002:15bf",
    integrated=True,
    gfx_target="gfx1103",
    memory_bytes=512 * 1024**2,
    gtt_bytes=16 * GIB,
    render_minor=128,
)
GPU_8060S = Gpu(
    index=0,
    vendor="amd",
    name="AMD Radeon 8060S",
    pci_id="1002:1586",
    integrated=True,
    gfx_target="gfx1151",
    memory_bytes=512 * 1024**2,
    gtt_bytes=62 * GIB,
    render_minor=128,
)
GPU_7900XTX = Gpu(
    index=0,
    vendor="amd",
    name="AMD Radeon RX 7900 XTX",
    pci_id="1002:744c",
    gfx_target="gfx1100",
    memory_bytes=24 * GIB,
    render_minor=128,
)
GPU_3090 = Gpu(
    index=0,
    vendor="nvidia",
    name="NVIDIA GeForce RTX 3090",
    pci_id="10de:2204",
    compute_capability="8.6",
    memory_bytes=24 * GIB,
    driver_version="560.35.03",
)
GPU_5090 = Gpu(
    index=0,
    vendor="nvidia",
    name="NVIDIA GeForce RTX 5090",
    pci_id="10de:2b85",
    compute_capability="12.0",
    memory_bytes=32 * GIB,
    driver_version="575.51.03",
)


def hardware(
    gpu: Gpu | None,
    *,
    container: str = "none",
    name: str | None = None,
    ram: int = 32 * GIB,
    kernel: str = "6.8.0-45-generic",
) -> Hardware:
    return Hardware(
        gpus=(gpu,) if gpu else (),
        selected_gpu=0 if gpu else None,
        memory_bytes=ram,
        os=OsInfo(id="ubuntu", version="24.04", pretty="Ubuntu 24.04", kernel=kernel),
        container=ContainerInfo(kind=container, name=name),  # type: ignore[arg-type]
        nvidia_driver=gpu.driver_version if gpu and gpu.vendor == "nvidia" else None,
    )


def selection(hw: Hardware, profile: str | None = None, *, source: str | None = None):
    from mw_env.profiles import load_profiles, select

    return select(hw, load_profiles(), name=profile, source=source)


def fake_venv(
    path: Path,
    *,
    version: str = "2.9.1+rocm6.4",
    hip: str | None = None,
    cuda: str | None = None,
    arch_flags: list[str] | None = None,
    blas_gfx: list[str] = (),  # type: ignore[assignment]
    matmul: str | None = None,  # None | "wrong" | "hang" | "crash"
    crash_at: str | None = None,  # "alloc": die in the first allocation
    crash_message: str = "",
    stderr: list[str] = (),  # type: ignore[assignment]
    with_torch: bool = True,
    record: dict[str, Any] | None = None,
    hang_marker: Path | None = None,  # touched when the "hang" matmul begins (the test's event)
) -> Path:
    """A venv whose torch reproduces one broken state (see the module doc)."""
    base = Path(getattr(sys, "_base_executable", sys.executable)).resolve()
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = path / "lib" / ver / "site-packages"
    site.mkdir(parents=True)
    (path / "bin").mkdir()
    (path / "bin" / "python").symlink_to(base)
    (path / "pyvenv.cfg").write_text(
        f"home = {base.parent}\ninclude-system-site-packages = false\nversion = {sys.version.split()[0]}\n"
    )
    if record is not None:
        data = {
            "torch_requirement": f"torch=={version}",
            "torch_version": version,
            "torch_build": "rocm" if hip else "cuda" if cuda else "cpu",
            "python": sys.version.split()[0],
            "torch_index": None,
            **record,
        }
        (path / "mw-env.json").write_text(json.dumps(data))
        env = data.get("env") or {}
        (path / "mw-env.env").write_text("".join(f"export {k}={v}\n" for k, v in env.items()))
    if not with_torch:
        return path
    pkg = site / "torch"
    pkg.mkdir()
    (pkg / "version.py").write_text(
        f"__version__ = {version!r}\ndebug = False\ncuda = {cuda!r}\ngit_version = 'fake'\nhip = {hip!r}\n"
    )
    for gfx in blas_gfx:
        lib = pkg / "lib" / "rocblas" / "library"
        lib.mkdir(parents=True, exist_ok=True)
        (lib / f"TensileLibrary_lazy_{gfx}.dat").write_text("")
    spec = {
        "real_site": REAL_SITE,
        "version": version,
        "hip": hip,
        "cuda": cuda,
        "arch_flags": arch_flags,
        "matmul": matmul,
        "crash_at": crash_at,
        "crash_message": crash_message,
        "stderr": list(stderr),
        "hang_marker": str(hang_marker) if hang_marker else None,
    }
    (pkg / "fake.json").write_text(json.dumps(spec))
    (pkg / "__init__.py").write_text(FAKE_INIT)
    return path


FAKE_INIT = """
import json, os, sys, time
_spec = json.load(open(os.path.join(os.path.dirname(__file__), "fake.json")))
for _line in _spec["stderr"]:
    print(_line, file=sys.stderr, flush=True)
# Swap this package for the real torch (importlib keeps whatever sits in sys.modules at the end).
del sys.modules["torch"]
sys.path.insert(0, _spec["real_site"])
try:
    import torch as _real
finally:
    sys.path.remove(_spec["real_site"])
_real.__version__ = _real.version.__version__ = _spec["version"]
_real.version.hip = _spec["hip"]
_real.version.cuda = _spec["cuda"]
if _spec["arch_flags"] is not None:
    _real._C._cuda_getArchFlags = lambda: " ".join(_spec["arch_flags"])

def _die():
    print(_spec["crash_message"] or "Segmentation fault", file=sys.stderr, flush=True)
    os.abort()

_orig_mm = _real.Tensor.__matmul__
def _matmul(a, b):
    mode = _spec["matmul"]
    if mode == "hang":  # like a GPU fault: the process never returns
        if _spec["hang_marker"]:
            open(_spec["hang_marker"], "w").close()
        while True:
            time.sleep(0.05)
    if mode == "crash":
        _die()
    out = _orig_mm(a, b)
    if mode == "wrong" and a.dtype != _real.float64:  # the faulty kernel; the float64 reference path is fine
        out = out * 1.25
    return out
_real.Tensor.__matmul__ = _matmul
if _spec["crash_at"] == "alloc":
    _real.zeros = lambda *a, **k: _die()
"""


def run(
    machine,
    sel,
    venv: Path,
    *,
    hw: Hardware,
    quick: bool = False,
    timeout: float = 60.0,
    network: bool = False,
):
    from mw_env.checks import run_doctor

    return run_doctor(
        machine=machine,
        selection=sel,
        venv=venv,
        quick=quick,
        probe_timeout=timeout,
        hardware=hw,
        network=network,
    )


def by_id(report) -> dict[str, Any]:
    return {c.id: c for c in report.checks}


def env_without(*names: str) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in names}
