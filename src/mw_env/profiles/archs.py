"""NVIDIA compute capabilities and the SM lists of wheels: a leaf module (profiles.model and profiles.cuda
both use it, so it imports neither)."""

from __future__ import annotations

import re
from collections.abc import Sequence


def parse_cc(text: str | None) -> tuple[int, int] | None:
    """Compute capability `"8.6"` -> (8, 6); also accepts `"sm_86"` / `"86"` / `"12.0"`."""
    if not text:
        return None
    t = str(text).strip().lower()
    m = re.fullmatch(r"(\d+)\.(\d+)", t)
    if m:
        return int(m.group(1)), int(m.group(2))
    m = re.fullmatch(r"(?:sm_|compute_)?(\d+?)(\d)a?", t)
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
