from __future__ import annotations

import subprocess
import sys

from mw_env.cli import main


def test_help_lists_commands_and_exit_codes(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in ("detect", "profiles", "host-commands", "bootstrap", "doctor", "train"):
        assert name in out
    assert "Exit codes" in out


def test_help_does_not_import_heavy_modules():
    code = (
        "import sys; from mw_env.cli import main; rc = main(['--help']);"
        "heavy = [m for m in ('torch', 'rich', 'yaml', 'cpuinfo', 'mw_env.hardware.detect') if m in sys.modules];"
        "print('HEAVY', heavy); raise SystemExit(rc)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "HEAVY []" in out


def test_unknown_command_is_usage_error(capsys):
    assert main(["no-such-command"]) == 2
    assert "no-such-command" in capsys.readouterr().err
