"""`mw-env profiles [NAME]`: the hardware profiles (shipped and user), or one in full."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

from mw_env.base.textsafe import redact
from mw_env.commands.common import echo_json, json_option, profiles_dir_option

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from mw_env.profiles.model import Profile


def _matches(p: Profile) -> str:
    m = p.match
    if m.vendor is None:
        return "no usable GPU"
    what = ", ".join(g if g != "*" else f"any {m.vendor.upper()} GPU" for g in m.gfx)
    if m.pci_ids:
        what += f" (PCI {', '.join(m.pci_ids)})"
    return what


@click.command("profiles")
@click.argument("name", required=False)
@profiles_dir_option
@click.option(
    "--check",
    is_flag=True,
    help="Compare every torch source with what its index serves now (versions, local tags, device packages, "
    "Python tags) and list the stale rows.",
)
@click.option(
    "--snapshots",
    type=click.Path(file_okay=False, exists=True),
    default=None,
    help="With --check: read recorded index snapshots (DIR/<source id>/, laid out like the index) instead.",
)
@click.option(
    "--timeout", type=click.FloatRange(0.1, 120), default=8.0, show_default=True, help="Per index request."
)
@json_option
def profiles(
    name: str | None,
    profiles_dirs: tuple[str, ...],
    check: bool,
    snapshots: str | None,
    timeout: float,
    as_json: bool,
) -> int:
    """List hardware profiles, or show profile NAME in full; `--check` compares the tables with the indexes.

    Exit codes: 0 ok (with --check: no stale row; an index that does not answer is "not checked"), 1 a stale
    row was found, 2 unknown profile or invalid profile file.
    """
    from pathlib import Path

    from mw_env.profiles import get_profile, load_profiles

    loaded = load_profiles(extra_dirs=[Path(d) for d in profiles_dirs], env=os.environ)
    if check or snapshots:
        if name is not None:
            get_profile(loaded, name)  # an unknown name is bad input, named
        return _check(loaded, name, Path(snapshots) if snapshots else None, timeout, as_json)
    if name is not None:
        profile = get_profile(loaded, name)
        if as_json:
            echo_json(profile.to_dict())
        else:
            _render_one(profile)
        return 0
    ordered = sorted(loaded.values(), key=lambda p: (-p.match.priority, p.name))
    if as_json:
        echo_json({"profiles": [_summary(p) for p in ordered]})
        return 0
    _render_list(ordered)
    return 0


def _check(
    loaded: Mapping[str, Profile], name: str | None, snapshots: Path | None, timeout: float, as_json: bool
) -> int:
    from mw_env.sources.freshness import check_profiles

    results = check_profiles(loaded, snapshots=snapshots, timeout=timeout, names=[name] if name else [])
    stale = [r for r in results if r.status == "stale"]
    if as_json:
        echo_json({"ok": not stale, "sources": [r.to_dict() for r in results]})
        return 1 if stale else 0
    from rich.console import Console
    from rich.markup import escape

    console = Console(highlight=False, soft_wrap=True)
    marks = {"fresh": "[green]fresh[/]", "stale": "[red]stale[/]", "not checked": "[dim]not checked[/]"}
    for r in results:
        newest = f" (newest listed: {r.versions[0]})" if r.versions else ""
        named = ", ".join(r.profiles or (r.profile,))
        console.print(f"{marks[r.status]} {r.source} ({named}) {escape(redact(r.index))}{newest}")
        for f in r.findings:
            console.print(f"    {escape(redact(f))}")
        for said in r.inferred:
            console.print(f"    [yellow]inferred[/] {escape(redact(said))}")
    unchecked = sum(r.status == "not checked" for r in results)
    console.print(
        f"{len(stale)} stale, {sum(r.status == 'fresh' for r in results)} fresh, {unchecked} not checked"
        + (" (an index that does not answer leaves its row as it is)" if unchecked else "")
    )
    return 1 if stale else 0


def _summary(p: Profile) -> dict[str, object]:
    src = p.default_source
    return {
        "name": p.name,
        "description": p.description,
        "matches": _matches(p),
        "aliases": list(p.aliases),
        "default_source": src.id,
        "sources": [s.id for s in p.sources],
        "torch": {
            "index_url": redact(src.index_url) if src.index_url else None,
            "build": src.build,
            "version": src.version,
            "local_tag": src.local_tag,
        },
        "shipped": p.shipped,
        "path": str(p.path) if p.path else None,
    }


def _render_list(items: list[Profile]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Profiles (first match wins, top to bottom)", title_justify="left")
    for col in ("name", "matches", "torch (default source)", "sources", "from"):
        table.add_column(col)
    for p in items:
        src = p.default_source
        table.add_row(
            p.name,
            _matches(p),
            f"{src.requirement} {src.local_tag}",
            ", ".join(s.id for s in p.sources),
            "shipped" if p.shipped else "user",
        )
    console = Console(highlight=False, soft_wrap=True)
    console.print(table)
    for p in items:
        if not p.shipped:
            console.print(f"user profile {p.name}: {p.path}")


def _render_one(p: Profile) -> None:
    from rich.console import Console
    from rich.markup import escape

    console = Console(highlight=False, soft_wrap=True)
    console.print(f"[bold]{p.name}[/bold]  {p.description}")
    console.print(f"matches: {_matches(p)}" + (f"   aliases: {', '.join(p.aliases)}" if p.aliases else ""))
    console.print(f"file: {p.path}" + ("" if p.shipped else "  (user profile)"))

    console.print("\n[bold]torch sources[/bold] (* = default)")
    for s in p.sources:
        mark = "*" if s is p.default_source else " "
        console.print(
            f"{mark} [bold]{s.id}[/bold]  {s.requirement} {s.local_tag} from {redact(s.index_url or 'the default index')}"
        )
        runtime = f"{s.build} {s.runtime_version}" if s.runtime_version else s.build
        if s.min_driver:
            runtime += f", NVIDIA driver >= {s.min_driver}"
        console.print(f"    {runtime}; archs: {' '.join(s.arch_list) or '-'}")
        if s.devices is not None:
            one = (
                f"torch[{s.devices.extra}] -> {s.devices.kernels}" if s.devices.extra else "no per-GPU choice"
            )
            console.print(f"    GPU kernels: {escape(one)}; every GPU: {s.devices.all_extra}")
        if s.channel != "stable":
            console.print(f"    {s.channel}: installed only with --source {s.id}")
        if s.retired:
            repl = f"; replaced by {s.replaced_by}" if s.replaced_by else ""
            console.print(f"    retired: {escape(s.retired.rstrip('.'))}{repl}")
        if s.note:
            console.print(f"    {escape(s.note)}")  # notes quote requirements: rocm[libraries,device-all]
        for fact, why in s.inferred.items():
            console.print(f"    [yellow]inferred[/] {fact}: {escape(why)} (never decides a default)")
        for fact, urls in s.evidence.items():
            console.print(f"    evidence for {fact}: {escape(', '.join(urls))}")
    console.print()
    if p.hsa_override_when_missing:
        console.print(
            f"HSA_OVERRIDE_GFX_VERSION={p.hsa_override_when_missing} only when the chosen source lacks the GPU's arch"
        )
    for o in p.arch_overrides:
        console.print(f"{o.gfx}: HSA_OVERRIDE_GFX_VERSION={o.hsa_override}  {o.note}")
    console.print("env: " + (" ".join(f"{k}={v}" for k, v in p.env.items()) or "(none)"))
    d = p.doctor
    console.print(
        "doctor: nodes "
        + (" ".join(d.device_nodes) or "-")
        + (f", min HIP {d.min_hip}" if d.min_hip else "")
        + (f", min CUDA {d.min_cuda}" if d.min_cuda else "")
        + (f", arch {d.arch}" if d.arch else "")
    )
    if d.expected_tflops:
        console.print("expected TFLOP/s: " + ", ".join(f"{k} {v:g}" for k, v in d.expected_tflops.items()))
    for gpu, row in d.expected_tflops_by_gpu.items():
        console.print(f"expected TFLOP/s on {gpu}: " + ", ".join(f"{k} {v:g}" for k, v in row.items()))
    t = p.trainer
    console.print(
        f"trainer: device {t.device}, {t.precision}, SDPA {t.sdpa_backend}, compile {str(t.compile).lower()}"
    )
    for n in (*p.notes, *d.notes, *t.notes):
        console.print(f"note: {n}")
