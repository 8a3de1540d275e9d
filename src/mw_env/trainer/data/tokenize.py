"""Tokenizers and row encoding: words -> ids, word-level BIO tags -> one label per word.

The tokenizer turns words into ids and puts each word's label on its first sub-token (-100
elsewhere, so the loss ignores continuation bytes and separators).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mw_env.base.errors import InputError
from mw_env.trainspec.extras import bootstrap_hint

if TYPE_CHECKING:
    from mw_env.trainspec.schema import DataConfig

SPM_MAX_BYTES = 512 * 1024 * 1024  # SentencePiece models are KiB to tens of MiB

PAD, CLS, SEP, UNK = 0, 1, 2, 3
N_SPECIAL = 4
IGNORE = -100


class ByteTokenizer:
    """UTF-8 bytes + 4 specials: 260 ids. Words are joined by a space byte, as in the raw address."""

    kind = "byte"
    vocab_size = 256 + N_SPECIAL

    def encode_word(self, word: str) -> list[int]:
        return [b + N_SPECIAL for b in word.encode("utf-8")] or [UNK]

    def separator(self) -> list[int]:
        return [ord(" ") + N_SPECIAL]

    def to_state(self) -> dict[str, object]:
        return {"kind": "byte"}


class SentencePieceTokenizer:
    """A SentencePiece model; its ids are shifted by the 4 specials. Words are encoded one by one."""

    kind = "sentencepiece"

    def __init__(self, model_proto: bytes, source: str = "<checkpoint>") -> None:
        try:
            import sentencepiece as spm
        except ModuleNotFoundError:
            raise InputError(
                "data.tokenizer is 'sentencepiece' but the sentencepiece package is not installed",
                hint=f"add the `spm` extra: {bootstrap_hint(sys.prefix, 'spm')}, or use data.tokenizer=byte",
            ) from None
        self.proto = model_proto
        self.sp = spm.SentencePieceProcessor()
        try:
            self.sp.LoadFromSerializedProto(model_proto)
        except Exception as exc:
            raise InputError(f"{source}: not a SentencePiece model ({exc})") from None
        self.vocab_size = self.sp.get_piece_size() + N_SPECIAL

    @classmethod
    def from_file(cls, path: str) -> SentencePieceTokenizer:
        from mw_env.base import userfile

        # Bounded and non-blocking like every user file: a FIFO or /dev/zero here is an error, not a hang.
        proto = userfile.read_bytes(Path(path).expanduser(), what="data.spm_model", max_bytes=SPM_MAX_BYTES)
        return cls(proto, source=path)

    def encode_word(self, word: str) -> list[int]:
        return [i + N_SPECIAL for i in self.sp.encode(word)] or [UNK]

    def separator(self) -> list[int]:
        return []  # SentencePiece marks word starts itself

    def to_state(self) -> dict[str, object]:
        import torch

        return {
            "kind": "sentencepiece",
            "model_proto": torch.frombuffer(bytearray(self.proto), dtype=torch.uint8),
        }


Tokenizer = ByteTokenizer | SentencePieceTokenizer


def make_tokenizer(data: DataConfig) -> Tokenizer:
    """The tokenizer a DataConfig names."""
    if data.tokenizer == "sentencepiece":
        return SentencePieceTokenizer.from_file(str(data.spm_model))
    return ByteTokenizer()


def tokenizer_from_state(state: dict[str, Any]) -> Tokenizer:
    if state.get("kind") == "sentencepiece":
        return SentencePieceTokenizer(state["model_proto"].numpy().tobytes())
    return ByteTokenizer()


def encode_row(
    tok: Tokenizer,
    words: Sequence[str],
    tags: Sequence[str] | None,
    max_len: int,
    label_id: Mapping[str, int] | None = None,
) -> tuple[list[int], list[int], int]:
    """ids, labels (first sub-token of each word, else -100), words that did not fit.

    `label_id` maps tag -> label index (default: the bundled label set). A tag it lacks is not a
    target (-100): the caller decides beforehand whether that is an error (data.unknown_tags)."""
    if label_id is None:
        from mw_env.trainer.data.labels import BUNDLED

        label_id = BUNDLED.index
    ids, labels = [CLS], [IGNORE]
    kept = 0
    for i, word in enumerate(words):
        sep = tok.separator() if i else []
        word_ids = tok.encode_word(word)
        if len(ids) + len(sep) + len(word_ids) + 1 > max_len:
            break  # drop whole words: a word is never cut in half with its label on the first half
        ids += sep
        labels += [IGNORE] * len(sep)
        if tags is not None:
            labels.append(label_id.get(tags[i], IGNORE))
            labels += [IGNORE] * (len(word_ids) - 1)
        else:
            labels += [IGNORE] * len(word_ids)
        ids += word_ids
        kept += 1
    ids.append(SEP)
    labels.append(IGNORE)
    return ids, labels, len(words) - kept
