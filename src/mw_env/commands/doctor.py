"""`mw-env doctor`: render the doctor's report (flutter-doctor style) or explain a training log."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from mw_env.base.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE, MwEnvError
from mw_env.base.textsafe import safe, safe_message
from mw_env.commands.common import (
    echo_json,
    json_option,
    profile_options,
    root_option,
    source_option,
    venv_option,
)

if TYPE_CHECKING:
    from rich.console import Console

    from mw_env.checks.catalogue import Hit
    from mw_env.checks.model import DoctorReport

MARKS = {"pass": ("✓", "green"), "warn": ("!", "yellow"), "fail": ("✗", "red"), "skip": ("-", "bright_black")}
HIT_MARKS = {"harmless": ("•", "bright_black"), "warning": ("!", "yellow"), "fatal": ("✗", "red")}


def _console(stderr: bool = False) -> Console:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=True, emoji=False)  # ":x:" in a path stays


def render_report(report: DoctorReport, *, verbose: bool) -> None:
    """Print the report: one line per check grouped by area, fixes under warn/fail, a summary line."""
    from rich.markup import escape

    from mw_env.checks.runner import area_title

    con = _console()
    con.print(f"Doctor summary for profile [bold]{escape(report.profile)}[/] (venv {escape(report.venv)}):")
    by_area: dict[str, list] = {}
    for c in report.checks:
        by_area.setdefault(c.area, []).append(c)
    for area, checks in by_area.items():
        statuses = {c.status for c in checks}
        worst = (
            "skip" if statuses == {"skip"} else next((s for s in ("fail", "warn") if s in statuses), "pass")
        )
        mark, colour = MARKS[worst]
        # One area's checks come from one function, so they share its duration: shown once, on the area.
        took = f" [bright_black]({_ms(max(c.duration_s for c in checks))})[/]" if verbose else ""
        summary = f" ({escape(_probe_summary(report))})" if area == "probe" and _probe_summary(report) else ""
        con.print(f"[{colour}][{mark}][/] {escape(area_title(area))}{summary}{took}")
        for c in checks:
            # flutter's [☠]: a check that crashed is a failure of the doctor, not of the machine.
            cmark, ccolour = ("☠", "red") if c.id.endswith(".crashed") else MARKS[c.status]
            show_detail = verbose or c.status in ("warn", "fail", "skip")
            detail = f": {escape(safe_message(c.detail))}" if show_detail and c.detail else ""
            con.print(f"    [{ccolour}]{cmark}[/] {escape(c.title)}{detail}")
            if c.fix and c.status in ("warn", "fail"):
                con.print(f"      [bold]fix:[/] {escape(c.fix)}")
            if verbose:
                for line in c.info:
                    con.print(f"      [bright_black]• {escape(line)}[/]")
    fails = {c.area for c in report.failed}
    warns = {c.area for c in report.warned} - fails
    took = f" in {report.duration_s:.1f}s"
    if fails:
        con.print(
            f"[red]✗[/] Doctor found failures in {len(fails)} area(s){(warns and f' and warnings in {len(warns)}') or ''}{took}."
        )
    elif warns:
        con.print(f"[yellow]![/] Doctor found warnings in {len(warns)} area(s), no failures{took}.")
    else:
        con.print(f"[green]•[/] No issues found{took}.")
    if not verbose:
        con.print("[bright_black]Run `mw-env doctor -v` for details and timings.[/]")


def _probe_summary(report: DoctorReport) -> str:
    """'fp32 0.17, bf16 0.43, fp16 0.0041 TFLOP/s on cpu' from the probe's figures, like flutter's
    '(Channel stable, 3.x)': the headline number without -v."""
    tflops = report.facts.get("tflops") or {}
    figures = [f"{d} {v:.3g}" for d, v in tflops.items() if isinstance(v, (int, float))]
    if not figures:
        return ""
    return f"{', '.join(figures)} TFLOP/s on {report.facts.get('device_name') or report.facts.get('device') or '?'}"


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"


def render_hits(hits: list[Hit], *, source: str, lines: int, here: dict[str, str]) -> None:
    from rich.markup import escape

    con = _console()
    if not hits:
        if lines == 0:
            con.print(f"{escape(source)} is empty: nothing to explain.")
        else:
            con.print(f"No known messages in {escape(source)} ({lines} lines read).")
        return
    seen: set[str] = set()
    for hit in hits:
        msg = hit.message
        if msg.id in seen:
            continue
        seen.add(msg.id)
        mark, colour = HIT_MARKS[msg.severity]
        count = sum(1 for h in hits if h.message.id == msg.id)
        more = f" (and {count - 1} more)" if count > 1 else ""
        con.print(f"[{colour}]{mark}[/] line {hit.line_no}{more}: {escape(safe(hit.line))}")
        con.print(f"    [bold]{msg.severity}[/] · {escape(msg.title)}")
        con.print(f"    cause: {escape(msg.cause)}")
        con.print(f"    fix: {escape(msg.fix)}")
        if here.get(msg.id):
            con.print(f"    [bold]here:[/] {escape(here[msg.id])}")
        elif msg.here:
            con.print(f"    check here: {escape(msg.here)}")
    counts = {sev: len({h.message.id for h in hits if h.message.severity == sev}) for sev in HIT_MARKS}
    summary = ", ".join(f"{n} {sev}" for sev, n in reversed(counts.items()) if n)
    con.print(f"{len(seen)} known message(s) in {escape(source)}: {summary}.")


# `--explain` reads the END of a log (where a crash is) and at most this much of it; a longer line is cut
# before the scan, so neither a 30 GB log nor one 40 MB line (nor stdin from /dev/zero) costs more than this.
LOG_TAIL_BYTES = 64 * 1024 * 1024
LOG_STDIN_MAX = 4 * LOG_TAIL_BYTES
LOG_LINE_MAX = 64 * 1024


def read_log(path: str) -> tuple[str, str, str | None]:
    """(text, source, note) for `--explain`: a bounded tail of a regular file, or of stdin for `-`."""
    from mw_env.base import userfile

    if path == "-":
        data, skipped, stopped = userfile.read_stream_tail(
            getattr(sys.stdin, "buffer", sys.stdin), max_bytes=LOG_TAIL_BYTES, max_total=LOG_STDIN_MAX
        )
        source = "stdin"
    else:
        data, skipped = userfile.read_tail(path, what="log", max_bytes=LOG_TAIL_BYTES)
        source, stopped = path, False
    note = None
    if skipped or stopped:
        note = (
            f"read the last {len(data)} bytes ({skipped} bytes before them skipped"
            + (f", stopped after {LOG_STDIN_MAX} bytes" if stopped else "")
            + "); line numbers count from there"
        )
    text = data.decode("utf-8", errors="replace")
    if len(text) > LOG_LINE_MAX and any(len(ln) > LOG_LINE_MAX for ln in text.splitlines()):
        text = "\n".join(ln[:LOG_LINE_MAX] for ln in text.splitlines())
    return text, source, note


def _explain(
    path: str,
    *,
    as_json: bool,
    profile: str | None,
    profiles_dirs: tuple[str, ...],
    root: str | None,
    gpu: int | None = None,
    source: str | None = None,
    venv: Path | None = None,
) -> int:
    from mw_env.checks.catalogue import general_advice, load_catalogue
    from mw_env.checks.explain import here as explain_here
    from mw_env.checks.explain import machine_kind
    from mw_env.checks.gpuadvice import for_machine, general
    from mw_env.checks.runner import read_venv_record
    from mw_env.profiles import resolve_for_venv
    from mw_env.venv.record import default_venv

    text, source_name, note = read_log(path)  # `source` names the torch source
    # The log usually comes from this machine: its GPU and the venv's record (which torch source it was built
    # from, the archs its wheel carries) decide the GPU advice, as they decided the install.
    chosen = Path(venv).expanduser().absolute() if venv else default_venv(os.environ).absolute()
    record = read_venv_record(chosen)[0]
    resolved = resolve_for_venv(
        record=record, root=root, profile=profile, profiles_dirs=profiles_dirs, gpu=gpu, source=source
    )
    base = (
        general_advice()
        if not profiles_dirs and not resolved.machine.env.get("MW_ENV_PROFILES")
        else general(resolved.profiles)
    )
    advice = for_machine(resolved.selection, base, record, str(chosen))
    # A message whose meaning depends on the hardware is explained for the machine the log is read on (or
    # --root): a CUDA torch's "Found no NVIDIA driver" on an AMD box is the wrong build, not a driver.
    seen = resolved.selection.gpu or resolved.hardware.gpu
    kind = machine_kind(seen)
    hits = load_catalogue(
        profile=resolved.selection.profile if profile else None, advice=advice, machine=kind
    ).scan(text)
    fatal = any(h.message.severity == "fatal" for h in hits)
    # Messages whose cause is a fact of the machine (its /dev/shm, SELinux, where hipBLASLt's library is):
    # read it here, in case the log came from this machine, as it usually does.
    here: dict[str, str] = {}
    for h in hits:
        if h.message.id not in here:
            found = explain_here(resolved.machine, h.message.id, h.line, venv=chosen, gpu=seen)
            if found is not None:
                here[h.message.id] = found
    if as_json:
        echo_json(
            {
                "source": safe(source_name),
                "fatal": fatal,
                "note": note,
                # Whom the GPU advice in the fixes is for: this machine's GPU and venv, or null (every GPU).
                "advice_for": advice.machine or None,
                # The kind of machine the causes are told for: "amd", "nvidia" or "cpu" (no usable GPU).
                "machine": kind,
                "messages": [
                    {
                        "id": h.message.id,
                        "severity": h.message.severity,
                        "line_no": h.line_no,
                        "line": safe(h.line),
                        "title": h.message.title,
                        "cause": h.message.cause,
                        "fix": h.message.fix,
                        "here": here.get(h.message.id),
                        "check": h.message.here,  # what on this machine confirms or rules the cause out
                        "source": h.message.source,
                    }
                    for h in hits
                ],
            }
        )
    else:
        if note:
            from rich.markup import escape

            _console().print(f"[yellow]note:[/] {escape(note)}")
        render_hits(hits, source=safe(source_name), lines=len(text.splitlines()), here=here)
    return EXIT_FAILED if fatal else EXIT_OK


@click.command(
    "doctor",
    epilog="Exit codes: 0 no check failed, 1 a check failed (--explain: a fatal message found), "
    "2 the doctor itself could not run (bad input), 130 interrupted.",
)
@root_option
@profile_options
@source_option
# A file as --venv is the doctor's to diagnose (venv.not_a_folder: a failed check, exit 1, with its fix), like a
# folder that is not a venv; click's file_okay=False made it a usage error (2), against the README.
@venv_option(
    "The venv to check",
    more="; with --explain, the venv whose torch source and wheel archs the GPU advice is for",
)
@json_option
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="Details of passing checks, harmless messages, per-check timings; every installed file's sha256 checked.",
)
@click.option(
    "--quick",
    is_flag=True,
    help="Skip the GPU probe and the network check (no torch import): device nodes, venv, build, env, disk.",
)
@click.option(
    "--explain",
    "explain",
    metavar="FILE|-",
    default=None,
    help="Explain the known messages in a training log (- reads stdin).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1.0),
    default=None,
    help="Probe timeout in seconds (default: the profile's, else 60).",
)
@click.option("--offline", is_flag=True, help="Skip the network check (also skipped with --quick).")
def doctor(
    root: str | None,
    profile: str | None,
    profiles_dirs: tuple[str, ...],
    gpu: int | None,
    source: str | None,
    venv: Path | None,
    as_json: bool,
    verbose: bool,
    quick: bool,
    explain: str | None,
    timeout: float | None,
    offline: bool,
) -> int:
    """Check the environment; name each problem's cause and fix."""
    if explain is not None:
        return _explain(
            explain,
            as_json=as_json,
            profile=profile,
            profiles_dirs=profiles_dirs,
            root=root,
            gpu=gpu,
            source=source,
            venv=venv,
        )
    from mw_env.checks import run_doctor
    from mw_env.checks.runner import read_venv_record
    from mw_env.hardware.machine import Machine
    from mw_env.profiles import resolve_for_venv
    from mw_env.venv.record import default_venv, venv_note

    chosen_venv = Path(venv).expanduser() if venv else default_venv(Machine.from_env(root).env)
    if venv is None and (note := venv_note(os.environ)):
        _console(stderr=True).print(f"note: {note}", markup=False)
    # Read once: a broken record is the venv checks' finding (the second half), not a reason to stop here.
    record = read_venv_record(chosen_venv.absolute())
    resolved = resolve_for_venv(
        record=record[0], root=root, profile=profile, profiles_dirs=profiles_dirs, gpu=gpu, source=source
    )
    machine = resolved.machine
    probe_timeout = timeout or float(
        getattr(resolved.selection.profile.doctor, "probe_timeout_s", 60.0) or 60.0
    )
    try:
        report = run_doctor(
            machine=machine,
            selection=resolved.selection,
            venv=chosen_venv,
            quick=quick,
            probe_timeout=probe_timeout,
            hardware=resolved.hardware,
            network=False if offline else None,
            record=record,
            hash_files=verbose,
        )
    except MwEnvError as exc:
        exc.exit_code = EXIT_USAGE  # the doctor itself could not run
        raise
    except Exception as exc:  # a bug in the doctor: exit 2 with one line, --debug shows the traceback
        raise MwEnvError(
            f"the doctor could not run: {type(exc).__name__}: {exc}",
            hint="re-run with `mw-env --debug doctor` for the traceback, and report it",
            exit_code=EXIT_USAGE,
        ) from exc
    if as_json:
        echo_json(report.to_dict())
    else:
        render_report(report, verbose=verbose)
    return EXIT_OK if report.ok else EXIT_FAILED
