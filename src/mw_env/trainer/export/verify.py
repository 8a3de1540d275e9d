"""How an export is checked: held-out inputs through onnxruntime and PyTorch, and the shipped runtime helper.

Inputs the export never saw - held-out addresses plus random rows at other batch sizes and lengths,
with padding - run through both runtimes; the figures are the largest and mean absolute logit
difference over real tokens and the share of real tokens where both pick the same label.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mw_env.base.errors import StepFailed
from mw_env.rundir.contract import ENCODER_FILE

if TYPE_CHECKING:
    import torch

    from mw_env.trainer.data import Tokenizer

# (name, input_ids, attention_mask): one batch the exported model and torch must agree on.
Case = tuple[str, "torch.Tensor", "torch.Tensor"]

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


def held_out_inputs(tokenizer: Tokenizer, *, max_len: int, vocab_size: int, seed: int = 0) -> list[Case]:
    """(name, input_ids, attention_mask) batches: the addresses, then random rows of other shapes."""
    import torch

    from mw_env.trainer.data import CLS, N_SPECIAL, PAD, SEP, encode_row

    def batch(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
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


def verify(onnx_path: Path, model: torch.nn.Module, cases: Sequence[Case]) -> dict[str, Any]:
    """Max and mean |logit difference| and argmax agreement over real tokens, onnxruntime vs PyTorch eager."""
    import numpy as np
    import onnxruntime as ort
    import torch

    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    worst, total_diff, cells, agree, total, report = 0.0, 0.0, 0, 0, 0, []
    for name, ids, mask in cases:
        with torch.no_grad():
            expected = model(ids, mask).float().numpy()
        got = session.run([OUTPUT_NAME], {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0]
        if got.shape != expected.shape:
            raise StepFailed(f"ONNX output shape {got.shape} != PyTorch {expected.shape} for {name}")
        real = mask.numpy()
        diffs = np.abs(got.astype(np.float64) - expected)[real]  # padded positions are never read downstream
        diff = float(diffs.max())
        if not np.isfinite(diff):
            diff = float("inf")
        same = got.argmax(-1)[real] == expected.argmax(-1)[real]
        agree, total = agree + int(same.sum()), total + int(real.sum())
        total_diff, cells = total_diff + float(diffs.sum()), cells + int(diffs.size)
        worst = max(worst, diff)
        report.append(
            {
                "case": name,
                "shape": list(ids.shape),
                "max_abs_diff": diff,
                "argmax_agreement": float(same.mean()),
            }
        )
    return {
        "max_abs_diff": worst,
        "mean_abs_diff": total_diff / max(cells, 1),
        "argmax_agreement": agree / max(total, 1),
        "tokens": total,
        "cases": report,
    }


def check_runtime_helper(meta_path: Path, tokenizer: Tokenizer, *, max_len: int) -> dict[str, Any]:
    """The shipped mw_tagger.py encodes exactly as training did, tags, and refuses a too-long address."""
    import importlib.util

    from mw_env.trainer.data import encode_row

    spec = importlib.util.spec_from_file_location("mw_tagger_check", meta_path.parent / ENCODER_FILE)
    if spec is None or spec.loader is None:
        raise StepFailed(f"cannot load the runtime helper beside {meta_path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tagger = module.Tagger(meta_path)
    for text in HELD_OUT_ADDRESSES:
        words = text.split()
        expected = encode_row(tokenizer, words, None, max_len)
        if expected[2] == 0 and tagger.encode(words)[0] != expected[0]:
            raise StepFailed(f"mw_tagger.py encodes {text!r} unlike the trainer", hint="please report this")
    tagged = tagger.tag(HELD_OUT_ADDRESSES[1].split())
    long_words = ["Road"] * max_len
    try:
        tagger.tag(long_words)
    except module.InputTooLong as exc:
        too_long = str(exc)
    else:
        raise StepFailed("mw_tagger.py accepted an address longer than max_seq_len")
    kept = tagger.tag(long_words, truncate=True)
    return {
        "example": [f"{w}/{t}" for w, t in tagged],
        "too_long_error": too_long,
        "truncated_words": len(kept),
    }
