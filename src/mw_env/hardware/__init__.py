"""Hardware detection, one module per source (KFD/PCI for AMD, NVIDIA, system, container).

`mw_env.hardware.detect.detect()` is the entry point; these modules are its parts.
"""

from __future__ import annotations
