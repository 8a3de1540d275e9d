"""PCI display devices from sysfs (`/sys/bus/pci/devices/<slot>/{vendor,device,revision,class}`)."""

from __future__ import annotations

from dataclasses import dataclass

from mw_env.hardware.probe import Probe

PCI_DEVICES = "sys/bus/pci/devices"
VENDOR_AMD = "1002"
VENDOR_NVIDIA = "10de"
VENDOR_INTEL = "8086"
VENDOR_NAMES = {
    VENDOR_AMD: "AMD",
    VENDOR_NVIDIA: "NVIDIA",
    VENDOR_INTEL: "Intel",
    "1a03": "ASPEED",
    "102b": "Matrox",
    "1d0f": "Amazon",
    "1414": "Microsoft",
}


@dataclass(frozen=True)
class PciDevice:
    slot: str  # "0000:c5:00.0"
    vendor: str | None  # "1002"
    device: str | None  # "15bf"
    revision: str | None  # "c1"
    pci_class: int  # 0x030000 VGA, 0x030200 3D controller, 0x038000 display, 0x120000 accelerator

    @property
    def pci_id(self) -> str | None:
        if self.vendor is None or self.device is None:
            return None
        return f"{self.vendor}:{self.device}"

    def path(self, leaf: str) -> str:
        return f"{PCI_DEVICES}/{self.slot}/{leaf}"


# PCI base classes that hold GPUs: display (0x03) and processing accelerator (0x12: Instinct MI200/MI300).
GPU_CLASSES = (0x03, 0x12)


def display_devices(probe: Probe) -> list[PciDevice]:
    """Every PCI device whose base class is display (0x03) or processing accelerator (0x12), in slot order.

    sysfs is not namespaced: inside a container this lists the host's GPUs, whether or not they were
    passed through. The device nodes (/dev/dri, /dev/kfd, /dev/nvidia*) say what the container can use.
    """
    out: list[PciDevice] = []
    for slot in probe.machine.listdir(PCI_DEVICES):
        base = f"{PCI_DEVICES}/{slot}"
        raw_class = probe.line(f"{base}/class")
        if raw_class is None:
            if probe.machine.is_dir(base):
                # Every real PCI device has a class file; its absence means broken sysfs.
                probe.note(f"/{base}/class: missing; PCI device {slot} skipped")
            continue
        try:
            pci_class = int(raw_class, 16)
        except ValueError:
            probe.note(f"/{base}/class: {raw_class[:40]!r} is not a hex number; PCI device {slot} skipped")
            continue
        if pci_class >> 16 not in GPU_CLASSES:
            continue
        vendor = probe.hex_id(f"{base}/vendor", required=True)
        device = probe.hex_id(f"{base}/device", required=True)
        revision = probe.hex_id(f"{base}/revision", required=True, width=2)
        out.append(PciDevice(slot=slot, vendor=vendor, device=device, revision=revision, pci_class=pci_class))
    return out


def normalize_slot(bus_id: str) -> str:
    """nvidia-smi's `00000000:41:00.0` -> sysfs's `0000:41:00.0` (lower case)."""
    bus_id = bus_id.strip().lower()
    domain, sep, rest = bus_id.partition(":")
    if not sep:
        return bus_id
    return f"{int(domain, 16):04x}:{rest}" if all(c in "0123456789abcdef" for c in domain) else bus_id


def render_minor_from_sysfs(probe: Probe, dev: PciDevice) -> int | None:
    """The DRM render minor of a PCI GPU from `<slot>/drm/renderD<N>` (when KFD cannot tell)."""
    for name in probe.machine.listdir(dev.path("drm")):
        if name.startswith("renderD") and name[7:].isdigit():
            return int(name[7:])
    return None
