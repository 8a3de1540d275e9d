"""`mw-env env`: the venv's runtime environment as export lines (or JSON), and bootstrap's `next:` line.

Both must leave the user able to run what they name in a FRESH shell, where `mw-env` itself may not be on
PATH (bootstrap often runs from `make bootstrap`, i.e. a tools venv): so `next:` names the activate script,
which puts the training venv's own `mw-env` on PATH, or mw-env by its absolute path; and `env` prepends the
venv's bin folder to PATH when it holds an `mw-env` and PATH lacks it.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

import click

from mw_env.base.errors import InputError
from mw_env.commands.common import (
    echo_json,
    json_option,
    profile_options,
    root_option,
    source_option,
    venv_option,
)


def self_command() -> list[str]:
    """How to run this very mw-env from any shell: its absolute path, else `python -m mw_env`."""
    argv0 = sys.argv[0] if sys.argv else ""
    if argv0 and Path(argv0).name == "mw-env":
        found = argv0 if os.sep in argv0 else shutil.which(argv0)
        if found and os.access(found, os.X_OK):
            return [str(Path(found).absolute())]
    return [sys.executable, "-m", "mw_env"]


def venv_mw_env(venv: Path) -> Path | None:
    """The venv's own mw-env script, when bootstrap installed mw-env into it."""
    script = Path(venv) / "bin" / "mw-env"
    return script if script.is_file() and os.access(script, os.X_OK) else None


def next_line(venv: Path, model_config: str = "address-tagger") -> str:
    """What to run after bootstrap, runnable as written in a fresh shell.

    model_config: the profile's own default config (`trainer.config`: address-tagger-cpu on a CPU box), so the
    line names what `mw-env train` without --config would train on this hardware."""
    venv = Path(venv).absolute()
    activate = shlex.quote(str(venv / "bin" / "activate"))
    # A command as pasted runs: the notes are shell comments, and `--config smoke` is the quick end-to-end
    # check (20 CPU steps, its report and manifest); the real model is the profile's default config.
    if venv_mw_env(venv) is not None:
        return f"source {activate} && mw-env train --config smoke  # then --config {model_config} for the real model"
    me = shlex.join([*self_command(), "train", "--venv", str(venv), "--config", "smoke"])
    return f"{me}  # or: source {activate} (the venv's python and its env)"


def _read_exports(path: Path) -> dict[str, str]:
    """`export K=V` lines of an env file, values unquoted the way the shell would."""
    from mw_env.base.userfile import read_text  # bounded, regular files only: never a FIFO's hang

    out: dict[str, str] = {}
    for line in read_text(path, what="env file").splitlines():
        if not line.startswith("export "):
            continue
        try:
            words = shlex.split(line[len("export ") :])
        except ValueError:
            continue
        for word in words:
            key, sep, value = word.partition("=")
            if sep and key.isidentifier():
                out[key] = value
    return out


def _looks_like_venv(path: Path) -> bool:
    return (
        (path / "pyvenv.cfg").is_file()
        or (path / "bin" / "python").exists()
        or (path / "mw-env.env").is_file()
    )


@click.command("env")
@root_option
@profile_options
@source_option
@venv_option("The venv to read")
@json_option
def env_cmd(
    root: str | None,
    profile: str | None,
    profiles_dirs: tuple[str, ...],
    gpu: int | None,
    source: str | None,
    venv: Path | None,
    as_json: bool,
) -> int:
    """Print the venv's runtime environment as export lines: eval "$(mw-env env)".

    Without a bootstrapped venv, prints the detected profile's variables (and says so on stderr).
    With --json: {"venv", "bootstrapped", "profile", "env", "path_prepend"} on stdout.
    Exit codes: 0 ok, 2 bad input (--venv that is not a venv, unknown profile, invalid profile file,
    --root not a folder).
    """
    from mw_env.venv.record import (
        create_command,
        default_venv,
        env_path,
        export_lines,
        read_record,
        venv_note,
    )

    if root is not None:  # a bad --root is named first, as by every command that reads the machine
        from mw_env.profiles.resolve import _check_root

        _check_root(Path(root), given_as="--root")
    target = (venv or default_venv(os.environ)).expanduser().absolute()
    if venv is None and (note := venv_note(os.environ)):
        click.echo(f"# note: {note}", err=True)
    if venv is not None and not _looks_like_venv(target):
        what = "does not exist" if not target.exists() else "is not a venv (no pyvenv.cfg, no bin/python)"
        raise InputError(
            f"--venv {target} {what}",
            hint=f"pass the venv bootstrap made, or create one: {create_command(target)}",
        )
    path = env_path(target)
    prepend = None
    bootstrapped = path.is_file()
    if bootstrapped:
        env = _read_exports(path)
        try:
            record = read_record(target)
        except InputError:
            record = None  # the env file is what is printed; `mw-env doctor` reports a torn record
        if source and record is not None and record.torch_source and record.torch_source != source:
            click.echo(
                f"note: {target} was built from torch source {record.torch_source}: its environment is printed "
                f"(--source {source} applies to a venv not yet bootstrapped; `mw-env bootstrap --source {source} "
                "--recreate` rebuilds this one)",
                err=True,
            )
        profile_name = record.profile if record else None
        bin_dir = target / "bin"
        on_path = str(bin_dir) in os.environ.get("PATH", "").split(os.pathsep)
        prepend = str(bin_dir) if venv_mw_env(target) is not None and not on_path else None
    else:
        from mw_env.profiles import resolve

        selection = resolve(
            root=root,
            profile=profile,
            profiles_dirs=profiles_dirs,
            gpu=gpu,
            source=source,
            interpreters=False,
        ).selection
        profile_name, env = selection.profile.name, dict(selection.env)
        click.echo(
            f"# no bootstrapped venv at {target}: the {profile_name} profile's environment "
            "(the torch pin appears after `mw-env bootstrap`)",
            err=True,
        )
    if as_json:
        echo_json(
            {
                "venv": str(target),
                "bootstrapped": bootstrapped,
                "profile": profile_name,
                "env": env,
                "path_prepend": prepend,
            }
        )
        return 0
    sys.stdout.write(export_lines(env))
    if prepend:
        # "$PATH" stays for the shell to expand at eval time.
        sys.stdout.write(f'export PATH={shlex.quote(prepend)}:"$PATH"\n')
    return 0
