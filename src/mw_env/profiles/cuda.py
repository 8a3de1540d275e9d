"""NVIDIA: which CUDA torch source fits a driver version and a set of compute capabilities.

Rule (install-anchors b4, b5): a source fits when the driver is at least the source's `min_driver` AND every
GPU's compute capability is covered by the source's SM list. Among fitting sources the newest torch wins, then
the newest CUDA. uv and light-the-torch rank by CUDA version alone and ignore the compute capability, which is
how a GTX 1080 Ti ends up with a wheel that has no sm_61 kernels (uv#14742).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mw_env.base.versions import version_tuple
from mw_env.profiles.archs import covers, parse_cc, sm_name
from mw_env.profiles.model import TorchSource

__all__ = ["CudaChoice", "choose_cuda_source", "covers", "minimum_driver_hint", "parse_cc", "sm_name"]


@dataclass(frozen=True)
class CudaChoice:
    source: TorchSource | None  # None: no CUDA wheel fits
    reason: str


def choose_cuda_source(
    sources: Sequence[TorchSource],
    *,
    driver: str | None,
    capabilities: Sequence[str | None],
) -> CudaChoice:
    """The newest torch source whose CUDA the driver runs and whose SMs cover every capability given."""
    drv = version_tuple(driver) or None
    ccs = sorted({c for c in (parse_cc(x) for x in capabilities) if c is not None})
    unknown_cc = any(parse_cc(x) is None for x in capabilities) or not capabilities
    fitting: list[TorchSource] = []
    rejected: list[str] = []
    for src in sources:
        if src.build != "cuda":
            continue
        deciding = sorted({"arch_list", "min_driver"} & set(src.inferred))
        if deciding:  # an inferred fact never decides: only `--source` installs such a source
            rejected.append(f"{src.id}: its {' and '.join(deciding)} is inferred, not shown by a source")
            continue
        need = version_tuple(src.min_driver) or None
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
        )

    def rank(src: TorchSource) -> tuple[tuple[int, ...], tuple[int, ...]]:
        newest = version_tuple(src.newest_torch)
        cuda = version_tuple(src.runtime_version)
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
    return CudaChoice(source=best, reason="; ".join(parts))


def minimum_driver_hint(sources: Sequence[TorchSource], capabilities: Sequence[str | None]) -> str | None:
    """The lowest driver that would let some source cover these GPUs, for the 'upgrade the driver' hint."""
    ccs = [c for c in (parse_cc(x) for x in capabilities) if c is not None]
    best: tuple[tuple[int, ...], str] | None = None
    for src in sources:
        if src.build != "cuda" or not src.min_driver or {"arch_list", "min_driver"} & set(src.inferred):
            continue
        if all(covers(src.arch_list, c, ptx=src.ptx) for c in ccs):
            v = version_tuple(src.min_driver)
            if best is None or v < best[0]:
                best = (v, f"{src.min_driver} ({src.id})")
    return best[1] if best else None
