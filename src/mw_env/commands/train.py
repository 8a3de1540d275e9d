"""`mw-env train`: run the bundled trainer in the provisioned venv, and inspect configs and runs.

`mw-env train --config smoke` runs the doctor's quick checks, then the trainer with the venv's python
(torchrun for --nproc-per-node > 1). `config`, `summary`, `check` and `verify` run here, without torch.
The others (RUN_COMMANDS) are imported when asked for.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

import click

from mw_env.base.errors import EXIT_FAILED, InputError
from mw_env.base.textsafe import safe
from mw_env.commands.common import echo_json, json_option, profile_options, root_option
from mw_env.commands.train_options import (
    config_options,
    launch_options,
    prepare_launch,
    resolve_train_config,
    run_folder_options,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Unpack

    from mw_env.commands.train_options import ConfigSelection
    from mw_env.runs.launch import LaunchOptions
    from mw_env.trainspec.config import TrainConfig
    from mw_env.trainspec.datacheck import ReadProgress

# name -> the module whose attribute of that name is the command (imported only when asked for).
RUN_COMMANDS = {
    "start": "mw_env.commands.train_runs",
    "status": "mw_env.commands.train_runs",
    "stop": "mw_env.commands.train_runs",
    "watch": "mw_env.commands.train_runs",
    "export": "mw_env.commands.train_export",
    "predict": "mw_env.commands.train_predict",
    "evaluate": "mw_env.commands.train_predict",
}


class TrainGroup(click.Group):
    """Built-in subcommands plus RUN_COMMANDS, imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*super().list_commands(ctx), *RUN_COMMANDS]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in RUN_COMMANDS:
            command: click.Command = getattr(importlib.import_module(RUN_COMMANDS[cmd_name]), cmd_name)
            return command
        return super().get_command(ctx, cmd_name)


@click.group(cls=TrainGroup, invoke_without_command=True)
@launch_options
@click.pass_context
def train(ctx: click.Context, config_name: str | None, **options: Unpack[LaunchOptions]) -> int | None:
    """Train the bundled address tagger in the provisioned venv (or manage runs).

    Exit codes: 0 finished (or stopped by SIGTERM), 1 training failed, 2 bad input, 130 interrupted.
    """
    if ctx.invoked_subcommand is not None:
        return None
    from mw_env.runs.foreground import run_foreground, stoppable_start, stopped_before_launch

    if options.get("venv") is None:
        from mw_env.venv.record import venv_note

        if note := venv_note():
            click.echo(f"note: {note}", err=True)
    stopped: list[int] = []
    with stoppable_start(stopped):  # SIGTERM during the config and the doctor: a clean stop, exit 0
        launch = prepare_launch(config_name=config_name, **options)
    if stopped:
        click.echo(stopped_before_launch(stopped[0]), err=True)
        return 0
    if launch.built_on:
        click.echo(launch.built_on, err=True)
    if launch.doctor is not None:
        from mw_env.checks.model import doctor_warnings

        warned = doctor_warnings(launch.doctor)
        n = f"{len(warned)} warning{'s' if len(warned) != 1 else ''}"
        click.echo("doctor: quick checks passed" + (f" with {n}:" if warned else ""), err=True)
        for line in warned:
            click.echo(f"  warning: {line}", err=True)
    for line in launch.notes:
        click.echo(line, err=True)
    click.echo(
        f"training {launch.config_path.name} in {launch.venv} (profile {launch.profile}); "
        f"run folder {launch.out_dir}",
        err=True,
    )
    return run_foreground(launch, write=lambda line: click.echo(line, err=True), early=stopped)


@train.command("config")
@config_options
@root_option
@profile_options
@click.option("--json", "as_json", is_flag=True, help="Accepted for symmetry: the output is always JSON.")
def config_cmd(as_json: bool, **selection: Unpack[ConfigSelection]) -> None:
    """Print the resolved settings as JSON, with where each value came from."""
    echo_json(resolve_train_config(**selection).to_dict())


@train.command("summary")
@config_options
@root_option
@profile_options
@json_option
def summary_cmd(as_json: bool, **selection: Unpack[ConfigSelection]) -> None:
    """The model (parameters per block, total), the data and the schedule."""
    from mw_env.trainspec.preflight import check_columns, check_labels
    from mw_env.trainspec.summary import summarize

    resolved = resolve_train_config(**selection)
    config = resolved.config
    venv = _default_venv()
    # The same host checks as `mw-env train` before the doctor (trainspec/preflight.py): a glob that matches
    # nothing, a FIFO or a device as a shard, a missing column, a tokens column that is not a list of
    # strings, a tag outside data.labels - each exit 2 here as there, never a summary of data the trainer
    # refuses. The venv's packages are the run's concern, not the summary's.
    check_labels(config)
    if config.data.source == "files":
        check_columns(config, Path.cwd(), venv)
    info = summarize(config, venv=venv)
    if as_json:
        echo_json(info)
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    from mw_env.trainspec.configfile import built_on

    if line := built_on(resolved):
        console.print(line, markup=False, highlight=False)
    m = info["model"]
    console.print(f"[bold]Model[/bold]: {m['architecture']}")
    table = Table("part", "parameters", box=None)
    for row in m["parameters"]:
        table.add_row(row["part"], f"{row['parameters']:,}")
    total = m["total_parameters"]
    table.add_row("[bold]total[/bold]", f"[bold]{total:,}[/bold]")
    console.print(table)
    d = info["data"]
    if d["source"] == "synthetic":
        where = (
            f"synthetic addresses, {d['train_rows']:,} train / {d['val_rows']:,} validation rows "
            f"({', '.join(d['countries'])}; noise {d['noise']:g})"
        )
    else:
        split = d.get("split")
        if split and split["val_share"] is not None and split["val_rows"]:
            val = f"{split['val_rows']:,} rows ({split['val_share']:.2%}) held out of the train rows"
        elif split and not d["val_files"]:
            val = "none (data.val_fraction is 0): evaluations are skipped"
        else:
            val = ", ".join(d["val_files"]) if d["val_files"] else f"{d['val_fraction']:g} of the train rows"
        if d.get("sources"):
            total = sum(x["weight"] for x in d["sources"])
            shards = "; ".join(
                f"{x['name']} ({', '.join(x['files'])}) weight {x['weight']:g} = {x['weight'] / total:.1%} of the rows"
                for x in d["sources"]
            )
            where = f"sources {shards}; validation: {val}"
        else:
            where = f"shards {', '.join(d['train_files'])}; validation: {val}"
    labels = (
        f"{len(d['labels'])} labels ({d['labels_from']})"
        if isinstance(d["labels"], list)
        else f"labels {d['labels']}"
    )
    console.print(f"[bold]Data[/bold]: {where}; {d['tokenizer']} tokenizer, max_len {d['max_len']}, {labels}")
    if d.get("split"):
        console.print(f"[bold]Units[/bold]: {d['split']['unit']}: {d['split']['why']}", highlight=False)
    s = info["schedule"]
    console.print(
        f"[bold]Schedule[/bold]: {s['optimizer']}; lr {s['lr']:g}, {s['schedule']} after {s['warmup_steps']} "
        f"warmup steps (floor {s['min_lr_ratio']:g}x), {s['max_steps']} steps x {s['rows_per_step_per_process']} "
        f"rows per process ({s['accumulation_steps']} micro-batch{'es' if s['accumulation_steps'] != 1 else ''}); clip {s['grad_clip']:g}, "
        f"label smoothing {s['label_smoothing']:g}"
    )
    console.print("lr at step: " + ", ".join(f"{k}: {v:.3g}" for k, v in s["lr_at"].items()))
    for line in info["warnings"]:
        console.print(f"[yellow]warning[/yellow]: {line}", markup=True, highlight=False)


@train.command(
    "check",
    epilog="Exit codes: 0 nothing stops training (warnings may be listed), 1 a row or tag would stop "
    "training, 2 bad input (the config, a file list, a missing column).",
)
@config_options
@root_option
@profile_options
@json_option
def check_cmd(as_json: bool, **selection: Unpack[ConfigSelection]) -> int:
    """Read every row of the dataset once, before training: columns, tags (IOB2 or plain), labels, rows whose
    tokens and tags differ in length, nulls, rows longer than model.max_len; each with the rows that have it."""
    config, venv = resolve_train_config(**selection).config, _default_venv()
    from mw_env.trainspec.checkreport import findings, verdict
    from mw_env.trainspec.datacheck import check_dataset
    from mw_env.trainspec.preflight import check_columns, check_labels

    if config.data.source != "files":
        raise InputError(
            "train check reads a corpus of files, and this config trains on the synthetic corpus",
            hint="name your files: --set 'data.train_files=[/data/*.parquet]' (data.source=files is implied)",
        )
    base = Path.cwd()
    check_labels(config)
    check_columns(config, base, venv, tags=False)  # the files and their columns; the rows are read below
    from mw_env.trainspec.files import expand_files

    d = config.data
    paths = [
        p
        for key, globs in (*d.train_globs(), ("data.val_files", d.val_files))
        for p in expand_files(globs, key, base)
    ]
    size = sum(p.stat().st_size for p in paths)
    click.echo(f"reading every row of {len(paths)} file(s), {size / 1e6:,.1f} MB ...", err=True)
    show = _progress_printer()
    try:
        import pyarrow  # noqa: F401  (here or in the venv)
    except ImportError:
        report = _check_in_venv(config, base, venv, show)
    else:
        report = check_dataset(config, base=base, progress=show).to_dict()
    items = findings(report, config)
    if as_json:
        echo_json({**report, "findings": [f.__dict__ for f in items], "verdict": verdict(items)})
    else:
        for f in items:
            prefix = "" if f.level == "info" else f"{f.level}: "
            click.echo(prefix + f.text)
            if f.hint:
                click.echo(f"  {'hint' if f.level != 'info' else 'paste'}: {f.hint}")
        click.echo(verdict(items))
    return EXIT_FAILED if any(f.level == "error" for f in items) else 0


PROGRESS_S, PROGRESS_PIPE_S = 2.0, 10.0


def _progress_printer() -> Callable[[ReadProgress], None]:
    """ReadProgress on stderr: a line every PROGRESS_S on a terminal, every PROGRESS_PIPE_S otherwise."""
    import sys
    import time

    every = PROGRESS_S if sys.stderr.isatty() else PROGRESS_PIPE_S
    last = [time.monotonic()]

    def show(p: ReadProgress) -> None:
        now = time.monotonic()
        if now - last[0] < every:
            return
        last[0] = now
        share = f", {100 * p.done_bytes / p.total_bytes:.0f}% of the bytes" if p.total_bytes else ""
        click.echo(f"  read {p.rows:,} rows{share} ({Path(p.path).name})", err=True)

    return show


def _check_in_venv(
    config: TrainConfig, base: Path, venv: Path | None, show: Callable[[ReadProgress], None]
) -> dict[str, object]:
    """The check run by the training venv's python, where mw-env's own has no pyarrow (the venv has it: the
    `train` extra): `python -m mw_env.trainspec.datacheck`, whose JSON lines (progress, then the report) are read
    back."""
    import json
    import os
    import subprocess

    from mw_env.base.errors import MwEnvError
    from mw_env.trainspec.datacheck import ReadProgress

    python = venv / "bin" / "python" if venv else None
    if python is None or not python.exists():
        raise InputError(
            "train check reads the rows with pyarrow, which neither mw-env's python nor a training venv has",
            hint="bootstrap the training venv (`mw-env bootstrap`), or point MW_ENV_VENV at it",
        )
    from mw_env.runs.launch import source_pythonpath

    env = dict(os.environ)
    if pythonpath := source_pythonpath(env):
        env["PYTHONPATH"] = pythonpath
    request = json.dumps({"config": config.to_dict(), "base": str(base)})
    proc = subprocess.Popen(
        [str(python), "-m", "mw_env.trainspec.datacheck", request],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    result: dict[str, object] | None = None
    for line in proc.stdout:
        msg = json.loads(line)
        if "progress" in msg:
            show(ReadProgress(**msg["progress"]))
        elif "error" in msg:
            e = msg["error"]
            proc.wait()
            raise (
                MwEnvError(e["message"], hint=e.get("hint"))
                if e.get("exit") != 2
                else InputError(e["message"], hint=e.get("hint"))
            )
        else:
            result = msg["report"]
    err = proc.stderr.read()
    if proc.wait() != 0 or result is None:
        raise MwEnvError(
            f"the check in {python} failed: {err.strip().splitlines()[-1] if err.strip() else proc.returncode}",
            hint="run `mw-env doctor`: the training venv may be damaged",
        )
    return result


def _default_venv() -> Path | None:
    """The venv bootstrap made (for reading Parquet labels when mw-env's own python has no pyarrow)."""
    import os

    from mw_env.venv.record import default_venv

    venv = default_venv(dict(os.environ))
    return venv if (venv / "bin" / "python").exists() else None


@train.command(
    "verify",
    epilog="Exit codes: 0 every file matches, 1 a file changed, is missing or is not listed, "
    "2 no manifest or the run has not finished (still running, or killed).",
)
@run_folder_options
@json_option
def verify_cmd(out_dir: Path, as_json: bool) -> int:
    """Check a finished run folder against its MANIFEST.sha256."""
    from mw_env.rundir.manifest import verify_manifest
    from mw_env.runs.liveness import check_verifiable

    check_verifiable(out_dir)
    check = verify_manifest(out_dir)
    if as_json:
        echo_json(check.to_dict())
    else:
        for _name, label, items in check.problems():
            for item in items:  # the manifest is data: its paths may hold escapes
                click.echo(f"{label}: {safe(item)}")
        click.echo(check.summary(out_dir))
    return 0 if check.ok else EXIT_FAILED
