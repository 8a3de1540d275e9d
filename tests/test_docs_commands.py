"""Every suggested command works when pasted (issue 20 #3: bootstrap's `next:` line and the operator guide
said `mw-env train`, which fails with `--config is required`).

- Each `mw-env ...` line in a code block of README.md and docs/*.md is parsed by the CLI itself (the command
  chain, every option and value, the required ones; `train` and `train start` also need --config), without
  running it. Synopsis lines (with `[`, `<`, `...`) are usage, not commands.
- Blocks the docs mark `<!-- runnable -->` run as written in a fresh shell, after bootstrap's `next:` line for
  the test venv (a real smoke run: doctor, training, report, manifest).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import warnings
from pathlib import Path

import click
import pytest

from mw_env.cli import cli

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```[a-z]*\n(.*?)^```", re.M | re.S)
RUNNABLE = re.compile(r"<!-- runnable[^>]*-->\n```[a-z]*\n(.*?)^```", re.M | re.S)
VENV = Path(sys.executable).parent.parent
PLACEHOLDER = re.compile(r"[A-Z][A-Z_]*(:[A-Z_]+)?")


def _commands() -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        for block in FENCE.findall(doc.read_text(encoding="utf-8")):
            for line in block.replace("\\\n", " ").splitlines():
                line = re.sub(r"\s+#.*$", "", line.strip().removeprefix("$ "))
                for part in re.split(r"&&|\|\||;|\|", line):
                    part = part.strip()
                    if not part.startswith("mw-env ") or any(c in part for c in "[<…") or "..." in part:
                        continue
                    if any(PLACEHOLDER.fullmatch(w) for w in part.split()):
                        continue  # `--node-rank R`, `HOST:PORT`: a synopsis, the reader fills it in
                    found.append((doc.name, part))
    return found


COMMANDS = _commands()


def _parse(words: list[str]) -> click.Context:
    """Parse a command line the way `mw-env` would, down to the last subcommand, without invoking it."""
    ctx = cli.make_context("mw-env", list(words))
    cmd: click.Command = cli
    while isinstance(cmd, click.Group):
        with warnings.catch_warnings():  # Click 8.2 deprecates protected_args; 8.1 needs it
            warnings.simplefilter("ignore", DeprecationWarning)
            rest = [*ctx.protected_args, *ctx.args]
        if not rest:
            break
        name, sub, rest = cmd.resolve_command(ctx, rest)
        assert sub is not None and name is not None
        ctx = sub.make_context(name, rest, parent=ctx)
        cmd = sub
    return ctx


def test_the_docs_have_commands_to_check():
    assert len(COMMANDS) >= 20
    assert ("operator-guide.md", "mw-env train --config smoke") in COMMANDS


@pytest.mark.parametrize(("doc", "line"), COMMANDS, ids=[f"{d}:{line}" for d, line in COMMANDS])
def test_each_documented_command_parses(doc, line):
    words = shlex.split(line, comments=True)
    if ">" in words:  # `> job.yaml` is the shell's
        words = words[: words.index(">")]
    try:
        ctx = _parse(words[1:])
    except click.exceptions.Exit:  # --help, --version
        return
    except click.ClickException as exc:
        pytest.fail(f"{doc}: `{line}`: {exc.format_message()}")
    if ctx.command.name in ("train", "start") and ctx.params.get("config_name") is None:
        pytest.fail(f"{doc}: `{line}` has no --config: `mw-env train` says `--config is required`")


def _fresh_shell(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {"HOME": os.environ.get("HOME", str(cwd)), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    for key in ("PIP_FIND_LINKS", "UV_CACHE_DIR", "TMPDIR"):
        if key in os.environ:
            env[key] = os.environ[key]
    return subprocess.run(
        ["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )


@pytest.mark.torch
@pytest.mark.slow
def test_next_line_and_the_runnable_blocks_work_pasted_into_a_fresh_shell(tmp_path):
    from mw_env.commands.env import next_line, venv_mw_env

    if venv_mw_env(VENV) is None:
        pytest.skip("the test venv has no mw-env of its own")
    blocks = [b for doc in DOCS for b in RUNNABLE.findall(doc.read_text(encoding="utf-8"))]
    assert blocks, "no docs block is marked <!-- runnable -->"
    first = _fresh_shell(next_line(VENV), tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    assert (tmp_path / "runs" / "smoke" / "MANIFEST.sha256").is_file()
    activate = f"source {shlex.quote(str(VENV / 'bin' / 'activate'))}\nset -e\n"
    for block in blocks:
        res = _fresh_shell(activate + block, tmp_path)
        assert res.returncode == 0, f"{block}\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"


def test_the_readme_names_the_extras_export_and_tracking_need():
    """Issue 20 #10: the first `train export` failed with "No module named 'onnx'" and nothing had said so."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    row = next(line for line in readme.splitlines() if line.startswith("| `mw-env train export"))
    assert "mw-env bootstrap --extras train,export" in row
    assert (
        "`tracking` or `mlflow` extra" in readme and "mw-env bootstrap --extras train,export,mlflow" in readme
    )
    runs = (ROOT / "docs" / "runs.md").read_text(encoding="utf-8")
    for extra in ("export", "tracking", "mlflow"):
        assert f"--extras train,{extra}`" in runs, extra
