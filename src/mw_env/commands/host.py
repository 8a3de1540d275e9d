"""`mw-env host-commands`: the commands the operator runs on the HOST to pass the GPU into this container."""

from __future__ import annotations

import click

from mw_env.commands.common import echo_json, json_option, profile_options, root_option


@click.command("host-commands")
@root_option
@profile_options
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
@json_option
def host_commands(
    root: str | None,
    profile: str | None,
    profiles_dirs: tuple[str, ...],
    gpu: int | None,
    runtime: str | None,
    container: str | None,
    image: str | None,
    as_json: bool,
) -> None:
    """Print the host-side commands that pass the GPU into this container.

    The output is a shell script for the host: notes are comments. Exit codes: 0 ok, 2 bad input
    (invalid container name, container name unknown, no GPU to pass through).
    """
    from mw_env.host import host_plan
    from mw_env.profiles import resolve

    resolved = resolve(root=root, profile=profile, profiles_dirs=profiles_dirs, gpu=gpu, interpreters=False)
    plan = host_plan(
        runtime=runtime,
        container=container,
        hardware=resolved.hardware,
        selection=resolved.selection,
        machine=resolved.machine,
        image=image,
    )
    if as_json:
        echo_json(plan.to_dict())
        return
    click.echo(
        f"# run on the host ({plan.runtime}, container {plan.container}, profile {resolved.selection.name})"
    )
    for note in plan.notes:
        click.echo(f"# {note}")
    for cmd in plan.commands:
        click.echo(cmd)
