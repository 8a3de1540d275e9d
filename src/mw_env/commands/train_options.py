"""The options `mw-env train` and its subcommands share, and the calls that turn them into a resolved config or
a launch (a leaf of the command layer: train and train_runs both import it, neither imports the other's module).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import click

from mw_env.commands.common import F, profile_options, root_option, source_option, venv_option

if TYPE_CHECKING:  # types only: `mw-env --help` imports no launch code
    from typing import Unpack

    from mw_env.runs.launch import Launch, LaunchOptions
    from mw_env.trainspec.config import ResolvedConfig


def config_options(func: F) -> F:
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
        help="Config file (YAML/TOML) or a shipped config: smoke, address-tagger, address-tagger-cpu "
        "(default: the profile's, address-tagger-cpu on the cpu profile, address-tagger on a GPU).",
    )(func)


class ConfigSelection(TypedDict):
    """What resolves a training config (`train config`, `train summary`): the config, its --set values and
    the profile options."""

    config_name: str | None
    overrides: tuple[str, ...]
    root: str | None
    profile: str | None
    profiles_dirs: tuple[str, ...]
    gpu: int | None


def resolve_train_config(
    *,
    config_name: str | None,
    overrides: tuple[str, ...],
    root: str | None,
    profile: str | None,
    profiles_dirs: tuple[str, ...],
    gpu: int | None,
) -> ResolvedConfig:
    from mw_env.profiles import resolve
    from mw_env.runs.launch import profile_defaults
    from mw_env.trainspec.config import find_config, resolve_config

    path = find_config(config_name) if config_name else None
    selection = resolve(
        root=root, profile=profile, profiles_dirs=profiles_dirs, gpu=gpu, interpreters=False
    ).selection
    return resolve_config(
        path=path or find_config(selection.trainer.config),  # no --config: the profile's
        overrides=overrides,
        profile_defaults=profile_defaults(selection),
        profile_name=selection.profile.name,
    )


def launch_options(func: F) -> F:
    """The options that say what to run and where: `mw-env train` and `mw-env train start` share them."""
    for deco in reversed(
        [
            config_options,
            venv_option("Training venv", folder_only=True),
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
                help="Processes (GPUs) per node for DDP, launched with the venv's torchrun.",
            ),
            click.option(
                "--nnodes",
                type=click.IntRange(min=1),
                default=1,
                show_default=True,
                help="Nodes in the run: run `mw-env train` on each, with the same --rdzv-endpoint (torchrun's c10d "
                "rendezvous instead of --standalone).",
            ),
            click.option(
                "--node-rank",
                type=click.IntRange(min=0),
                default=0,
                show_default=True,
                help="This node's number, 0 to N-1 (with --nnodes N).",
            ),
            click.option(
                "--rdzv-endpoint",
                default=None,
                metavar="HOST:PORT",
                help="Rendezvous address, the same on every node: node 0's address and a free port.",
            ),
            click.option(
                "--rdzv-id",
                default=None,
                metavar="ID",
                help="Rendezvous id, the same on every node (default: derived from the endpoint).",
            ),
            click.option(
                "--rdzv-timeout",
                type=click.IntRange(min=1),
                default=None,
                metavar="SECONDS",
                help="How long each node waits for all the others at the rendezvous (default 600); "
                "it says whom it waits for meanwhile.",
            ),
            click.option(
                "--allow-env-mismatch",
                is_flag=True,
                help="Several nodes: train even though the nodes' environments differ (lock, torch build, "
                "CUDA/HIP, NCCL/RCCL, Python, mw-env); recorded in the run's report. Node 0's flag decides.",
            ),
            source_option,
            root_option,
            profile_options,
        ]
    ):
        func = deco(func)
    return func


def prepare_launch(*, config_name: str | None, **options: Unpack[LaunchOptions]) -> Launch:
    """`mw_env.runs.launch.prepare` from the launch options (the doctor's quick checks included)."""
    from mw_env.runs.launch import LaunchRequest, prepare

    return prepare(LaunchRequest(config=config_name or "", **options))


def run_folder_options(func: Any) -> Any:
    """The run folder, the same way for status, watch, stop, verify and export: `RUN` as the argument,
    or `--out-dir RUN` (runtime.out_dir, as `start` prints it); the function receives `out_dir`."""
    import functools

    @functools.wraps(func)
    def wrapper(*args: Any, run: Path | None, out_dir: Path | None, **kwargs: Any) -> Any:
        return func(*args, out_dir=pick_run_folder(run, out_dir), **kwargs)

    wrapper = click.option(
        "--out-dir",
        "out_dir",
        default=None,
        type=click.Path(file_okay=False, path_type=Path),
        help="The run folder (runtime.out_dir of its config); the same as giving RUN.",
    )(wrapper)
    return click.argument("run", required=False, type=click.Path(file_okay=False, path_type=Path))(wrapper)


def pick_run_folder(run: Path | None, out_dir: Path | None) -> Path:
    from mw_env.base.errors import InputError

    if run is not None and out_dir is not None and Path(run).resolve() != Path(out_dir).resolve():
        raise InputError(
            f"two run folders given: {run} and --out-dir {out_dir}",
            hint="name the run folder once: `RUN` or `--out-dir RUN`",
        )
    chosen = run if run is not None else out_dir
    if chosen is None:
        raise InputError(
            "which run? no run folder given",
            hint="name it: `mw-env train status runs/tagger` (or `--out-dir runs/tagger`), the folder "
            "`train start` printed",
        )
    return Path(chosen)
