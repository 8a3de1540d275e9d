"""The command line: a thin click layer over typed library functions.

Commands live in mw_env.commands.<name> and are imported only when invoked, so `mw-env --help`
never pays for torch, rich or detection. This module is the only place that catches MwEnvError.

Exit codes: 0 ok · 1 a check or step failed · 2 usage or bad input (or the tool could not run) ·
130 interrupted.
"""

from __future__ import annotations

import importlib
import os
import sys

import click

from mw_env import __version__
from mw_env.base.errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    MwEnvError,
    cwd_gone,
    os_error_in,
    os_fault,
)
from mw_env.base.textsafe import safe_message

# name -> (module, attribute, one-line help). Order is the order of `mw-env --help`.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "detect": ("mw_env.commands.detect", "detect", "Show what this machine is and which profile fits it."),
    "profiles": ("mw_env.commands.profiles", "profiles", "List hardware profiles, or show one."),
    "host-commands": (
        "mw_env.commands.host",
        "host_commands",
        "Print the host-side commands that pass the GPU into this container.",
    ),
    "bootstrap": (
        "mw_env.commands.bootstrap",
        "bootstrap",
        "Create the training venv with the right torch for this hardware.",
    ),
    "lock": (
        "mw_env.commands.lock",
        "lock",
        "Write the venv's lock: exact packages and hashes, for this hardware.",
    ),
    "env": ("mw_env.commands.env", "env_cmd", "Print the profile's runtime environment (eval-able)."),
    "doctor": (
        "mw_env.commands.doctor",
        "doctor",
        "Check the environment; name each problem's cause and fix.",
    ),
    "train": ("mw_env.commands.train", "train", "Train the bundled address tagger (and manage runs)."),
}

EPILOG = "Exit codes: 0 ok, 1 a check or step failed, 2 usage or bad input, 130 interrupted."


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        spec = COMMANDS.get(cmd_name)
        if spec is None:
            return None
        module_name, attr, _ = spec
        return getattr(importlib.import_module(module_name), attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Short help comes from the table above so --help imports nothing.
        rows = [(name, help_) for name, (_, _, help_) in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mw-env")
@click.option("--debug", is_flag=True, envvar="MW_ENV_DEBUG", help="Show tracebacks for errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """mw-env: a working PyTorch training environment on whatever hardware this container has."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


def split_debug(args: list[str]) -> tuple[list[str], bool]:
    """`--debug` taken from anywhere before a `--` (before or after the subcommand), and the rest."""
    end = args.index("--") if "--" in args else len(args)
    head = [a for a in args[:end] if a != "--debug"]
    return head + args[end:], len(head) != end


def _command_path(args: list[str]) -> str:
    """`mw-env train start` for the words of `args` that name commands (some usage errors carry no context)."""
    from mw_env.commands.train import train  # on an error's path only: `--help` stays light

    train_commands = train.list_commands(click.Context(train))
    words = ["mw-env"]
    for arg in (a for a in args if not a.startswith("-")):
        if (len(words) == 1 and arg in COMMANDS) or (
            len(words) == 2 and words[1] == "train" and arg in train_commands
        ):
            words.append(arg)
        else:
            break
    return " ".join(words)


def run() -> int:
    """The `mw-env` program (its console script, and `python -m mw_env`): main() on sys.argv."""
    return main()


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI, turn MwEnvError into `error:`/`hint:` lines and an exit code.

    The standard streams are guarded first (mw_env.base.streams): a closed, full or broken stdout is exit 1
    (said on stderr, except to a reader that left: EPIPE), a stderr that cannot be written is dropped."""
    import errno

    from mw_env.base.streams import StdoutLost, guard, say
    from mw_env.base.textsafe import tolerant_streams

    tolerant_streams()  # a locale that cannot encode ✓ or a corpus word: escaped, never a traceback
    with guard():
        try:
            code = _run(argv)
            sys.stdout.flush()  # here, where a full stdout is still ours to report, not at the exit
            return code
        except StdoutLost as exc:
            if exc.cause.errno != errno.EPIPE:
                say(f"error: {exc}")
                say("hint: send the output to a file or a pipe that can take it (`> out.txt`)")
            return EXIT_FAILED


def _run(argv: list[str] | None) -> int:
    args, debug_flag = split_debug(list(sys.argv[1:] if argv is None else argv))
    debug = debug_flag or bool(os.environ.get("MW_ENV_DEBUG"))
    if debug_flag:
        args = ["--debug", *args]  # the group's own option, wherever it was written
    try:
        result = cli.main(args=args, prog_name="mw-env", standalone_mode=False)
    except MwEnvError as exc:
        if debug:
            # The traceback for whoever asked, and the same lines and exit code as without --debug:
            # a script's handling of exit 2 (bad input) must not change because someone is debugging.
            import traceback

            traceback.print_exc()
        # Messages quote values from files and the command line: escape control characters, hide URL
        # credentials and bound the length here, once, for every error.
        # Exit 0 (NothingToDo) is not an error: the same two lines, said as a note.
        click.echo(f"{'error' if exc.exit_code else 'note'}: {safe_message(exc.message)}", err=True)
        if exc.hint:
            click.echo(f"hint: {safe_message(exc.hint)}", err=True)
        return exc.exit_code
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("interrupted", err=True)
        return EXIT_INTERRUPTED
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except (OSError, RuntimeError) as exc:
        # pathlib's resolve() turns ELOOP into `RuntimeError: Symlink loop from ...` (a link loop named as any
        # path option: --out-dir, verify's folder), torch's zip writer an ENOSPC into its own RuntimeError:
        # the OSError behind it is the fault. A RuntimeError with no OSError behind it is a bug: raised.
        cause = os_error_in(exc)
        if debug or cause is None:
            raise
        # The net under every command: a fault of the machine or of a path (a full disk, EIO, a name too
        # long) that no narrower handler caught is still one sentence with the documented exit code.
        err = cwd_gone(cause) or os_fault(cause, "use")
        click.echo(f"error: {safe_message(err.message)}", err=True)
        click.echo(f"hint: {safe_message(err.hint)}", err=True)
        return err.exit_code
    except click.ClickException as exc:
        # Usage errors speak the same two lines as every other error; the usage goes into the hint.
        ctx = getattr(exc, "ctx", None)
        path = ctx.command_path if ctx is not None else _command_path(args)
        message = " ".join(safe_message(exc.format_message()).split())
        usage = " ".join(ctx.get_usage().split()) if ctx is not None else ""
        usage = usage[0].lower() + usage[1:] if usage else ""
        click.echo(f"error: {message}", err=True)
        click.echo(f"hint: {usage + '; ' if usage else ''}see `{path} --help`", err=True)
        return exc.exit_code if exc.exit_code else EXIT_USAGE
    return result if isinstance(result, int) else 0
