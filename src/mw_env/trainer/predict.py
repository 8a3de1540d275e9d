"""`mw-env train predict` and `mw-env train evaluate`, inside the training venv's python:

    python -m mw_env.trainer.predict predict RUN --input FILE [--output FILE] [--export DIR] --result R.json
    python -m mw_env.trainer.predict evaluate RUN --data FILE [--export DIR] --result R.json
    python -m mw_env.trainer.predict predict --weights DIR --input FILE ... (a portable weights folder, no RUN)

RUN is a run folder (its newest valid checkpoint) or a step-*.pt file. The rows go through the run's own
encoder (data/corpus.encoder_for) and the evaluation's forward pass (evaluate.batch_logits), so what the
model reads is what training fed it. With --export, the ONNX export's runtime helper (mw_tagger.Tagger,
onnxruntime) tags instead: the model a service would run. A word the model cannot see (past model.max_len
tokens) is tagged "O" and counted (`truncated_words`). The result (or {"error", "hint", "exit_code"}) is
written as JSON to --result; predictions go to --output or stdout.

Three parts, each replaceable alone: a reader (tagio.iter_rows: the input streamed, a batch of rows at a
time), a tagger (`make_tagger`: a checkpoint's model, a portable weights folder's or an ONNX export; `tagged`
is the one place that calls it), and a writer (tagout.TaggedWriter: stdout, or a file through the atomic
writer). Memory stays flat however long the input. A stop signal (SIGINT, SIGTERM, SIGHUP) ends the job where
it is: the output file, never committed, is not there; the result says so, with 128 + the signal's number as its
exit code.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from mw_env.base.errors import EXIT_FAILED, InputError, MwEnvError, os_error_in, os_fault
from mw_env.rundir.contract import EXPORT_META_GLOB, ONNX_SUFFIX, RESULT_FOLDER_PREFIX
from mw_env.trainer.scoring import Tally
from mw_env.trainer.tagio import Row, iter_rows
from mw_env.trainer.tagout import StdoutFailed, TaggedWriter

if TYPE_CHECKING:
    from mw_env.trainspec.schema import F1Mode

OUTSIDE = "O"  # the tag of a word past the model's max_len
BATCH_ROWS = 512  # rows read, tagged and written at a time


class WordTagger(Protocol):
    labels: list[str]
    what: str  # the checkpoint or export file, for the result
    step: int | None
    tokens_column: str
    tags_column: str
    f1_mode: F1Mode
    truncated: int  # words the model could not see (past model.max_len), tagged OUTSIDE, so far

    def tag(self, rows: Sequence[list[str]]) -> list[list[str]]: ...


class CheckpointTagger:
    """A checkpoint's model on this machine's device (fp32), fed by the run's own encoder."""

    def __init__(
        self, target: Path | None, *, batch_size: int = 64, device: str = "auto", weights: Path | None = None
    ) -> None:
        import torch

        from mw_env.trainer.ckpt.checkpoint import model_from_checkpoint
        from mw_env.trainer.ckpt.newest import newest_checkpoint
        from mw_env.trainer.data.corpus import encoder_for
        from mw_env.trainer.data.labels import LabelSet
        from mw_env.trainer.decoding import Decoder
        from mw_env.trainer.runtime import resolve_precision
        from mw_env.trainspec.config import config_from_dict

        self.step: int | None
        if weights is not None:  # a portable weights folder (trainer/weights/load.py), read the same way
            from mw_env.trainer.weights.load import model_from_weights

            model, tokenizer, labels, config, self.what, self.step = model_from_weights(weights)
        else:
            assert target is not None  # main() asks for RUN or --weights
            # Loaded once, the newest complete one: a run may be writing its next checkpoint beside us.
            path, ckpt = newest_checkpoint(target, warn=lambda msg: print(msg, file=sys.stderr, flush=True))
            model, tokenizer, labels = model_from_checkpoint(ckpt)
            config = config_from_dict(ckpt["config"])
            self.what, self.step = str(path), int(ckpt["step"])
        self.labels = labels
        self.tokens_column, self.tags_column = config.data.tokens_column, config.data.tags_column
        self.f1_mode = config.runtime.f1_mode
        self.label_set = LabelSet(tuple(labels), "checkpoint")
        self.encoder = encoder_for(tokenizer, self.label_set, config)
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        self.model = model.to(self.device)
        self.precision = resolve_precision("fp32", self.device)
        self.sdpa_backend = config.runtime.sdpa_backend
        self.batch_size = batch_size
        self.truncated = 0
        self.decoder = Decoder(labels, config.model.decode)

    def tag(self, rows: Sequence[list[str]]) -> list[list[str]]:
        import numpy as np
        import pyarrow as pa
        import torch

        from mw_env.trainer.data.reader import SYNTHETIC, Chunk
        from mw_env.trainer.data.stream import Rows, gather
        from mw_env.trainer.evaluate import batch_logits, word_scores

        # The rows in memory, through the run's encoder and the corpus's gather/pad: what training fed the
        # model. Any label will do as the input's tag: it only marks each word's first sub-token, where the
        # prediction is read (a word cut off by max_len has none).
        typ, n = pa.list_(pa.string()), len(rows)
        tags = pa.array([[self.labels[0]] * len(w) for w in rows], typ)
        chunk = Chunk(
            pa.array(rows, typ), tags, np.zeros(n, np.int32), np.full(n, SYNTHETIC, np.int32), np.arange(n)
        )
        encoded = Rows([(chunk, self.encoder.encode(chunk.tokens, chunk.tags))], self.label_set, [])
        out: list[list[str]] = []
        with torch.no_grad():
            for start in range(0, n, self.batch_size):
                idx = np.arange(start, min(start + self.batch_size, n))
                batch = gather([(encoded, idx)], None)
                logits = batch_logits(
                    self.model, batch.to(self.device), self.device, self.precision, self.sdpa_backend
                )
                for r, scores in zip(idx.tolist(), word_scores(logits, batch.labels), strict=True):
                    seen = self.decoder.tags(scores)
                    self.truncated += len(rows[r]) - len(seen)
                    out.append(seen + [OUTSIDE] * (len(rows[r]) - len(seen)))
        return out


class ExportTagger:
    """An ONNX export (its metadata JSON, or the newest in an export folder) through mw_tagger.Tagger."""

    def __init__(self, export: Path) -> None:
        from mw_env.trainer.export.runtime import Tagger as OnnxTagger

        meta = _newest_metadata(export)
        _check_metadata(meta)
        try:
            self.tagger = OnnxTagger(meta)
            self.tagger.session  # noqa: B018 - the model is loaded now: a damaged .onnx is told before any row
        except Exception as exc:  # onnxruntime's own kinds (InvalidProtobuf, Fail, ...) and the helper's
            raise InputError(
                f"--export {meta}: not a usable ONNX export ({type(exc).__name__}: "
                f"{(str(exc).splitlines() or [''])[0][:300]})",
                hint="export the run again (`mw-env train export --out-dir RUN`); a copy cut short, or a "
                "metadata file from elsewhere, does not load",
            ) from None
        self.labels, self.what = self.tagger.labels, str(meta)
        digits = meta.stem.rpartition("-")[2]  # model-step-000001000
        self.step: int | None = int(digits) if digits.isdigit() else None
        self.tokens_column, self.tags_column = "tokens", "tags"
        self.f1_mode: F1Mode = "conlleval"
        self.truncated = 0

    def tag(self, rows: Sequence[list[str]]) -> list[list[str]]:
        out = []
        for words in rows:
            seen = [t for _, t in self.tagger.tag(words, truncate=True)] if words else []
            self.truncated += len(words) - len(seen)
            out.append(seen + [OUTSIDE] * (len(words) - len(seen)))
        return out


def _newest_metadata(export: Path) -> Path:
    export = export.expanduser()
    if export.is_file() and export.suffix == ".json":
        return export
    if export.is_dir():
        found = [p for p in export.glob(EXPORT_META_GLOB) if p.with_suffix(ONNX_SUFFIX).exists()]
        if found:
            return max(found, key=lambda p: (p.stem, p.stat().st_mtime))
    raise InputError(
        f"--export {export}: no ONNX export there (model-step-N.json beside its .onnx)",
        hint="export the run first (`mw-env train export --out-dir RUN`), or name the export's .json",
    )


def _check_metadata(meta: Path) -> None:
    """The export's metadata read as the project reads a user's file (regular, bounded, UTF-8, one JSON
    object, no key twice) before the runtime helper (which trusts it) does."""
    from mw_env.base import userfile, userjson

    text = userfile.read_text(meta, what="export metadata", max_bytes=16 << 20)
    data = userjson.load_json(text, source=f"--export {meta}", hint="export the run again")
    if not isinstance(data, dict):
        raise InputError(
            f"--export {meta}: holds {type(data).__name__}, not an export's metadata object",
            hint="name the model-step-N.json that `mw-env train export` wrote beside its .onnx",
        )


def make_tagger(
    target: Path | None, export: Path | None, device: str, weights: Path | None = None
) -> WordTagger:
    if export is not None:
        return ExportTagger(export)
    return CheckpointTagger(target, device=device, weights=weights)


def _rows(
    tagger: WordTagger, path: Path, args: argparse.Namespace, *, need_tags: bool = False
) -> Iterator[Row]:
    return iter_rows(
        path,
        tokens_column=args.tokens_column or tagger.tokens_column,
        tags_column=args.tags_column or tagger.tags_column,
        need_tags=need_tags,
    )


@dataclass
class JobProgress:
    """How far the job got (rows tagged, words in them): the result's counts, and a stop's sentence."""

    rows: int = 0
    words: int = 0


def tagged(
    tagger: WordTagger, rows: Iterable[Row], progress: JobProgress, *, batch_rows: int = BATCH_ROWS
) -> Iterator[tuple[Row, list[str]]]:
    """Each row with its predicted tags, in order, a batch at a time: the one call of the tagger."""
    from mw_env.trainer.lifecycle import hold

    batch: list[Row] = []

    def flush() -> Iterator[tuple[Row, list[str]]]:
        predicted = tagger.tag([r.words for r in batch])
        if not progress.rows:
            hold("predict")  # the fault harness: mid-job, the output's temporary file open (lifecycle.py)
        for row, tags in zip(batch, predicted, strict=True):
            progress.rows += 1
            progress.words += len(row.words)
            yield row, tags

    for row in rows:
        batch.append(row)
        if len(batch) >= batch_rows:
            yield from flush()
            batch = []
    if batch:
        yield from flush()


def predict(args: argparse.Namespace, progress: JobProgress | None = None) -> dict[str, object]:
    progress = progress if progress is not None else JobProgress()
    tagger = make_tagger(args.run, args.export, args.device, args.weights)
    with TaggedWriter(args.output) as out:
        for row, tags in tagged(tagger, _rows(tagger, args.input, args), progress):
            out.write(row.words, tags)
    return {
        "model": tagger.what,
        "step": tagger.step,
        "input": str(args.input),
        "output": str(args.output) if args.output else None,
        "rows": progress.rows,
        "words": progress.words,
        "truncated_words": tagger.truncated,
    }


def evaluate(args: argparse.Namespace, progress: JobProgress | None = None) -> dict[str, object]:
    progress = progress if progress is not None else JobProgress()
    tagger = make_tagger(args.run, args.export, args.device, args.weights)
    tally = Tally()
    column = args.tags_column or tagger.tags_column
    rows = _bio_checked(_rows(tagger, args.data, args, need_tags=True), args.data, column)
    for row, pred in tagged(tagger, rows, progress):
        assert row.tags is not None  # need_tags
        tally.add(row.tags, pred)
    return {
        "model": tagger.what,
        "step": tagger.step,
        "data": str(args.data),
        "f1_mode": tagger.f1_mode,  # the run's runtime.f1_mode: the mode its own eval showed
        "truncated_words": tagger.truncated,
        **tally.report(),
    }


def refuse_plain_tags(gold: set[str], path: Path, column: str) -> None:
    """Plain gold tags (no B-/I-) score no entity: an F1 of 0.0 over a support of 0, said as if measured.
    Refused as training refuses them (trainspec/labelscan.py), with the conversion to paste."""
    from mw_env.trainspec.labelscan import not_bio, not_bio_error

    if plain := not_bio(gold):
        raise not_bio_error(
            plain, f"{path}: the gold tags ({column!r})", column=column, jsonl=Path(path).suffix == ".jsonl"
        )


def _bio_checked(rows: Iterator[Row], path: Path, column: str) -> Iterator[Row]:
    """The rows as they stream by, each new gold tag checked before its row is tagged: plain tags are refused
    at the first row that holds one (refuse_plain_tags), without reading the whole input first."""
    seen: set[str] = set()
    for row in rows:
        new = set(row.tags or ()) - seen
        if new:
            refuse_plain_tags(new, path, column)
            seen |= new
        yield row


def _stopped(command: str, signum: int, progress: JobProgress, output: Path | None) -> dict[str, object]:
    from mw_env.base.stopsignals import exit_code, signal_words

    done = f"after {progress.rows:,} rows"
    if command == "evaluate":
        kept = "no score was computed"
    elif output is None:
        kept = "the rows tagged so far went to standard output"
    else:
        kept = f"{output} was not written (it is written whole or not at all)"
    return {
        "error": f"train {command} was stopped by {signal_words(signum)} {done}: {kept}",
        "hint": "run the same command again",
        "exit_code": exit_code(signum),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mw_env.trainer.predict")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("predict", "evaluate"):
        s = sub.add_parser(name)
        s.add_argument("run", type=Path, nargs="?", default=None)
        if name == "predict":
            s.add_argument("--input", type=Path, required=True)
            s.add_argument("--output", type=Path, default=None)
        else:
            s.add_argument("--data", type=Path, required=True)
        s.add_argument("--export", type=Path, default=None)
        s.add_argument("--weights", type=Path, default=None)
        s.add_argument("--tokens-column", default=None)
        s.add_argument("--tags-column", default=None)
        s.add_argument("--device", default="auto")
        s.add_argument("--result", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.run is None and args.weights is None:
        parser.error("name a RUN (a run folder or a step-*.pt), or --weights DIR")
    if args.weights is not None and args.export is not None:
        parser.error("--weights and --export name two models: pick one")
    from mw_env.base.stopsignals import Stopped, stop_on_signals

    parent = os.getppid()
    progress = JobProgress()
    result: dict[str, object]
    try:
        with (
            stop_on_signals()
        ):  # before torch's import: a stop at any moment is a sentence, never a traceback
            result = (predict if args.command == "predict" else evaluate)(args, progress)
    except Stopped as stop:
        result = _stopped(args.command, stop.signum, progress, getattr(args, "output", None))
    except StdoutFailed as exc:
        # The rules of base/streams.py: the command says it (or, for a reader that left, EPIPE, only its code).
        result = {
            "error": f"cannot write to standard output: {exc.cause.strerror or exc.cause}",
            "hint": "send the output to a file or a pipe that can take it, or use --output FILE",
            "exit_code": EXIT_FAILED,
            "stdout_errno": exc.cause.errno,
        }
    except MwEnvError as exc:
        result = {"error": exc.message, "hint": exc.hint, "exit_code": exc.exit_code}
    except Exception as exc:
        cause = os_error_in(exc)
        if cause is None:
            raise
        err = os_fault(cause, "write the predictions" if args.command == "predict" else "read the data")
        hint = (err.hint or "") + ("; no partial output is left" if args.command == "predict" else "")
        result = {"error": err.message, "hint": hint, "exit_code": EXIT_FAILED}
    if os.getppid() != parent and args.result.parent.name.startswith(RESULT_FOLDER_PREFIX):
        # mw-env was killed (SIGKILL: the kernel told us, PR_SET_PDEATHSIG) and we were given to another
        # parent: no one will read the result, and the folder mw-env made for it would stay behind in /tmp.
        import shutil

        shutil.rmtree(args.result.parent, ignore_errors=True)
    else:
        args.result.write_text(json.dumps(result), encoding="utf-8")
    code = result.get("exit_code", 0)
    return code if isinstance(code, int) else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
