"""The one parser of dotted version numbers (kernel, driver, HIP/CUDA runtime, uv), as integer tuples.

PEP 440 versions (torch, packages) go through `packaging.version` instead; this is for the tool and driver
strings that are not PEP 440 ("6.2.41133-abc", "550.144.03", "6.8.0-45-generic").
"""

from __future__ import annotations

import re

_LEADING = re.compile(r"\s*(\d+(?:\.\d+)*)")


def version_tuple(text: str | None) -> tuple[int, ...]:
    """'6.2.41133-abc' -> (6, 2, 41133); '6.8.0-45-generic' -> (6, 8, 0); '580' -> (580,); junk or None -> ()."""
    m = _LEADING.match(str(text)) if text else None
    return tuple(int(p) for p in m.group(1).split(".")) if m else ()
