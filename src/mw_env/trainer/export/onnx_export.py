"""ONNX export of a trained tagger, verified with onnxruntime against PyTorch before it is kept.

Runs inside the venv's python (`python -m mw_env.trainer.export.onnx_export CHECKPOINT`), which prints one JSON
line with the result. The model takes `input_ids` (int64 [batch, seq]) and `attention_mask` (bool
[batch, seq], True = a real token) and returns `logits` (float32 [batch, seq, labels]); batch and
sequence are dynamic axes (sequence up to model.max_len). Beside the `.onnx` (export.bundle): a
`.json` with the id layout, labels, tokenizer and shapes, the SentencePiece model when there is one,
the runtime helper mw_tagger.py, and on request int8 / fp16 variants.

Verification (export.verify) runs inputs the export never saw through both runtimes: the fp32 model's
largest absolute logit difference must stay under the bound; a reduced-precision variant must pick
the same label as PyTorch on at least --min-agreement of the real tokens. If anything fails, nothing
is kept: every file is written under a temporary name and only a fully verified set replaces an
earlier export.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mw_env.base.atomic import atomic_path, check_faults
from mw_env.base.errors import EXIT_FAILED, InputError, MwEnvError, StepFailed, os_error_in, os_fault
from mw_env.rundir.contract import CHECKPOINTS_DIR, EXPORT_DIR, ONNX_SUFFIX, onnx_name, sha256_file
from mw_env.trainer.export.bundle import DEFAULT_MIN_AGREEMENT, FP16_MAX_DIFF
from mw_env.trainer.export.verify import OUTPUT_NAME
from mw_env.trainspec.extras import bootstrap_hint

if TYPE_CHECKING:
    import torch

DEFAULT_MAX_DIFF = 1e-4  # fp32 logits; the exporters agree with eager to ~1e-6 on the shipped models
DEFAULT_OPSET = 18
EXPORTERS = ("auto", "dynamo", "torchscript")
INPUT_NAMES = ("input_ids", "attention_mask")


def _extra_hint() -> str:
    # This runs in the venv's python, so sys.prefix is the training venv. Re-running bootstrap with the extra
    # keeps torch pinned: the one install form every hint names (trainspec/extras.py).
    return f"add the `export` extra: {bootstrap_hint(sys.prefix, 'export')}"


@dataclass(frozen=True)
class ExportResult:
    onnx_path: Path
    metadata_path: Path
    sha256: str
    checkpoint: Path
    step: int
    exporter: str
    opset: int
    max_abs_diff: float
    bound: float
    argmax_agreement: float  # share of real tokens where both runtimes pick the same label
    cases: tuple[dict[str, Any], ...]
    manifest: Path | None
    notes: tuple[str, ...] = ()
    variants: dict[str, dict[str, Any]] | None = None  # int8 / fp16: file, sha256, bytes, figures
    files: tuple[Path, ...] = ()  # everything written beside the .onnx
    runtime_check: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "onnx": str(self.onnx_path),
            "metadata": str(self.metadata_path),
            "sha256": self.sha256,
            "checkpoint": str(self.checkpoint),
            "step": self.step,
            "exporter": self.exporter,
            "opset": self.opset,
            "max_abs_diff": self.max_abs_diff,
            "bound": self.bound,
            "argmax_agreement": self.argmax_agreement,
            "cases": list(self.cases),
            "variants": dict(self.variants or {}),
            "files": [str(f) for f in self.files],
            "runtime_check": self.runtime_check,
            "manifest": str(self.manifest) if self.manifest else None,
            "notes": list(self.notes),
        }


def run_dir_of(checkpoint: Path) -> Path | None:
    """The run folder of `<run>/checkpoints/step-N.pt`, else None."""
    return checkpoint.parent.parent if checkpoint.parent.name == CHECKPOINTS_DIR else None


def _export(
    model: torch.nn.Module,
    example: tuple[torch.Tensor, torch.Tensor],
    path: Path,
    *,
    opset: int,
    max_len: int,
    exporter: str,
) -> str:
    """Write the ONNX file; returns the exporter used. "auto" = dynamo, else the TorchScript exporter."""
    import torch

    names = {"input_names": list(INPUT_NAMES), "output_names": [OUTPUT_NAME], "opset_version": opset}
    if exporter in ("auto", "dynamo"):
        try:
            batch = torch.export.Dim("batch", min=1)
            seq = torch.export.Dim("seq", min=2, max=max_len)
            shapes = {name: {0: batch, 1: seq} for name in INPUT_NAMES}
            quiet = io.StringIO()
            # The exporter logs a "torchvision is not installed" warning per vision op it cannot
            # register; none of them is ours, so its logger is quieted for the export only.
            onnx_log = logging.getLogger("torch.onnx")
            level = onnx_log.level
            onnx_log.setLevel(logging.ERROR)
            with (
                contextlib.redirect_stdout(quiet),
                warnings.catch_warnings(),
                contextlib.ExitStack() as restore,
            ):
                restore.callback(onnx_log.setLevel, level)
                warnings.simplefilter("ignore")
                torch.onnx.export(
                    model,
                    example,
                    str(path),
                    **names,
                    dynamic_shapes=shapes,
                    dynamo=True,
                    external_data=False,  # one file: what onnxruntime-web/-node load
                    verbose=False,
                )
            return "dynamo"
        except Exception as exc:  # old torch, missing onnxscript, an op the exporter lacks
            if exporter == "dynamo":
                raise StepFailed(
                    f"the dynamo ONNX exporter failed: {type(exc).__name__}: {exc}",
                    hint="try --exporter torchscript",
                ) from exc
            print(
                f"mw-env: dynamo exporter failed ({type(exc).__name__}: {exc}); using the TorchScript exporter",
                file=sys.stderr,
            )
    axes = {name: {0: "batch", 1: "seq"} for name in (*INPUT_NAMES, OUTPUT_NAME)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, example, str(path), **names, dynamic_axes=axes, dynamo=False)
    return "torchscript"


def export_onnx(
    *,
    checkpoint: Path,
    out: Path | None = None,
    opset: int = DEFAULT_OPSET,
    max_diff: float = DEFAULT_MAX_DIFF,
    exporter: str = "auto",
    seed: int = 0,
    quantize: str | None = None,
    fp16: bool = False,
    min_agreement: float = DEFAULT_MIN_AGREEMENT,
) -> ExportResult:
    """Export `checkpoint` (a file or a run folder) to ONNX with everything needed to serve it, all verified."""
    if exporter not in EXPORTERS:
        raise InputError(f"--exporter {exporter!r}: allowed {', '.join(EXPORTERS)}")
    if not max_diff > 0:
        raise InputError(f"--max-diff {max_diff}: must be > 0")
    if quantize not in (None, "int8"):
        raise InputError(f"--quantize {quantize!r}: allowed int8")
    if not 0 < min_agreement <= 1:
        raise InputError(f"--min-agreement {min_agreement}: must be in (0, 1]")
    try:
        import onnx
        import onnxruntime  # fail here, not after minutes of export
    except ImportError as exc:
        raise MwEnvError(
            f"ONNX export needs onnx and onnxruntime in this venv ({exc})", hint=_extra_hint()
        ) from exc
    import torch

    from mw_env.trainer.ckpt.checkpoint import model_from_checkpoint
    from mw_env.trainer.ckpt.newest import newest_checkpoint
    from mw_env.trainer.data import SentencePieceTokenizer
    from mw_env.trainer.export import bundle
    from mw_env.trainer.export.verify import check_runtime_helper, held_out_inputs, verify
    from mw_env.trainspec.config import config_from_dict

    # Loaded once: a run still training beside the export may rotate or rewrite its checkpoints.
    ckpt_path, ckpt = newest_checkpoint(checkpoint, warn=lambda msg: print(msg, file=sys.stderr))
    model, tokenizer, labels = model_from_checkpoint(ckpt)
    step = int(ckpt["step"])
    max_len = int(model.cfg.max_len)
    run_dir = run_dir_of(ckpt_path)
    if out is None:
        out = (run_dir / EXPORT_DIR if run_dir else ckpt_path.parent) / onnx_name(step)
    out = Path(out).expanduser().resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    stem = out.stem
    wanted = [v for v, on in (("int8", quantize == "int8"), ("fp16", fp16)) if on]
    example = (torch.randint(4, tokenizer.vocab_size, (2, 16)), torch.ones(2, 16, dtype=torch.bool))
    cases = held_out_inputs(tokenizer, max_len=max_len, vocab_size=tokenizer.vocab_size, seed=seed)
    variants: dict[str, dict[str, Any]] = {}
    # Everything under temporary names first: a disagreeing model or variant leaves nothing behind.
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(atomic_path(out, suffix=ONNX_SUFFIX))
        used = _export(model, example, tmp, opset=opset, max_len=max_len, exporter=exporter)
        onnx.checker.check_model(str(tmp))
        fp32 = verify(tmp, model, cases)
        worst = fp32["max_abs_diff"]
        if not worst <= max_diff:
            per_case = ", ".join(f"{r['case']}: {r['max_abs_diff']:.3g}" for r in fp32["cases"])
            raise StepFailed(
                f"the ONNX model disagrees with PyTorch: max |logit difference| {worst:.3g} > bound "
                f"{max_diff:g} ({per_case})",
                hint="nothing was kept; try the other --exporter or another --opset, and report the model/torch versions",
            )
        digest = sha256_file(tmp)
        for kind in wanted:
            path = out.with_name(f"{stem}.{kind}{ONNX_SUFFIX}")
            vtmp = stack.enter_context(atomic_path(path, suffix=ONNX_SUFFIX))
            bundle.make_variant(kind, tmp, vtmp)
            figures = verify(vtmp, model, cases)
            bundle.judge_variant(kind, figures, min_agreement=min_agreement)
            variants[kind] = {
                "onnx": path.name,
                "sha256": sha256_file(vtmp),
                "bytes": vtmp.stat().st_size,
                "verification": {
                    **{k: figures[k] for k in ("max_abs_diff", "mean_abs_diff", "argmax_agreement")},
                    "min_agreement": min_agreement,
                    "bound": FP16_MAX_DIFF if kind == "fp16" else None,
                    "cases": figures["cases"],
                },
            }
        fp32_bytes = tmp.stat().st_size
        # The tokenizer and the metadata go under temporary names too, before anything is committed: a full
        # disk at any of them keeps no half of this export and the previous one whole (its model with its own
        # metadata), instead of a new model beside the old metadata.
        tok = bundle.tokenizer_entry(tokenizer, stem)
        extra: list[Path] = []
        if isinstance(tokenizer, SentencePieceTokenizer):
            spm_path = out.parent / str(tok["model"])
            stmp = stack.enter_context(atomic_path(spm_path))
            stmp.write_bytes(bytes(tokenizer.proto))
            tok["sha256"] = sha256_file(stmp)
            extra.append(spm_path)
        meta_path = out.with_suffix(".json")
        metadata = {
            "format": bundle.FORMAT,
            "onnx": out.name,
            "sha256": digest,
            **bundle.io_spec(len(labels)),
            "max_seq_len": max_len,
            "id_layout": bundle.id_layout(tokenizer),
            "tokenizer": tok,
            "labels": labels,
            "label_scheme": "BIO over words; an entity is a B- label and the I- labels of its type that follow",
            # How the runtime helper reads tags out of the logits (model.decode): "viterbi" = the best
            # sequence with valid IOB2 transitions (trainer/decoding.py), "argmax" = each word alone.
            "decode": config_from_dict(ckpt["config"]).model.decode,
            "variants": {
                "fp32": {"onnx": out.name, "sha256": digest, "bytes": fp32_bytes},
                **{k: {n: v[n] for n in ("onnx", "sha256", "bytes")} for k, v in variants.items()},
            },
            "runtime_helper": bundle.RUNTIME_HELPER,
            "checkpoint": str(ckpt_path),
            "checkpoint_sha256": sha256_file(ckpt_path),
            "step": step,
            "config_sha256": ckpt.get("config_sha256"),
            "exporter": used,
            "opset": opset,
            "verification": {
                "max_abs_diff": worst,
                "mean_abs_diff": fp32["mean_abs_diff"],
                "bound": max_diff,
                "argmax_agreement": fp32["argmax_agreement"],
                "cases": fp32["cases"],
                **{kind: v["verification"] for kind, v in variants.items()},
            },
            "versions": {
                "torch": torch.__version__,
                "onnx": onnx.__version__,
                "onnxruntime": onnxruntime.__version__,
            },
        }
        mtmp = stack.enter_context(atomic_path(meta_path))
        mtmp.write_text(json.dumps(metadata, indent=2) + "\n", encoding="utf-8")
        # The test seam's full disk meets the group's writes before any is committed, as a real one does.
        check_faults([out, *(out.with_name(v["onnx"]) for v in variants.values()), *extra, meta_path])
    files = [out, *(out.with_name(v["onnx"]) for v in variants.values()), *extra]
    files += [meta_path, bundle.copy_runtime_helper(out.parent)]
    runtime_check = check_runtime_helper(meta_path, tokenizer, max_len=max_len)
    manifest, notes = None, []
    if run_dir is not None and out.is_relative_to(run_dir.resolve()):
        from mw_env.rundir.manifest import add_to_manifest

        manifest = add_to_manifest(run_dir, files)
    else:
        notes.append(f"{out} is outside the run folder: no manifest entry (sha256 is in {meta_path.name})")
    return ExportResult(
        onnx_path=out,
        metadata_path=meta_path,
        sha256=digest,
        checkpoint=ckpt_path,
        step=step,
        exporter=used,
        opset=opset,
        max_abs_diff=worst,
        bound=max_diff,
        argmax_agreement=fp32["argmax_agreement"],
        cases=tuple(fp32["cases"]),
        manifest=manifest,
        notes=tuple(notes),
        variants=variants,
        files=tuple(files),
        runtime_check=runtime_check,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """CLI inside the venv: one JSON line on stdout (the result, or {"error", "hint"})."""
    parser = argparse.ArgumentParser(
        prog="python -m mw_env.trainer.export.onnx_export", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "checkpoint", type=Path, help="a step-*.pt file, or a run folder (newest valid checkpoint)"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="ONNX file (default <run>/export/model-step-N.onnx)"
    )
    parser.add_argument("--opset", type=int, default=DEFAULT_OPSET)
    parser.add_argument(
        "--max-diff", type=float, default=DEFAULT_MAX_DIFF, help="bound on max |logit difference|"
    )
    parser.add_argument("--exporter", choices=EXPORTERS, default="auto")
    parser.add_argument("--quantize", choices=["int8"], default=None, help="also write <stem>.int8.onnx")
    parser.add_argument("--fp16", action="store_true", help="also write <stem>.fp16.onnx")
    parser.add_argument("--min-agreement", type=float, default=DEFAULT_MIN_AGREEMENT)
    args = parser.parse_args(argv)
    from mw_env.base.stopsignals import Stopped, answer, exit_code, signal_words, stop_on_signals

    try:
        # A stop: every file of the export is still a temporary, removed on the way out.
        with stop_on_signals():
            result = export_onnx(
                checkpoint=args.checkpoint,
                out=args.out,
                opset=args.opset,
                max_diff=args.max_diff,
                exporter=args.exporter,
                quantize=args.quantize,
                fp16=args.fp16,
                min_agreement=args.min_agreement,
            )
    except Stopped as stop:
        code = exit_code(stop.signum)
        why = f"the export was stopped by {signal_words(stop.signum)}: nothing of it was kept"
        detail = " (its files are written under temporary names and committed only once verified)"
        return answer(
            {"error": why + detail, "hint": "run the same command again to export", "exit_code": code}
        )
    except MwEnvError as exc:
        return answer({"error": exc.message, "hint": exc.hint, "exit_code": exc.exit_code})
    except Exception as exc:
        cause = os_error_in(exc)  # a full disk, EIO, EACCES at the ONNX, a variant or the metadata
        if cause is not None:
            err = os_fault(cause, "write the export")
            hint = f"{err.hint}; nothing half-written is kept, the run folder is untouched"
            return answer({"error": err.message, "hint": hint, "exit_code": EXIT_FAILED})
        answer(
            {"error": f"export failed: {type(exc).__name__}: {exc}", "hint": None, "exit_code": EXIT_FAILED}
        )
        raise
    return answer(result.to_dict(), code=0)


if __name__ == "__main__":
    raise SystemExit(main())
