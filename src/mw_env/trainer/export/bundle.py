"""What a serving team gets beside the .onnx: the tokenizer, the id layout, the labels, smaller variants.

- `<stem>.json`: inputs/outputs (names, dtypes, shapes), max_seq_len, the id layout (specials, shift,
  word separator, where each word's label is read), the labels in logit order, the tokenizer, opset,
  exporter, the checkpoint's path and sha256, each variant's file, sha256 and verification figures.
- `<stem>.spm.model`: the SentencePiece model, byte for byte as trained (SentencePiece exports only);
  the byte tokenizer needs no file, its scheme is spelled out in the JSON.
- `mw_tagger.py`: a runtime helper needing only numpy + onnxruntime (trainer/export/runtime.py, copied).
- `<stem>.int8.onnx` (`--quantize int8`: onnxruntime dynamic quantization, int8 weights of MatMul/Gemm)
  and `<stem>.fp16.onnx` (`--fp16`: onnxruntime's float16 converter, fp32 inputs/outputs kept).
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mw_env.base.errors import MwEnvError, StepFailed
from mw_env.rundir.contract import ENCODER_FILE as RUNTIME_HELPER  # the weights folder ships it too

if TYPE_CHECKING:
    from mw_env.trainer.data import Tokenizer

FORMAT = "mw-env-onnx-tagger/1"
FP16_MAX_DIFF = 5e-2  # fp16 weights/activations: logits move by ~1e-3 on the shipped models
DEFAULT_MIN_AGREEMENT = 0.98  # reduced-precision variants: share of real tokens with the same label


def id_layout(tokenizer: Tokenizer) -> dict[str, object]:
    from mw_env.trainer.data import CLS, N_SPECIAL, PAD, SEP, UNK

    return {
        "pad": PAD,
        "cls": CLS,
        "sep": SEP,
        "unk": UNK,
        "shift": N_SPECIAL,
        "vocab_size": tokenizer.vocab_size,
        "word_separator": tokenizer.separator(),
        "sequence": "[CLS] ids(word 1) separator ids(word 2) ... [SEP]; pad with `pad`, mask false there",
        "label_position": "each word's label is read at its first id (after the separator)",
        "too_long": "a sequence may hold at most max_seq_len ids, CLS and SEP included: longer input is an "
        "error (mw_tagger.py raises InputTooLong) or is cut at a word boundary (truncate=True), as training did",
    }


def tokenizer_entry(tokenizer: Tokenizer, stem: str, *, model_file: str | None = None) -> dict[str, object]:
    """The tokenizer as the metadata describes it; a SentencePiece model's file is `model_file` (default
    `<stem>.spm.model`, beside an ONNX export)."""
    if tokenizer.kind == "sentencepiece":
        return {
            "kind": "sentencepiece",
            "model": model_file or f"{stem}.spm.model",
            "vocab_size": tokenizer.vocab_size,
            "pieces": tokenizer.vocab_size - 4,
            "scheme": "each word encoded on its own: SentencePieceProcessor.encode(word) (ids), every id + shift; "
            "an empty result is [unk]; no separator between words (the pieces mark word starts)",
        }
    return {
        "kind": "byte",
        "vocab_size": tokenizer.vocab_size,
        "scheme": "the UTF-8 bytes of each word, every byte + shift (so 0..255 -> 4..259); an empty word is "
        "[unk]; words are joined by the space byte (32 + shift = 36)",
    }


def io_spec(n_labels: int) -> dict[str, object]:
    return {
        "inputs": [
            {"name": "input_ids", "dtype": "int64", "shape": ["batch", "seq"]},
            {
                "name": "attention_mask",
                "dtype": "bool",
                "shape": ["batch", "seq"],
                "meaning": "true = real token",
            },
        ],
        "outputs": [{"name": "logits", "dtype": "float32", "shape": ["batch", "seq", n_labels]}],
    }


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """onnxruntime's tools log advice ("consider pre-processing") and warnings per node: not the user's news."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        root.setLevel(level)


def make_variant(kind: str, src: Path, dst: Path) -> None:
    """Write the `kind` variant (int8 or fp16: export_onnx passes no other) of the fp32 model `src` to `dst`."""
    import onnx

    try:
        if kind == "int8":
            from onnxruntime.quantization import QuantType, quantize_dynamic

            with _quiet():
                quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8)
        else:  # fp16
            from onnxruntime.transformers.float16 import convert_float_to_float16

            with _quiet():
                model = convert_float_to_float16(onnx.load(str(src)), keep_io_types=True)
            onnx.save(model, str(dst))
        onnx.checker.check_model(str(dst))
    except ImportError as exc:
        raise MwEnvError(
            f"the {kind} variant needs onnxruntime's tools ({exc})",
            hint="install onnxruntime>=1.18 into the training venv (the export extra)",
        ) from exc
    except Exception as exc:
        raise StepFailed(
            f"making the {kind} variant failed: {type(exc).__name__}: {exc}",
            hint="nothing was kept; export without it, and report the onnx/onnxruntime versions",
        ) from exc


def judge_variant(kind: str, figures: dict[str, Any], *, min_agreement: float) -> None:
    """Raise StepFailed when a reduced-precision variant disagrees with PyTorch beyond its tolerance."""
    agreement, worst = figures["argmax_agreement"], figures["max_abs_diff"]
    if agreement < min_agreement:
        raise StepFailed(
            f"the {kind} model picks another label than PyTorch on {100 * (1 - agreement):.2f}% of real tokens "
            f"(argmax agreement {100 * agreement:.2f}% < --min-agreement {100 * min_agreement:g}%; "
            f"max |logit difference| {worst:.3g})",
            hint="nothing was kept; a longer-trained model is usually less sensitive, or lower --min-agreement "
            "knowingly, or ship the fp32 model",
        )
    if kind == "fp16" and not worst <= FP16_MAX_DIFF:
        raise StepFailed(
            f"the fp16 model's logits differ from PyTorch by up to {worst:.3g} (bound {FP16_MAX_DIFF:g})",
            hint="nothing was kept; ship the fp32 or int8 model",
        )


def copy_runtime_helper(directory: Path) -> Path:
    from mw_env.base.atomic import write_text_atomic

    source = Path(__file__).with_name("runtime.py").read_text(encoding="utf-8")
    path = directory / RUNTIME_HELPER
    write_text_atomic(path, source)
    return path
