"""`mw-env host-commands`: the commands the operator runs on the HOST to pass the GPU into this container."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import click

from mw_env.commands.common import json_option, json_text, profile_options, root_option, source_option

if TYPE_CHECKING:  # the CLI module stays light at start-up: the type only, for the checker
    from typing import Unpack

    from mw_env.host.k8s import PodLock
    from mw_env.profiles.model import Resolved


class HostOptions(TypedDict):
    """What `host-commands` is asked (its options but --out), as the command and the planner both read it: the
    options are named here once (tests/test_cmd_host.py checks the click options against these keys)."""

    root: str | None
    profile: str | None
    profiles_dirs: tuple[str, ...]
    gpu: int | None
    source: str | None  # a torch source of the profile (the env it implies: HSA_OVERRIDE_GFX_VERSION or none)
    runtime: str | None  # incus | docker | podman | kubernetes; None: the detected one
    container: str | None
    image: str | None
    nodes: int | None  # kubernetes: a multi-node manifest for this many nodes
    name: str
    gpus_per_node: int
    train_config: str
    render_gid: int | None
    pvc: str | None
    lock: str | None
    as_json: bool


@click.command("host-commands")
@root_option
@profile_options
@source_option
@click.option(
    "--runtime",
    type=click.Choice(["incus", "docker", "podman", "kubernetes"]),
    default=None,
    help="Container runtime on the host (default: the one detected, else incus).",
)
@click.option("--container", default=None, help="Container name on the host (default: the detected name).")
@click.option(
    "--image", default=None, help="docker/podman: image for the GPU container (default: the container's)."
)
@click.option(
    "--nodes",
    type=click.IntRange(min=2),
    default=None,
    help="kubernetes: print a multi-node training manifest for N nodes (an Indexed Job + headless Service).",
)
@click.option("--name", default="mw-env-train", show_default=True, help="--nodes: the Job's name.")
@click.option(
    "--gpus-per-node", type=click.IntRange(min=1), default=1, show_default=True, help="--nodes: GPUs per pod."
)
@click.option(
    "--config",
    "train_config",
    default="address-tagger",
    show_default=True,
    help="--nodes: the training config.",
)
@click.option(
    "--render-gid", type=click.IntRange(min=1), default=None, help="--nodes, AMD: the nodes' render gid."
)
@click.option("--pvc", default=None, help="--nodes: an existing ReadWriteMany claim for the run folder.")
@click.option(
    "--lock",
    "lock",
    default=None,
    type=click.Path(dir_okay=False),
    help="--nodes: the environment lock the image was built from; each pod refuses a venv with another.",
)
@click.option(
    "--out",
    "out_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the output to FILE (replaced only when everything succeeded; `> FILE` leaves an empty file "
    "behind when the command fails).",
)
@json_option
def host_commands(out_file: Path | None, **options: Unpack[HostOptions]) -> None:
    """Print the host-side commands that pass the GPU into this container.

    The output is a shell script for the host: notes are comments. With `--runtime kubernetes --nodes N` it is
    a manifest for `kubectl apply -f -` instead. Exit codes: 0 ok, 2 bad input
    (invalid container name, container name unknown, no GPU to pass through).
    """
    lines: list[str] = []
    # Everything is built first: an error leaves nothing half-printed and no --out file touched.
    _plan(lines, options)
    text = "".join(lines)
    if out_file is None:
        click.echo(text, nl=False)
        return
    from mw_env.base.atomic import write_text_atomic

    write_text_atomic(out_file, text)
    click.echo(f"wrote {out_file}", err=True)


def _plan(lines: list[str], o: HostOptions) -> None:
    from mw_env.host.commands import host_plan
    from mw_env.profiles import resolve

    echo = lines.append
    resolved = resolve(
        root=o["root"],
        profile=o["profile"],
        profiles_dirs=o["profiles_dirs"],
        gpu=o["gpu"],
        source=o["source"],
        interpreters=False,
    )
    if o["nodes"] is not None:
        _manifest(echo, resolved, o["nodes"], o)
        return
    if o["lock"] is not None:
        from mw_env.base.errors import InputError

        raise InputError(
            "--lock names the lock in a multi-node manifest: it needs --runtime kubernetes --nodes N",
            hint="for one container, rebuild its venv from the lock inside it: `mw-env bootstrap --lock FILE`",
        )
    plan = host_plan(
        runtime=o["runtime"],
        container=o["container"],
        hardware=resolved.hardware,
        selection=resolved.selection,
        machine=resolved.machine,
        image=o["image"],
    )
    if o["as_json"]:
        echo(json_text(plan.to_dict()))
        return
    echo(
        f"# run on the host ({plan.runtime}, container {plan.container}, profile {resolved.selection.name})\n"
    )
    for note in plan.notes:
        echo(f"# {note}\n")
    for cmd in plan.commands:
        echo(cmd + "\n")


def _manifest(echo: Callable[[str], None], resolved: Resolved, nodes: int, o: HostOptions) -> None:
    from mw_env.base.errors import InputError
    from mw_env.host.k8s import multinode_manifest

    if o["runtime"] != "kubernetes":
        raise InputError(
            "--nodes prints a Kubernetes manifest: it needs --runtime kubernetes",
            hint="for bare metal and incus/docker hosts, run `mw-env train --nnodes N ...` on each node "
            "(docs/training.md, Several nodes)",
        )
    manifest = multinode_manifest(
        hardware=resolved.hardware,
        selection=resolved.selection,
        nodes=nodes,
        image=o["image"],
        name=o["name"],
        gpus_per_node=o["gpus_per_node"],
        config=o["train_config"],
        render_gid=o["render_gid"],
        pvc=o["pvc"],
        lock=_lock_of(o["lock"]),
    )
    if o["as_json"]:
        echo(json_text(manifest.to_dict()))
        return
    for note in manifest.notes:
        echo(f"# {note}\n")
    echo(manifest.text)


def _lock_of(path: str | None) -> PodLock | None:
    """The lock every pod bootstraps from (file name, sha256, text); it is read and validated first."""
    if path is None:
        return None
    from mw_env.host.k8s import PodLock
    from mw_env.venv.lock.lockfile import read_lock

    lock = read_lock(path)
    return PodLock(Path(path).name, lock.sha256, lock.text)
