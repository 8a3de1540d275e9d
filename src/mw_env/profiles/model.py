"""The profile model: frozen dataclasses that the loader builds from YAML and everything else reads.

Fields may be added (with defaults); never renamed or removed without updating every reader
(design.md, "Module contracts").
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from mw_env.base.textsafe import redact
from mw_env.profiles.archs import covers, parse_cc

if TYPE_CHECKING:
    from mw_env.hardware.facts import Gpu, Hardware
    from mw_env.hardware.machine import Machine

# The allowed values of a profile's fields: the loader checks against these types, and the value lists in
# its messages are derived from them (typing.get_args), so they are kept in one place.
Build = Literal["rocm", "cuda", "cpu"]
MatchVendor = Literal["amd", "nvidia"]
SdpaBackend = Literal["math", "flash", "efficient", "auto"]
Precision = Literal["fp32", "bf16", "fp16"]
TrainerDevice = Literal["cuda", "cpu"]  # ROCm GPUs are "cuda" to torch too
HostKind = Literal["amd", "nvidia", "none"]
Dtype = Literal["fp32", "tf32", "bf16", "fp16"]  # the expected_tflops keys
Runtime = Literal["incus", "docker", "podman"]
Channel = Literal["stable", "nightly"]  # nightly sources are installed only when asked for (--source)
# The facts of a torch source that a public source must show for the release the row describes (`evidence`),
# or that are marked `inferred` (derived, not shown): an inferred fact never decides an automatic choice.
Fact = Literal[
    "arch_list",
    "version",
    "newest_torch",
    "local_tag",
    "runtime_version",
    "min_driver",
    "download_gb",
    "installed_gb",
    "pythons",
]


def has_local_tag(installed_version: str, local_tag: str) -> bool:
    """Whether a torch version carries a source's local tag: the one rule bootstrap, verify and doctor share.

    "+rocm7.2" accepts "2.9.1+rocm7.2" and AMD's own spellings of the same stack, "2.9.1+rocm7.2.0" and
    "2.9.1+rocm7.2.0.lw.git1234" (the tag followed by more dot-separated parts), but not "+rocm7.20" or
    "+rocm7.21": a plain suffix or prefix test gets one or the other wrong. An empty tag accepts any version.
    The comparison is on PEP 440's normalised local part, so "+ROCM7.2-0" reads as "rocm7.2.0".
    """
    tag = local_tag.lstrip("+").lower()
    if not tag:
        return True
    from packaging.version import InvalidVersion, Version

    try:
        local = Version(installed_version).local or ""
    except InvalidVersion:
        return False
    # The tag is normalised the same way ("cu126" stays "cu126", "rocm7.2-0" becomes "rocm7.2.0").
    with contextlib.suppress(InvalidVersion):
        tag = Version(f"0+{tag}").local or tag
    return local == tag or local.startswith(tag + ".")


@dataclass(frozen=True)
class DeviceSpec:
    """How a source splits GPU kernels into per-GPU packages (ROCm 7.14+ wheels, AMD's multi-arch index).

    `{gfx}` in a name stands for the gfx target. On AMD's multi-arch index the extra is torch's own
    (`torch[device-gfx1103]` pulls `amd-torch-device-gfx1103`); on pytorch.org's rocm7.14 index torch requires
    `rocm[libraries,device-all]` itself, so there is no per-GPU choice (`extra` is empty).
    """

    extra: str = ""  # the extra on torch that installs one GPU's kernels, e.g. "device-{gfx}"; "" = none
    all_extra: str = "device-all"  # the extra that installs every GPU's kernels (--all-devices)
    kernels: str = "amd-torch-device-{gfx}"  # the installed distribution that carries one GPU's kernels

    def extra_for(self, gfx: str) -> str:
        return self.extra.replace("{gfx}", gfx)

    def package_for(self, gfx: str) -> str:
        return self.kernels.replace("{gfx}", gfx)


@dataclass(frozen=True)
class TorchSource:
    """Where torch comes from and what a correct install of it reports."""

    id: str  # name inside the profile, e.g. "rocm6.4", "therock-gfx110x", "cu126"
    build: Build
    index_url: str | None  # PEP 503 simple index; None = the default index / a wheelhouse
    version: str  # PEP 440 specifier for torch, e.g. "==2.9.1" or ">=2.11,<2.14"
    local_tag: str  # "+rocm6.4" / "+cu126" / "+cpu" (what torch.__version__ ends with)
    runtime_version: str | None = None  # HIP / CUDA the wheel bundles, e.g. "6.4", "12.6"
    arch_list: tuple[str, ...] = ()  # gfx… or sm_… the wheel ships kernels for
    min_driver: str | None = None  # CUDA: the lowest NVIDIA driver that runs this wheel (Linux)
    newest_torch: str | None = None  # newest torch release on this index ("2.14"): ranks CUDA sources
    ptx: bool = False  # CUDA: the newest SM also ships PTX, so newer GPUs can JIT it
    companions: tuple[str, ...] = ()  # other packages that must come from the same index (torchvision…)
    extra_index_urls: tuple[str, ...] = ()
    default: bool = False  # the source chosen when nothing else decides
    note: str = ""  # why this source, or what to watch for (shown by `profiles NAME`)
    refs: tuple[str, ...] = ()  # where the facts come from (URLs)
    channel: Channel = "stable"
    devices: DeviceSpec | None = None  # per-GPU kernel packages (None: the wheel bundles every arch it has)
    download_gb: float | None = None  # the stated download for one GPU (every GPU when devices.extra is "")
    retired: str = ""  # why no new releases come from this index (a venv built from it keeps working)
    replaced_by: str | None = None  # the source id that replaces a retired one
    # CPython tags the index has wheels for ("cp312"); `profiles --check` compares
    pythons: tuple[str, ...] = ()
    # What the index answers for a project it does not hold: 404, or 403 (AMD's indexes, LocalAI#10997, and
    # pytorch.org's). The torch step tells uv to read a 403 from it as "not here" (provision/torchindex.py).
    unserved: Literal[403, 404] = 404
    serves: tuple[str, ...] = ()  # the projects the index holds ("amd-torch-device-*"): the catalogue says
    installed_gb: float | None = None  # the stated installed size of the install download_gb describes
    # fact -> the public URLs that show it for this row's releases (the build script of that release, the
    # index's listing, a reading of the wheel's own files)
    evidence: Mapping[Fact, tuple[str, ...]] = field(default_factory=dict)
    # fact -> why it is inferred rather than shown (and what would confirm it): never decides a default
    inferred: Mapping[Fact, str] = field(default_factory=dict)

    @property
    def confirmed_archs(self) -> tuple[str, ...]:
        """The arch list when a source shows it; () when it is inferred (no automatic choice may rest on it)."""
        return () if "arch_list" in self.inferred else self.arch_list

    @property
    def per_gpu(self) -> bool:
        """Whether one GPU's kernels can be installed without every other GPU's."""
        return self.devices is not None and bool(self.devices.extra)

    @property
    def requirement(self) -> str:
        """The pip requirement for torch from this source, e.g. `torch==2.9.1`."""
        return f"torch{self.version}"

    def accepts(self, installed_version: str) -> bool:
        """Whether an installed `torch.__version__` (e.g. "2.9.1+rocm6.4") is this source's build and version."""
        from packaging.version import InvalidVersion, Version

        try:
            v = Version(installed_version)
        except InvalidVersion:
            return False
        if not has_local_tag(installed_version, self.local_tag):
            return False
        from packaging.specifiers import SpecifierSet

        return SpecifierSet(self.version).contains(Version(v.public), prereleases=True)


@dataclass(frozen=True)
class Match:
    """Which hardware a profile is for. An empty tuple matches nothing on that axis."""

    vendor: MatchVendor | None = None  # None = no GPU: the CPU profile
    gfx: tuple[str, ...] = ()  # exact gfx targets; "*" means any of this vendor
    pci_ids: tuple[str, ...] = ()  # "1002:15bf" — matches even when the gfx target is unknown
    exclude: tuple[str, ...] = ()  # gfx targets a "*" profile never claims (wrong numerics even with kernels)
    priority: int = 0  # higher wins when several profiles match


@dataclass(frozen=True)
class ArchOverride:
    """An arch without native wheels, run with HSA_OVERRIDE_GFX_VERSION pointing at a sibling ISA."""

    gfx: str  # "gfx1031"
    hsa_override: str  # "10.3.0"
    note: str = ""


@dataclass(frozen=True)
class DoctorExpectations:
    device_nodes: tuple[str, ...] = ()  # "/dev/kfd", "/dev/dri/renderD*", "/dev/nvidia*"
    min_hip: str | None = None
    min_cuda: str | None = None
    arch: str | None = None  # gfx… / sm_… that must be in torch.cuda.get_arch_list(); None = the GPU's own
    harmless_messages: tuple[str, ...] = ()  # substrings of known-harmless warnings
    # dtype -> expected dense matmul TFLOP/s (a realistic figure, not the datasheet peak)
    expected_tflops: Mapping[Dtype, float] = field(default_factory=dict)
    # GPU-name substring -> {dtype: TFLOP/s}; the first key found in Gpu.name wins over expected_tflops
    expected_tflops_by_gpu: Mapping[str, Mapping[Dtype, float]] = field(default_factory=dict)
    probe_timeout_s: float = 60.0
    notes: tuple[str, ...] = ()
    # Extra known-message entries for the doctor's catalogue (id, pattern, severity, title, cause, fix, source);
    # checked in full by mw_env.checks.catalogue when the doctor loads them.
    catalogue: tuple[Mapping[str, Any], ...] = ()

    def tflops_for(self, gpu_name: str | None) -> dict[str, float]:
        """The expected TFLOP/s per dtype for a GPU (its row in the table, else the profile default)."""
        if gpu_name:
            import re

            for key, row in self.expected_tflops_by_gpu.items():
                # Whole-token match: "L4" must not pick up an "L40S", nor "A10" an "A100".
                if re.search(rf"(?<![A-Za-z0-9]){re.escape(key)}(?![A-Za-z0-9])", gpu_name, re.IGNORECASE):
                    return {str(k): v for k, v in row.items()}
        return {str(k): v for k, v in self.expected_tflops.items()}


@dataclass(frozen=True)
class TrainerDefaults:
    # The shipped trainer config `mw-env train` (and `train config`/`summary`) uses when --config is not
    # given: the GPU-sized address-tagger, or address-tagger-cpu where training runs on the CPU.
    config: str = "address-tagger"
    device: TrainerDevice = "cuda"
    precision: Precision = "fp32"
    sdpa_backend: SdpaBackend = "auto"
    compile: bool = False
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class HostSpec:
    """How the host must pass this profile's hardware into a container."""

    kind: HostKind = "none"
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    match: Match
    sources: tuple[TorchSource, ...]
    env: Mapping[str, str] = field(default_factory=dict)  # always set for this profile
    doctor: DoctorExpectations = field(default_factory=DoctorExpectations)
    trainer: TrainerDefaults = field(default_factory=TrainerDefaults)
    host: HostSpec = field(default_factory=HostSpec)
    arch_overrides: tuple[ArchOverride, ...] = ()  # rocm: archs that run on a sibling ISA
    # gfx1103: the value of HSA_OVERRIDE_GFX_VERSION when the chosen wheel lacks the GPU's arch
    hsa_override_when_missing: str | None = None
    aliases: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    refs: tuple[str, ...] = ()  # where the profile's facts come from
    path: Path | None = None  # the YAML file it was loaded from
    shipped: bool = True

    @property
    def default_source(self) -> TorchSource:
        return next((src for src in self.sources if src.default), self.sources[0])

    def source(self, source_id: str) -> TorchSource | None:
        return next((src for src in self.sources if src.id == source_id), None)

    def to_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["path"] = str(self.path) if self.path else None
        return data


@dataclass(frozen=True)
class Selection:
    """The profile chosen for this hardware, the torch source for it, and the runtime env."""

    profile: Profile
    reason: str
    torch: TorchSource
    env: Mapping[str, str] = field(default_factory=dict)
    gpu: Gpu | None = None
    warnings: tuple[str, ...] = ()  # things the user should know (hang-prone override, no fitting wheel)
    explicit: bool = False  # chosen by --profile rather than by matching
    hsa_override: str | None = None  # the HSA_OVERRIDE_GFX_VERSION in `env`, if any
    # The arch the installed torch must serve: AMD "gfx1100" (the override's target when one is set, else the
    # GPU's own gfx), NVIDIA "sm_86" (covered by an equal-major, lower-minor sm_8x too); None on CPU.
    required_arch: str | None = None
    trainer: TrainerDefaults = field(default_factory=TrainerDefaults)  # profile defaults fitted to this GPU
    # AMD: the gfx targets whose kernels to install (the selected GPU's; HIP_VISIBLE_DEVICES hides the others)
    device_targets: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.profile.name

    @property
    def device_packages(self) -> tuple[str, ...]:
        """The per-GPU kernel packages the torch source installs for `device_targets` (empty: none, or all)."""
        spec = self.torch.devices
        if spec is None or not spec.extra:
            return ()
        return tuple(spec.package_for(g) for g in self.device_targets)

    def torch_extras(self, *, all_devices: bool = False) -> tuple[str, ...]:
        """torch's extras for this install: this GPU's device extra, or every GPU's with `all_devices`.

        A per-GPU source with no GPU in sight (a `docker build` of the generic profile) gets every GPU's.
        """
        spec = self.torch.devices
        if spec is None or not spec.extra:
            return ()  # pytorch.org rocm7.14: torch itself requires rocm[libraries,device-all]
        if all_devices or not self.device_targets:
            return (spec.all_extra,)
        return tuple(spec.extra_for(g) for g in self.device_targets)

    @property
    def expected_tflops(self) -> dict[str, float]:
        """Expected dense-matmul TFLOP/s per dtype for this GPU (empty when the profile has no figure)."""
        return self.profile.doctor.tflops_for(self.gpu.name if self.gpu else None)

    def arch_supported(self, arch_list: list[str] | tuple[str, ...]) -> bool:
        """Whether a torch build reporting `torch.cuda.get_arch_list()` == arch_list can run on this GPU."""
        if self.required_arch is None:
            return True
        if self.required_arch.startswith("sm_"):
            cc = parse_cc(self.required_arch)
            return cc is not None and covers(
                arch_list, cc, ptx=any(a.startswith("compute_") for a in arch_list)
            )
        return self.required_arch in arch_list

    def to_dict(self) -> dict[str, object]:
        return {
            "profile": self.profile.name,
            "reason": self.reason,
            "explicit": self.explicit,
            "env": dict(self.env),
            "torch": {
                # Output (detect --json, a run's doctor.json): a token in a user profile's URL stays hidden.
                "index_url": redact(self.torch.index_url) if self.torch.index_url else None,
                "build": self.torch.build,
                "source": self.torch.id,
                "version": self.torch.version,
                "requirement": self.torch.requirement,
                "local_tag": self.torch.local_tag,
                "runtime_version": self.torch.runtime_version,
                "arch_list": list(self.torch.arch_list),
                "channel": self.torch.channel,
                "retired": self.torch.retired or None,
                "replaced_by": self.torch.replaced_by,
                "device_packages": list(self.device_packages),
                "download_gb": self.torch.download_gb,
            },
            "device_targets": list(self.device_targets),
            "required_arch": self.required_arch,
            "hsa_override": self.hsa_override,
            "trainer": asdict(self.trainer),
            "expected_tflops": self.expected_tflops,
            "warnings": list(self.warnings),
        }


@dataclass(frozen=True)
class Resolved:
    """What every command needs: the machine, its hardware facts and the selection for them."""

    machine: Machine
    hardware: Hardware
    selection: Selection
    profiles: Mapping[str, Profile] = field(default_factory=dict)
