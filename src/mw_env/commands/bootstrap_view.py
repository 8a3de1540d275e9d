"""`mw-env bootstrap`'s text views: the dry run's plan (the JSON view is Plan.to_dict), and the steps as they run."""

from __future__ import annotations

import time
from typing import Any

from mw_env.base.textsafe import redact, safe, safe_message


def print_plan(out: Any, the_plan: Any, sel: Any) -> None:
    """The dry run's text: the choices, the torch step's indexes, each step with its exact command."""
    import shlex

    out.print(f"[bold]profile[/] {the_plan.profile}: {sel.reason}")
    out.print(
        f"[bold]venv[/] {the_plan.venv}"
        + (f" (built at {the_plan.build_venv})" if the_plan.build_venv != the_plan.venv else "")
    )
    if the_plan.python:
        out.print(f"[bold]python[/] {the_plan.python.version} ({the_plan.python.path})")
    if the_plan.lock is not None:
        from rich.markup import escape as esc

        from mw_env.venv.lock.rebuild import describe

        lock = the_plan.lock
        out.print(
            f"[bold]lock[/] {esc(redact(lock.source))}: {describe(lock)}, made for {esc(lock.meta.hardware())}",
            soft_wrap=True,
        )
    elif the_plan.torch:
        out.print(
            f"[bold]torch[/] {the_plan.torch.requirement} from {the_plan.torch.origin} "
            f"{redact(the_plan.torch.location or '')}"
            + (f" (source {the_plan.torch_source})" if the_plan.torch_source else "")
        )
    from rich.markup import escape

    data = the_plan.to_dict()
    if data["device_packages"] or data["torch_extras"]:
        size = data["download_bytes"]
        shown = f"{size / 1e9:.2f} GB ({data['download_note']})" if size else (data["download_note"] or "")
        out.print(
            f"[bold]GPU kernels[/] {escape(', '.join(data['device_packages']) or 'every GPU (device-all)')}"
            + (f"; download {shown}" if shown else ""),
            soft_wrap=True,
        )
    if data["override"]:
        o = data["override"]
        value = f"HSA_OVERRIDE_GFX_VERSION={o['value']}" if o["set"] else "no HSA_OVERRIDE_GFX_VERSION"
        out.print(
            f"[bold]override[/] {value}: {escape(o['reason'] or '')} (decided by {o['decided_by']})",
            soft_wrap=True,
        )
    if data["disk"]:
        out.print(f"[bold]disk[/] needs {escape(data['disk']['text'])} free", soft_wrap=True)
    for ix in data["indexes"] if the_plan.lock is None else ():  # the torch step's, in uv's order
        out.print(
            f"[bold]index[/] {escape(ix['name'])} {escape(ix['url'])}: {ix['behaviour']}", soft_wrap=True
        )
    env_line = " ".join(f"{k}={v}" for k, v in the_plan.runtime_env.items()) or "(none)"
    out.print(f"[bold]env[/] {escape(env_line)}")
    for w in the_plan.warnings:
        out.print(f"[yellow]warning:[/] {w}")
    for n in the_plan.notes:
        out.print(f"note: {n}", soft_wrap=True, markup=False)
    if the_plan.adoptable is not None:
        cand = the_plan.adoptable
        out.print(
            f"[yellow]note:[/] {cand.python.path} already holds torch {cand.version} ({cand.build}): "
            "--adopt-torch reuses it instead of downloading"
        )
    if the_plan.problem:
        out.print(f"[red]problem:[/] {escape(safe_message(the_plan.problem.message))}", soft_wrap=True)
        if the_plan.problem.hint:
            out.print(f"[yellow]hint:[/] {escape(safe_message(the_plan.problem.hint))}", soft_wrap=True)
    for i, step in enumerate(the_plan.steps, 1):
        mark = "[green]done[/]" if step.done else "[yellow]todo[/]"
        out.print(f"{i:2}. {mark} [bold]{step.id}[/] {step.title}")
        if step.command:
            out.print(f"      $ {redact(shlex.join(step.command))}", soft_wrap=True, markup=False)


class StepView:
    """Each step with a live spinner and its elapsed time; uv's output live (-v) or on failure."""

    def __init__(self, console: Any, *, verbose: bool) -> None:
        self.console = console
        self.verbose = verbose
        self.status: Any = None
        self.started = 0.0

    def step_started(self, step: Any) -> None:
        self.started = time.monotonic()
        # A spinner only where it is drawn: rich draws a transient status on a terminal alone, and elsewhere
        # (a pipe, a CI log, --json's stderr) it would only run its refresh thread beside the steps.
        if self.console.is_terminal:
            self.status = self.console.status(f"{step.title} ...")
            self.status.start()

    def step_output(self, step: Any, line: str) -> None:
        if self.verbose:
            self.console.print(f"    {safe(redact(line))}", style="dim", markup=False, highlight=False)
        elif self.status is not None:
            elapsed = time.monotonic() - self.started
            self.status.update(f"{step.title} ({elapsed:.0f}s) {safe(redact(line.strip()), limit=80)}")

    def step_finished(self, step: Any, outcome: Any) -> None:
        self.stop()
        icons = {
            "done": "[green]✓[/]",
            "skipped": "[dim]·[/]",
            "failed": "[red]✗[/]",
            "interrupted": "[red]![/]",
            "warn": "[yellow]![/]",
        }
        timing = f" ({outcome.duration_s:.1f}s)" if outcome.status != "skipped" else " (already done)"
        # A failure's message follows as `error:`; repeating it here would only add noise.
        detail = f" [dim]{outcome.detail}[/]" if outcome.detail and outcome.status in ("done", "warn") else ""
        self.console.print(f"{icons.get(outcome.status, '?')} {step.title}{timing}{detail}")
        if outcome.status == "failed" and outcome.output_tail and not self.verbose:
            tail = safe(redact(outcome.output_tail), limit=None, newlines=True)
            self.console.print(tail, style="dim", markup=False, highlight=False)

    def stop(self) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None
