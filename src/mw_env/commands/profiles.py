"""`mw-env profiles [NAME]`: the hardware profiles (shipped and user), or one in full."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import click

from mw_env.commands.common import echo_json, json_option
from mw_env.textsafe import redact

if TYPE_CHECKING:
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
@click.option(
    "--profiles-dir",
    "profiles_dirs",
    multiple=True,
    type=click.Path(file_okay=False),
    help="Extra folder of profile YAML files (repeatable; env MW_ENV_PROFILES, ':'-separated).",
)
@json_option
def profiles(name: str | None, profiles_dirs: tuple[str, ...], as_json: bool) -> None:
    """List hardware profiles, or show profile NAME in full.

    Exit codes: 0 ok, 2 unknown profile or invalid profile file.
    """
    from pathlib import Path

    from mw_env.profiles import get_profile, load_profiles

    loaded = load_profiles(extra_dirs=[Path(d) for d in profiles_dirs], env=os.environ)
    if name is not None:
        profile = get_profile(loaded, name)
        if as_json:
            echo_json(profile.to_dict())
        else:
            _render_one(profile)
        return
    ordered = sorted(loaded.values(), key=lambda p: (-p.match.priority, p.name))
    if as_json:
        echo_json({"profiles": [_summary(p) for p in ordered]})
        return
    _render_list(ordered)


def _summary(p: Profile) -> dict[str, Any]:
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
        if s.note:
            console.print(f"    {s.note}")
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
