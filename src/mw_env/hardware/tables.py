"""The data tables shipped with mw-env: AMD names/gfx by PCI id, NVIDIA compute capabilities."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path


@dataclass(frozen=True)
class AmdChip:
    device_id: str  # "15bf"
    chip: str
    gfx: str | None
    integrated: bool
    name: str  # the name when the revision is unknown


def _data(name: str) -> str:
    # The tables sit next to this module (package data of a regular package, never a zip): a plain read,
    # not importlib.resources, whose import (tempfile, shutil, ...) cost ~5 ms of every command's start-up.
    return Path(__file__).with_name(name).read_text(encoding="utf-8")


def _yaml(name: str) -> dict:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(_data(name), Loader=loader) or {}  # a safe loader (CSafeLoader or SafeLoader)


@lru_cache(maxsize=1)
def amd_chips() -> dict[str, AmdChip]:
    out: dict[str, AmdChip] = {}
    for key, spec in _yaml("amd_chips.yaml").items():
        dev = str(key).lower()
        out[dev] = AmdChip(
            device_id=dev,
            chip=str(spec.get("chip", "")),
            gfx=spec.get("gfx"),
            integrated=bool(spec.get("integrated", False)),
            name=str(spec.get("name", f"AMD GPU 1002:{dev}")),
        )
    return out


@lru_cache(maxsize=1)
def amd_names() -> dict[tuple[str, str], str]:
    """(device, revision) -> product name from the amdgpu.ids subset, both lower-case hex."""
    out: dict[tuple[str, str], str] = {}
    for raw in _data("amdgpu.ids").splitlines():
        if not raw.strip() or raw.startswith("#"):
            continue
        parts = [p.strip() for p in raw.split(",", 2)]
        if len(parts) == 3:
            out[(parts[0].lower(), parts[1].lower())] = parts[2]
    return out


def amd_product_name(device: str, revision: str | None) -> str | None:
    """The marketing name libdrm gives (device, revision), without the trailing " Graphics"."""
    if revision is None:
        return None
    name = amd_names().get((device.lower(), revision.lower().removeprefix("0x").zfill(2)))
    if name and name.endswith(" Graphics"):
        name = name[: -len(" Graphics")]
    return name


@lru_cache(maxsize=1)
def _nvidia() -> dict:
    return _yaml("nvidia_gpus.yaml")


def nvidia_device(device: str) -> tuple[str, str] | None:
    """(name, compute capability) for an NVIDIA PCI device id, when the table knows it."""
    spec = (_nvidia().get("devices") or {}).get(device.lower())
    if not spec:
        return None
    return str(spec["name"]), str(spec["cc"])


def nvidia_cc_from_name(name: str) -> str | None:
    for pattern, cc in _nvidia().get("name_patterns") or []:
        if re.search(pattern, name, re.IGNORECASE):
            return str(cc)
    return None
