"""Issue 40: a venv path is data, never shell code. Whatever the path holds, sourcing the venv's activate runs
nothing, loads the torch pin (UV_CONSTRAINT / PIP_CONSTRAINT naming the venv's constraints file) and gives the
environment `mw-env env` prints; a path no venv can hold safely is refused before anything is made."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest

from mw_env.base.shellquote import list_item, venv_path_problem
from mw_env.provision import pin as pinmod

from .provision_support import cpu_bootstrap_args

SHELLS = [s for s in ("bash", "dash") if shutil.which(s)]

# Each name is also a command a careless quoting would run: it creates the file MARK in the working folder.
HOSTILE = {
    "command substitution": "v$(touch MARK)",
    "backticks": "v`touch MARK`",
    "a positional parameter": "share$5/v",
    "double quote": 'v"; touch MARK; "',
    "single quote": "v'; touch MARK; '",
    "spaces": "my venvs/v 1",
    "non-ASCII": "vénv-東京",
    "all at once": "s$5 h'a\"r`touch MARK`e/v $(touch MARK) é",
}


def _files(value: str) -> list[Path]:
    """The files a whitespace-separated list names, as uv and pip read it (a file:// URL decoded)."""
    out = []
    for item in value.split():
        if item.startswith("file://"):
            item = urllib.parse.unquote(urllib.parse.urlsplit(item).path)
        out.append(Path(item))
    return out


def _activated_env(shell: str, venv: Path, cwd: Path) -> dict[str, str]:
    """The environment after `. VENV/bin/activate` in `shell`, read back NUL-separated (values may hold
    newlines)."""
    script = '. "$1"/bin/activate && env -0'
    res = subprocess.run(
        [shell, "-c", script, "sh", str(venv)],
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", "HOME": str(cwd), "LANG": "C.UTF-8"},
        capture_output=True,
        check=False,
    )
    assert res.returncode == 0, res.stderr.decode(errors="replace")
    pairs = (item.split("=", 1) for item in res.stdout.decode().split("\0") if "=" in item)
    return dict(pairs)


def _mw_env_env(venv: Path, capsys) -> dict[str, str]:
    from mw_env.cli import main

    capsys.readouterr()
    assert main(["env", "--venv", str(venv), "--json"]) == 0
    return json.loads(capsys.readouterr().out)["env"]


@pytest.mark.parametrize("name", list(HOSTILE.values()), ids=list(HOSTILE))
def test_sourcing_the_activate_of_a_hostile_path_runs_nothing_and_loads_the_pin(
    tmp_path, name, uv_bin, capsys
):
    # The activate hook and the env file as the env step writes them (pin.patch_activate, keys.env_text's
    # parts), over uv's own activate script for a venv made at that path.
    venv = tmp_path / name
    venv.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([uv_bin, "venv", "--quiet", "--python", sys.executable, str(venv)], check=True)
    (venv / pinmod.CONSTRAINTS_FILE).write_text(pinmod.constraints_text("2.13.0+cpu"))
    pins = pinmod.pin_env(venv)
    (venv / "mw-env.env").write_text(
        pinmod.env_file_content({"HSA_OVERRIDE_GFX_VERSION": "11.0.0"}, {**pins, "MW_ENV_VENV": str(venv)})
    )
    pinmod.patch_activate(venv, venv)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    expected = _mw_env_env(venv, capsys)
    for shell in SHELLS:
        got = _activated_env(shell, venv, cwd)
        assert list(cwd.iterdir()) == [], (shell, "the path ran as a command")
        assert _files(got["UV_CONSTRAINT"]) == [venv / pinmod.CONSTRAINTS_FILE], shell
        assert _files(got["PIP_CONSTRAINT"]) == [venv / pinmod.CONSTRAINTS_FILE], shell
        assert got["MW_ENV_VENV"] == str(venv) and got["VIRTUAL_ENV"] == str(venv), shell
        assert {k: got.get(k) for k in expected} == expected, shell


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("v\nx", "a newline"),
        ("v\tx", "a tab"),
        ("v\rx", "a carriage return"),
        ("v\x1bx", "U+001B"),
        ("a:b/v", "':'"),
    ],
)
def test_a_path_no_venv_can_hold_is_named_with_the_reason(name, said):
    assert said in (venv_path_problem(name) or "")


def test_a_plain_path_stays_as_written_in_the_pin_lists():
    assert venv_path_problem("/srv/share$5/v 'x' é") is None
    assert list_item("/srv/venv/c.txt") == "/srv/venv/c.txt"
    assert list_item("/srv/my venv/c.txt") == "file:///srv/my%20venv/c.txt"


def test_bootstrap_refuses_a_newline_in_the_venv_path_before_making_anything(tmp_path, hermetic_env, indexes):
    root = tmp_path / "root"
    root.mkdir()
    venv = tmp_path / "v\nhome = /tmp/evil"
    env = {**hermetic_env, "PYTHONPATH": os.pathsep.join(sys.path)}
    res = subprocess.run(
        [sys.executable, "-m", "mw_env", *cpu_bootstrap_args(venv, indexes, root, "--offline")],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert res.returncode == 2, res.stdout + res.stderr
    assert "a newline" in res.stderr and "pyvenv.cfg" in res.stderr and "Traceback" not in res.stderr
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("v")]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["venvs/v$(touch X)", 'share$5/v "it\'s" `touch X` é'])
def test_a_bootstrapped_venv_at_a_hostile_path_keeps_its_pin_in_an_activated_shell(
    tmp_path, hermetic_env, indexes, name
):
    # The two paths, bootstrapped for real (offline, the fake CPU torch): activate runs nothing,
    # exports the pin, and the pin holds for uv in that shell and for the venv's pip (its pip.conf).
    venv = tmp_path / name
    root = tmp_path / "root"
    root.mkdir()
    env = {**hermetic_env, "PYTHONPATH": os.pathsep.join(sys.path)}
    argv = cpu_bootstrap_args(
        venv, indexes, root, "--find-links", str(indexes.cpu_links), "--no-adopt-torch", "--no-doctor"
    )
    res = subprocess.run(
        [sys.executable, "-m", "mw_env", *argv], env=env, capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0, res.stdout + res.stderr
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    for shell in SHELLS:
        # torch==2.9.1 is on the "PyPI" index: only the pin (torch==2.10.0+cpu) stops either tool.
        script = (
            '. "$1"/bin/activate && printf "%s\\n" "$UV_CONSTRAINT" && '
            '{ "$UV" pip install torch==2.9.1 2>&1; echo "uv exit $?"; } && '
            '{ pip install torch==2.9.1 2>&1; echo "pip exit $?"; }'
        )
        shown = subprocess.run(
            [shell, "-c", script, "sh", str(venv)], cwd=cwd, env=env, capture_output=True, text=True
        )
        assert list(cwd.iterdir()) == [] and not (tmp_path / "X").exists(), shell
        out = shown.stdout
        assert _files(out.splitlines()[0]) == [venv / pinmod.CONSTRAINTS_FILE], (shell, out, shown.stderr)
        assert "uv exit 1" in out and "pip exit 1" in out, (shell, out, shown.stderr)
        assert out.count("torch==2.10.0+cpu") >= 2, out  # both name the pin that refused them
    from mw_env.provision.plan import installed_version

    assert installed_version(venv, "torch") == "2.10.0+cpu"
