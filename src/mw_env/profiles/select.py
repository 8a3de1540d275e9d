"""Choose a profile for the hardware, the torch source for the GPU, and the runtime env that goes with both.

Every choice carries a human `reason`. The HSA override is never hard-coded: it is set only when the GPU's
arch is missing from the chosen wheel's arch list and the profile names a safe substitute ISA.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from mw_env.base.errors import InputError
from mw_env.hardware.facts import Gpu, Hardware
from mw_env.profiles.amd import HSA_OVERRIDE, choose_amd_source
from mw_env.profiles.cuda import CudaChoice, choose_cuda_source, minimum_driver_hint, parse_cc, sm_name
from mw_env.profiles.model import Profile, Selection, TorchSource, TrainerDefaults

# AMD archs whose matrix units do bf16 natively (CDNA2+, RDNA3+); elsewhere bf16 is emulated and slow.
_AMD_BF16 = ("gfx908", "gfx90a", "gfx942", "gfx950")


def get_profile(profiles: Mapping[str, Profile], name: str) -> Profile:
    """A profile by name or alias; an unknown name is an InputError listing the known ones."""
    if name in profiles:
        return profiles[name]
    for p in profiles.values():
        if name in p.aliases:
            return p
    known = ", ".join(sorted(profiles))
    raise InputError(f"unknown profile {name!r}; known profiles: {known}", hint="see `mw-env profiles`")


def select(
    hardware: Hardware,
    profiles: Mapping[str, Profile],
    *,
    name: str | None = None,
    source: str | None = None,
) -> Selection:
    """The profile for this hardware (or the one named), its torch source and its runtime env.

    `source` picks one of the profile's torch sources by id (e.g. "therock-gfx110x") instead of the automatic
    choice. Raises InputError for an unknown profile or source name.
    """
    if not profiles:
        raise InputError(
            "no profiles loaded", hint="the package's shipped profiles are missing; reinstall mw-env"
        )
    if name is not None:
        profile = get_profile(profiles, name)
        return _build(
            profile, hardware, source, why=f"profile {profile.name!r} chosen with --profile", explicit=True
        )
    matched, why = _match(hardware, profiles, source)
    return _build(matched or _cpu_profile(profiles), hardware, source, why=why, explicit=False)


def _match(
    hardware: Hardware, profiles: Mapping[str, Profile], source: str | None
) -> tuple[Profile | None, str]:
    """The profile matching the hardware's GPU (None: the CPU profile) and why."""
    gpu = hardware.gpu
    if gpu is None:
        cpu = _cpu_profile(profiles)
        why = hardware.selection_reason or "no AMD or NVIDIA GPU found"
        return cpu, f"{why}; profile {cpu.name!r} uses the CPU"
    label = _gpu_label(gpu, hardware)
    if gpu.vendor == "amd":
        amd, how = _match_amd(gpu, profiles)
        if amd is None:
            return None, (
                f"{label}: {how}; using the CPU build. `--profile rocm` tries the GPU anyway "
                "(expect 'invalid device function')"
            )
        return amd, f"{label} {how}"
    if gpu.vendor != "nvidia":
        return (
            None,
            f"{label}: {gpu.vendor} GPUs have no mw-env profile (ROCm and CUDA only); using the CPU build",
        )
    matched = _best(p for p in profiles.values() if _vendor_matches(p, gpu))
    if matched is None:
        return None, f"{label}: no profile matches NVIDIA GPUs"
    choice = _cuda_choice(matched, hardware)
    if choice.source is None and source is None:
        hint = minimum_driver_hint(matched.sources, _nvidia_ccs(hardware))
        why = f"{label}: {choice.reason}; using the CPU build"
        return None, why + (f". A host driver >= {hint} would allow a CUDA build" if hint else "")
    return matched, f"{label} matches profile {matched.name!r}"


def runtime_env(selection: Selection) -> dict[str, str]:
    """The variables to export before running torch for this selection."""
    return dict(selection.env)


# -- matching ------------------------------------------------------------------------------------------


def _cpu_profile(profiles: Mapping[str, Profile]) -> Profile:
    cpu = _best(p for p in profiles.values() if p.match.vendor is None)
    if cpu is None:
        raise InputError(
            "no profile matches a machine without a usable GPU", hint="keep a profile named 'cpu'"
        )
    return cpu


def _best(candidates: Iterable[Profile]) -> Profile | None:
    ranked = sorted(candidates, key=lambda p: (-p.match.priority, p.name))
    return ranked[0] if ranked else None


def _vendor_matches(profile: Profile, gpu: Gpu) -> bool:
    return profile.match.vendor == gpu.vendor and bool(profile.match.gfx or profile.match.pci_ids)


def _supports_gfx(profile: Profile, gfx: str) -> bool:
    """A wildcard profile claims an arch only when a source ships its kernels or a known override exists."""
    if any(gfx in s.confirmed_archs for s in profile.sources):  # an inferred arch list claims nothing
        return True
    return any(o.gfx == gfx for o in profile.arch_overrides)


def _match_amd(gpu: Gpu, profiles: Mapping[str, Profile]) -> tuple[Profile | None, str]:
    gfx = gpu.gfx_target
    pci = (gpu.pci_id or "").lower()
    exact, wildcard = [], []
    for p in profiles.values():
        if p.match.vendor != "amd":
            continue
        if (gfx and gfx in p.match.gfx) or (pci and pci in p.match.pci_ids):
            exact.append(p)
        elif "*" in p.match.gfx and gfx not in p.match.exclude and (gfx is None or _supports_gfx(p, gfx)):
            wildcard.append(p)
    best = _best(exact) or _best(wildcard)
    if best is None:
        return None, f"no torch wheel ships {gfx or 'its'} kernels and no safe HSA override is known"
    if best in exact:
        key = f"gfx target {gfx}" if gfx and gfx in best.match.gfx else f"PCI id {pci}"
        return best, f"matches profile {best.name!r} by {key}"
    if gfx is None:
        return (
            best,
            f"has an unknown gfx target: profile {best.name!r} (any AMD GPU); the doctor checks the arch",
        )
    return best, f"matches profile {best.name!r} (any AMD GPU whose arch a wheel or a known override serves)"


def _gpu_label(gpu: Gpu, hardware: Hardware) -> str:
    label = gpu.name
    if gpu.vendor == "amd" and gpu.gfx_target:
        label += f" ({gpu.gfx_target})"
    if gpu.vendor == "nvidia" and gpu.compute_capability:
        label += f" (compute capability {gpu.compute_capability})"
    if len(hardware.gpus) > 1:
        # Say first which of the GPUs this is for, and why (detect's words), then what it matches.
        why = hardware.selection_reason or f"GPU {gpu.index} of {len(hardware.gpus)}"
        label = f"{why}; {label}"
    return label


def _nvidia_ccs(hardware: Hardware) -> list[str | None]:
    return [g.compute_capability for g in hardware.gpus if g.vendor == "nvidia"]


def _nvidia_driver(hardware: Hardware) -> str | None:
    drivers = (g.driver_version for g in hardware.gpus if g.vendor == "nvidia" and g.driver_version)
    return hardware.nvidia_driver or next(drivers, None)


def _cuda_choice(profile: Profile, hardware: Hardware) -> CudaChoice:
    # Every NVIDIA GPU in the box, not just the selected one: DDP runs one process per GPU on the same wheel.
    return choose_cuda_source(
        profile.sources, driver=_nvidia_driver(hardware), capabilities=_nvidia_ccs(hardware)
    )


# -- building the selection ----------------------------------------------------------------------------


def _explicit_source(profile: Profile, source: str) -> TorchSource:
    src = profile.source(source)
    if src is None:
        ids = ", ".join(s.id for s in profile.sources)
        raise InputError(
            f"profile {profile.name!r} has no torch source {source!r}; its sources: {ids}",
            hint=f"see `mw-env profiles {profile.name}`",
        )
    return src


def _build(
    profile: Profile, hardware: Hardware, source: str | None, *, why: str, explicit: bool
) -> Selection:
    gpu = hardware.gpu
    build = profile.default_source.build
    warnings: list[str] = []
    env = dict(profile.env)
    override: str | None = None
    required: str | None = None
    reasons = [why]

    if build == "rocm":
        src, override, required, notes, warns = _rocm_source(profile, gpu, source)
        reasons += notes
        warnings += warns
        if gpu is not None and gpu.vendor != "amd":
            warnings.append(f"profile {profile.name!r} is for AMD GPUs but the selected GPU is {gpu.vendor}")
        env.update(_hip_visible(hardware))
    elif build == "cuda":
        src, required, notes, warns = _cuda_source(profile, hardware, source)
        reasons += notes
        warnings += warns
    else:
        src = _explicit_source(profile, source) if source else profile.default_source
        if gpu is not None and explicit:
            warnings.append(
                f"profile {profile.name!r} ignores the {gpu.vendor.upper()} GPU: training runs on the CPU"
            )

    if override is not None:
        env[HSA_OVERRIDE] = override
    if gpu is not None and gpu.vendor in ("amd", "nvidia") and build != "cpu" and not gpu.device_nodes_ok:
        missing = _node_problems(gpu)
        reasons.append(
            f"its device nodes are not usable in this container ({missing}); bootstrap can still prepare the venv, "
            "`mw-env doctor` reports the problem and `mw-env host-commands` prints the host-side fix"
        )
    return Selection(
        profile=profile,
        reason="; ".join(r for r in reasons if r),
        torch=src,
        env=env,
        gpu=gpu,
        warnings=tuple(warnings),
        explicit=explicit,
        hsa_override=override,
        required_arch=required,
        trainer=_trainer_for(profile.trainer, build, required),
        # One GPU's kernels: the arch the wheel must serve (the visible GPUs share it, _hip_visible).
        device_targets=(required,) if build == "rocm" and required else (),
    )


def _node_problems(gpu: Gpu) -> str:
    if not gpu.device_nodes:
        return "no device nodes found"
    bad = []
    for n in gpu.device_nodes:
        if not n.exists:
            bad.append(f"{n.path} missing")
        elif not n.ok:
            bad.append(f"{n.path} not read/writable")
    return ", ".join(bad) or "not usable"


def _rocm_source(
    profile: Profile, gpu: Gpu | None, source: str | None
) -> tuple[TorchSource, str | None, str | None, list[str], list[str]]:
    """(source, override, required arch, reason notes, warnings) for an AMD GPU (policy: profiles/amd.py)."""
    gfx = gpu.gfx_target if gpu is not None and gpu.vendor == "amd" else None
    if gfx is None and gpu is not None and (gpu.pci_id or "").lower() in profile.match.pci_ids:
        # Matched by PCI id while KFD could not say the gfx: a single-arch profile knows it.
        named = [g for g in profile.match.gfx if g != "*"]
        gfx = named[0] if len(named) == 1 else None
    pre: list[str] = []
    if gfx is None and (gpu is None or gpu.vendor != "amd"):
        # A forced profile with no AMD GPU in sight (a `docker build`, a CI runner): the env must still be
        # the one the image will need on its target, so a single-arch profile speaks for its GPU.
        named = [g for g in profile.match.gfx if g != "*"]
        if len(named) == 1:
            gfx = named[0]
            pre.append(f"no AMD GPU visible: the env is derived for the profile's target {gfx}")
    forced = _explicit_source(profile, source) if source is not None else None
    choice = choose_amd_source(profile, gfx, forced)
    warns = list(choice.warnings)
    if choice.decision is None:
        if gpu is not None and gpu.vendor == "amd":
            warns.append("the GPU's gfx target is unknown: `mw-env doctor` checks the installed arch list")
        return choice.source, None, None, pre + choice.notes, warns
    if gfx in profile.match.exclude:
        warns.append(
            f"profile {profile.name!r} excludes {gfx}: it is reported to compute wrong results even with native "
            "kernels (docs/profiles.md); check the doctor's numeric probe before trusting a run"
        )
    d = choice.decision
    return choice.source, d.override, d.required_arch, pre + choice.notes, warns


def _cuda_source(
    profile: Profile, hardware: Hardware, source: str | None
) -> tuple[TorchSource, str | None, list[str], list[str]]:
    gpu = hardware.gpu
    required = None
    if gpu is not None and gpu.vendor == "nvidia":
        cc = parse_cc(gpu.compute_capability)
        required = sm_name(cc) if cc else None
    if source is not None:
        src = _explicit_source(profile, source)
        return src, required, [f"torch source {src.id!r} chosen with --source"], []
    if gpu is None or gpu.vendor != "nvidia":
        src = profile.default_source
        note = (
            f"no NVIDIA GPU visible, so the broadest source {src.id} ({', '.join(src.arch_list)}, driver >= "
            f"{src.min_driver}); pass --source for another (e.g. a Blackwell GPU needs cu128 or newer)"
        )
        return src, None, [note], []
    choice = _cuda_choice(profile, hardware)
    if choice.source is None:
        src = profile.default_source
        return (
            src,
            required,
            [],
            [f"{choice.reason}; installing {src.id} anyway because the profile was forced"],
        )
    return choice.source, required, [f"torch source {choice.reason}"], []


def _hip_visible(hardware: Hardware) -> dict[str, str]:
    """Hide AMD GPUs of another arch (an iGPU next to a dGPU): HIP enumerates both, and one wheel/override cannot
    serve two ISAs (doctor-anchors B1#11). Same-arch boxes (MI300X x4) keep every GPU for DDP."""
    gpu = hardware.gpu
    amd = [g for g in hardware.gpus if g.vendor == "amd"]
    if gpu is None or gpu.vendor != "amd" or len(amd) < 2 or len({g.gfx_target for g in amd}) < 2:
        return {}
    # HIP numbers devices in KFD topology order.
    order = sorted(amd, key=lambda g: (g.kfd_node if g.kfd_node is not None else 1 << 30, g.index))
    # detect() gives each reachable GPU its HIP index (runtime_index): GPUs not passed into this container
    # take no index, so the position in the KFD order is only the fallback.
    keep = [
        str(g.runtime_index if g.runtime_index is not None else i)
        for i, g in enumerate(order)
        if g.gfx_target == gpu.gfx_target
    ]
    return {"HIP_VISIBLE_DEVICES": ",".join(keep)}


def _trainer_for(base: TrainerDefaults, build: str, required_arch: str | None) -> TrainerDefaults:
    """Profile defaults fitted to the GPU: bf16 only where the hardware does it natively."""
    if base.precision != "bf16" or required_arch is None:
        return base
    if required_arch.startswith("sm_"):
        cc = parse_cc(required_arch)
        native = cc is not None and cc >= (8, 0)
        why = "bf16 needs compute capability >= 8.0 (Ampere)"
    else:
        native = required_arch.startswith(("gfx11", "gfx12")) or required_arch in _AMD_BF16
        why = f"{required_arch} has no native bf16 matrix units"
    if native:
        return base
    return replace(base, precision="fp32", notes=(*base.notes, f"fp32 instead of bf16: {why}"))
