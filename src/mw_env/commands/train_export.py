"""`mw-env train export`: ONNX export of a checkpoint, or (`--format safetensors`) its portable weights folder,
run inside the training venv (torch lives there)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import click

from mw_env.base.errors import InputError, MwEnvError
from mw_env.commands.common import echo_json, json_option, venv_option
from mw_env.rundir.contract import ONNX_SUFFIX

if TYPE_CHECKING:
    from mw_env.base.stopsignals import ChildEnd


@click.command(
    "export",
    epilog="Exit codes: 0 exported and verified, 1 export or verification failed, 2 bad input, 128+N stopped "
    "by signal N (nothing of it kept).",
)
@click.argument("checkpoint", required=False, type=click.Path(path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["onnx", "safetensors"]),
    default="onnx",
    show_default=True,
    help="onnx: a verified ONNX model for serving; safetensors: the portable weights folder (model.safetensors, "
    "config.json, the modeling file), loadable by plain torch.",
)
@click.option(
    "--out-dir",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Run folder whose newest valid checkpoint to export (when no CHECKPOINT is given).",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="ONNX file to write (default <run>/export/model-step-N.onnx); with --format safetensors the folder "
    "(default <run>/weights/step-N).",
)
@venv_option("Training venv", folder_only=True)
@click.option("--opset", type=click.IntRange(min=14), default=18, show_default=True)
@click.option(
    "--max-diff",
    type=click.FloatRange(min=0, min_open=True),
    default=1e-4,
    show_default=True,
    help="Largest allowed |logit difference| between onnxruntime and PyTorch.",
)
@click.option(
    "--exporter", type=click.Choice(["auto", "dynamo", "torchscript"]), default="auto", show_default=True
)
@click.option(
    "--quantize",
    type=click.Choice(["int8"]),
    default=None,
    help="Also write <stem>.int8.onnx (onnxruntime dynamic quantization), verified against PyTorch.",
)
@click.option(
    "--fp16", is_flag=True, help="Also write <stem>.fp16.onnx (fp16 weights, fp32 inputs/outputs), verified."
)
@click.option(
    "--min-agreement",
    type=click.FloatRange(min=0, max=1, min_open=True),
    default=0.98,
    show_default=True,
    help="Share of real tokens on which an int8/fp16 model must pick PyTorch's label.",
)
@json_option
def export(
    checkpoint: Path | None,
    fmt: str,
    out_dir: Path | None,
    out: Path | None,
    venv: Path | None,
    opset: int,
    max_diff: float,
    exporter: str,
    quantize: str | None,
    fp16: bool,
    min_agreement: float,
    as_json: bool,
) -> int:
    """Export a checkpoint (or a run's newest) to ONNX, verified with onnxruntime against PyTorch; or, with
    --format safetensors, write its portable weights folder (docs/training.md, Portable weights)."""
    target = checkpoint or out_dir
    if target is None:
        raise click.UsageError("name a CHECKPOINT (step-*.pt or a run folder), or pass --out-dir")
    if fmt == "safetensors":
        if quantize or fp16:
            raise click.UsageError("--quantize and --fp16 make ONNX variants: they need --format onnx")
        return _export_weights(Path(target), out, venv, as_json)
    if out is not None:
        from mw_env.base.atomic import refuse_special

        refuse_special(out)  # before the venv's python starts; the trainer's writer refuses it too
    python, env = _venv_python(venv)
    _check_export_extra(python.parent.parent)
    argv = [
        str(python),
        "-m",
        "mw_env.trainer.export.onnx_export",
        str(Path(target).resolve()),
        "--opset",
        str(opset),
        "--max-diff",
        repr(max_diff),
        "--exporter",
        exporter,
        "--min-agreement",
        repr(min_agreement),
    ]
    if quantize:
        argv += ["--quantize", quantize]
    if fp16:
        argv.append("--fp16")
    if out is not None:
        argv += ["--out", str(out.resolve())]
    if not as_json:
        click.echo(f"exporting {target} to ONNX with {python} (verifying with onnxruntime)...", err=True)
    from mw_env.base.stopsignals import run_child

    result: dict = _result(
        *run_child(argv, env=env, stdout=subprocess.PIPE)
    )  # dies with us; signals reach it
    if as_json:
        echo_json(result)
        return 0
    click.echo(
        f"wrote {result['onnx']} (step {result['step']}, {result['exporter']} exporter, opset {result['opset']})"
    )
    click.echo(f"  sha256 {result['sha256']}")
    click.echo(
        f"  verified on {len(result['cases'])} held-out batches: max |diff| {result['max_abs_diff']:.2e} "
        f"<= {result['bound']:g}, argmax agreement {100 * result['argmax_agreement']:.2f}%"
    )
    for kind, variant in (result.get("variants") or {}).items():
        v = variant["verification"]
        click.echo(
            f"  {kind}: {variant['onnx']} ({variant['bytes'] / 1e6:.1f} MB), argmax agreement "
            f"{100 * v['argmax_agreement']:.2f}% (>= {100 * v['min_agreement']:g}%), max |diff| "
            f"{v['max_abs_diff']:.2e}, mean |diff| {v['mean_abs_diff']:.2e}"
        )
    click.echo(f"  metadata {result['metadata']} (id layout, labels, tokenizer, shapes)")
    others = [Path(f).name for f in result.get("files", []) if Path(f).suffix not in (ONNX_SUFFIX, ".json")]
    if others:
        click.echo(f"  beside it: {', '.join(others)}")
    check = result.get("runtime_check") or {}
    if check:
        click.echo(f"  mw_tagger.py checked (onnxruntime alone): {' '.join(check['example'])}")
    click.echo(
        f"  manifest {result['manifest']}"
        if result.get("manifest")
        else f"  note: {'; '.join(result['notes'])}"
    )
    return 0


def _export_weights(target: Path, out: Path | None, venv: Path | None, as_json: bool) -> int:
    """--format safetensors: trainer/weights/export.py in the venv, its JSON line read back."""
    python, env = _venv_python(venv)
    from mw_env.trainspec.extras import bootstrap_hint, installed

    root = python.parent.parent
    if "safetensors" not in installed(root):
        raise InputError(
            f"train export --format safetensors needs safetensors, which the training venv {root} does not have",
            hint=f"add it with the train extra again: {bootstrap_hint(root)}",
        )
    argv = [str(python), "-m", "mw_env.trainer.weights.export", str(target.expanduser().resolve())]
    if out is not None:
        argv += ["--out", str(out.expanduser().resolve())]
    if not as_json:
        click.echo(f"writing the portable weights of {target} with {python}...", err=True)
    from mw_env.base.stopsignals import run_child

    # trainer/weights/export.py's result: folder, step, checkpoint, files, max_abs_diff, manifest.
    result: dict = _result(
        *run_child(argv, env=env, stdout=subprocess.PIPE)
    )  # dies with us; signals reach it
    if as_json:
        echo_json(result)
        return 0
    click.echo(f"wrote {result['folder']} (step {result['step']}, from {result['checkpoint']})")
    click.echo(f"  files: {', '.join(result['files'])}")
    click.echo(
        f"  read back as `train predict --weights` reads it: max |logit difference| {result['max_abs_diff']:.1e}"
    )
    click.echo("  load it without mw-env: docs/training.md, Portable weights (torch + safetensors)")
    if result.get("manifest"):
        click.echo(f"  manifest {result['manifest']}")
    return 0


def _result(end: ChildEnd, stdout: str) -> dict[str, object]:
    """The last JSON line a venv-side command printed; its error raised as mw-env's own, and a child that
    ended without one (a stop, a kill, a crash) said in words (no_result)."""
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    try:
        result = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        raise no_result("export", end) from None
    return child_result(result)


def child_result(result: dict) -> dict[str, object]:
    """A venv-side command's result, its error raised as mw-env's own."""
    if "error" in result:
        raise MwEnvError(
            str(result["error"]), hint=result.get("hint"), exit_code=int(result.get("exit_code") or 1)
        )
    return dict(result)


def no_result(command: str, end: ChildEnd) -> MwEnvError:
    """The child in the training venv ended without its result: how it ended, in words."""
    from mw_env.base.stopsignals import exit_code, signal_words

    if end.stopped_by is not None:
        return MwEnvError(
            f"train {command} was stopped by {signal_words(end.stopped_by)} before it finished: nothing of it was "
            "kept (its output is written whole or not at all)",
            hint="run the same command again",
            exit_code=exit_code(end.stopped_by),
        )
    if end.returncode < 0:
        return MwEnvError(
            f"train {command}'s process in the training venv was killed by {signal_words(-end.returncode)} (not "
            "by mw-env): nothing of it was kept",
            hint="run the same command again; a SIGKILL nobody sent is often the kernel's out-of-memory killer "
            "(`journalctl -k`)",
        )
    return MwEnvError(
        f"train {command} ended with code {end.returncode} and no result",
        hint="its error is above; is the training venv complete (`mw-env doctor`)?",
    )


def _venv_python(venv: Path | None) -> tuple[Path, dict[str, str]]:
    """The training venv's python and an env in which it imports this mw-env."""
    from mw_env.runs.launch import source_pythonpath, training_python
    from mw_env.venv.record import default_venv, read_record

    venv_path = Path(venv).expanduser() if venv else default_venv(os.environ)
    python = training_python(venv_path)
    env = dict(os.environ)
    record = read_record(venv_path)
    if record:
        env.update(record.env)
    if pythonpath := source_pythonpath(env):
        env["PYTHONPATH"] = pythonpath
    env.pop("PYTHONHOME", None)
    return python, env


def _check_export_extra(venv: Path) -> None:
    """onnx/onnxruntime/onnxscript in the venv, read from its metadata here (a second), not found missing by the
    export process after its torch import: `error:`/`hint:` with the bootstrap command, exit 2."""
    from mw_env.base.errors import InputError
    from mw_env.trainspec.extras import bootstrap_hint, missing

    lacking = missing(venv, "export")
    if lacking:
        raise InputError(
            f"train export needs {', '.join(lacking)}, which the training venv {venv} does not have",
            hint=f"add the `export` extra: {bootstrap_hint(venv, 'export')}",
        )
