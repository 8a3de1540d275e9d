"""NVIDIA: which CUDA torch source fits a driver version and a set of compute capabilities.

Rule (install-anchors b4, b5): a source fits when the driver is at least the source's `min_driver` AND every
GPU's compute capability is covered by the source's SM list. Among fitting sources the newest torch wins, then
the newest CUDA. uv and light-the-torch rank by CUDA version alone and ignore the compute capability, which is
how a GTX 1080 Ti ends up with a wheel that has no sm_61 kernels (uv#14742).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from mw_env.profiles.model import TorchSource


def parse_version(text: str | None) -> tuple[int, ...] | None:
    """`"550.144.03"` -> (550, 144, 3); None for anything that is not a dotted number."""
    if not text:
        return None
    m = re.match(r"^\s*(\d+(?:\.\d+)*)", str(text))
    if not m:
        return None
    return tuple(int(p) for p in m.group(1).split("."))


def parse_cc(text: str | None) -> tuple[int, int] | None:
    """Compute capability `"8.6"` -> (8, 6); also accepts `"sm_86"` / `"86"` / `"12.0"`."""
    if not text:
        return None
    t = str(text).strip().lower()
    m = re.match(r"^(\d+)\.(\d+)$", t)
    if m:
        return int(m.group(1)), int(m.group(2))
    m = re.match(r"^(?:sm_|compute_)?(\d+?)(\d)a?$", t)
    if m:
        return int(m.group(1)), int(m.group(2))
    return None


def sm_name(cc: tuple[int, int]) -> str:
    return f"sm_{cc[0]}{cc[1]}"


def covers(arch_list: Sequence[str], cc: tuple[int, int], *, ptx: bool = False) -> bool:
    """Whether a wheel built for `arch_list` runs on a GPU of capability `cc`.

    CUDA binary compatibility: code for sm_XY runs on sm_XZ with Z >= Y (same major), so sm_60 serves a 6.1 GPU
    and sm_86 an 8.9 one. PTX for the newest arch can be JIT-compiled for any newer GPU.
    """
    archs = [a for a in (parse_cc(x) for x in arch_list) if a is not None]
    if any(a[0] == cc[0] and a[1] <= cc[1] for a in archs):
        return True
    return bool(ptx and archs and max(archs) < cc)


@dataclass(frozen=True)
class CudaChoice:
    source: TorchSource | None  # None: no CUDA wheel fits
    reason: str
    rejected: tuple[str, ...] = ()  # "cu130: no kernels for sm_61", one per source that did not fit


def choose_cuda_source(
    sources: Sequence[TorchSource],
    *,
    driver: str | None,
    capabilities: Sequence[str | None],
) -> CudaChoice:
    """The newest torch source whose CUDA the driver runs and whose SMs cover every capability given."""
    drv = parse_version(driver)
    ccs = sorted({c for c in (parse_cc(x) for x in capabilities) if c is not None})
    unknown_cc = any(parse_cc(x) is None for x in capabilities) or not capabilities
    fitting: list[TorchSource] = []
    rejected: list[str] = []
    for src in sources:
        if src.build != "cuda":
            continue
        need = parse_version(src.min_driver)
        if drv is not None and need is not None and drv < need:
            rejected.append(f"{src.id}: needs driver >= {src.min_driver}")
            continue
        missing = [sm_name(c) for c in ccs if not covers(src.arch_list, c, ptx=src.ptx)]
        if missing:
            rejected.append(f"{src.id}: no kernels for {', '.join(missing)}")
            continue
        fitting.append(src)
    if not fitting:
        what = f"driver {driver}" if driver else "an unknown driver"
        caps = ", ".join(f"{c[0]}.{c[1]}" for c in ccs) or "unknown"
        return CudaChoice(
            source=None,
            reason=f"no CUDA torch wheel fits {what} and compute capability {caps} ({'; '.join(rejected)})",
            rejected=tuple(rejected),
        )

    def rank(src: TorchSource) -> tuple[tuple[int, ...], tuple[int, ...]]:
        newest = parse_version(src.newest_torch) or ()
        cuda = parse_version(src.runtime_version) or ()
        # With the driver unknown, prefer the oldest CUDA among equally new torches: it needs the oldest driver.
        return (newest, cuda if drv is not None else tuple(-p for p in cuda))

    best = max(fitting, key=rank)
    parts = [f"{best.id} (torch {best.newest_torch or best.version})"]
    if drv is not None:
        parts.append(f"driver {driver} >= {best.min_driver}")
    else:
        parts.append(f"driver version unknown: assumed >= {best.min_driver}")
    if ccs:
        parts.append(f"kernels cover {', '.join(sm_name(c) for c in ccs)}")
    if unknown_cc:
        parts.append("compute capability unknown for some GPU: SM coverage not checked")
    return CudaChoice(source=best, reason="; ".join(parts), rejected=tuple(rejected))


def minimum_driver_hint(sources: Sequence[TorchSource], capabilities: Sequence[str | None]) -> str | None:
    """The lowest driver that would let some source cover these GPUs, for the 'upgrade the driver' hint."""
    ccs = [c for c in (parse_cc(x) for x in capabilities) if c is not None]
    best: tuple[tuple[int, ...], str] | None = None
    for src in sources:
        if src.build != "cuda" or not src.min_driver:
            continue
        if all(covers(src.arch_list, c, ptx=src.ptx) for c in ccs):
            v = parse_version(src.min_driver) or ()
            if best is None or v < best[0]:
                best = (v, f"{src.min_driver} ({src.id})")
    return best[1] if best else None
