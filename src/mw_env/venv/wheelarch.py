"""Truth from the wheel: which GPU archs the torch installed in a venv carries, read without importing torch.

Cheapest first, each reliable for the wheels that use it:
1. the per-GPU device packages installed (`amd-torch-device-gfx1103`, AMD's multi-arch index; and
   `rocm-sdk-device-gfxNNNN`, ROCm's own kernels on pytorch.org's rocm7.14): a folder listing;
2. the build's arch flags, the `gfx908 gfx90a ...` string `torch._C._cuda_getArchFlags()` returns (what
   `get_arch_list()` splits; readable without a GPU), found in torch's libraries: one read of each until found;
3. the code objects' target names (`amdgcn-amd-amdhsa--gfx1103`) in the same library when no flag string is
   found. None found: the archs are unknown and the caller states its fallback (the table's list).
Importing torch would also tell (`get_arch_list()`), but costs seconds and loads the GPU runtime.
"""

from __future__ import annotations

import mmap
import re
from dataclasses import dataclass
from pathlib import Path

_DEVICE_DIST = re.compile(r"^(amd_torch_device|rocm_sdk_device)_(gfx[0-9a-f]{3,4})-[^-]+\.dist-info$", re.I)
# torch._C._cuda_getArchFlags() on ROCm: "gfx908 gfx90a gfx942 ..." (space-separated, what get_arch_list()
# splits); build scripts write the same list with ';' (PYTORCH_ROCM_ARCH).
_FLAGS = re.compile(rb"gfx[0-9a-f]{3,4}(?::[a-z+-]+)*(?:[; ]gfx[0-9a-f]{3,4}(?::[a-z+-]+)*){1,}")
_CODE_OBJECT = re.compile(rb"amdgcn-amd-amdhsa--(gfx[0-9a-f]{3,4})")
# libtorch_python.so holds _cuda_getArchFlags' string (torch/csrc/cuda/Module.cpp) and is the smallest; the HIP
# libraries hold the code objects. Which one a given wheel embeds the string in was not checked on a real wheel
# here: all are tried, smallest first.
_HIP_LIBS = ("libtorch_python.so", "libtorch_hip.so", "libc10_hip.so")


@dataclass(frozen=True)
class WheelArchs:
    archs: tuple[str, ...]  # sorted gfx targets; empty = unknown
    how: str  # "device packages" | "build arch flags" | "code objects" | "unknown"
    packages: tuple[str, ...] = ()  # the device packages found ("amd-torch-device-gfx1103")
    rocm_archs: tuple[str, ...] = ()  # ROCm libraries' own device packages (rocm-sdk-device-*)

    @property
    def known(self) -> bool:
        return bool(self.archs)

    def to_dict(self) -> dict[str, object]:
        return {"archs": list(self.archs), "how": self.how, "packages": list(self.packages)}


def _site_packages(venv: Path) -> list[Path]:
    return sorted(venv.glob("lib/python3*/site-packages"))


def _scan(lib: Path) -> tuple[list[str], str]:
    # memchr-speed find() to each candidate, the regex only there: a regex over the whole mapped library is
    # several times slower (a bundling wheel's libtorch_hip.so is hundreds of MB).
    try:
        with lib.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            best = b""
            pos = mm.find(b"gfx")
            while pos != -1:
                m = _FLAGS.match(mm, pos)
                if m and len(m.group(0)) > len(best):
                    best = m.group(0)  # the full list, not a fragment of a longer one
                pos = mm.find(b"gfx", m.end() if m else pos + 3)
            if best:
                text = best.decode("ascii", "replace").replace(";", " ")
                return [a.split(":")[0] for a in text.split()], "build arch flags"
            found: set[str] = set()
            marker = b"amdgcn-amd-amdhsa--"
            pos = mm.find(marker)
            while pos != -1:
                m = _CODE_OBJECT.match(mm, pos)
                if m:
                    found.add(m.group(1).decode())
                pos = mm.find(marker, pos + len(marker))
            return sorted(found), "code objects"
    except (OSError, ValueError):  # unreadable, or empty (mmap of 0 bytes)
        return [], "unknown"


def read_wheel_archs(venv: Path, *, scan: bool = True) -> WheelArchs:
    """The gfx archs the venv's torch carries (see the module docstring for the order). `scan=False` reads the
    device packages only (a folder listing: the doctor's quick run)."""
    torch_pkgs: dict[str, str] = {}
    rocm: set[str] = set()
    sites = _site_packages(Path(venv))
    for site in sites:
        try:
            entries = list(site.iterdir())
        except OSError:
            continue
        for entry in entries:
            m = _DEVICE_DIST.match(entry.name)
            if not m:
                continue
            kind, gfx = m.group(1).lower(), m.group(2).lower()
            if kind == "amd_torch_device":
                torch_pkgs[gfx] = f"amd-torch-device-{gfx}"
            else:
                rocm.add(gfx)
    if torch_pkgs:
        archs = tuple(sorted(torch_pkgs))
        return WheelArchs(archs, "device packages", tuple(torch_pkgs[a] for a in archs), tuple(sorted(rocm)))
    for site in sites if scan else ():
        for name in _HIP_LIBS:
            lib = site / "torch" / "lib" / name
            if lib.is_file():
                found, how = _scan(lib)
                if found:
                    archs = tuple(sorted(set(found)))
                    if (
                        rocm
                    ):  # ROCm 7.14 wheels: a kernel needs both torch's and ROCm's libraries for the arch
                        archs = tuple(a for a in archs if a in rocm)
                    return WheelArchs(
                        archs, how, tuple(f"rocm-sdk-device-{g}" for g in sorted(rocm)), tuple(sorted(rocm))
                    )
    if rocm:
        return WheelArchs(
            tuple(sorted(rocm)),
            "device packages",
            tuple(f"rocm-sdk-device-{g}" for g in sorted(rocm)),
            tuple(sorted(rocm)),
        )
    return WheelArchs((), "unknown")
