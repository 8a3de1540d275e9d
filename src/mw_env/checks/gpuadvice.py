"""The catalogue's GPU advice, derived from the profiles when it is printed, never typed beside them.

Which torch source carries a GPU's kernels and whether HSA_OVERRIDE_GFX_VERSION is needed are facts of the
profiles' source tables (and, for a venv, of the wheel bootstrap installed, `VenvRecord.wheel_archs`). The
catalogue's entries name them through placeholders (`{gpu_advice}`, `{override_values}`, `{math_sdpa}`) that
this module fills: for this machine's GPU and venv when they are known (`doctor`, `doctor --explain` on the
machine), else for every GPU the profiles know (docs/troubleshooting.md, a log read elsewhere). The decision
itself is the one bootstrap takes (`profiles.amd.decide_override`, `rank_native`), so the advice and the
install cannot disagree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mw_env.profiles.amd import HSA_OVERRIDE, decide_override, rank_native

if TYPE_CHECKING:
    from mw_env.profiles.model import Profile, Selection, TorchSource
    from mw_env.venv.record import VenvRecord

# The placeholders a catalogue message may carry; tests/checks hold every message to this list.
KEYS: tuple[str, ...] = ("gpu_advice", "override_values", "math_sdpa", "cuda_archs", "cuda_drivers")


@dataclass(frozen=True)
class Advice:
    """The filled text of each placeholder, and whom it is for ("" = every GPU the profiles know)."""

    values: Mapping[str, str]
    machine: str = ""  # "AMD Radeon 780M (gfx1103), venv /v (torch source rocm6.4)" when it is this machine's


def _label(profile: Profile) -> str:
    """'AMD Radeon 780M/760M/740M iGPU' from the description's head."""
    return profile.description.split(" (")[0].strip() or profile.name


def _ids(sources: Sequence[TorchSource]) -> str:
    ids = [s.id for s in sources]
    return ids[0] if len(ids) == 1 else ", ".join(ids[:-1]) + " or " + ids[-1]


def _single_gfx(profile: Profile) -> str | None:
    named = [g for g in profile.match.gfx if g != "*"]
    return named[0] if len(named) == 1 else None


def _amd(profiles: Mapping[str, Profile]) -> list[Profile]:
    return [p for p in profiles.values() if p.default_source.build == "rocm"]


def _lacking(profile: Profile, gfx: str) -> list[TorchSource]:
    """Stable sources of the profile without native `gfx` kernels: the ones an override would be for."""
    return [s for s in profile.sources if s.channel == "stable" and gfx not in s.arch_list]


def _general_line(profile: Profile, gfx: str, override: str | None) -> str:
    native = rank_native(profile.sources, gfx)
    who = f"{gfx} ({_label(profile)})" if _single_gfx(profile) == gfx else gfx
    if native:
        head = f"{who}: native kernels from {_ids(native)}, so no {HSA_OVERRIDE}"
    else:
        head = f"{who}: no source of profile {profile.name} ships native kernels"
    lacking = _lacking(profile, gfx)
    if override is None:
        return head + (
            f" (profile {profile.name} names none for it)" if native else ", and no safe override is known"
        )
    decision = decide_override(profile, gfx, (), source_id=lacking[0].id if lacking else "?")
    risk = "; ".join(decision.warnings[:1])
    under = f"under {_ids(lacking)}" if lacking else "under a source without them"
    return f"{head}; {override} only {under} ({risk})" if native else f"{head}: {override} ({risk})"


def general(profiles: Mapping[str, Profile]) -> Advice:
    """The advice for every AMD GPU the profiles name, for a log read away from its machine."""
    lines: list[str] = []
    sibling: dict[str, list[str]] = {}
    for profile in _amd(profiles):
        gfx = _single_gfx(profile)
        if gfx is not None:
            lines.append(_general_line(profile, gfx, profile.hsa_override_when_missing))
            if profile.hsa_override_when_missing:
                sibling.setdefault(profile.hsa_override_when_missing, []).append(gfx)
        for known in profile.arch_overrides:
            if not rank_native(profile.sources, known.gfx):
                lines.append(_general_line(profile, known.gfx, known.hsa_override))
            sibling.setdefault(known.hsa_override, []).append(known.gfx)
    advice = (
        "For the GPUs the profiles name - "
        + "; ".join(lines)
        + ". Other AMD GPUs: `mw-env profiles rocm` lists which source carries which gfx target. Run "
        "`mw-env doctor --explain LOG` on the machine (with `--venv V` for the venv that failed) for its GPU "
        "and venv alone."
    )
    values = ", ".join(f"{', '.join(gfxs)}: {value}" for value, gfxs in sibling.items())
    return Advice(
        values={
            "gpu_advice": advice,
            "override_values": values or "none known",
            "math_sdpa": _math_sdpa(profiles),
            **_cuda(profiles),
        }
    )


def _cuda(profiles: Mapping[str, Profile]) -> dict[str, str]:
    """Which compute capabilities each CUDA source carries and the driver it needs, from the cuda profiles."""
    from mw_env.profiles.archs import parse_cc

    archs, drivers = [], []
    for profile in profiles.values():
        if profile.default_source.build != "cuda":
            continue
        for src in profile.sources:
            sms = sorted((cc, a) for a in src.arch_list if (cc := parse_cc(a)) is not None)
            if sms:
                span = sms[0][1] if len(sms) == 1 else f"{sms[0][1]}-{sms[-1][1]}"
                archs.append(f"{src.id} {span}{' (+PTX)' if src.ptx else ''}")
            if src.min_driver:
                drivers.append(f"{src.id} >= {src.min_driver}")
    return {
        "cuda_archs": ", ".join(archs) or "no CUDA profile loaded",
        "cuda_drivers": ", ".join(drivers) or "no CUDA profile loaded",
    }


def _math_sdpa(profiles: Mapping[str, Profile]) -> str:
    names = [p.name for p in profiles.values() if p.trainer.sdpa_backend == "math"]
    return (
        f"the {', '.join(names)} profile{'s' if len(names) > 1 else ''} use{'' if len(names) > 1 else 's'} it"
        if names
        else "set `--set train.sdpa_backend=math`"
    )


def for_machine(
    selection: Selection, base: Advice, record: VenvRecord | None = None, venv: str = ""
) -> Advice:
    """The advice for this machine's GPU and its venv (the record's wheel archs win over the table); `base` is
    `general()` of the loaded profiles, kept for a machine without an AMD GPU (the log came from elsewhere)."""
    profile = selection.profile
    gpu = selection.gpu
    gfx = gpu.gfx_target if gpu is not None and gpu.vendor == "amd" else None
    if gfx is None or profile.default_source.build != "rocm":
        return base  # no AMD GPU here: the log came from elsewhere
    src = selection.torch
    rec = record if record is not None and record.profile == profile.name else None
    if rec is not None and rec.wheel_archs and rec.torch_source in (None, src.id):
        archs: Sequence[str] = rec.wheel_archs
        how = "its installed wheel's arch list"
    else:
        archs, how = src.arch_list, f"the {src.id} table"
    if rec is not None:
        where = f"the venv {rec.venv or venv}".rstrip()
    else:
        where = "the torch bootstrap installs here"  # no venv record: the profile's choice for this GPU
    name = gpu.name if gpu is not None and gpu.name else _label(profile)
    who = f"This machine's {name} ({gfx}) with {where} (torch source {src.id})"
    native = rank_native(profile.sources, gfx)
    if gfx in archs:
        other = (
            f" If the log came from another venv or image, build one with `mw-env bootstrap` (native {gfx} "
            f"kernels from {native[0].id})."
            if native
            else ""
        )
        text = (
            f"{who}: native {gfx} kernels ({how} lists {gfx}), so set no {HSA_OVERRIDE} "
            f"(`unset {HSA_OVERRIDE}` where the failing shell had one; bootstrap sets none for this venv).{other}"
        )
    else:
        d = decide_override(
            profile, gfx, archs, source_id=src.id, what=f"torch from {src.id}", alternatives=native
        )
        if d.override:
            text = (
                f"{who}: no {gfx} kernels ({how}), so {HSA_OVERRIDE}={d.override} "
                f"(`export {HSA_OVERRIDE}={d.override}`; bootstrap persists it in the venv's mw-env.env, "
                f'`eval "$(mw-env env)"` applies it). Warning: {"; ".join(d.warnings)}.'
            )
        else:
            fix = (
                f"`mw-env bootstrap --source {native[0].id} --recreate` installs native {gfx} kernels"
                if native
                else f"no source of profile {profile.name} ships them"
            )
            text = f"{who}: no {gfx} kernels ({how}) and no safe override is known: {fix}."
    values = dict(base.values)
    values["gpu_advice"] = text
    return Advice(values=values, machine=f"{name} ({gfx}), {where} (torch source {src.id})")


def fill(text: str, advice: Advice) -> str:
    """`text` with each known `{placeholder}` replaced; other braces (a `{ map }` in a quoted AVC line) kept."""
    import re

    return re.sub(r"\{(" + "|".join(KEYS) + r")\}", lambda m: advice.values.get(m.group(1), m.group(0)), text)
