"""Provisioning: the ordered bootstrap plan, its executor, the uv wrapper, state/lock, wheelhouse, pins."""

from __future__ import annotations
