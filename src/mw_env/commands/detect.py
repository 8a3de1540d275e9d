"""`mw-env detect`: what this machine is, which profile fits it, and why."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from mw_env.base.textsafe import redact
from mw_env.commands.common import echo_json, json_option, profile_options, root_option, source_option

if TYPE_CHECKING:
    from mw_env.hardware.facts import Gpu
    from mw_env.profiles.model import Resolved

_GIB = 1024**3


def detect_dict(resolved: Resolved) -> dict[str, object]:
    """The `detect --json` document (design.md, "Contracts that others rely on")."""
    hw, sel = resolved.hardware, resolved.selection
    gpus = [
        {
            "index": g.index,
            "vendor": g.vendor,
            "gfx_target": g.gfx_target,
            "name": g.name,
            "pci_id": g.pci_id,
            "compute_capability": g.compute_capability,
            "memory_bytes": g.memory_bytes,
            "device_nodes_ok": g.device_nodes_ok,
            "selected": g.index == hw.selected_gpu,
        }
        for g in hw.gpus
    ]
    sel_dict = sel.to_dict()
    return {
        "profile": sel.profile.name,
        "reason": sel.reason,
        "hardware": hw.to_dict(),
        "gpus": gpus,
        "selected_gpu": hw.selected_gpu,
        "container": {"kind": hw.container.kind, "name": hw.container.name},
        "env": dict(sel.env),
        "torch": sel_dict["torch"],
        "required_arch": sel.required_arch,
        "trainer": sel_dict["trainer"],
        "expected_tflops": sel.expected_tflops,
        "warnings": list(sel.warnings),
        "notes": list(hw.notes),
    }


@click.command("detect")
@root_option
@profile_options
@source_option
@json_option
def detect(
    root: str | None,
    profile: str | None,
    profiles_dirs: tuple[str, ...],
    gpu: int | None,
    source: str | None,
    as_json: bool,
) -> None:
    """Show what this machine is and which profile fits it, with the reason.

    Exit codes: 0 ok, 2 bad input (unknown profile or --source, invalid profile file, --gpu out of range,
    --root not a folder).
    """
    from mw_env.profiles import resolve

    resolved = resolve(root=root, profile=profile, profiles_dirs=profiles_dirs, gpu=gpu, source=source)
    if as_json:
        echo_json(detect_dict(resolved))
        return
    _render(resolved)


def _gib(n: int | None) -> str:
    return f"{n / _GIB:.1f} GiB" if n else "?"


def _render(resolved: Resolved) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    hw, sel = resolved.hardware, resolved.selection
    console = Console(highlight=False, soft_wrap=True)

    facts = Table(show_header=False, box=None, pad_edge=False)
    facts.add_column(style="bold")
    facts.add_column()
    facts.add_row("OS", f"{hw.os.pretty} (kernel {hw.os.kernel})")
    cores = f"{hw.cpu.cores} logical CPUs" + (f", quota {hw.cpu.quota_cores:g}" if hw.cpu.quota_cores else "")
    facts.add_row("CPU", f"{hw.cpu.brand} ({hw.cpu.arch}, {cores})")
    mem = _gib(hw.memory_bytes) + (
        f" (container limit {_gib(hw.memory_limit_bytes)})" if hw.memory_limit_bytes else ""
    )
    facts.add_row("Memory", mem)
    container: str = hw.container.kind if hw.container.kind != "none" else "none detected"
    if hw.container.name:
        container += f" {hw.container.name!r}"
    facts.add_row("Container", container)
    if hw.pythons:
        facts.add_row("Python", ", ".join(f"{p.version} ({p.path})" for p in hw.pythons))
    facts.add_row("uv", f"{hw.uv.version or '?'} ({hw.uv.path})" if hw.uv else "not found")
    if hw.nvidia_driver:
        facts.add_row("NVIDIA driver", hw.nvidia_driver)
    console.print(facts)

    if hw.gpus:
        table = Table(title="GPUs", title_justify="left")
        for col in ("#", "vendor", "name", "arch", "memory", "device nodes"):
            table.add_column(col)
        for g in hw.gpus:
            arch = g.gfx_target or (f"CC {g.compute_capability}" if g.compute_capability else "?")
            mem = _gib(g.memory_bytes) + (f" + GTT {_gib(g.gtt_bytes)}" if g.gtt_bytes else "")
            nodes = "ok" if g.device_nodes_ok else _nodes_problem(g)
            mark = "*" if g.index == hw.selected_gpu else " "
            table.add_row(f"{mark}{g.index}", g.vendor, g.name, arch, mem, nodes)
        console.print(table)
    else:
        console.print("[bold]GPUs[/bold]  none")

    console.print(f"\n[bold]Profile[/bold]  {sel.profile.name}  [dim]{sel.profile.description}[/dim]")
    console.print(f"[bold]Why[/bold]      {sel.reason}")
    t = sel.torch
    console.print(
        f"[bold]torch[/bold]    {t.requirement} ({t.local_tag}) from {redact(t.index_url or 'the default index')}"
    )
    others = [s.id for s in sel.profile.sources if s.id != t.id]
    pick = f"  (others: {', '.join(others)}; choose with --source)" if others else ""
    console.print(f"[bold]source[/bold]   {t.id}{pick}")
    if sel.env:
        for k, v in sel.env.items():
            console.print(f"[bold]env[/bold]      {k}={v}")
    else:
        console.print("[bold]env[/bold]      (none)")
    console.print(
        f"[bold]trainer[/bold]  device {sel.trainer.device}, {sel.trainer.precision}, SDPA {sel.trainer.sdpa_backend}"
    )
    for w in sel.warnings:
        console.print(f"[yellow]warning:[/yellow] {w}")
    for g in hw.gpus:
        for n in g.notes:
            console.print(f"[dim]note: GPU {g.index}: {escape(n)}[/dim]")
    for n in hw.notes:
        console.print(f"[dim]note: {escape(n)}[/dim]")


def _nodes_problem(g: Gpu) -> str:
    if not g.device_nodes:
        return "[red]none[/red]"
    bad = [n.path + (" missing" if not n.exists else " no access") for n in g.device_nodes if not n.ok]
    return "[red]" + ", ".join(bad) + "[/red]"
