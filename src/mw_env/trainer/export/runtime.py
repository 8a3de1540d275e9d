"""mw_tagger.py - run an mw-env ONNX address tagger with onnxruntime alone (no torch, no mw-env).

`mw-env train export` copies this file beside the model. It needs numpy and onnxruntime, plus
sentencepiece for a SentencePiece-tokenized model. Everything it knows comes from the export's
metadata JSON (the id layout, the labels, the tokenizer file), so it works for any export:

    from mw_tagger import Tagger
    tagger = Tagger("model-step-000001000.json")            # or .int8.onnx / .fp16.onnx via variant=
    tagger.tag("10 Downing Street London SW1A 2AA".split())
    # [("10", "B-house_number"), ("Downing", "B-street"), ...]

An address longer than the model's max_seq_len raises InputTooLong (a ValueError) instead of
onnxruntime's shape error; `truncate=True` drops whole words from the end, as training did.
Tags are read as the model was evaluated (the metadata's "decode"): "viterbi" picks the best sequence whose
transitions are valid IOB2 (no I-X after O or after another type; `viterbi()` below), "argmax" each word's
best label alone.
This file is also the exporter's own check: it verifies every export with it.

`Encoder` alone (words -> ids, nothing imported but the standard library and, for SentencePiece,
sentencepiece) also serves a portable weights folder, whose config.json has the same id_layout /
tokenizer / max_seq_len keys: the folder ships this file beside its modeling file, and its torch
snippet encodes with `Encoder(config, folder).encode(words)`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:  # types only: this file runs beside the model with numpy and onnxruntime, nothing else
    import numpy as np
    from onnxruntime import InferenceSession


# A large finite penalty for an invalid transition (-inf would give inf - inf = NaN on -inf scores), and
# a floor for the scores far above it, so a valid path always beats an invalid one.
FORBIDDEN, FLOOR = -1e12, -1e6


def transitions(labels: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(start [L], step [L, L]): 0 where IOB2 allows a row to begin with a label / one label to follow
    another, FORBIDDEN where not (I-X only after B-X or I-X; anything else anywhere)."""
    import numpy as np

    n = len(labels)
    start, step = np.zeros(n), np.zeros((n, n))
    for cur, label in enumerate(labels):
        prefix, _, typ = label.partition("-")
        if prefix == "I" and typ:
            start[cur] = FORBIDDEN
            for prev, other in enumerate(labels):
                if other not in (f"B-{typ}", f"I-{typ}"):
                    step[prev, cur] = FORBIDDEN
    return start, step


def viterbi(logits: np.ndarray, start: np.ndarray, step: np.ndarray) -> list[int]:
    """The label indices of the valid sequence with the highest total log-probability, from one row's
    per-word logits [words, labels] (mw-env's trainer/decoding.py decodes with it too)."""
    import numpy as np

    x = np.asarray(logits, dtype=np.float64)
    if x.shape[0] == 0:
        return []
    top = x.max(axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    scores = np.maximum(x - top - np.log(np.exp(x - top).sum(axis=-1, keepdims=True)), FLOOR)
    best = start + scores[0]
    back = np.zeros(scores.shape, dtype=np.int64)
    for t in range(1, scores.shape[0]):
        total = best[:, None] + step
        back[t] = total.argmax(axis=0)
        best = total[back[t], np.arange(total.shape[1])] + scores[t]
    path = [int(best.argmax())]
    for t in range(scores.shape[0] - 1, 0, -1):
        path.append(int(back[t, path[-1]]))
    return path[::-1]


class InputTooLong(ValueError):
    """The encoded address does not fit the model's max_seq_len."""


class IdLayout(TypedDict):
    pad: int
    cls: int
    sep: int
    unk: int
    shift: int
    word_separator: list[int]


class TokenizerEntry(TypedDict, total=False):
    kind: str  # "byte" | "sentencepiece"
    model: str  # the SentencePiece model's file, beside the metadata


class EncoderMeta(TypedDict):
    """What the encoder reads of an export's metadata JSON or a weights folder's config.json (both have it)."""

    id_layout: IdLayout
    max_seq_len: int
    labels: list[str]
    tokenizer: TokenizerEntry


class Encoder:
    """Words -> input ids, as training encoded them: the id layout, tokenizer and max_seq_len of `meta` (an
    export's metadata JSON, or a weights folder's config.json), the tokenizer file found in `folder`."""

    def __init__(self, meta: EncoderMeta, folder: str | Path, *, source: str = "config") -> None:
        layout = meta["id_layout"]
        self.cls, self.sep, self.pad, self.unk = layout["cls"], layout["sep"], layout["pad"], layout["unk"]
        self.shift = layout["shift"]
        self.separator = list(layout["word_separator"])
        self.max_len = int(meta["max_seq_len"])
        self.labels = list(meta["labels"])
        tok = meta["tokenizer"]
        self.kind = tok["kind"]
        self._sp = None
        if self.kind == "sentencepiece":
            import sentencepiece

            self._sp = sentencepiece.SentencePieceProcessor()
            self._sp.Load(str(Path(folder) / tok.get("model", "")))
        elif self.kind != "byte":
            raise ValueError(f"{source}: unknown tokenizer kind {self.kind!r}")

    def encode_word(self, word: str) -> list[int]:
        if self._sp is not None:
            ids = [i + self.shift for i in self._sp.encode(word)]
        else:
            ids = [b + self.shift for b in word.encode("utf-8")]
        return ids or [self.unk]

    def encode(self, words: Sequence[str], *, truncate: bool = False) -> tuple[list[int], list[int]]:
        """(input ids with CLS/SEP, the position of each kept word's first sub-token)."""
        ids, starts = [self.cls], []
        for i, word in enumerate(words):
            sep, word_ids = (self.separator if i else []), self.encode_word(word)
            piece = sep + word_ids
            if len(ids) + len(piece) + 1 > self.max_len:
                if truncate:
                    break  # whole words only, as in training
                total = (
                    len(ids)
                    + len(piece)
                    + 1
                    + sum(len(self.separator) + len(self.encode_word(w)) for w in words[i + 1 :])
                )
                raise InputTooLong(
                    f"the address is {total} tokens with CLS and SEP; this model takes at most {self.max_len} "
                    f"(word {i + 1} of {len(words)} no longer fits); pass truncate=True to drop the words that "
                    "do not fit, as training did"
                )
            starts.append(len(ids) + len(sep))
            ids += piece
        ids.append(self.sep)
        return ids, starts


class Tagger(Encoder):
    def __init__(
        self,
        metadata: str | Path,
        *,
        variant: str = "fp32",
        providers: Sequence[str] | None = None,
        decode: str | None = None,
    ):
        self.meta_path = Path(metadata)
        meta = json.loads(self.meta_path.read_text(encoding="utf-8"))
        super().__init__(meta, self.meta_path.parent, source=str(self.meta_path))
        self.meta: dict[str, Any] = meta
        # "viterbi": tags with valid IOB2 transitions only; exports made before the key read the argmax.
        self.decode = decode or self.meta.get("decode", "argmax")
        if self.decode not in ("viterbi", "argmax"):
            raise ValueError(f"decode={self.decode!r}: expected 'viterbi' or 'argmax'")
        self._start, self._step = transitions(self.labels)
        variants = self.meta.get("variants") or {"fp32": {"onnx": self.meta["onnx"]}}
        if variant not in variants:
            raise ValueError(
                f"{self.meta_path}: no {variant!r} variant (this export has {', '.join(variants)})"
            )
        self.onnx_path = self.meta_path.parent / variants[variant]["onnx"]
        self._session: InferenceSession | None = None
        self._providers = list(providers or ["CPUExecutionProvider"])

    @property
    def session(self) -> InferenceSession:
        if self._session is None:
            import onnxruntime

            self._session = onnxruntime.InferenceSession(str(self.onnx_path), providers=self._providers)
        return self._session

    def logits(self, batch: Sequence[Sequence[int]]) -> np.ndarray:
        """Run rows of ids (padded here) and return the float32 logits [batch, seq, labels]."""
        import numpy as np

        width = max(len(r) for r in batch)
        if width > self.max_len:
            raise InputTooLong(f"a row is {width} tokens; this model takes at most {self.max_len}")
        ids = np.full((len(batch), width), self.pad, dtype=np.int64)
        for i, row in enumerate(batch):
            ids[i, : len(row)] = row
        mask = np.zeros((len(batch), width), dtype=bool)
        for i, row in enumerate(batch):
            mask[i, : len(row)] = True
        return self.session.run(["logits"], {"input_ids": ids, "attention_mask": mask})[0]

    def tag(self, words: Sequence[str], *, truncate: bool = False) -> list[tuple[str, str]]:
        """(word, BIO label) for each word (the kept words, with truncate=True)."""
        ids, starts = self.encode(words, truncate=truncate)
        scores = self.logits([ids])[0][starts]  # each kept word's first sub-token
        if self.decode == "viterbi":
            best = viterbi(scores, self._start, self._step)
        else:
            best = [int(i) for i in scores.argmax(-1)]
        return [(words[k], self.labels[best[k]]) for k in range(len(starts))]


if __name__ == "__main__":
    import sys

    if len(sys.argv) < 3:
        raise SystemExit("usage: python mw_tagger.py MODEL.json WORD [WORD ...]")
    for word, label in Tagger(sys.argv[1]).tag(sys.argv[2:]):
        print(f"{label}\t{word}")
