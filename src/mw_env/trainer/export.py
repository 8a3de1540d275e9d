"""ONNX export of a trained tagger, verified with onnxruntime against PyTorch before it is kept.

Runs inside the venv's python (`python -m mw_env.trainer.export CHECKPOINT`), which prints one JSON
line with the result. The model takes `input_ids` (int64 [batch, seq]) and `attention_mask` (bool
[batch, seq], True = a real token) and returns `logits` (float32 [batch, seq, labels]); batch and
sequence are dynamic axes (sequence up to model.max_len). A `.json` beside the `.onnx` names the
labels, tokenizer and shapes for the Node.js/browser side.

Verification runs inputs the export never saw - held-out addresses plus random rows at other batch
sizes and lengths, with padding - through both runtimes; the largest absolute logit difference must
stay under the bound, else the file is not kept. Only a verified file replaces an earlier one.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import random
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mw_env.atomic import atomic_path, write_json_atomic
from mw_env.errors import EXIT_FAILED, InputError, MwEnvError, StepFailed

DEFAULT_MAX_DIFF = 1e-4  # fp32 logits; the exporters agree with eager to ~1e-6 on the shipped models
DEFAULT_OPSET = 18
EXPORTERS = ("auto", "dynamo", "torchscript")
INPUT_NAMES = ("input_ids", "attention_mask")
OUTPUT_NAME = "logits"
# Real-world shaped addresses the synthetic training data does not contain verbatim.
HELD_OUT_ADDRESSES = (
    "1600 Pennsylvania Avenue NW, Washington, DC 20500, USA",
    "10 Downing Street, London SW1A 2AA, United Kingdom",
    "Unter den Linden 77, 10117 Berlin, Deutschland",
    "55 Rue du Faubourg Saint-Honoré, 75008 Paris, France",
    "Prinsengracht 263-267, 1016 GV Amsterdam",
    "Unit 4, 18 Macquarie St, Sydney NSW 2000",
    "24 Sussex Drive, Ottawa ON K1M 1M4, Canada",
)


def _extra_hint() -> str:
    # This runs in the venv's python, so sys.prefix is the training venv. Re-running bootstrap with the extra
    # keeps torch pinned; a plain install works too because the venv's pin refuses any torch swap.
    venv = sys.prefix
    return (
        f"add the export extra: `mw-env bootstrap --venv {venv} --extras train,export`, or "
        f"`uv pip install --python {venv}/bin/python 'onnx>=1.16' 'onnxruntime>=1.18' 'onnxscript>=0.1'`"
    )


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

    def to_dict(self) -> dict[str, Any]:
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
            "manifest": str(self.manifest) if self.manifest else None,
            "notes": list(self.notes),
        }


def resolve_checkpoint(path: Path) -> Path:
    """A checkpoint file as given, or the newest valid one in a run folder / checkpoints folder."""
    from mw_env.trainer.checkpoint import latest_valid_checkpoint

    path = Path(path).expanduser().resolve()
    if path.is_file():
        return path
    if path.is_dir():
        folder = path / "checkpoints" if (path / "checkpoints").is_dir() else path
        found = latest_valid_checkpoint(folder, warn=lambda msg: print(msg, file=sys.stderr))
        if found is not None:
            return found
        raise InputError(f"no valid checkpoint in {folder}", hint="train first, or name a step-*.pt file")
    raise InputError(f"checkpoint {path} does not exist", hint="name a step-*.pt file or a run folder")


def run_dir_of(checkpoint: Path) -> Path | None:
    """The run folder of `<run>/checkpoints/step-N.pt`, else None."""
    return checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" else None


def held_out_inputs(
    tokenizer: Any, *, max_len: int, vocab_size: int, seed: int = 0
) -> list[tuple[str, Any, Any]]:
    """(name, input_ids, attention_mask) batches: the addresses, then random rows of other shapes."""
    import torch

    from mw_env.trainer.data import CLS, N_SPECIAL, PAD, SEP, encode_row

    def batch(rows: list[list[int]]) -> tuple[Any, Any]:
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), PAD, dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        return ids, ids != PAD

    cases = []
    rows = [encode_row(tokenizer, text.split(), None, max_len)[0] for text in HELD_OUT_ADDRESSES]
    cases.append(("addresses", *batch(rows)))
    rng = random.Random(seed)
    # Batch sizes and lengths unlike the export's example (2 x 16): 1 row; odd sizes; the full length.
    for size, lengths in (
        (1, (5,)),
        (3, (max_len, 9, 17)),
        (8, tuple(rng.randint(3, max_len) for _ in range(8))),
    ):
        rows = [[CLS, *(rng.randrange(N_SPECIAL, vocab_size) for _ in range(n - 2)), SEP] for n in lengths]
        cases.append((f"random batch {size}, lengths {min(lengths)}-{max(lengths)}", *batch(rows)))
    return cases


def _export(
    model: Any, example: tuple[Any, Any], path: Path, *, opset: int, max_len: int, exporter: str
) -> str:
    """Write the ONNX file; returns the exporter used. "auto" = dynamo, else the TorchScript exporter."""
    import torch

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
                    input_names=list(INPUT_NAMES),
                    output_names=[OUTPUT_NAME],
                    dynamic_shapes=shapes,
                    opset_version=opset,
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
        torch.onnx.export(
            model,
            example,
            str(path),
            input_names=list(INPUT_NAMES),
            output_names=[OUTPUT_NAME],
            dynamic_axes=axes,
            opset_version=opset,
            dynamo=False,
        )
    return "torchscript"


def verify(
    onnx_path: Path, model: Any, cases: Sequence[tuple[str, Any, Any]]
) -> tuple[float, float, list[dict[str, Any]]]:
    """Max |logit difference| and argmax agreement over real tokens, onnxruntime vs PyTorch eager."""
    import numpy as np
    import onnxruntime as ort
    import torch

    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    worst, agree, total, report = 0.0, 0, 0, []
    for name, ids, mask in cases:
        with torch.no_grad():
            expected = model(ids, mask).float().numpy()
        got = session.run([OUTPUT_NAME], {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0]
        if got.shape != expected.shape:
            raise StepFailed(f"ONNX output shape {got.shape} != PyTorch {expected.shape} for {name}")
        real = mask.numpy()
        diff = float(np.abs(got - expected)[real].max())  # padded positions are never read downstream
        if not np.isfinite(diff):
            diff = float("inf")
        same = got.argmax(-1)[real] == expected.argmax(-1)[real]
        agree, total = agree + int(same.sum()), total + int(real.sum())
        worst = max(worst, diff)
        report.append({"case": name, "shape": list(ids.shape), "max_abs_diff": diff})
    return worst, agree / max(total, 1), report


def _sha256(path: Path) -> str:
    from mw_env.runs.manifest import sha256_file

    return sha256_file(path)


def export_onnx(
    *,
    checkpoint: Path,
    out: Path | None = None,
    opset: int = DEFAULT_OPSET,
    max_diff: float = DEFAULT_MAX_DIFF,
    exporter: str = "auto",
    seed: int = 0,
) -> ExportResult:
    """Export `checkpoint` (a file or a run folder) to ONNX, verify it, record its sha256."""
    if exporter not in EXPORTERS:
        raise InputError(f"--exporter {exporter!r}: allowed {', '.join(EXPORTERS)}")
    if not max_diff > 0:
        raise InputError(f"--max-diff {max_diff}: must be > 0")
    try:
        import onnx
        import onnxruntime  # fail here, not after minutes of export
    except ImportError as exc:
        raise MwEnvError(
            f"ONNX export needs onnx and onnxruntime in this venv ({exc})", hint=_extra_hint()
        ) from exc
    import torch

    from mw_env.trainer.checkpoint import load_checkpoint, model_from_checkpoint

    ckpt_path = resolve_checkpoint(checkpoint)
    ckpt = load_checkpoint(ckpt_path)
    model, tokenizer, labels = model_from_checkpoint(ckpt)
    step = int(ckpt["step"])
    max_len = int(model.cfg.max_len)
    run_dir = run_dir_of(ckpt_path)
    if out is None:
        base = run_dir / "export" if run_dir else ckpt_path.parent
        out = base / f"model-step-{step:09d}.onnx"
    out = Path(out).expanduser().resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    example = (torch.randint(4, tokenizer.vocab_size, (2, 16)), torch.ones(2, 16, dtype=torch.bool))
    # Kept only once checked and verified: a disagreeing export leaves nothing behind.
    with atomic_path(out, suffix=".onnx") as tmp:
        used = _export(model, example, tmp, opset=opset, max_len=max_len, exporter=exporter)
        onnx.checker.check_model(str(tmp))
        cases = held_out_inputs(tokenizer, max_len=max_len, vocab_size=tokenizer.vocab_size, seed=seed)
        worst, agreement, report = verify(tmp, model, cases)
        if not worst <= max_diff:
            per_case = ", ".join(f"{r['case']}: {r['max_abs_diff']:.3g}" for r in report)
            raise StepFailed(
                f"the ONNX model disagrees with PyTorch: max |logit difference| {worst:.3g} > bound "
                f"{max_diff:g} ({per_case})",
                hint="nothing was kept; try the other --exporter or another --opset, and report the model/torch versions",
            )
        digest = _sha256(tmp)
    meta_path = out.with_suffix(".json")
    metadata = {
        "onnx": out.name,
        "sha256": digest,
        "inputs": {
            "input_ids": "int64 [batch, seq]",
            "attention_mask": "bool [batch, seq], true = real token",
        },
        "outputs": {"logits": f"float32 [batch, seq, {len(labels)}]"},
        "max_seq_len": max_len,
        "labels": labels,
        "tokenizer": {"kind": tokenizer.kind, "vocab_size": tokenizer.vocab_size},
        "checkpoint": str(ckpt_path),
        "step": step,
        "config_sha256": ckpt.get("config_sha256"),
        "exporter": used,
        "opset": opset,
        "verification": {
            "max_abs_diff": worst,
            "bound": max_diff,
            "argmax_agreement": agreement,
            "cases": report,
        },
        "versions": {
            "torch": torch.__version__,
            "onnx": onnx.__version__,
            "onnxruntime": onnxruntime.__version__,
        },
    }
    write_json_atomic(meta_path, metadata)
    manifest, notes = None, []
    if run_dir is not None and out.is_relative_to(run_dir.resolve()):
        from mw_env.runs.manifest import add_to_manifest

        manifest = add_to_manifest(run_dir, [out, meta_path])
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
        argmax_agreement=agreement,
        cases=tuple(report),
        manifest=manifest,
        notes=tuple(notes),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """CLI inside the venv: one JSON line on stdout (the result, or {"error", "hint"})."""
    parser = argparse.ArgumentParser(
        prog="python -m mw_env.trainer.export", description=__doc__.splitlines()[0]
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
    args = parser.parse_args(argv)
    try:
        result = export_onnx(
            checkpoint=args.checkpoint,
            out=args.out,
            opset=args.opset,
            max_diff=args.max_diff,
            exporter=args.exporter,
        )
    except MwEnvError as exc:
        print(json.dumps({"error": exc.message, "hint": exc.hint, "exit_code": exc.exit_code}))
        return exc.exit_code
    except Exception as exc:
        print(
            json.dumps(
                {
                    "error": f"export failed: {type(exc).__name__}: {exc}",
                    "hint": None,
                    "exit_code": EXIT_FAILED,
                }
            )
        )
        raise
    print(json.dumps(result.to_dict()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
