"""`mw-env train predict` and `mw-env train evaluate`: tag addresses with a run's model, or score it on labelled
rows. Both run mw_env.trainer.predict inside the training venv (torch lives there), as `train export` does."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import click

from mw_env.base.errors import InputError
from mw_env.commands.common import echo_json, json_option, venv_option

_RUN = click.argument("run", required=False, type=click.Path(path_type=Path))
_VENV = venv_option("Training venv", folder_only=True)
_EXPORT = click.option(
    "--export",
    "export_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Use this ONNX export (a folder, newest model-step-N.json; or the .json) instead of the newest "
    "checkpoint; needs the `export` extra.",
)
_WEIGHTS = click.option(
    "--weights",
    "weights_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Use this portable weights folder (model.safetensors + config.json; or a run folder: its newest) "
    "instead of a checkpoint; RUN may be left out.",
)
_TOKENS = click.option(
    "--tokens-column", default=None, help="The words' column/key (default: the run's, `tokens`)."
)
_TAGS = click.option("--tags-column", default=None, help="The tags' column/key (default: the run's, `tags`).")
_DEVICE = click.option(
    "--device",
    default="auto",
    show_default=True,
    help="cpu, cuda, cuda:N, or auto (a GPU when torch sees one).",
)


@click.command(
    "predict",
    epilog="Exit codes: 0 tagged, 1 the model could not be run or the output not written, 2 bad input, "
    "128+N stopped by signal N (130 Ctrl-C, 143 SIGTERM).",
)
@_RUN
@click.option(
    "--input",
    "input_path",
    required=True,
    type=click.Path(path_type=Path),
    help="JSONL, Parquet or text file.",
)
@click.option(
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Where the tagged rows go: .parquet, else JSONL (default: JSONL on stdout).",
)
@_EXPORT
@_WEIGHTS
@_TOKENS
@_TAGS
@_DEVICE
@_VENV
def predict(
    run: Path | None,
    input_path: Path,
    output: Path | None,
    export_dir: Path | None,
    weights_dir: Path | None,
    tokens_column: str | None,
    tags_column: str | None,
    device: str,
    venv: Path | None,
) -> int:
    """Tag the addresses in --input with RUN's newest checkpoint (or --export, or --weights): one {tokens, tags}
    row each.

    Input: .jsonl (a `tokens` list, or a `text`/`address` string, per line), .parquet (the same columns), or
    plain text, one address a line; streamed, so any size. A file output appears whole or not at all."""
    args = ["--input", str(_input(input_path, "--input")), *_weights_args(run, weights_dir, export_dir)]
    if output is not None:
        from mw_env.base.atomic import refuse_special

        refuse_special(output)  # before the venv's python starts; the writer refuses it too
        args += ["--output", str(output.expanduser().resolve())]
    else:
        from mw_env.base.streams import require_stdout

        require_stdout()  # closed when mw-env started: exit 1 now, not rows tagged into /dev/null
    result = _run_in_venv("predict", run, args, export_dir, tokens_column, tags_column, device, venv)
    where = result["output"] or "stdout"
    click.echo(
        f"tagged {result['rows']:,} rows ({result['words']:,} words) with {result['model']} -> {where}"
        + (
            f"; {result['truncated_words']:,} words past the model's max_len tagged O"
            if result["truncated_words"]
            else ""
        ),
        err=True,
    )
    return 0


@click.command(
    "evaluate",
    epilog="Exit codes: 0 scored, 1 the model could not be run, 2 bad input, 128+N stopped by signal N "
    "(130 Ctrl-C, 143 SIGTERM).",
)
@_RUN
@click.option(
    "--data",
    required=True,
    type=click.Path(path_type=Path),
    help="Labelled rows: .jsonl or .parquet with words and gold BIO tags.",
)
@_EXPORT
@_WEIGHTS
@_TOKENS
@_TAGS
@_DEVICE
@_VENV
@json_option
def evaluate(
    run: Path | None,
    data: Path,
    export_dir: Path | None,
    weights_dir: Path | None,
    tokens_column: str | None,
    tags_column: str | None,
    device: str,
    venv: Path | None,
    as_json: bool,
) -> int:
    """Score RUN's newest checkpoint (or --export) on labelled rows: word accuracy, exact-address rate,
    entity precision/recall/F1 in strict IOB2 and conlleval modes, per-type F1, the commonest confusions."""
    args = ["--data", str(_input(data, "--data")), *_weights_args(run, weights_dir, export_dir)]
    result = _run_in_venv("evaluate", run, args, export_dir, tokens_column, tags_column, device, venv)
    if as_json:
        echo_json(result)
        return 0
    for line in render_evaluation(result):
        click.echo(line)
    return 0


def render_evaluation(r: dict[str, object]) -> list[str]:
    """The evaluation as text lines (the --json document, read back)."""
    entity = r["entity"]
    assert isinstance(entity, dict)
    lines = [
        f"{r['model']} on {r['data']}: {r['rows']:,} rows, {r['words']:,} words",
        f"  word accuracy (BIO tag per word)  {r['word_accuracy']:.4f}",
        f"  exact-address rate (every word)   {r['exact_address_rate']:.4f}",
    ]
    for mode in ("strict", "conlleval"):
        e = entity[mode]
        note = "  (the run's runtime.f1_mode)" if mode == r.get("f1_mode") else ""
        lines.append(
            f"  entity F1 {mode:<9}  {e['f1']:.4f}  (precision {e['precision']:.4f}, recall {e['recall']:.4f}){note}"
        )
    per = entity["strict"]["per_type"]
    if per:
        lines.append("  per type (strict):   F1      P      R  support")
        for typ, v in sorted(per.items(), key=lambda kv: -kv[1]["support"]):
            lines.append(
                f"    {typ:<16} {v['f1']:.4f} {v['precision']:.4f} {v['recall']:.4f} {v['support']:>8,}"
            )
    confusions = r.get("confusions") or []
    assert isinstance(confusions, list)
    if confusions:
        lines.append("  commonest confusions (gold -> predicted, words):")
        lines += [f"    {c['gold']} -> {c['predicted']}: {c['count']:,}" for c in confusions]
    if r.get("truncated_words"):
        lines.append(
            f"  note: {r['truncated_words']:,} words past the model's max_len were scored as tagged O"
        )
    return lines


def _weights_args(run: Path | None, weights: Path | None, export: Path | None) -> list[str]:
    """--weights for the venv's side; RUN or --weights must name the model, --export or --weights (not both)."""
    if weights is not None and export is not None:
        raise click.UsageError("--weights and --export name two models: pick one")
    if weights is None:
        if run is None:
            raise click.UsageError("name a RUN (a run folder or a step-*.pt), or --weights DIR")
        return []
    return ["--weights", str(weights.expanduser().resolve())]


def _input(path: Path, option: str) -> Path:
    """The input file, checked here before the venv's python starts (and imports torch) for nothing."""
    import os
    import stat

    full = path.expanduser().resolve()
    try:
        st = os.stat(full)
    except OSError as exc:
        raise InputError(
            f"{option} {path}: cannot read it: {exc.strerror or exc}", hint="check the path"
        ) from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(
            f"{option} {path} is not a regular file", hint="name a .jsonl, .parquet or text file"
        )
    return full


def _run_in_venv(
    command: str,
    run: Path | None,
    args: list[str],
    export_dir: Path | None,
    tokens_column: str | None,
    tags_column: str | None,
    device: str,
    venv: Path | None,
) -> dict[str, object]:
    from mw_env.commands.train_export import _check_export_extra, _venv_python

    python, env = _venv_python(venv)
    if export_dir is not None:
        _check_export_extra(python.parent.parent)
        args += ["--export", str(export_dir.expanduser().resolve())]
    for flag, value in (("--tokens-column", tokens_column), ("--tags-column", tags_column)):
        if value:
            args += [flag, value]
    from mw_env.base.stopsignals import run_child
    from mw_env.commands.train_export import child_result, no_result
    from mw_env.rundir.contract import RESULT_FOLDER_PREFIX

    with tempfile.TemporaryDirectory(prefix=RESULT_FOLDER_PREFIX) as tmp:
        result_file = Path(tmp) / "result.json"
        target = [str(run.expanduser().resolve())] if run is not None else []
        argv = [str(python), "-m", "mw_env.trainer.predict", command, *target, *args]
        argv += ["--device", device, "--result", str(result_file)]
        # stdout is the user's (predict without --output writes its rows there); the result comes back in a
        # file. The child dies with us, and our stop signals reach it (base/stopsignals.py).
        sys.stdout.flush()
        end, _ = run_child(argv, env=env)
        try:
            result = json.loads(result_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise no_result(command, end) from None
    if isinstance(result.get("stdout_errno"), int):
        from mw_env.base.streams import StdoutLost

        # The child's rows met a closed, full or broken stdout: the CLI's rule for stdout says it (exit 1).
        raise StdoutLost(OSError(result["stdout_errno"], os.strerror(result["stdout_errno"])))
    return child_result(result)
