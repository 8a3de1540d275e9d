"""`mw-env train start|status|stop|watch`: detached runs.

`start` builds the trainer's command line exactly as `mw-env train` does (launch.prepare) and runs
it detached; `status`, `stop` and `watch` read the run folder (docs/runs.md).
"""

from __future__ import annotations

import functools
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from mw_env.base.errors import EXIT_FAILED
from mw_env.base.textsafe import bounded, duration
from mw_env.commands.common import echo_json, json_option
from mw_env.commands.train_options import launch_options, prepare_launch, run_folder_options

if TYPE_CHECKING:
    from typing import Unpack

    from mw_env.runs.anomalies import Thresholds
    from mw_env.runs.launch import LaunchOptions
    from mw_env.runs.runstatus import RunStatus

STATUS_EPILOG = (
    "Exit codes: 0 no anomaly (running, finished or stopped), 2 no run there / bad input, "
    "10 NaN/inf loss or non-finite steps, 11 divergence, 12 process gone without a finished event, "
    "13 no output for too long, 14 out of memory, 15 GPU fault, 16 NCCL/RCCL timeout, 17 Python traceback. "
    "With several anomalies the most specific wins (in the order 14 15 16 10 11 17 12 13)."
)


# (option, default, the lowest value (excluded), help), in `--help` order.
_THRESHOLDS = (
    ("--silence-minutes", 15.0, 0, "No output for this long between steps is a stall."),
    (
        "--first-step-minutes",
        60.0,
        0,
        "Silence allowed before the first step (imports, data, kernel searches).",
    ),
    ("--checkpoint-minutes", 45.0, 0, "Silence allowed while a checkpoint is being written."),
    ("--divergence-factor", 3.0, 1.0, "Divergence: loss above this multiple of its running minimum."),
)


def _threshold_options(func: Callable[..., int]) -> Callable[..., int]:
    """The anomaly thresholds' options; the function receives them as `thresholds`."""

    @functools.wraps(func)
    def wrapper(
        *args: object,
        silence_minutes: float,
        first_step_minutes: float,
        checkpoint_minutes: float,
        divergence_factor: float,
        **kwargs: object,
    ) -> int:
        from mw_env.runs.anomalies import Thresholds

        thresholds = Thresholds(
            silence_s=silence_minutes * 60,
            first_step_silence_s=first_step_minutes * 60,
            checkpoint_silence_s=checkpoint_minutes * 60,
            divergence_factor=divergence_factor,
        )
        return func(*args, thresholds=thresholds, **kwargs)

    for name, default, low, help_ in reversed(_THRESHOLDS):
        kind = click.FloatRange(min=low, min_open=True)
        wrapper = click.option(name, type=kind, default=default, show_default=True, help=help_)(wrapper)
    return wrapper


# ---------------------------------------------------------------------------------------------


@click.command("start", epilog="Exit codes: 0 started, 1 could not start, 2 bad input or a live run there.")
@launch_options
@json_option
def start(config_name: str | None, as_json: bool, **options: Unpack[LaunchOptions]) -> int:
    """Start training detached from the terminal; print where to look."""
    from mw_env.rundir.contract import node_folder
    from mw_env.runs.runs import start_run

    launch = prepare_launch(config_name=config_name, **options)
    # Nodes other than 0 keep their own supervision (run.json, train.log, state.json) beside the run, so nodes
    # that share the run folder never overwrite each other's; rank 0 writes the metrics and checkpoints.
    rank = launch.nodes.node_rank
    record = start_run(
        argv=launch.argv,
        env=launch.env,
        out_dir=launch.out_dir / node_folder(rank) if rank else launch.out_dir,
        cwd=launch.cwd,
        max_steps=launch.max_steps,
        memory_need=launch.memory_need,
        memory_lower=launch.memory_lower,
    )
    if as_json:
        echo_json(record.to_dict())
        return 0
    d = record.run_dir
    from mw_env.checks.model import doctor_warnings

    built = [launch.built_on] if launch.built_on else []
    for line in [*built, *(f"warning: doctor: {w}" for w in doctor_warnings(launch.doctor)), *launch.notes]:
        click.echo(line, err=True)
    click.echo(
        f"started {launch.config_path.name} detached (profile {launch.profile}; pid {record.pid}, trainer pid {record.child_pid})"
    )
    click.echo(f"  run folder  {d}")
    click.echo(f"  log         {record.log_file}")
    click.echo(f"  status      mw-env train status {d}")
    click.echo(f"  watch       mw-env train watch {d}")
    click.echo(f"  stop        mw-env train stop {d}")
    return 0


# ---------------------------------------------------------------------------------------------


@click.command("status", epilog=STATUS_EPILOG)
@run_folder_options
@_threshold_options
@json_option
def status(
    out_dir: Path,
    thresholds: Thresholds,
    as_json: bool,
) -> int:
    """Progress of a run and anything that looks wrong; never touches the run."""
    from mw_env.runs.runstatus import run_status

    result = run_status(out_dir=out_dir, thresholds=thresholds)
    if as_json:
        echo_json(bounded(result.to_dict()))
        return result.exit_code
    _render_status(result)
    return result.exit_code


def _render_status(result: RunStatus) -> None:
    p = result.progress
    who = (
        f"pid {result.pid}"
        if result.pid
        else f"detached, run.json gone: pids {', '.join(map(str, result.detached_pids))}"
        if result.detached_pids
        else "no run.json: a foreground run"
    )
    click.echo(f"run {result.run_dir}: {result.state} ({who})")
    if p.step is not None:
        share = f"/{p.max_steps} ({100 * p.step / p.max_steps:.0f}%)" if p.max_steps else ""
        parts = [f"step {p.step}{share}"]
        if p.loss is not None:
            parts.append(f"loss {p.loss:.4g}")
        if p.lr is not None:
            parts.append(f"lr {p.lr:.2e}")
        if p.tokens_per_s is not None:
            parts.append(f"{p.tokens_per_s:,.0f} tok/s")
        if p.steps_per_s:
            parts.append(f"{p.steps_per_s:.2f} steps/s")
        if p.eta_s is not None and result.state in ("running", "starting"):
            parts.append(f"ETA {duration(p.eta_s)}")
        click.echo("  " + ", ".join(parts))
    else:
        click.echo("  no step logged yet")
    now = time.time()
    if p.last_checkpoint:
        ago = duration(now - p.last_checkpoint["time"]) + " ago" if p.last_checkpoint.get("time") else ""
        click.echo(
            f"  last checkpoint: step {p.last_checkpoint['step']} {p.last_checkpoint['path']} {ago}".rstrip()
        )
    if p.last_eval:
        mode = p.last_eval.get("f1_mode")  # which entity F1 entity_f1 is (runtime.f1_mode)
        metrics = ", ".join(
            f"{k}{f' ({mode})' if k == 'entity_f1' and isinstance(mode, str) else ''} {v:.4g}"
            for k, v in p.last_eval.items()
            if k not in ("step", "time") and isinstance(v, int | float)
        )
        click.echo(f"  last eval: step {p.last_eval.get('step')}: {metrics}")
    if p.last_event_time:
        # A foreground run has no train.log: name the log only where there is one.
        log = f"; log {result.log_file}" if result.log_file.is_file() else ""
        click.echo(f"  last event {duration(now - p.last_event_time)} ago{log}")
    for note in result.notes:
        click.echo(f"  note: {note}")
    if not result.anomalies:
        click.echo("no anomalies")
        return
    click.echo(
        f"{len(result.anomalies)} anomal{'y' if len(result.anomalies) == 1 else 'ies'} (exit {result.exit_code}):"
    )
    for a in result.anomalies:
        click.echo(f"  ✗ [{a.kind}, {a.code}] {a.message}")
        click.echo(f"      fix: {a.hint}")


# ---------------------------------------------------------------------------------------------


@click.command(
    "stop",
    epilog="Exit codes: 0 stopped (or not running), 1 had to be killed (no report for this attempt), "
    "2 no detached run there.",
)
@run_folder_options
@click.option(
    "--grace",
    type=click.FloatRange(min=0),
    default=None,
    help="Seconds to wait after SIGTERM before SIGKILL. Default: computed from the run's own longest "
    "step, checkpoint and eval (at least 90).",
)
@json_option
def stop(out_dir: Path, grace: float | None, as_json: bool) -> int:
    """Ask the run to stop: it finishes its step, checkpoints and writes its report; SIGKILL only after the grace."""
    from mw_env.rundir.occupants import RUN_DIR_ENV
    from mw_env.runs.liveness import detached_processes
    from mw_env.runs.runs import is_alive, read_run
    from mw_env.runs.runstatus import run_status
    from mw_env.runs.stop import STOP_REPORT, stop_grace, stop_run
    from mw_env.runs.tail import recent_events

    record = read_run(out_dir.resolve())
    # Announce the wait only when there is a live run to stop (no run: stop_run raises the error).
    found = detached_processes(out_dir.resolve()) if record is None else []
    if not as_json and ((record is not None and is_alive(record)) or found):
        planned = stop_grace(recent_events(out_dir.resolve()), override=grace)
        which = (
            f"the detached run in {out_dir} (run.json gone; pids {', '.join(map(str, found))})"
            if found
            else f"the run in {out_dir}"
        )
        click.echo(
            f"stopping {which}: SIGTERM; it finishes its step, checkpoints and writes its report "
            f"(SIGKILL after {planned.describe()}, more while it is checkpointing and reporting)...",
            err=True,
        )
    result = stop_run(out_dir=out_dir, grace_s=grace)
    code = EXIT_FAILED if result.escalated else 0
    # Only a folder deleted or replaced under the run has no status: its processes were found by their folder.
    after = run_status(out_dir=out_dir) if result.folder_kept or not result.orphans else None
    if as_json:
        said: dict[str, object] = {} if after is None else {"state": after.state}
        if after is not None and not result.orphans:
            said["last_checkpoint"] = after.progress.last_checkpoint
        echo_json({**result.to_dict(), **said})
        return code
    pids = ", ".join(map(str, result.orphans))
    if result.orphans and after is not None:  # a detached run whose run.json is gone, found by its processes
        how = (
            f"killed with SIGKILL after {duration(result.waited_s)} (last good checkpoint: "
            f"{result.last_good_checkpoint or 'none'})"
            if result.escalated
            else f"stopped after {duration(result.waited_s)}; state {after.state}"
        )
        click.echo(
            f"the detached run in {out_dir} has no run.json; its processes {pids}, found by {RUN_DIR_ENV} in "
            f"their environment, were {how}"
        )
        return code
    if result.orphans:
        how = f"were killed with SIGKILL after {duration(result.waited_s)}" if result.escalated else "stopped"
        click.echo(
            f"the run started in {out_dir} has no record there (its folder was deleted or replaced); its "
            f"processes {pids}, found by {RUN_DIR_ENV} in their environment, {how}"
        )
        return code
    assert after is not None
    if not result.was_running:
        click.echo(f"no live run in {result.run_dir} (state: {after.state})")
        return 0
    if result.escalated:
        click.echo(
            f"killed with SIGKILL after {duration(result.waited_s)} (pids {', '.join(map(str, result.killed_pids))}): "
            f"no report for this attempt; {result.run_dir / STOP_REPORT} says what happened"
        )
        good = result.last_good_checkpoint
        click.echo(
            f"last good checkpoint: {good}; `mw-env train start` with the same config resumes there"
            if good
            else "no complete checkpoint: a new start begins at step 0"
        )
        return code
    click.echo(f"stopped after {duration(result.waited_s)}; state {after.state}")
    ckpt = after.progress.last_checkpoint
    if ckpt:
        click.echo(
            f"last checkpoint: step {ckpt['step']} {ckpt['path']}; `mw-env train start` with the same config resumes there"
        )
    return code


# ---------------------------------------------------------------------------------------------


@click.command("watch", epilog="Each line is one JSON event. " + STATUS_EPILOG)
@run_folder_options
@click.option(
    "--poll", type=click.FloatRange(min=0.05), default=2.0, show_default=True, help="Seconds between reads."
)
@click.option("--tail", "tail_only", is_flag=True, help="Skip the events logged before now.")
@_threshold_options
def watch(
    out_dir: Path,
    poll: float,
    tail_only: bool,
    thresholds: Thresholds,
) -> int:
    """Stream one JSON event per line (progress, eval, checkpoint, anomaly, finished) until the run ends."""
    from mw_env.runs.runstatus import RunWatcher

    watcher = RunWatcher(out_dir=out_dir, thresholds=thresholds, replay=not tail_only)
    for event in watcher.events(poll_s=poll):
        # Events re-emit what the run's files hold: every string escaped and capped (textsafe.bounded).
        sys.stdout.write(json.dumps(bounded(event), allow_nan=False, default=str) + "\n")
        sys.stdout.flush()
    return watcher.exit_code
