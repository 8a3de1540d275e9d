"""AMD: which torch source serves a gfx target, and whether HSA_OVERRIDE_GFX_VERSION is needed.

The policy (docs/profiles.md, "How a source is chosen"): the newest torch whose wheel carries native kernels for
the GPU, from the smallest install that gives them (one GPU's device package beats every GPU's); a nightly or
retired source only when asked for. The override is the last resort: only when no source has native kernels,
or the user forces one without them, and then with the hang warning. The same `decide_override` runs on the
table's arch list before installing and on the installed wheel's own arch list after (the wheel wins).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from mw_env.base.versions import version_tuple
from mw_env.profiles.model import Profile, TorchSource

HSA_OVERRIDE = "HSA_OVERRIDE_GFX_VERSION"


def override_to_gfx(value: str) -> str | None:
    """HSA_OVERRIDE_GFX_VERSION "11.0.0" -> "gfx1100", "9.0.10" -> "gfx90a" (the ISA the GPU will run); None
    when the value is malformed."""
    m = re.fullmatch(r"\s*(\d+)\.(\d+)\.(\d+)\s*", value)
    if m is None or int(m[2]) > 15 or int(m[3]) > 15:
        return None
    return f"gfx{int(m[1])}{int(m[2]):x}{int(m[3]):x}"


def _size_key(src: TorchSource) -> tuple[int, float]:
    # One GPU's device package first; then the stated download (unknown sizes last).
    return (0 if src.per_gpu else 1, src.download_gb if src.download_gb is not None else float("inf"))


def usable(src: TorchSource) -> bool:
    """Offered without being asked for: stable and not retired."""
    return src.channel == "stable" and not src.retired


def rank_native(sources: Sequence[TorchSource], gfx: str) -> list[TorchSource]:
    """The usable sources with native `gfx` kernels, best first: newest torch, then smallest install, then the
    order in the file."""
    # Only an arch list a public source shows counts: an inferred one never decides the default.
    native = [s for s in sources if usable(s) and gfx in s.confirmed_archs]
    order = {id(s): i for i, s in enumerate(sources)}

    def key(s: TorchSource) -> tuple[tuple[int, ...], tuple[int, float], int]:
        newest = version_tuple(s.newest_torch) or version_tuple(s.version.lstrip("=<>~!"))
        return (tuple(-p for p in newest), _size_key(s), order[id(s)])

    return sorted(native, key=key)


def why_won(best: TorchSource, ranked: Sequence[TorchSource], gfx: str) -> str:
    """One sentence on why `best` beat the other native sources."""
    torch = best.newest_torch or best.version
    size = (
        "one GPU's device package" + (f", ~{best.download_gb:g} GB" if best.download_gb else "")
        if best.per_gpu
        else "every GPU's kernels"
        if best.devices is not None
        else "the wheel's bundled kernels"
    )
    parts = [f"{best.id} won: the newest torch ({torch}) with native {gfx} kernels, from {size}"]
    for other in [s for s in ranked if s is not best][:2]:  # the runners-up; `profiles NAME` lists the rest
        if (other.newest_torch or other.version) == torch:
            what = (
                "every GPU's kernels"
                if other.devices is not None and not other.per_gpu
                else "a larger install"
            )
            parts.append(f"{other.id} has the same torch but installs {what}")
        else:
            parts.append(f"{other.id} has older torch ({other.newest_torch or other.version})")
    return "; ".join(parts)


@dataclass(frozen=True)
class OverrideDecision:
    override: str | None  # the HSA_OVERRIDE_GFX_VERSION value, None = native kernels (or nothing helps)
    required_arch: str | None  # the arch the wheel must carry: the override's target, else the GPU's own
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


def decide_override(
    profile: Profile,
    gfx: str,
    archs: Sequence[str],
    *,
    source_id: str,
    what: str = "",
    alternatives: Sequence[TorchSource] = (),
) -> OverrideDecision:
    """Whether `gfx` needs HSA_OVERRIDE_GFX_VERSION with a build carrying `archs` (the table's or the wheel's).

    `what` names where `archs` came from ("the installed wheel"); `alternatives` are sources with native kernels
    to point at when the override is used.
    """
    where = what or f"torch from {source_id}"
    if gfx in archs:
        return OverrideDecision(None, gfx, (f"{where} ships native {gfx} kernels, so no {HSA_OVERRIDE}",))
    override = profile.hsa_override_when_missing
    known = next((o for o in profile.arch_overrides if o.gfx == gfx), None)
    if override is None and known is not None:
        override = known.hsa_override
    if override is None:
        return OverrideDecision(
            None,
            gfx,
            warnings=(
                f"{where} has no {gfx} kernels and no safe override is known: torch will fail with "
                "'invalid device function'",
            ),
        )
    target = override_to_gfx(override) or override
    notes = (f"{where} lacks {gfx} kernels, so {HSA_OVERRIDE}={override} makes the GPU run {target} code",)
    alt = f"; `--source {alternatives[0].id}` installs native {gfx} kernels instead" if alternatives else ""
    warns = [
        f"{HSA_OVERRIDE}={override} runs {target} kernels on {gfx}: unsupported by AMD and reported to hang or "
        f"page-fault the machine under load (TheRock#1184); checkpoint often{alt}"
    ]
    if target not in archs:
        warns.append(f"{where} does not list {target} either: the override cannot help")
    return OverrideDecision(override, target, notes, tuple(warns))


@dataclass(frozen=True)
class AmdChoice:
    source: TorchSource
    decision: OverrideDecision | None  # None: the gfx target is unknown
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def choose_amd_source(profile: Profile, gfx: str | None, forced: TorchSource | None) -> AmdChoice:
    """The torch source for an AMD GPU of target `gfx` (None: unknown), `forced` by --source or chosen."""
    notes: list[str] = []
    warns: list[str] = []
    ranked = rank_native(profile.sources, gfx) if gfx else []
    if forced is not None:
        src = forced
        notes.append(f"torch source {src.id!r} chosen with --source")
        if src.retired:
            repl = f"; its replacement is `--source {src.replaced_by}`" if src.replaced_by else ""
            warns.append(f"source {src.id} is retired: {src.retired}{repl}")
        if src.channel == "nightly":
            notes.append(f"{src.id} is a nightly/preview index: expect breakage between builds")
        if "arch_list" in src.inferred:
            warns.append(
                f"{src.id}'s arch list is inferred, not shown by a source (`mw-env profiles` says why): the "
                "environment below follows it until bootstrap reads the installed wheel's own list, which decides"
            )
    elif gfx is None or not ranked:
        src = profile.default_source
        if gfx is not None:
            notes.append(f"no source of profile {profile.name!r} ships native {gfx} kernels")
    else:
        src = ranked[0]
        notes.append(why_won(src, ranked, gfx))
    if gfx is None:
        return AmdChoice(src, None, notes, warns)
    decision = decide_override(profile, gfx, src.arch_list, source_id=src.id, alternatives=ranked)
    return AmdChoice(src, decision, notes + list(decision.notes), warns + list(decision.warnings))
