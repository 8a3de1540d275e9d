"""`mw-env lock`: write the lock of an existing venv (PEP 751 pylock.toml by uv, plus [tool.mw-env])."""

from __future__ import annotations

from pathlib import Path

import click

from mw_env.commands.common import (
    echo_json,
    json_option,
    profile_options,
    root_option,
    source_option,
    venv_option,
)


@click.command("lock")
@root_option
@profile_options
@source_option
@venv_option("The venv to lock")
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Where to write the lock (default: VENV/pylock.mw-env.toml, the one the doctor and runs use).",
)
@click.option("--find-links", "find_links", multiple=True, help="Wheelhouse folder/URL uv may look in.")
@click.option("--offline", is_flag=True, help="Only uv's cache and the wheelhouse: never contact an index.")
@json_option
def lock(
    root: str | None,
    profile: str | None,
    profiles_dirs: tuple[str, ...],
    gpu: int | None,
    source: str | None,
    venv: Path | None,
    output: Path | None,
    find_links: tuple[str, ...],
    offline: bool,
    as_json: bool,
) -> int:
    """Lock a venv: every package with its version, source and sha256, plus the hardware it is for.

    `mw-env bootstrap --lock FILE` rebuilds exactly that venv on a machine of the same hardware.
    Exit codes: 0 written, 1 uv could not lock a package, 2 bad input.
    """
    import os

    from mw_env.base.atomic import refuse_special
    from mw_env.profiles import resolve_for_venv
    from mw_env.venv.lock import LOCK_FILE
    from mw_env.venv.lock.make import lock_venv, write_lock
    from mw_env.venv.record import default_venv, read_record, venv_note

    if venv is None and (note := venv_note(os.environ)):
        click.echo(f"note: {note}", err=True)
    venv = Path(venv).expanduser() if venv else default_venv(os.environ)
    refuse_special(output or venv / LOCK_FILE)  # before uv works: the writer refuses it again at the end
    from mw_env.venv.venvinfo import read_pyvenv_cfg

    read_pyvenv_cfg(venv)  # uv would start the venv's python, which dies in site.py on a non-UTF-8 file
    # The torch source the venv was built with, as the doctor and train judge it (one detection).
    record = read_record(venv) if (venv / "bin" / "python").exists() else None
    resolved = resolve_for_venv(
        record=record,
        root=root,
        profile=profile,
        profiles_dirs=profiles_dirs,
        gpu=gpu,
        source=source,
    )
    env = resolved.machine.env
    the_lock = lock_venv(
        venv=venv,
        selection=resolved.selection,
        env=env,
        find_links=find_links,
        offline=offline,
    )
    output = write_lock(the_lock, output or venv / LOCK_FILE)
    if as_json:
        echo_json(
            {
                "lock": str(output),
                "sha256": the_lock.sha256,
                "packages": len(the_lock.packages),
                "hardware": the_lock.meta.hardware(),
                "torch": the_lock.meta.torch,
            }
        )
    else:
        click.echo(
            f"wrote {output}: {len(the_lock.packages)} packages, torch {the_lock.meta.torch}, "
            f"for {the_lock.meta.hardware()} (sha256 {the_lock.sha256[:16]})"
        )
        click.echo(f"rebuild with: mw-env bootstrap --lock {output}")
    return 0
