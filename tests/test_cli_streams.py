"""No traceback at any standard stream (issue 29, class 5).

`mw-env train config --config smoke >&-` was an AttributeError traceback (Python sets sys.stdout to None when
fd 1 is closed). Every command of cli.py COMMANDS runs here, as a real process, with each stream in a bad
state: stdout closed, full (/dev/full) or a pipe whose reader left; stderr closed or full; stdin closed. The
rules (mw_env/base/streams.py, docs/reliability.md): a lost stdout is exit 1, said on stderr (not to a reader that
left); a lost stderr changes nothing but the words; a closed stdin reads as empty. Never a traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mw_env.cli import COMMANDS

CPU = str(Path(__file__).parent / "fixtures" / "machines" / "cpu-only")
INCUS = str(Path(__file__).parent / "fixtures" / "machines" / "incus-780m-no-kfd")
MODES = ("stdout-closed", "stdout-full", "stdout-broken-pipe", "stderr-closed", "stderr-full", "stdin-closed")


def _argv(command: str, tmp: Path) -> list[str]:
    """Each command in a form that is quick and offline, writing to stdout where it can."""
    return {
        "detect": ["detect", "--root", CPU],
        "profiles": ["profiles"],
        "host-commands": ["host-commands", "--root", INCUS],
        "bootstrap": ["bootstrap", "--dry-run", "--root", CPU, "--venv", str(tmp / "venv")],
        "lock": ["lock", "--venv", str(tmp / "venv"), "--root", CPU],  # not a venv: exit 2, stderr only
        "env": ["env", "--root", CPU, "--venv", str(tmp / "venv")],
        "doctor": ["doctor", "--root", CPU, "--quick", "--venv", str(tmp / "venv")],
        "train": ["train", "config", "--config", "smoke"],
    }[command]


def _run(argv: list[str], mode: str | None, *, module: bool = True) -> tuple[int, str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    # A child that starts with a closed fd: close it between fork and exec (pass_fds cannot close 0-2).
    close = {"stdout-closed": 1, "stderr-closed": 2, "stdin-closed": 0}.get(mode or "")
    out: int | None = subprocess.PIPE
    err: int | None = subprocess.PIPE
    read_end = write_end = None
    full = None
    if mode in ("stdout-full", "stderr-full"):
        full = os.open("/dev/full", os.O_WRONLY)
        out, err = (full, subprocess.PIPE) if mode == "stdout-full" else (subprocess.PIPE, full)
    elif mode == "stdout-broken-pipe":
        read_end, write_end = os.pipe()
        os.close(read_end)  # the reader left before the first write: every write is EPIPE, no race
        out = write_end
    try:
        proc = subprocess.run(
            [sys.executable, *(["-m", "mw_env"] if module else []), *argv],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            env=env,
            timeout=120,
            check=False,
            preexec_fn=(lambda: os.close(close)) if close is not None else None,
        )
    finally:
        for fd in (full, write_end):
            if fd is not None:
                os.close(fd)
    decode = lambda b: (b or b"").decode("utf-8", "replace")  # noqa: E731
    return proc.returncode, decode(proc.stdout), decode(proc.stderr)


def _check(command: str, modes: tuple[str, ...], tmp: Path) -> None:
    argv = _argv(command, tmp)
    base_code, base_out, _ = _run(argv, None)
    for mode in modes:
        _check_mode(command, argv, mode, base_code, base_out)


def _check_mode(command: str, argv: list[str], mode: str, base_code: int, base_out: str) -> None:
    code, out, err = _run(argv, mode)
    assert "Traceback" not in out + err and "Exception ignored" not in err, (command, mode, err)
    if mode.startswith("stdout") and base_out:
        assert code == 1, (command, mode, code, err)
        if mode == "stdout-broken-pipe":
            assert err.count("error:") == 0 or "standard output" not in err, err  # the reader left: not told
        else:
            assert "error: cannot write to standard output" in err and "hint: " in err, (command, mode, err)
    else:
        assert code == base_code, (command, mode, code, base_code, err)


def test_the_reproducer_train_config_with_stdout_closed() -> None:
    code, _, err = _run(["train", "config", "--config", "smoke"], "stdout-closed")
    assert code == 1 and "Traceback" not in err, err
    assert err.splitlines() == [
        "error: cannot write to standard output: it was closed when mw-env started",
        "hint: send the output to a file or a pipe that can take it (`> out.txt`)",
    ]


@pytest.mark.slow
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_with_each_bad_stream(tmp_path: Path, command: str) -> None:
    _check(command, MODES, tmp_path)


@pytest.mark.slow
def test_a_closed_stdout_is_never_a_file_the_command_opens(tmp_path: Path) -> None:
    """fd 1 closed: the --out file mw-env opens would get the number 1 and a child's output; it is held on
    /dev/null instead, and a command that writes only its file and stderr succeeds."""
    out = tmp_path / "script.sh"
    code, _, err = _run(["host-commands", "--root", INCUS, "--out", str(out)], "stdout-closed")
    assert code == 0 and "Traceback" not in err, err
    assert out.read_text().startswith("# run on the host"), out.read_text()


def test_a_closed_stdin_reads_as_empty(tmp_path: Path) -> None:
    code, out, err = _run(["doctor", "--explain", "-"], "stdin-closed")
    assert "Traceback" not in err and code in (0, 1), err
    assert out == _run(["doctor", "--explain", "-"], None)[1]  # as from an empty stdin (/dev/null)


@pytest.mark.parametrize("mode", ["stdout-full", "stdout-broken-pipe"])
def test_the_trainers_lines_to_a_lost_stdout_say_so(mode: str) -> None:
    """The trainer (a child with the user's stdout) said "cannot write: the disk is full" for a full stdout;
    its one printer (`_say`) now names standard output, and Python's last flush prints nothing more."""
    program = (
        "import sys\n"
        "from mw_env.base.errors import MwEnvError\n"
        "from mw_env.trainer.__main__ import _say\n"
        "try:\n"
        "    _say('step 1: loss 2.0')\n"
        "except MwEnvError as exc:\n"
        "    print(exc.message, file=sys.stderr)\n"
        "    raise SystemExit(exc.exit_code)\n"
    )
    code, _, err = _run(["-c", program], mode, module=False)
    assert code == 1 and err.startswith("cannot write to standard output: "), err
    assert "Exception ignored" not in err and "disk" not in err
