"""`mw-env bootstrap` (the ordered installer) and `mw-env env` (the venv's runtime environment)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from mw_env.base.errors import EXIT_FAILED, EXIT_INTERRUPTED
from mw_env.base.textsafe import safe_message
from mw_env.commands.common import (
    echo_json,
    json_option,
    profile_options,
    root_option,
    source_option,
    venv_option,
)

if TYPE_CHECKING:
    from mw_env.provision.model import BootstrapOptions, Plan  # imported where used: `--help` stays light


@click.command("bootstrap")
@root_option
@profile_options
@venv_option("The venv to build")
@click.option(
    "--python",
    "python",
    default=None,
    help="Python for the venv (default 3.12; falls back, with a "
    "warning, to an available one the project supports).",
)
@click.option(
    "--project",
    type=click.Path(path_type=Path),  # a file here is refused by the planner with error:/hint:
    default=None,
    help="Project whose extras to install (default: mw-env itself).",
)
@click.option("--extras", default="train", show_default=True, help="Comma-separated extras of the project.")
@source_option
@click.option("--torch-index", default=None, help="Index URL for torch (replaces the profile's).")
@click.option(
    "--find-links",
    "find_links",
    multiple=True,
    help="Wheelhouse folder/URL (repeatable; also PIP_FIND_LINKS, UV_FIND_LINKS, pip.conf find-links).",
)
@click.option("--offline", is_flag=True, help="Never contact an index: the wheelhouse and uv's cache only.")
@click.option("--recreate", is_flag=True, help="Build a new venv beside the old one; swap when complete.")
@click.option(
    "--adopt-torch/--no-adopt-torch",
    "adopt",
    default=None,
    help="Reuse a torch of the profile's build that the base image ships (asked when not given).",
)
@click.option(
    "--lock",
    "lock",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Rebuild exactly the venv this lock names (every wheel, hash checked); a lock for other hardware "
    "is refused unless --force.",
)
@click.option("--force", is_flag=True, help="With --lock: install a lock made for other hardware anyway.")
@click.option(
    "--all-devices",
    is_flag=True,
    help="Install every GPU's kernels (device-all) instead of only the selected GPU's (AMD multi-arch sources).",
)
@click.option("--no-doctor", is_flag=True, help="Skip the final doctor run.")
@click.option("--dry-run", is_flag=True, help="Print the plan (the exact commands) and change nothing.")
@click.option("-y", "--yes", is_flag=True, help="Answer yes to questions (adopt an image's torch).")
@click.option("-v", "--verbose", is_flag=True, help="Show uv's output live (it is always shown on failure).")
@json_option
def bootstrap(**params: Any) -> int:
    """Create the training venv: the right torch FIRST, verified, pinned; then the extras, env and doctor.

    Re-running a finished bootstrap changes nothing; an interrupted one resumes at the step that failed.
    Exit codes: 0 ready, 1 a step failed (state kept), 2 bad input, 130 interrupted (state kept).
    """
    return _bootstrap(BootstrapArgs(**params))


@dataclass(frozen=True)
class BootstrapArgs:
    """The command line of `mw-env bootstrap`, typed: click fills it by parameter name, and this is the one
    place that turns it into the library's BootstrapOptions."""

    root: str | None
    profile: str | None
    profiles_dirs: tuple[str, ...]
    gpu: int | None
    venv: Path | None
    python: str | None
    project: Path | None
    extras: str
    source: str | None
    torch_index: str | None
    find_links: tuple[str, ...]
    offline: bool
    recreate: bool
    adopt: bool | None
    lock: Path | None
    force: bool
    all_devices: bool
    no_doctor: bool
    dry_run: bool
    yes: bool
    verbose: bool
    as_json: bool

    def options(
        self, env: Mapping[str, str], lock: Any = None, target: Mapping[str, str] | None = None
    ) -> BootstrapOptions:
        from mw_env.provision.model import BootstrapOptions
        from mw_env.venv.record import default_venv

        python = self.python
        if lock is not None:
            from mw_env.venv.lock.rebuild import python_request

            python = python_request(lock, self.python)  # the lock's wheels are for its Python
        return BootstrapOptions(
            venv=self.venv or default_venv(env),
            python=python or "3.12",
            python_explicit=python is not None,
            project=self.project,
            extras=tuple(e.strip() for e in self.extras.split(",") if e.strip()),
            torch_index=self.torch_index,
            find_links=self.find_links,
            offline=self.offline,
            recreate=self.recreate,
            # --yes answers the question, unless a wheel source was named: then that is the answer
            # (--find-links / --offline are honoured; --adopt-torch still adopts on request). A lock names its
            # torch: an image's torch is never reused for one.
            adopt=False
            if lock is not None
            else True
            if (self.adopt is None and self.yes and not (self.find_links or self.offline))
            else self.adopt,
            doctor=not self.no_doctor,
            lock=lock,
            lock_target=dict(target or {}),
        )


def _bootstrap(args: BootstrapArgs) -> int:
    from rich.console import Console

    # soft_wrap: a long line (a path, a command) is wrapped by the terminal, never broken mid-phrase by rich
    # emoji=False: a ":name:" in a path or a package's output stays as written (and rich's emoji table, 1.5 ms
    # of import, is never loaded).
    out = Console(stderr=args.as_json, highlight=False, soft_wrap=True, emoji=False)
    as_json, dry_run = args.as_json, args.dry_run
    from mw_env.profiles import resolve
    from mw_env.provision.plan import plan_for

    # The planner finds its own interpreter with uv: listing every Python on PATH would only slow a no-op run.
    resolved = resolve(
        root=args.root,
        profile=args.profile,
        profiles_dirs=args.profiles_dirs,
        gpu=args.gpu,
        source=args.source,
        interpreters=False,
    )
    sel = resolved.selection
    lock = _read_lock(args, sel, resolved.machine.env) if args.lock else None
    from mw_env.venv.lock.match import target_of

    options = args.options(resolved.machine.env, lock, target_of(sel))
    if args.venv is None:
        from mw_env.venv.record import venv_note

        note = venv_note(resolved.machine.env)
        if note:
            out.print(f"note: {note}", markup=False)

    def planned(options: BootstrapOptions) -> Plan:
        return plan_for(
            selection=sel,
            options=options,
            env=resolved.machine.env,
            all_devices=args.all_devices,
            # A dry run changes nothing: a venv a real run would refuse is a warning there, exit 0, and the plan
            # shown is what `--recreate` would do (a new venv built beside it, swapped in only when complete).
            refused_as_warning=dry_run,
        )

    the_plan = planned(options)
    if the_plan.adoptable is not None and not dry_run:
        cand = the_plan.adoptable
        question = (
            f"The base image ships torch {cand.version} ({cand.build}) for {cand.python.path}. "
            "Reuse it instead of downloading the profile's torch?"
        )
        if sys.stdin.isatty() and not as_json and click.confirm(question, default=True):
            the_plan = planned(replace(options, adopt=True))
        else:
            out.print(f"[yellow]note:[/] the image's torch {cand.version} could be reused: --adopt-torch")
    if dry_run:
        if as_json:
            echo_json(the_plan.to_dict())
        else:
            from mw_env.commands.bootstrap_view import print_plan

            print_plan(out, the_plan, sel)
        return 0

    from mw_env.commands.bootstrap_view import StepView
    from mw_env.provision.execute import execute

    for w in the_plan.warnings:
        out.print(f"[yellow]warning:[/] {w}")
    for n in the_plan.notes:
        out.print(f"note: {n}", soft_wrap=True, markup=False)
    out.print(f"[bold]mw-env bootstrap[/] profile [cyan]{the_plan.profile}[/] -> {the_plan.venv}")
    events = StepView(out, verbose=args.verbose)
    try:
        result = execute(the_plan, events=events, doctor=_doctor_hook(resolved, out), argv=sys.argv)
    except KeyboardInterrupt:
        events.stop()
        from rich.markup import escape

        again = rerun_command(click.get_current_context(), the_plan.venv)
        out.print(
            f"[red]interrupted[/]: everything done so far is kept; re-run `{escape(again)}` to resume",
            soft_wrap=True,
        )
        return EXIT_INTERRUPTED
    finally:
        events.stop()
    from rich.markup import escape

    if result.doctor_report is not None and not as_json:
        from mw_env.commands.doctor import render_report

        render_report(result.doctor_report, verbose=False)
    if as_json:
        echo_json(result.to_dict())
    if not result.ok:
        err = result.error
        # soft_wrap: one line each, as every other error:/hint: (rich would break a long hint at the
        # terminal's width, leaving a word alone on a third line).
        out.print(
            f"[red]error:[/] step {result.failed_step}: {escape(safe_message(err.message if err else 'failed'))}",
            soft_wrap=True,
        )
        if err and err.hint:
            out.print(f"[yellow]hint:[/] {escape(safe_message(err.hint))}", soft_wrap=True)
        out.print(f"state kept: re-run to resume at '{result.failed_step}' ({result.total_s:.1f}s)")
        return err.exit_code if err else EXIT_FAILED
    from mw_env.venv.record import remember_venv

    # Commands run later without --venv use this venv (and say so), not some older ~/training-venv.
    remember_venv(the_plan.venv, resolved.machine.env)
    verb = "ready" if result.changed else "already complete, nothing changed"
    out.print(f"[green]{the_plan.venv} {verb}[/] (torch {result.torch_version}) in {result.total_s:.1f}s")
    from mw_env.commands.env import next_line

    out.print(f"next: {escape(next_line(the_plan.venv, sel.profile.trainer.config))}", soft_wrap=True)
    return 0


def _read_lock(args: BootstrapArgs, sel: Any, env: Mapping[str, str]) -> Any:
    """`--lock FILE` read, validated and matched to this machine before anything is planned or installed."""
    from mw_env.sources.wheelhouse import discover
    from mw_env.venv.lock.rebuild import load_for_bootstrap

    assert args.lock is not None
    sources = discover(env=env, find_links=args.find_links)
    extras = tuple(e.strip() for e in args.extras.split(",") if e.strip())
    return load_for_bootstrap(
        args.lock,
        selection=sel,
        sources=sources,
        force=args.force,
        env=env,
        project=args.project,
        extras=extras,
    )


def _doctor_hook(resolved: Any, out: Any) -> Any:
    def hook(venv: Path) -> tuple[bool, Any]:
        from mw_env.checks import run_doctor  # here: the doctor's imports are its step's time, not planning's

        report = run_doctor(machine=resolved.machine, selection=resolved.selection, venv=venv)
        return bool(report.ok), report

    return hook


def rerun_command(ctx: click.Context, venv: Path) -> str:
    """The bootstrap command that resumes this one: the options given on the command line, and the venv."""
    import shlex

    from click.core import ParameterSource

    words = ["mw-env", "bootstrap"]
    for param in ctx.command.params:
        if not isinstance(param, click.Option) or param.name is None:
            continue
        if ctx.get_parameter_source(param.name) is not ParameterSource.COMMANDLINE:
            continue
        value = ctx.params.get(param.name)
        opt = max(param.opts, key=len)
        if param.is_flag:
            flag = opt if value else (param.secondary_opts[0] if param.secondary_opts else None)
            words += [flag] if flag else []
        elif param.multiple:
            for item in value or ():
                words += [opt, str(item)]
        elif value is not None:
            words += [opt, str(value)]
    if "--venv" not in words:
        words += ["--venv", str(venv)]
    return shlex.join(words)
