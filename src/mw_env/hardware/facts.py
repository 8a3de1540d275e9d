"""Plain, frozen facts about a machine: what detect() returns and everything downstream reads.

Fields may be added (with defaults); never renamed or removed without updating every reader.
`to_dict()` gives the JSON shape of `mw-env detect --json` (design.md, "Contracts").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal

Vendor = Literal["amd", "nvidia", "intel", "other"]
ContainerKind = Literal["incus", "lxc", "docker", "podman", "kubernetes", "wsl", "other", "none"]


@dataclass(frozen=True)
class DeviceNode:
    """A device node as seen inside this container (/dev/kfd, /dev/dri/renderD128, /dev/nvidia0)."""

    path: str
    exists: bool
    is_char: bool = False
    readable: bool = False
    writable: bool = False
    mode: str | None = None  # "0660"
    uid: int | None = None
    gid: int | None = None
    group: str | None = None  # the group's name in this container's /etc/group, None if unknown

    @property
    def ok(self) -> bool:
        return self.exists and self.is_char and self.readable and self.writable


@dataclass(frozen=True)
class Gpu:
    index: int  # position in Hardware.gpus (what --gpu N selects)
    vendor: Vendor
    name: str  # marketing name, e.g. "AMD Radeon 780M", "NVIDIA GeForce RTX 3090"
    pci_id: str | None = None  # "1002:15bf"
    pci_slot: str | None = None  # "0000:c5:00.0"
    revision: str | None = None  # "0xc1"
    integrated: bool = False  # APU / iGPU
    gfx_target: str | None = None  # AMD: "gfx1103"
    compute_capability: str | None = None  # NVIDIA: "8.6"
    memory_bytes: int | None = None  # VRAM (dedicated / carve-out)
    gtt_bytes: int | None = None  # AMD: GTT (system memory the GPU may map; what APUs really use)
    driver_version: str | None = None
    render_minor: int | None = None  # AMD: drm_render_minor -> /dev/dri/renderD<minor>
    kfd_node: int | None = None  # AMD: KFD topology node id
    device_nodes: tuple[DeviceNode, ...] = ()
    notes: tuple[str, ...] = ()
    chip: str | None = None  # codename, e.g. "Phoenix1", "Navi 31", "Strix Halo"
    gfx_target_version: int | None = None  # AMD: KFD encoding, e.g. 110003 for gfx1103
    source: str = "pci"  # what found it: "kfd" | "pci" | "nvidia-smi"
    uuid: str | None = None  # NVIDIA: "GPU-4aba3cfa-..." (CUDA_VISIBLE_DEVICES accepts it)
    # torch device index inside this container: among reachable GPUs of the same vendor, in HIP order (KFD
    # node order) or CUDA order with CUDA_DEVICE_ORDER=PCI_BUS_ID; None when the GPU is not passed through.
    runtime_index: int | None = None

    @property
    def device_nodes_ok(self) -> bool:
        return bool(self.device_nodes) and all(n.ok for n in self.device_nodes)


@dataclass(frozen=True)
class CpuInfo:
    brand: str = "unknown"
    arch: str = "unknown"  # "x86_64", "aarch64"
    cores: int = 0  # logical CPUs
    flags: tuple[str, ...] = ()  # only the ones that matter: avx2, avx512f, amx_bf16, ...
    quota_cores: float | None = None  # cgroup cpu.max quota in CPUs; None when unlimited or unknown


@dataclass(frozen=True)
class OsInfo:
    id: str = "unknown"  # "ubuntu"
    version: str = ""  # "24.04"
    pretty: str = "unknown"
    kernel: str = "unknown"  # "6.8.0-45-generic"


@dataclass(frozen=True)
class ContainerInfo:
    kind: ContainerKind = "none"
    name: str | None = None
    evidence: str | None = None  # which file/variable told us
    id: str | None = None  # docker/podman container id where it can be read


@dataclass(frozen=True)
class PythonInfo:
    version: str  # "3.12.3"
    path: str
    # "PATH" (found on PATH and run) | "pyenv" (its versions folder, read) | "uv" (uv python list)
    source: str = "PATH"


@dataclass(frozen=True)
class UvInfo:
    path: str
    version: str | None


@dataclass(frozen=True)
class Hardware:
    gpus: tuple[Gpu, ...] = ()
    selected_gpu: int | None = None  # index into gpus of the GPU profiles are chosen for
    selection_reason: str = ""
    cpu: CpuInfo = field(default_factory=CpuInfo)
    memory_bytes: int | None = None
    os: OsInfo = field(default_factory=OsInfo)
    container: ContainerInfo = field(default_factory=ContainerInfo)
    pythons: tuple[PythonInfo, ...] = ()
    uv: UvInfo | None = None
    nvidia_driver: str | None = None
    notes: tuple[str, ...] = ()  # what could not be read, and why (broken sysfs, missing tools)
    memory_limit_bytes: int | None = None  # cgroup memory limit of this container, None when unlimited
    ignored_devices: tuple[str, ...] = ()  # display adapters that are not compute GPUs (BMC VGA, Intel)

    @property
    def gpu(self) -> Gpu | None:
        """The selected GPU, or None on a CPU-only machine."""
        if self.selected_gpu is None:
            return None
        return self.gpus[self.selected_gpu]

    def to_dict(self) -> dict[str, object]:
        data = asdict(self)
        for g, gpu in zip(data["gpus"], self.gpus, strict=True):
            g["device_nodes_ok"] = gpu.device_nodes_ok
        return data
