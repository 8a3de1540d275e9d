"""The disk a torch source needs, once: bootstrap's preflight and the doctor's disk check both read it.

What a source installs decides the figure, not its build alone: one GPU's device package from AMD's multi-arch
index is a few GB, every GPU's kernels (`device-all`, or pytorch.org's rocm7.14 torch, which requires them, or
an upstream wheel bundling ROCm for every arch) several times that. Figures are the published ones (GB = 10^9
bytes, as the sources state them); a source's own `download_gb` replaces the table's download. The need is the
download (uv's cache) plus the installed size (the venv) plus a margin for the rest of the venv.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

GB = 10**9
GiB = 1024**3
MARGIN = 512 * 1024**2  # the extras, the lock, pip's own files


@dataclass(frozen=True)
class InstallSize:
    kind: str  # "one-gpu" | "all-gpus" | "cuda" | "cpu"
    label: str
    download_gb: float
    installed_gb: float
    refs: tuple[str, ...]


SIZES = {
    s.kind: s
    for s in (
        InstallSize(
            "one-gpu",
            "torch with one GPU's device package",
            2.1,
            6.0,
            # gfx1151: ~1.6 GB download, 5.7 GB installed; other GPUs' packages up to ~2.1 GB.
            ("https://github.com/ultralytics/ultralytics/issues/24137",),
        ),
        InstallSize(
            "all-gpus",
            "torch with every GPU's kernels (device-all, or ROCm bundled for every arch)",
            10.0,
            19.0,
            ("https://github.com/ultralytics/ultralytics/issues/24137",),
        ),
        InstallSize(
            "cuda",
            "CUDA torch with its nvidia-* libraries",
            3.0,
            5.0,
            # "PyPI torch on Linux is a CUDA-13 build pulling ~5 GB of nvidia-* libs" (install-anchors).
            (
                "https://docs.astral.sh/uv/guides/integration/pytorch/",
                "https://github.com/eegdash/EEGDash/issues/385",
            ),
        ),
        # Measured 2026-12-06 (torch 2.13.0+cpu, Python 3.11, x86_64): the wheel is 192 MB; installed, torch/ is
        # 695 MB and the whole venv with the train extras 1.05 GB (du, hard links counted once).
        InstallSize("cpu", "CPU torch", 0.2, 1.0, ("https://download.pytorch.org/whl/cpu",)),
    )
}


@dataclass(frozen=True)
class DiskNeed:
    """What installing one source's torch takes."""

    source: str  # the source id
    kind: str
    label: str
    download_bytes: int
    installed_bytes: int

    @property
    def need_bytes(self) -> int:
        return self.download_bytes + self.installed_bytes + MARGIN

    @property
    def text(self) -> str:
        """The one wording preflight and the doctor quote."""
        return (
            f"~{self.need_bytes / GiB:.1f} GiB for {self.label} from {self.source} "
            f"({self.download_bytes / GB:.1f} GB download + {self.installed_bytes / GB:.1f} GB installed)"
        )

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "need_bytes": self.need_bytes, "text": self.text}


def install_kind(source: object, *, all_devices: bool = False) -> str:
    """Which row of SIZES a source's install is: by its build, and for ROCm by whether one GPU's kernels come
    alone (a per-GPU device extra, not --all-devices)."""
    build = getattr(source, "build", "cpu")
    if build == "cuda":
        return "cuda"
    if build != "rocm":
        return "cpu"
    devices = getattr(source, "devices", None)
    per_gpu = devices is not None and bool(getattr(devices, "extra", ""))
    return "one-gpu" if per_gpu and not all_devices else "all-gpus"


def disk_need(source: object, *, all_devices: bool = False) -> DiskNeed:
    """The disk a fresh install of `source` (a profiles.model.TorchSource) needs."""
    kind = install_kind(source, all_devices=all_devices)
    size = SIZES[kind]
    stated = getattr(source, "download_gb", None)
    # A source's stated download is for one GPU (every GPU when it has no per-GPU extra): it replaces the
    # table's download when it describes this install, not for --all-devices of a per-GPU source.
    per_gpu_source = bool(getattr(getattr(source, "devices", None), "extra", ""))
    describes = stated is not None and (kind != "all-gpus" or not per_gpu_source)
    download = float(stated) if describes and stated is not None else size.download_gb
    stated_installed = getattr(source, "installed_gb", None)
    installed = float(stated_installed) if describes and stated_installed is not None else size.installed_gb
    return DiskNeed(
        source=getattr(source, "id", None) or "torch",
        kind=kind,
        label=size.label,
        download_bytes=int(download * GB),
        installed_bytes=int(installed * GB),
    )
