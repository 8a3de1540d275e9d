"""Which hardware a lock is for, and whether this machine is that hardware.

The torch wheel is what depends on the hardware: the profile decides the build (cpu / rocm / cuda) and the
source, an AMD GPU's arch decides which ROCm kernels must be in it (gfx1103 vs gfx1151), an NVIDIA driver
decides the newest CUDA it runs. A lock states all of them in [tool.mw-env]; a machine that differs in any
of them is another machine, and its lock is refused before anything is installed (`--force` overrides).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from mw_env.base.versions import version_tuple

if TYPE_CHECKING:
    from mw_env.hardware.facts import Gpu
    from mw_env.profiles.model import Selection
    from mw_env.venv.lock.lockfile import LockMeta
    from mw_env.venv.record import VenvRecord


def gpu_arch(gpu: Gpu | None) -> str:
    """`gfx1103` (AMD), `sm_86` (NVIDIA), "" (no GPU)."""
    if gpu is None:
        return ""
    if getattr(gpu, "gfx_target", None):
        return str(gpu.gfx_target)
    cc = getattr(gpu, "compute_capability", None)
    return f"sm_{str(cc).replace('.', '')}" if cc else ""


def target_of(selection: Selection) -> dict[str, str]:
    """The hardware facts of a lock, from this machine's selection (what LockMeta keeps beside the torch)."""
    cpu = selection.torch.build == "cpu"
    gpu = None if cpu else selection.gpu
    return {
        "gpu": gpu.name if gpu else "",
        "arch": gpu_arch(gpu),
        "required_arch": "" if cpu else (selection.required_arch or ""),
        "driver_floor": (selection.torch.min_driver or "") if selection.torch.build == "cuda" else "",
    }


def meta_for(
    record: VenvRecord, target: Mapping[str, str], *, mw_env_version: str, created: str, platform: str
) -> LockMeta:
    """The [tool.mw-env] table for a venv bootstrapped with `record` on the hardware `target`."""
    from mw_env.base.textsafe import redact
    from mw_env.venv.lock.lockfile import LockMeta

    return LockMeta(
        profile=record.profile,
        build=record.torch_build,
        torch=record.torch_version,
        python=record.python,
        torch_source=record.torch_source or "",
        torch_from=redact(record.torch_index or ""),
        gpu=target.get("gpu", ""),
        arch=target.get("arch", ""),
        required_arch=target.get("required_arch", ""),
        driver_floor=target.get("driver_floor", ""),
        platform=platform,
        mw_env_version=mw_env_version,
        created=created,
        env=dict(record.env),
    )


def machine_hardware(selection: Selection) -> str:
    """This machine in the words of LockMeta.hardware()."""
    gpu = None if selection.torch.build == "cpu" else selection.gpu
    what = ", ".join(x for x in ((gpu.name if gpu else ""), gpu_arch(gpu)) if x) or "no GPU"
    return f"profile {selection.profile.name} ({what})"


def hardware_problem(meta: LockMeta, selection: Selection) -> str | None:
    """Why the lock does not fit this machine's selection, None when it fits."""
    if meta.profile != selection.profile.name:
        return "another profile"
    if meta.build != selection.torch.build:
        return f"another torch build ({meta.build}; this profile installs {selection.torch.build})"
    if meta.build == "cpu":
        return None
    gpu = selection.gpu
    arch = gpu_arch(gpu)
    if meta.build == "rocm" and meta.arch and arch and meta.arch != arch:
        return f"another GPU arch ({meta.arch}; this GPU is {arch})"
    if meta.build == "cuda":
        if meta.arch and arch and meta.arch != arch:
            return f"another CUDA compute capability ({meta.arch}; this GPU is {arch})"
        driver = getattr(gpu, "driver_version", None)
        if meta.driver_floor and driver and version_tuple(driver) < version_tuple(meta.driver_floor):
            return f"a newer NVIDIA driver ({meta.driver_floor} or newer; this one is {driver})"
    return None
