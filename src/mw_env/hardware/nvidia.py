"""NVIDIA GPUs: the kernel driver version from procfs/sysfs, nvidia-smi rows, PCI ids, /dev/nvidia* nodes."""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass

from mw_env.hardware import tables
from mw_env.hardware.facts import DeviceNode, Gpu
from mw_env.hardware.machine import CommandResult
from mw_env.hardware.pci import VENDOR_NVIDIA, PciDevice, normalize_slot
from mw_env.hardware.probe import Probe, node_notes

SMI_TIMEOUT = 20.0
_FIELDS = ("index", "pci.bus_id", "name", "driver_version", "compute_cap", "memory.total", "uuid")
_VERSION = re.compile(r"\b(\d{3,}\.\d+(?:\.\d+)?)\b")
_MIB = 1024 * 1024
_NO_VALUE = ("N/A", "Not Supported", "Unknown Error", "Insufficient Permissions")  # nvidia-smi's, maybe in []
WSL_SMI = "usr/lib/wsl/lib/nvidia-smi"


@dataclass(frozen=True)
class SmiRow:
    index: int | None
    slot: str | None
    name: str | None
    driver: str | None
    cc: str | None
    memory_bytes: int | None
    uuid: str | None = None


def kernel_driver_version(probe: Probe) -> str | None:
    """The loaded nvidia kernel module's version: /proc/driver/nvidia/version, else /sys/module/nvidia/version.

    e.g. `NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 ...` or the "Open Kernel
    Module for x86_64" form; the version is the first dotted number with a 3-digit major.
    """
    text = probe.text("proc/driver/nvidia/version")
    if text:
        first = text.splitlines()[0] if text.splitlines() else ""
        if m := _VERSION.search(first.split("Kernel Module", 1)[-1]):
            return m.group(1)
        probe.note(f"/proc/driver/nvidia/version: no driver version in {first[:60]!r}")
    line = probe.line("sys/module/nvidia/version")
    if line:
        if m := _VERSION.fullmatch(line):
            return m.group(1)
        probe.note(f"/sys/module/nvidia/version: {line[:40]!r} is not a driver version")
    return None


def find_smi(probe: Probe) -> str | None:
    """nvidia-smi on PATH, else WSL's /usr/lib/wsl/lib/nvidia-smi (often not on root's PATH: gpustack#1297)."""
    found = probe.machine.which("nvidia-smi")
    if found is None and probe.machine.exists(WSL_SMI):
        found = str(probe.machine.path(WSL_SMI))
    return found


def query_smi(probe: Probe) -> list[SmiRow] | None:
    """One row per GPU from nvidia-smi, or None when nvidia-smi is absent or fails (noted)."""
    smi = find_smi(probe)
    if smi is None:
        return None
    fields = list(_FIELDS)
    result = _run_smi(probe, smi, fields)
    if not result.ok and "compute_cap" in (result.stdout + result.stderr):
        # Drivers before ~510 reject the field: `Field "compute_cap" is not a valid field to query.`
        fields.remove("compute_cap")
        result = _run_smi(probe, smi, fields)
    if not result.ok:
        detail = (result.stderr or result.stdout).strip().splitlines()
        text = detail[0] if detail else result.describe()
        probe.note(f"nvidia-smi failed: {text[:160]}")
        return None
    rows: list[SmiRow] = []
    for record in csv.reader(result.stdout.splitlines(), skipinitialspace=True):
        if not record or not any(v.strip() for v in record):
            continue
        if len(record) != len(fields):
            probe.note(f"nvidia-smi: unexpected line {', '.join(record)[:80]!r}; ignored")
            continue
        row = {f: _value(v) for f, v in zip(fields, record, strict=True)}
        rows.append(
            SmiRow(
                index=_int(row.get("index")),
                slot=normalize_slot(bus) if (bus := row.get("pci.bus_id")) else None,
                name=row.get("name"),
                driver=row.get("driver_version"),
                cc=row.get("compute_cap") if _is_cc(row.get("compute_cap")) else None,
                memory_bytes=_mib(row.get("memory.total")),
                uuid=row.get("uuid"),
            )
        )
    return rows


def _run_smi(probe: Probe, smi: str, fields: list[str]) -> CommandResult:
    argv = [smi, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]
    return probe.machine.run(argv, timeout=SMI_TIMEOUT)


def nvidia_gpus(probe: Probe, pci: list[PciDevice]) -> tuple[list[Gpu], str | None]:
    """NVIDIA GPUs in nvidia-smi/PCI order, and the driver version (kernel module first)."""
    kernel = kernel_driver_version(probe)
    nv_pci = [d for d in pci if d.vendor == VENDOR_NVIDIA]
    rows = query_smi(probe)
    by_slot = {d.slot: d for d in nv_pci}
    gpus: list[Gpu] = []
    seen: set[str] = set()
    for position, row in enumerate(rows or []):
        dev = by_slot.get(row.slot or "")
        if dev is not None:
            seen.add(dev.slot)
        gpus.append(_gpu(probe, dev, row, position))
    for dev in nv_pci:
        if dev.slot not in seen:
            gpus.append(_gpu(probe, dev, None, len(gpus)))
    smi_driver = next((r.driver for r in rows or [] if r.driver), None)
    if kernel and smi_driver and kernel != smi_driver:
        probe.note(
            f"NVIDIA kernel module {kernel} but nvidia-smi/NVML reports {smi_driver}: "
            "driver/library version mismatch (update the container's NVIDIA userspace or reboot the host)"
        )
    if nv_pci and rows is None and find_smi(probe) is None:
        probe.note("nvidia-smi not found: GPU names and compute capabilities come from the mw-env PCI table")
    return gpus, kernel or smi_driver


def _gpu(probe: Probe, dev: PciDevice | None, row: SmiRow | None, position: int) -> Gpu:
    notes: list[str] = []
    known = tables.nvidia_device(dev.device) if dev and dev.device else None
    name = (row.name if row else None) or (known[0] if known else None)
    if name is None:
        name = f"NVIDIA GPU {dev.pci_id}" if dev and dev.pci_id else "NVIDIA GPU"
    cc = row.cc if row else None
    if cc is None:
        cc = (known[1] if known else None) or tables.nvidia_cc_from_name(name)
        if cc is not None:
            notes.append(f"compute capability {cc} from the mw-env table (nvidia-smi did not report it)")
        else:
            notes.append(
                "compute capability unknown (nvidia-smi did not report it and the table lacks this GPU)"
            )
    slot = dev.slot if dev else (row.slot if row else None)
    minor = _device_minor(probe, slot)
    if minor is None:
        minor = row.index if row and row.index is not None else position
    nodes = _device_nodes(probe, minor)
    notes.extend(node_notes(nodes))
    return Gpu(
        index=-1,
        vendor="nvidia",
        name=name,
        pci_id=dev.pci_id if dev else None,
        pci_slot=slot,
        revision=f"0x{dev.revision}" if dev and dev.revision else None,
        integrated=False,
        compute_capability=cc,
        memory_bytes=row.memory_bytes if row else None,
        driver_version=row.driver if row else None,
        device_nodes=nodes,
        notes=tuple(notes),
        source="nvidia-smi" if row else "pci",
        uuid=row.uuid if row else None,
    )


def _device_nodes(probe: Probe, minor: int) -> tuple[DeviceNode, ...]:
    if probe.machine.exists("dev/dxg") and not probe.machine.exists("dev/nvidiactl"):
        # WSL2: CUDA goes through the paravirtual /dev/dxg, there are no /dev/nvidia* nodes.
        return (probe.device_node("/dev/dxg"),)
    return tuple(probe.device_node(p) for p in (f"/dev/nvidia{minor}", "/dev/nvidiactl", "/dev/nvidia-uvm"))


def _device_minor(probe: Probe, slot: str | None) -> int | None:
    """`Device Minor:` from /proc/driver/nvidia/gpus/<slot>/information (-> /dev/nvidia<minor>)."""
    if not slot:
        return None
    text = probe.text(f"proc/driver/nvidia/gpus/{slot}/information")
    if text and (m := re.search(r"^Device Minor:\s*(\d+)", text, re.MULTILINE)):
        return int(m.group(1))
    return None


def _value(raw: str) -> str | None:
    value = raw.strip()
    return None if not value or value.strip("[]") in _NO_VALUE else value


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


def _mib(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(float(value.split()[0]) * _MIB)
    except (ValueError, IndexError):
        return None


def _is_cc(value: str | None) -> bool:
    return value is not None and re.fullmatch(r"\d+\.\d+", value) is not None
