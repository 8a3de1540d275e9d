"""AMD GPUs without ROCm: the KFD topology in sysfs, PCI ids for the product name, device nodes.

KFD node `properties` hold `name integer` lines (gfx_target_version 110003, vendor_id 4098, device_id 5567,
location_id = bus<<8 | dev<<3 | fn, domain, drm_render_minor, simd_count, local_mem_size ...). CPU nodes have
simd_count 0 and gfx_target_version 0; a dual-socket box has two of them, so GPUs may start at node 2.
The order of GPU nodes is the HIP device order, so Hardware.gpus[i] is torch device i on an AMD-only box.
"""

from __future__ import annotations

from dataclasses import dataclass

from mw_env.hardware import tables
from mw_env.hardware.facts import DeviceNode, Gpu
from mw_env.hardware.pci import VENDOR_AMD, PciDevice, render_minor_from_sysfs
from mw_env.hardware.probe import Probe, node_notes

KFD_NODES = ("sys/class/kfd/kfd/topology/nodes", "sys/devices/virtual/kfd/kfd/topology/nodes")
KFD_DEVICE = "/dev/kfd"


def gfx_name(version: int) -> str | None:
    """KFD `gfx_target_version` -> gfx name: 110003 -> gfx1103, 90010 -> gfx90a, 90012 -> gfx90c.

    Encoding: major*10000 + minor*100 + stepping; minor and stepping print as one hex digit each.
    """
    if version <= 0:
        return None
    major, minor, step = version // 10000, version // 100 % 100, version % 100
    if major == 0 or minor > 15 or step > 15:
        return None
    return f"gfx{major}{minor:x}{step:x}"


def gfx_version_string(gfx: str) -> str | None:
    """gfx name -> the `major.minor.stepping` form HSA_OVERRIDE_GFX_VERSION takes (gfx1103 -> 11.0.3)."""
    digits = gfx.removeprefix("gfx")
    if len(digits) < 3:
        return None
    try:
        major, minor, step = int(digits[:-2]), int(digits[-2], 16), int(digits[-1], 16)
    except ValueError:
        return None
    return f"{major}.{minor}.{step}"


@dataclass(frozen=True)
class KfdNode:
    node: int
    props: dict[str, int]

    @property
    def slot(self) -> str | None:
        loc = self.props.get("location_id")
        if not loc:
            return None
        domain = self.props.get("domain", 0)
        return f"{domain:04x}:{loc >> 8 & 0xFF:02x}:{loc >> 3 & 0x1F:02x}.{loc & 0x7}"

    @property
    def device_id(self) -> str | None:
        dev = self.props.get("device_id")
        return f"{dev:04x}" if dev else None


def kfd_gpu_nodes(probe: Probe) -> tuple[list[KfdNode], bool]:
    """GPU nodes of the KFD topology, and whether a topology was found at all."""
    base = next((b for b in KFD_NODES if probe.machine.is_dir(b)), None)
    if base is None:
        return [], False
    names = probe.machine.listdir(base)
    nodes: list[KfdNode] = []
    for name in sorted((n for n in names if n.isdigit()), key=int):
        rel = f"{base}/{name}/properties"
        if not probe.machine.exists(rel):
            probe.note(f"/{base}/{name}: KFD node without a properties file; node skipped")
            continue
        props = probe.key_values(rel)
        if props is None:
            continue  # unreadable; Probe noted why
        if "simd_count" not in props and "gfx_target_version" not in props:
            if props.get("vendor_id") == int(VENDOR_AMD, 16) and props.get("device_id"):
                # A filtered or partial view: the ids still say it is an AMD GPU; _gpu_from_kfd names it
                # from the PCI id table and says what was missing.
                nodes.append(KfdNode(node=int(name), props=props))
                continue
            probe.note(f"/{rel}: has neither simd_count nor gfx_target_version; node skipped")
            continue
        if props.get("simd_count", 0) == 0 and props.get("gfx_target_version", 0) == 0:
            continue  # a CPU node
        nodes.append(KfdNode(node=int(name), props=props))
    return nodes, True


def amd_gpus(probe: Probe, pci: list[PciDevice]) -> list[Gpu]:
    """AMD GPUs from KFD (preferred: it is what ROCm will see), then AMD PCI GPUs that KFD lacks."""
    nodes, have_kfd = kfd_gpu_nodes(probe)
    amd_pci = [d for d in pci if d.vendor == VENDOR_AMD]
    by_slot = {d.slot: d for d in amd_pci}
    used: set[str] = set()
    gpus: list[Gpu] = []
    for node in nodes:
        dev = by_slot.get(node.slot or "")
        if dev is None and node.device_id:
            # No usable location: fall back to the only unmatched PCI GPU with this device id.
            same = [d for d in amd_pci if d.device == node.device_id and d.slot not in used]
            dev = same[0] if len(same) == 1 else None
        if dev is not None:
            used.add(dev.slot)
        gpus.append(_gpu_from_kfd(probe, node, dev))
    kfd_device = probe.machine.exists(KFD_DEVICE)
    for dev in amd_pci:
        if dev.slot in used:
            continue
        if have_kfd:
            why = "no KFD topology node matches it (amdgpu does not offer it for compute)"
        else:
            why = "no KFD topology in /sys/class/kfd (amdgpu/KFD not loaded on the host, or hidden)"
        gpus.append(_gpu_from_pci(probe, dev, note=f"{dev.slot}: {why}"))
    if amd_pci and not have_kfd and not kfd_device:
        probe.note(
            "AMD GPU present but /sys/class/kfd is missing: the host's amdgpu driver has no KFD (compute)"
        )
    return gpus


def _gpu_from_kfd(probe: Probe, node: KfdNode, dev: PciDevice | None) -> Gpu:
    props = node.props
    notes: list[str] = []
    version = props.get("gfx_target_version")
    gfx = gfx_name(version) if version else None
    device_id = (dev.device if dev else None) or node.device_id
    chip = tables.amd_chips().get(device_id or "")
    if gfx is None:
        fallback = chip.gfx if chip else None
        if "gfx_target_version" not in props:
            lacking = ["gfx_target_version"] + (["simd_count"] if "simd_count" not in props else [])
            pci_id = f"1002:{device_id}" if device_id else "unknown"
            found = (
                f"identified as {fallback} ({chip.name}) from its device id {pci_id} (PCI id table)"
                if chip and fallback
                else f"its device id {pci_id} is not in the PCI id table, so the gfx target is unknown"
            )
            notes.append(
                f"KFD node {node.node}: its properties lack {' and '.join(lacking)} (a filtered or partial "
                f"sysfs view); {found}"
            )
        else:
            notes.append(
                f"KFD node {node.node}: gfx_target_version {version!r} is not a valid gfx target"
                + (f"; using {fallback} from the PCI id table" if fallback else "")
            )
        gfx = fallback
        version = None
    vendor = props.get("vendor_id")
    if vendor is not None and vendor != int(VENDOR_AMD, 16):
        notes.append(f"KFD node {node.node}: vendor_id {vendor:#06x} is not AMD")
    render_minor = props.get("drm_render_minor")
    if render_minor is not None and render_minor < 128:
        # Render minors start at 128 (renderD128); 0 or -1 means "none" (a GPU without a render node).
        render_minor = None
    if render_minor is None and dev is not None:
        render_minor = render_minor_from_sysfs(probe, dev)
    local_mem = props.get("local_mem_size") or None
    integrated = chip.integrated if chip else local_mem is None  # APUs report local_mem_size 0
    vram, gtt = _memory(probe, dev)
    nodes = _device_nodes(probe, render_minor)
    notes.extend(_node_notes(nodes, render_minor))
    return Gpu(
        index=-1,
        vendor="amd",
        name=_name(dev, chip, device_id, gfx),
        pci_id=f"1002:{device_id}" if device_id else None,
        pci_slot=(dev.slot if dev else node.slot),
        revision=f"0x{dev.revision}" if dev and dev.revision else None,
        integrated=integrated,
        gfx_target=gfx,
        memory_bytes=vram if vram is not None else local_mem,
        gtt_bytes=gtt,
        render_minor=render_minor,
        kfd_node=node.node,
        device_nodes=nodes,
        notes=tuple(notes),
        chip=chip.chip if chip else None,
        gfx_target_version=version,
        source="kfd",
    )


def _gpu_from_pci(probe: Probe, dev: PciDevice, *, note: str) -> Gpu:
    chip = tables.amd_chips().get(dev.device or "")
    render_minor = render_minor_from_sysfs(probe, dev)
    vram, gtt = _memory(probe, dev)
    nodes = _device_nodes(probe, render_minor)
    gfx = chip.gfx if chip else None
    version = None
    if gfx and (v := gfx_version_string(gfx)):
        major, minor, step = (int(x) for x in v.split("."))
        version = major * 10000 + minor * 100 + step
    return Gpu(
        index=-1,
        vendor="amd",
        name=_name(dev, chip, dev.device, gfx),
        pci_id=dev.pci_id,
        pci_slot=dev.slot,
        revision=f"0x{dev.revision}" if dev.revision else None,
        integrated=chip.integrated if chip else False,
        gfx_target=gfx,
        memory_bytes=vram,
        gtt_bytes=gtt,
        render_minor=render_minor,
        device_nodes=nodes,
        notes=(note, *_node_notes(nodes, render_minor)),
        chip=chip.chip if chip else None,
        gfx_target_version=version,
        source="pci",
    )


def _name(dev: PciDevice | None, chip: tables.AmdChip | None, device_id: str | None, gfx: str | None) -> str:
    if dev is not None and dev.device:
        exact = tables.amd_product_name(dev.device, dev.revision)
        if exact:
            return exact
    if chip is not None:
        return chip.name
    label = f"1002:{device_id}" if device_id else "unknown device"
    return f"AMD GPU {label}" + (f" ({gfx})" if gfx else "")


def _memory(probe: Probe, dev: PciDevice | None) -> tuple[int | None, int | None]:
    """VRAM and GTT totals in bytes from amdgpu's sysfs files (the GPU's PCI folder = card*/device)."""
    if dev is None:
        return None, None
    return probe.integer(dev.path("mem_info_vram_total")), probe.integer(dev.path("mem_info_gtt_total"))


def _device_nodes(probe: Probe, render_minor: int | None) -> tuple[DeviceNode, ...]:
    nodes = [probe.device_node(KFD_DEVICE)]
    if render_minor is not None:
        nodes.append(probe.device_node(f"/dev/dri/renderD{render_minor}"))
    return tuple(nodes)


def _node_notes(nodes: tuple[DeviceNode, ...], render_minor: int | None) -> list[str]:
    notes = node_notes(nodes)
    if render_minor is None:
        notes.append("render node unknown (no drm_render_minor and no drm/renderD* in sysfs)")
    return notes
