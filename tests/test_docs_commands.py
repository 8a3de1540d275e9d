"""Every suggested command works when pasted (issue 20 #3: bootstrap's `next:` line and the operator guide
said `mw-env train`, which fails with `--config is required`).

- Each `mw-env ...` line in a code block of README.md and docs/*.md is parsed by the CLI itself (the command
  chain, every option and value, the required ones; `train` without --config trains the profile's default
  config), without running it. Synopsis lines (with `[`, `<`, `...`) are usage, not commands.
- Blocks the docs mark `<!-- runnable -->` run as written in a fresh shell, after the README's "Then:" block and
  bootstrap's `next:` line for the test venv (a real smoke run: doctor, training, report, manifest).
- Every command block is run by a test or marked `<!-- example: why -->` (issue 30): the README's blocks
  (`<!-- tested: ... -->`) run here, bootstrap as a dry run into a fresh `--venv`, the make targets as `make -n`.
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
    assert ctx.command is not None  # `train` without --config trains the profile's default (trainer.config)


def _fresh_shell(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {"HOME": os.environ.get("HOME", str(cwd)), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    for key in ("PIP_FIND_LINKS", "UV_CACHE_DIR", "TMPDIR"):
        if key in os.environ:
            env[key] = os.environ[key]
    return subprocess.run(
        ["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )


CODE = re.compile(r"^```([a-z]*)\n(.*?)^```", re.M | re.S)
DATA = {"toml", "json", "yaml", "text"}  # what a block of these shows is data or output, not commands
MARK = re.compile(r"<!-- (runnable|tested|example)\b|<!-- tests/\S+ runs this block")
TESTED = re.compile(r"<!-- tested: tests/test_docs_commands\.py ([^>]*)-->\n```bash\n(.*?)^```", re.M | re.S)
TOOL = ROOT / ".venv" / "bin" / "mw-env"  # the README's `.venv/bin/mw-env` (make install)


def test_every_command_block_is_run_by_a_test_or_marked_an_example():
    unmarked = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for m in CODE.finditer(text):
            if m.group(1) in DATA:
                continue
            before = text[: m.start()].rstrip("\n").splitlines()
            if not m.group(1) or not (before and MARK.match(before[-1].strip())):
                first = m.group(2).strip().splitlines()[0] if m.group(2).strip() else ""
                unmarked.append(f"{doc.name}: ```{m.group(1)} {first[:60]}")
    assert not unmarked, (
        "blocks neither run by a test nor marked `<!-- example: why -->` (a block of output or data is "
        f"```text / toml / json / yaml; a block needs a language): {unmarked}"
    )


def _readme_block(kind: str) -> str:
    blocks = [
        body
        for what, body in TESTED.findall((ROOT / "README.md").read_text(encoding="utf-8"))
        if kind in what
    ]
    assert len(blocks) == 1, f"README.md: no one block marked tested for {kind!r}"
    return blocks[0]


def _as_run_here(block: str, fresh: Path) -> str:
    """The README's set-up block as the test runs it: bootstrap a dry run into a fresh venv, `make -n` for the
    suite's targets (running the suite inside the suite is not the point), the tool venv left as it is."""
    out = []
    for line in block.splitlines():
        cmd = re.sub(r"\s+#.*$", "", line).strip()
        if not cmd:
            continue
        words = shlex.split(cmd)
        assert words[0] == "make", f"README set-up block: {cmd!r} is not a make target this test knows"
        if words[1:] == ["bootstrap"]:
            out.append(
                f"make -o .venv/.stamp bootstrap BOOTSTRAP_ARGS={shlex.quote(f'--venv {fresh} --dry-run')}"
            )
        else:
            out.append(shlex.join(["make", "-n", *words[1:]]))
    return "set -e\n" + "\n".join(out)


def test_the_readmes_set_up_block_runs(tmp_path):
    if not TOOL.exists():
        pytest.skip("no .venv/bin/mw-env (make install) in this checkout")
    fresh = tmp_path / "fresh-venv"
    script = _as_run_here(_readme_block("bootstrap as a dry run"), fresh)
    env = {**os.environ, "MW_ENV_STATE_DIR": str(tmp_path / "state")}
    res = subprocess.run(
        ["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert f"venv {fresh}" in res.stdout and "todo torch" in res.stdout  # the plan for the fresh venv
    assert "pytest" in res.stdout and '-m "not slow"' in res.stdout  # make test and make test-fast, unrun
    assert not fresh.exists() and not (tmp_path / "state").exists()  # a dry run changes nothing


@pytest.mark.torch
@pytest.mark.slow
def test_the_readme_then_block_next_line_and_the_runnable_blocks_work_in_a_fresh_shell(tmp_path):
    from mw_env.commands.env import next_line, venv_mw_env

    if venv_mw_env(VENV) is None or not (VENV / "mw-env.json").is_file():
        pytest.skip("the test venv has no mw-env of its own (or no bootstrap record)")
    if not TOOL.exists():
        pytest.skip("no .venv/bin/mw-env (make install) in this checkout")
    blocks = [b for doc in DOCS for b in RUNNABLE.findall(doc.read_text(encoding="utf-8"))]
    assert blocks, "no docs block is marked <!-- runnable -->"
    # The README's "Then:" block after `make bootstrap` built the test venv: recorded as the venv bootstrap
    # built last, which the block's commands (no --venv) must use and name, whatever ~/training-venv holds.
    state = tmp_path / "state"
    state.mkdir()
    (state / "last-venv").write_text(f"{VENV}\n")
    then = _readme_block("fresh shell").replace(".venv/bin/", f"{ROOT}/.venv/bin/")
    readme = _fresh_shell(f"export MW_ENV_STATE_DIR={shlex.quote(str(state))}\nset -e\n{then}", tmp_path)
    assert readme.returncode == 0, readme.stdout[-3000:] + readme.stderr[-3000:]
    assert f"using {VENV}" in readme.stderr and f"(venv {VENV})" in " ".join(readme.stdout.split())
    assert (tmp_path / "runs" / "smoke" / "MANIFEST.sha256").is_file()
    # bootstrap's `next:` line, pasted in the same folder: the finished smoke run is said, exit 0.
    first = _fresh_shell(next_line(VENV), tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
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


def test_every_benchmark_section_states_the_machine_and_its_load():
    """Issue 30: a figure without the machine's load reads as a promise (69 s was 5 min 43 s at load 1)."""
    text = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    sections = re.split(r"^#{2,3} ", text, flags=re.M)[1:]
    assert sections
    for section in sections:
        if "|---" not in section:
            continue  # a heading over subsections, no figures of its own
        title = section.splitlines()[0]
        assert "CPUs" in section and "load" in section, (
            f"docs/benchmarks.md, {title!r}: machine or load unstated"
        )


def test_no_doc_promises_the_fast_suite_in_two_minutes():
    for path in (ROOT / "README.md", ROOT / "Makefile", ROOT / "docs" / "design.md"):
        assert "under two minutes" not in path.read_text(encoding="utf-8"), path.name
