"""`doctor --explain`: what THIS machine says about a message found in a log.

A log is usually explained on the machine it came from (or on its `--root`), so two things are read here:
- which kind of machine it is (`machine_kind`: an AMD GPU, an NVIDIA GPU, none), which picks the catalogue
  entry's variant for it: a CUDA torch's "Found no NVIDIA driver" on a 780M is the wrong build, not a driver;
- for the messages whose cause is a fact of the machine, that fact (`here`): /dev/shm and SELinux
  (checks/ipc.py), and where hipBLASLt's Tensile library for the GPU really is.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from mw_env.checks.ipc import explain_here as ipc_here

if TYPE_CHECKING:
    from pathlib import Path

    from mw_env.hardware.facts import Gpu
    from mw_env.hardware.machine import Machine

# The lazy-loading library file hipBLASLt reads first (tensile_host.cpp: `TensileLibrary_lazy_<arch>.dat`),
# named in both of its lines, quoted (a std::filesystem::path) or not (older releases), with a path or without.
_LAZY = re.compile(r"""["']?([^"':]*?)TensileLibrary_lazy_(gfx[0-9a-z]+)\.dat(?:\.zlib)?["']?""", re.I)
# Where the wheels put hipBLASLt's library: torch/lib/ in pytorch.org's bundling wheels, the rocm-sdk
# packages' own folder in AMD's (`_rocm_sdk_libraries*/lib/hipblaslt/library`, TheRock#7976).
_LIBRARY_GLOBS = (
    "lib/python3*/site-packages/torch/lib/hipblaslt/library",
    "lib/python3*/site-packages/*/lib/hipblaslt/library",
)


def machine_kind(gpu: Gpu | None) -> str:
    """The catalogue's machine kind for the selected GPU: "amd", "nvidia", or "cpu" (none torch can use)."""
    if gpu is not None and gpu.vendor in ("amd", "nvidia"):
        return gpu.vendor
    return "cpu"


def here(machine: Machine, message_id: str, line: str, *, venv: Path | None, gpu: Gpu | None) -> str | None:
    """What this machine says about message `message_id` found as `line`, or None (nothing to read here)."""
    ours = gpu.gfx_target if gpu is not None and gpu.vendor == "amd" else None
    if message_id == "rocblaslt-lazy-library":
        m = _LAZY.search(line)
        if m is None:
            return None
        folder, gfx = m.group(1).rstrip("/\\"), m.group(2).lower()
        return _hipblaslt_here(machine, folder, gfx, ours, venv=venv)
    if message_id == "hipblaslt-invalid-value" and ours:
        # The line names neither the arch nor the folder: look for this machine's GPU in the venv's hipBLASLt.
        return _hipblaslt_here(machine, "", ours, ours, venv=venv)
    return ipc_here(machine, message_id)


def _hipblaslt_here(
    machine: Machine, folder: str, gfx: str, ours: str | None, *, venv: Path | None
) -> str | None:
    notes: list[str] = []
    if ours is not None and ours != gfx:
        notes.append(f"the log names {gfx}, this machine's GPU is {ours}: the log came from another machine")
    libraries = _libraries(machine, venv, folder)
    found = _where(libraries, gfx)
    if found is not None:
        flat, sub = found
        if flat:
            notes.append(
                f"{flat} exists, where hipBLASLt reads it: the process that logged this read another hipBLASLt "
                "(HIPBLASLT_TENSILE_LIBPATH, LD_LIBRARY_PATH or a system ROCm ahead of the venv's)"
            )
        else:
            notes.append(
                f"the library is installed in the per-arch folder {sub}, which this hipBLASLt does not look in "
                "(TheRock#7976): cause (1); until a ROCm that probes it, `export TORCH_BLAS_PREFER_HIPBLASLT=0` "
                "(torch uses rocBLAS)"
            )
    elif libraries:
        names = ", ".join(name for name, _ in libraries[:2])
        notes.append(
            f"no TensileLibrary_lazy_{gfx} file in {names} or a {gfx}/ folder below it: this install ships no "
            f"hipBLASLt kernels for {gfx}: cause (2); `export TORCH_BLAS_PREFER_HIPBLASLT=0` (torch uses rocBLAS)"
        )
    if (machine.env.get("ROCBLAS_USE_HIPBLASLT") or "").strip() not in ("", "0"):
        notes.append(
            "ROCBLAS_USE_HIPBLASLT is set here, so rocBLAS hands its GEMMs to hipBLASLt too "
            "(lemonade-sdk/llamacpp-rocm#10): unset it for programs built on rocBLAS"
        )
    if not notes:
        return None
    text = "; ".join(notes)
    return text[:1].upper() + text[1:] + "."


def _libraries(machine: Machine, venv: Path | None, folder: str) -> list[tuple[str, Path]]:
    """(shown, real path) of the hipBLASLt library folders to look in: the one the line names, when it is a full
    path on this machine (below `--root`), then the venv's (a real path, as the doctor reads it)."""
    out: list[tuple[str, Path]] = []
    if folder.startswith("/") and machine.is_dir(folder):
        out.append((folder, machine.path(folder)))
    if venv is not None:
        for pattern in _LIBRARY_GLOBS:
            for path in sorted(venv.glob(pattern)):
                if path.is_dir() and all(p != path for _, p in out):
                    out.append((str(path), path))
    return out


def _where(libraries: list[tuple[str, Path]], gfx: str) -> tuple[str, str] | None:
    """(the flat file, the per-arch folder): where `gfx`'s lazy library is in the first folder that has it."""
    name = f"TensileLibrary_lazy_{gfx}."
    for shown, real in libraries:
        flat = sorted(p.name for p in real.glob(name + "*"))
        if flat:
            return f"{shown}/{flat[0]}", ""
        if any((real / gfx).glob(name + "*")):
            return "", f"{shown}/{gfx}"
    return None
