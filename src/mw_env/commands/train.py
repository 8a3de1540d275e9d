"""`mw-env train`: run the bundled trainer in the provisioned venv, and inspect configs and runs.

`mw-env train --config smoke` runs the doctor's quick checks, then the trainer with the venv's python
(torchrun for --nproc-per-node > 1). `config`, `summary` and `verify` run here, without torch.
`start status stop watch export` come from mw_env.commands.train_runs when it is installed.
"""

from __future__ import annotations

import importlib
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from mw_env.commands.common import echo_json, json_option, profile_options, root_option, source_option
from mw_env.errors import EXIT_FAILED, EXIT_INTERRUPTED, StepFailed

if TYPE_CHECKING:
    from mw_env.trainer.torchrun_output import TorchrunStderr

RUN_COMMANDS = ("start", "status", "stop", "watch", "export")


class TrainGroup(click.Group):
    """Built-in subcommands plus the detached-run ones, imported only when present and asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        names = list(super().list_commands(ctx))
        return names + [n for n in RUN_COMMANDS if self._run_command(n) is not None]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        cmd = super().get_command(ctx, cmd_name)
        if cmd is None and cmd_name in RUN_COMMANDS:
            return self._run_command(cmd_name)
        return cmd

    @staticmethod
    def _run_command(name: str) -> click.Command | None:
        try:
            module = importlib.import_module("mw_env.commands.train_runs")
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("mw_env.commands"):
                return None
            raise
        for attr in (name, f"{name}_cmd", f"{name}_command"):
            cmd = getattr(module, attr, None)
            if isinstance(cmd, click.Command):
                return cmd
        return None


def _config_options(func: Any) -> Any:
    func = click.option(
        "--set",
        "overrides",
        multiple=True,
        metavar="KEY=VALUE",
        help="Override a config value (read as YAML: 1e-3, true, null). Repeatable.",
    )(func)
    return click.option(
        "--config",
        "config_name",
        default=None,
        metavar="FILE|NAME",
        help="Config file (YAML/TOML) or a shipped config: smoke, address-tagger.",
    )(func)


def _profile_defaults(
    root: str | None, profile: str | None, profiles_dirs: tuple[str, ...], gpu: int | None
) -> tuple[dict[str, Any], str]:
    from mw_env.profiles import resolve
    from mw_env.trainer.launch import profile_defaults

    selection = resolve(
        root=root, profile=profile, profiles_dirs=profiles_dirs, gpu=gpu, interpreters=False
    ).selection
    return profile_defaults(selection), selection.profile.name


def _resolve(
    config_name: str | None,
    overrides: tuple[str, ...],
    root: str | None,
    profile: str | None,
    profiles_dirs: tuple[str, ...],
    gpu: int | None,
) -> Any:
    from mw_env.trainer.config import find_config, resolve_config

    if not config_name:
        raise click.UsageError("--config is required (a file, or one of: smoke, address-tagger)")
    path = find_config(config_name)
    defaults, name = _profile_defaults(root, profile, profiles_dirs, gpu)
    return resolve_config(path=path, overrides=overrides, profile_defaults=defaults, profile_name=name)


def launch_options(func: Any) -> Any:
    """The options that say what to run and where: `mw-env train` and `mw-env train start` share them."""
    for deco in reversed(
        [
            _config_options,
            click.option(
                "--venv",
                type=click.Path(file_okay=False, path_type=Path),
                default=None,
                help="Training venv (default: the one bootstrap made, $MW_ENV_VENV or ~/training-venv).",
            ),
            click.option("--skip-doctor", is_flag=True, help="Start even if the doctor's quick checks fail."),
            click.option(
                "--resume",
                type=click.Path(dir_okay=False, path_type=Path),
                default=None,
                help="Resume from this checkpoint (default: the newest valid one in the run folder).",
            ),
            click.option(
                "--fresh", is_flag=True, help="Start from step 0; earlier checkpoints are kept, renamed."
            ),
            click.option(
                "--nproc-per-node",
                type=click.IntRange(min=1),
                default=1,
                show_default=True,
                help="Processes (GPUs) for DDP, launched with the venv's torchrun.",
            ),
            source_option,
            root_option,
            profile_options,
        ]
    ):
        func = deco(func)
    return func


def prepare_launch(*, config_name: str | None, **options: Any) -> Any:
    """`mw_env.trainer.launch.prepare` from the launch options (the doctor's quick checks included)."""
    from mw_env.trainer.launch import prepare

    if not config_name:
        raise click.UsageError("--config is required (a file, or one of: smoke, address-tagger)")
    return prepare(config=config_name, **options)


@click.group(cls=TrainGroup, invoke_without_command=True)
@launch_options
@click.pass_context
def train(ctx: click.Context, config_name: str | None, **options: Any) -> int | None:
    """Train the bundled address tagger in the provisioned venv (or manage runs).

    Exit codes: 0 finished (or stopped by SIGTERM), 1 training failed, 2 bad input, 130 interrupted.
    """
    if ctx.invoked_subcommand is not None:
        return None
    launch = prepare_launch(config_name=config_name, **options)
    if launch.doctor is not None:
        click.echo("doctor: quick checks passed", err=True)
    click.echo(
        f"training {launch.config_path.name} in {launch.venv} (profile {launch.profile}); "
        f"run folder {launch.out_dir}",
        err=True,
    )
    torchrun = Path(launch.argv[0]).name == "torchrun"
    # Under torchrun its own failure traceback is filtered out and the workers' exit code kept.
    proc = subprocess.Popen(
        launch.argv,
        env=launch.env,
        cwd=launch.cwd,
        stderr=subprocess.PIPE if torchrun else None,
        text=True if torchrun else None,
        errors="replace" if torchrun else None,
    )
    filt = None
    try:
        if torchrun:
            filt = _relay_torchrun_stderr(proc)
        code = proc.wait()
    except KeyboardInterrupt:
        # The trainer shares our terminal's process group, so it got the same Ctrl-C; let it exit.
        if torchrun and proc.stderr is not None:
            for _ in proc.stderr:  # keep draining, or workers writing their last lines block
                pass
        code = proc.wait()
        return EXIT_INTERRUPTED
    if filt is not None:
        code = filt.exit_code(code)
    if code < 0:
        raise StepFailed(
            f"the trainer was killed by signal {-code}",
            hint=f"exit 137/SIGKILL often means the host ran out of memory; resume with the same command "
            f"(the newest checkpoint in {launch.out_dir / 'checkpoints'} is used)",
        )
    if code not in (0, 1, 2, EXIT_INTERRUPTED):
        return EXIT_FAILED
    return code


def _relay_torchrun_stderr(proc: subprocess.Popen[str]) -> TorchrunStderr:
    """Copy torchrun's stderr to ours through the filter, line by line as it comes."""
    from mw_env.trainer.torchrun_output import TorchrunStderr

    filt = TorchrunStderr()
    assert proc.stderr is not None
    for line in proc.stderr:
        for out in filt.feed(line.rstrip("\n")):
            click.echo(out, err=True)
    for out in filt.flush():
        click.echo(out, err=True)
    return filt


@train.command("config")
@_config_options
@root_option
@profile_options
@click.option("--json", "as_json", is_flag=True, help="Accepted for symmetry: the output is always JSON.")
def config_cmd(
    config_name: str | None,
    overrides: tuple[str, ...],
    root: str | None,
    profile: str | None,
    profiles_dirs: tuple[str, ...],
    gpu: int | None,
    as_json: bool,
) -> None:
    """Print the resolved settings as JSON, with where each value came from."""
    echo_json(_resolve(config_name, overrides, root, profile, profiles_dirs, gpu).to_dict())


@train.command("summary")
@_config_options
@root_option
@profile_options
@json_option
def summary_cmd(
    config_name: str | None,
    overrides: tuple[str, ...],
    root: str | None,
    profile: str | None,
    profiles_dirs: tuple[str, ...],
    gpu: int | None,
    as_json: bool,
) -> None:
    """The model (parameters per block, total), the data and the schedule."""
    from mw_env.trainer.summary import summarize

    info = summarize(_resolve(config_name, overrides, root, profile, profiles_dirs, gpu).config)
    if as_json:
        echo_json(info)
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    m = info["model"]
    console.print(f"[bold]Model[/bold]: {m['architecture']}")
    table = Table("part", "parameters", box=None)
    for row in m["parameters"]:
        table.add_row(row["part"], f"{row['parameters']:,}")
    total = m["total_parameters"]
    table.add_row(
        "[bold]total[/bold]", f"[bold]{total:,}[/bold]" if total else "depends on the SentencePiece model"
    )
    console.print(table)
    d = info["data"]
    if d["source"] == "synthetic":
        where = (
            f"synthetic addresses, {d['train_rows']:,} train / {d['val_rows']:,} validation rows "
            f"({', '.join(d['countries'])}; noise {d['noise']:g})"
        )
    else:
        val = ", ".join(d["val_files"]) if d["val_files"] else f"{d['val_fraction']:g} of the train rows"
        where = f"shards {', '.join(d['train_files'])}; validation: {val}"
    console.print(
        f"[bold]Data[/bold]: {where}; {d['tokenizer']} tokenizer, max_len {d['max_len']}, {len(d['labels'])} labels"
    )
    s = info["schedule"]
    console.print(
        f"[bold]Schedule[/bold]: {s['optimizer']}; lr {s['lr']:g}, {s['schedule']} after {s['warmup_steps']} "
        f"warmup steps (floor {s['min_lr_ratio']:g}x), {s['max_steps']} steps x {s['rows_per_step_per_process']} "
        f"rows per process ({s['accumulation_steps']} micro-batch{'es' if s['accumulation_steps'] != 1 else ''}); clip {s['grad_clip']:g}, "
        f"label smoothing {s['label_smoothing']:g}"
    )
    console.print("lr at step: " + ", ".join(f"{k}: {v:.3g}" for k, v in s["lr_at"].items()))


@train.command("verify")
@click.argument("run_dir", type=click.Path(file_okay=False, exists=True, path_type=Path))
@json_option
def verify_cmd(run_dir: Path, as_json: bool) -> int:
    """Check a run folder against its MANIFEST.sha256 (exit 1 on any difference)."""
    from mw_env.trainer.manifest import verify_manifest

    check = verify_manifest(run_dir)
    if as_json:
        echo_json(check.to_dict())
    else:
        for label, items in (
            ("changed", check.mismatched),
            ("missing", check.missing),
            ("not in the manifest", check.unlisted),
            ("malformed line", check.malformed),
        ):
            for item in items:
                click.echo(f"{label}: {item}")
        click.echo(
            f"{'ok' if check.ok else 'FAILED'}: {check.checked} files listed in {run_dir / 'MANIFEST.sha256'}"
        )
    return 0 if check.ok else EXIT_FAILED
