"""mw-env: a working PyTorch training environment on whatever hardware a container has."""

from __future__ import annotations

__version__ = "0.3.0"
