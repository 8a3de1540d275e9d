"""commands/lazyconsole.py: off a terminal bootstrap's lines are queued and printed in order; on one, rich's own."""

from __future__ import annotations

import io
import threading

from mw_env.base import idle
from mw_env.commands.lazyconsole import LazyConsole, console_for, flush


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_off_a_terminal_the_console_is_lazy_and_on_one_or_when_rich_is_told_it_is_real(monkeypatch):
    from rich.console import Console

    monkeypatch.setattr("sys.stdout", io.StringIO())
    assert isinstance(console_for(stderr=False, env={}), LazyConsole)
    assert not console_for(stderr=False, env={}).is_terminal
    for hint in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        assert isinstance(console_for(stderr=False, env={hint: "1"}), Console)
    monkeypatch.setattr("sys.stderr", _Tty())
    assert isinstance(console_for(stderr=True, env={}), Console)  # a spinner is live output: built at once


def test_lines_are_queued_then_printed_in_order_with_rich_markup_and_options(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr("sys.stdout", out)
    console = LazyConsole(highlight=False, soft_wrap=True, emoji=False)
    console.print("[bold]mw-env bootstrap[/] profile [cyan]cpu[/]")
    console.print("note: [not markup] :smile:", markup=False)
    assert out.getvalue() == ""  # nothing built yet: no wait came
    flush(console)
    console.print("✓ after the flush, at once")
    assert out.getvalue().splitlines() == [
        "mw-env bootstrap profile cpu",
        "note: [not markup] :smile:",
        "✓ after the flush, at once",
    ]


def test_the_idle_thread_prints_the_queue_while_the_main_thread_waits(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr("sys.stdout", out)
    console = LazyConsole()
    console.print("first")
    printed = threading.Event()
    idle.soon(printed.set)  # queued after the console's own job: set once that has printed
    with idle.waiting():
        assert printed.wait(timeout=60)
    assert out.getvalue() == "first\n"
    console.print("second")
    assert out.getvalue() == "first\nsecond\n"


def test_lines_queued_before_a_failure_are_printed_before_the_command_ends(tmp_path, monkeypatch, capsys):
    """In the CLI: the plan's lines, queued (no uv ran, so no idle turn came), are out when the run dies."""
    from mw_env.cli import main
    from mw_env.provision import execute as ex

    def dies(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt  # the user's Ctrl-C at the first step

    monkeypatch.setattr(ex, "execute", dies)
    code = main(["bootstrap", "--profile", "cpu", "--venv", str(tmp_path / "v"), "--yes"])
    out = capsys.readouterr().out
    assert code == 130, out
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("mw-env bootstrap profile cpu -> "))
    interrupted = next(i for i, line in enumerate(lines) if line.startswith("interrupted: "))
    assert header < interrupted  # in the order printed, all of them
