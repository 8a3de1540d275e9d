"""`mw-env train check`: every row of the config's files read once, before any training (trainspec/datacheck.py).

The rows are read with pyarrow: here when mw-env's interpreter has it, else in the training venv's python
(`python -m mw_env.trainspec.datacheck`, the venv has it: the `train` extra), whose JSON lines (progress,
then the report) are read back. ReadProgress goes to stderr (a line every PROGRESS_S on a terminal, every
PROGRESS_PIPE_S otherwise); the findings to stdout, or the report as JSON with --json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import click

from mw_env.base.errors import EXIT_FAILED, InputError, MwEnvError
from mw_env.trainspec.config import TrainConfig
from mw_env.trainspec.datacheck import ReadProgress

PROGRESS_S, PROGRESS_PIPE_S = 2.0, 10.0


def _progress_printer() -> Callable[[ReadProgress], None]:
    every = PROGRESS_S if sys.stderr.isatty() else PROGRESS_PIPE_S
    last = [time.monotonic()]

    def show(p: ReadProgress) -> None:
        now = time.monotonic()
        if now - last[0] < every:
            return
        last[0] = now
        share = f", {100 * p.done_bytes / p.total_bytes:.0f}% of the bytes" if p.total_bytes else ""
        click.echo(f"  read {p.rows:,} rows{share} ({Path(p.path).name})", err=True)

    return show


def _in_venv(
    config: TrainConfig, base: Path, venv: Path | None, show: Callable[[ReadProgress], None]
) -> dict[str, object]:
    """The check run by the training venv's python (mw-env's own has no pyarrow)."""
    python = venv / "bin" / "python" if venv else None
    if python is None or not python.exists():
        raise InputError(
            "train check reads the rows with pyarrow, which neither mw-env's python nor a training venv has",
            hint="bootstrap the training venv (`mw-env bootstrap`), or point MW_ENV_VENV at it",
        )
    from mw_env.runs.launch import source_pythonpath

    env = dict(os.environ)
    if pythonpath := source_pythonpath(env):
        env["PYTHONPATH"] = pythonpath
    request = json.dumps({"config": config.to_dict(), "base": str(base)})
    proc = subprocess.Popen(
        [str(python), "-m", "mw_env.trainspec.datacheck", request],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    result: dict[str, object] | None = None
    for line in proc.stdout:
        msg = json.loads(line)
        if "progress" in msg:
            show(ReadProgress(**msg["progress"]))
        elif "error" in msg:
            e = msg["error"]
            proc.wait()
            raise (
                MwEnvError(e["message"], hint=e.get("hint"))
                if e.get("exit") != 2
                else InputError(e["message"], hint=e.get("hint"))
            )
        else:
            result = msg["report"]
    err = proc.stderr.read()
    if proc.wait() != 0 or result is None:
        raise MwEnvError(
            f"the check in {python} failed: {err.strip().splitlines()[-1] if err.strip() else proc.returncode}",
            hint="run `mw-env doctor`: the training venv may be damaged",
        )
    return result


def run_check(config: TrainConfig, *, venv: Path | None, as_json: bool) -> int:
    from mw_env.trainspec.checkreport import findings, verdict
    from mw_env.trainspec.datacheck import check_dataset
    from mw_env.trainspec.preflight import check_columns, check_labels

    if config.data.source != "files":
        raise InputError(
            "train check reads a corpus of files, and this config trains on the synthetic corpus",
            hint="name your files: --set 'data.train_files=[/data/*.parquet]' (data.source=files is implied)",
        )
    base = Path.cwd()
    check_labels(config)
    check_columns(config, base, venv, tags=False)  # the files and their columns; the rows are read below
    from mw_env.trainspec.files import expand_files

    d = config.data
    paths = [
        p
        for key, globs in (*d.train_globs(), ("data.val_files", d.val_files))
        for p in expand_files(globs, key, base)
    ]
    size = sum(p.stat().st_size for p in paths)
    click.echo(f"reading every row of {len(paths)} file(s), {size / 1e6:,.1f} MB ...", err=True)
    show = _progress_printer()
    try:
        import pyarrow  # noqa: F401  (here or in the venv)
    except ImportError:
        report = _in_venv(config, base, venv, show)
    else:
        report = check_dataset(config, base=base, progress=show).to_dict()
    items = findings(report, config)
    if as_json:
        from mw_env.commands.common import echo_json

        echo_json({**report, "findings": [f.__dict__ for f in items], "verdict": verdict(items)})
    else:
        for f in items:
            prefix = "" if f.level == "info" else f"{f.level}: "
            click.echo(prefix + f.text)
            if f.hint:
                click.echo(f"  {'hint' if f.level != 'info' else 'paste'}: {f.hint}")
        click.echo(verdict(items))
    return EXIT_FAILED if any(f.level == "error" for f in items) else 0
