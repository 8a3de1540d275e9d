"""Truth from the wheel, after installing and before pinning: HSA_OVERRIDE_GFX_VERSION decided from the GPU
archs the installed torch carries (mw_env.venv.wheelarch), not from the profile's table.

The plan carries an `ArchPolicy` (the GPU's target, the table's claim and the override it implied); the
`wheel-archs` step reads the venv and `judge` decides again. When the wheel and the table disagree, the wheel
wins: the env file gets the wheel's decision, the record keeps both, and the doctor shows it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mw_env.profiles.amd import HSA_OVERRIDE, decide_override

if TYPE_CHECKING:
    from mw_env.profiles.model import Profile, Selection
    from mw_env.venv.wheelarch import WheelArchs


@dataclass(frozen=True)
class ArchPolicy:
    profile: Profile
    gfx: str  # the GPU's own target, e.g. "gfx1103"
    source_id: str
    table_archs: tuple[str, ...]
    table_override: str | None  # what the table implied (None: native kernels)
    reason: str = ""  # the selection's own sentence on the override

    def to_dict(self) -> dict[str, object]:
        return {
            "gfx": self.gfx,
            "value": self.table_override,
            "set": self.table_override is not None,
            "reason": self.reason,
        }


def policy_for(selection: Selection) -> ArchPolicy | None:
    """The policy for an AMD selection whose GPU target is known; None otherwise (NVIDIA, CPU, unknown gfx)."""
    if selection.torch.build != "rocm":
        return None
    gpu = selection.gpu
    gfx = gpu.gfx_target if gpu is not None and gpu.vendor == "amd" else None
    if gfx is None:
        named = [g for g in selection.profile.match.gfx if g != "*"]
        gfx = named[0] if len(named) == 1 else None
    if gfx is None:
        return None
    override = selection.env.get(HSA_OVERRIDE)
    words = [s.strip() for s in selection.reason.split(";")]
    reason = next((w for w in words if HSA_OVERRIDE in w), "")
    return ArchPolicy(selection.profile, gfx, selection.torch.id, selection.torch.arch_list, override, reason)


@dataclass(frozen=True)
class WheelVerdict:
    archs: tuple[str, ...]
    how: str
    override: str | None
    decision: str  # one sentence for the record and the plan
    warnings: tuple[str, ...] = ()
    differs: bool = False  # the wheel contradicted the table
    packages: tuple[str, ...] = ()


def judge(policy: ArchPolicy, wheel: WheelArchs) -> WheelVerdict:
    """The override for `policy.gfx` on this wheel; a wheel whose archs cannot be read leaves the table's."""
    gfx = policy.gfx
    if not wheel.known:
        decision = (
            f"{HSA_OVERRIDE}={policy.table_override}" if policy.table_override else f"no {HSA_OVERRIDE}"
        ) + f": the installed wheel's archs could not be read, so the table of {policy.source_id} decides"
        warn = (
            f"the installed torch shows no GPU arch list (no device packages, no arch flags in its HIP library): "
            f"going by the table of {policy.source_id}; `mw-env doctor` checks torch.cuda.get_arch_list()"
        )
        return WheelVerdict((), "unknown", policy.table_override, decision, (warn,))
    d = decide_override(
        policy.profile, gfx, wheel.archs, source_id=policy.source_id, what="the installed wheel"
    )
    decision = (
        f"{HSA_OVERRIDE}={d.override}: the installed wheel lacks {gfx}"
        if d.override
        else f"no {HSA_OVERRIDE}: the installed wheel ships {gfx}"
        if gfx in wheel.archs
        else f"no {HSA_OVERRIDE}: the installed wheel lacks {gfx} and no safe override is known"
    )
    table_has = gfx in policy.table_archs
    differs = table_has != (gfx in wheel.archs)
    warns = []
    if differs:
        warns.append(
            f"the installed wheel contradicts the table: {policy.source_id} is listed "
            f"{'with' if table_has else 'without'} {gfx}, but the wheel's {wheel.how} say "
            f"{', '.join(wheel.archs)}; the wheel wins: {decision}"
        )
        warns += d.warnings
    return WheelVerdict(wheel.archs, wheel.how, d.override, decision, tuple(warns), differs, wheel.packages)


def env_with(env: Mapping[str, str], override: str | None) -> dict[str, str]:
    out = {k: v for k, v in env.items() if k != HSA_OVERRIDE}
    if override is not None:
        out[HSA_OVERRIDE] = override
    return out


@dataclass(frozen=True)
class GpuKernels:
    """What a bootstrap installs for the GPU and how it judges the result (plan()'s one parameter for it)."""

    extras: tuple[str, ...] = ()  # torch's extras, ("device-gfx1103",) on AMD's multi-arch index
    packages: tuple[str, ...] = ()  # the per-GPU kernel packages they install
    policy: ArchPolicy | None = None  # the GPU target and the table's override, judged against the wheel


NO_KERNELS = GpuKernels()
