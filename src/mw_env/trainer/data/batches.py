"""Rows -> padded tensors: encoding with the label set, counting for the card, collation.

Also the packed in-memory split the synthetic source uses (a few bytes per token, not a Python
object per word).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mw_env.errors import InputError
from mw_env.trainer.data.card import Counts
from mw_env.trainer.data.labels import LabelSet
from mw_env.trainer.data.tokenize import IGNORE, PAD, Tokenizer, encode_row

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Batch:
    input_ids: torch.Tensor  # [B, T] long
    labels: torch.Tensor  # [B, T] long, -100 = ignored
    attention_mask: torch.Tensor  # [B, T] bool, True = a real token
    n_tokens: int = 0  # input tokens (counted on the host by the reader: no device sync)
    n_labelled: int = 0  # labelled positions (words)

    def to(self, device: Any, non_blocking: bool = False) -> Batch:
        return Batch(
            self.input_ids.to(device, non_blocking=non_blocking),
            self.labels.to(device, non_blocking=non_blocking),
            self.attention_mask.to(device, non_blocking=non_blocking),
            self.n_tokens,
            self.n_labelled,
        )

    def pin_memory(self) -> Batch:
        return Batch(
            self.input_ids.pin_memory(),
            self.labels.pin_memory(),
            self.attention_mask.pin_memory(),
            self.n_tokens,
            self.n_labelled,
        )


def pad_batch(rows: Sequence[tuple[Sequence[int], Sequence[int]]]) -> Batch:
    """Pad (ids, labels) rows to the longest one in this micro-batch."""
    import numpy as np
    import torch

    width = max(len(ids) for ids, _ in rows)
    ids = np.full((len(rows), width), PAD, dtype=np.int64)
    labels = np.full((len(rows), width), IGNORE, dtype=np.int64)
    for i, (a, b) in enumerate(rows):
        ids[i, : len(a)] = a
        labels[i, : len(b)] = b
    t_ids, t_labels = torch.from_numpy(ids), torch.from_numpy(labels)
    n_tokens = sum(len(a) for a, _ in rows)
    n_labelled = int((labels != IGNORE).sum())
    return Batch(t_ids, t_labels, t_ids != PAD, n_tokens, n_labelled)


def pad_flat(ids: Any, labels: Any, lengths: Any) -> Batch:
    """Pad rows given as flat buffers (row k: the next lengths[k] entries) into one batch, vectorised."""
    import numpy as np
    import torch

    n = len(lengths)
    width = int(lengths.max()) if n else 1
    row = np.repeat(np.arange(n), lengths)
    starts = np.zeros(n, dtype=np.int64)
    if n > 1:
        np.cumsum(lengths[:-1], out=starts[1:])
    col = np.arange(len(ids), dtype=np.int64) - np.repeat(starts, lengths)
    out_ids = np.full((n, width), PAD, dtype=np.int64)
    out_labels = np.full((n, width), IGNORE, dtype=np.int64)
    out_ids[row, col] = ids
    out_labels[row, col] = labels
    t_ids, t_labels = torch.from_numpy(out_ids), torch.from_numpy(out_labels)
    return Batch(t_ids, t_labels, t_ids != PAD, int(lengths.sum()), int((labels != IGNORE).sum()))


class Encoder:
    """Encodes checked rows with the run's tokenizer and label set, counting into `counts`."""

    def __init__(self, tok: Tokenizer, labels: LabelSet, max_len: int, unknown_tags: str) -> None:
        self.tok, self.labels, self.max_len, self.unknown_tags = tok, labels, max_len, unknown_tags

    def encode(
        self, words: list[str], tags: list[str], where: str, counts: Counts
    ) -> tuple[list[int], list[int]]:
        index = self.labels.index
        unknown = [t for t in tags if t not in index]
        if unknown and self.unknown_tags == "error":
            raise InputError(
                f"{where}: tag {unknown[0]!r} is not in the label set ({self.labels.origin}: "
                f"{', '.join(self.labels.names[:12])}{', ...' if len(self.labels) > 12 else ''})",
                hint="list every tag of the corpus in data.labels, or --set data.unknown_tags=ignore "
                "to train on those words without a label (they are counted in the data card)",
            )
        ids, label_ids, dropped = encode_row(self.tok, words, tags, self.max_len, index)
        kept = [k for k in label_ids if k != IGNORE]
        n_unknown = sum(1 for t in tags[: len(words) - dropped] if t not in index)
        counts.add_row(len(ids), kept, truncated=dropped, unknown=n_unknown)
        bad = self.labels.bio_errors(kept)
        if bad:
            counts.add_bio(bad, where)
        return ids, label_ids


@dataclass
class Split:
    """A packed in-memory split: example k is ids[offsets[k]:offsets[k+1]] (and the same slice of labels)."""

    ids: array = field(default_factory=lambda: array("i"))
    labels: array = field(default_factory=lambda: array("i"))
    offsets: array = field(default_factory=lambda: array("q", [0]))
    dropped: array = field(default_factory=lambda: array("i"))
    preview: list[list[str]] = field(default_factory=list)  # the first rows' words, for printed samples

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def add(self, ids: list[int], labels: list[int], words: list[str], dropped: int = 0) -> None:
        self.ids.extend(ids)
        self.labels.extend(labels)
        self.offsets.append(len(self.ids))
        self.dropped.append(dropped)
        if len(self.preview) < 16:
            self.preview.append(list(words))

    def example(self, k: int) -> tuple[array, array]:
        a, b = self.offsets[k], self.offsets[k + 1]
        return self.ids[a:b], self.labels[a:b]


def collate(
    split: Split, indices: Sequence[int], counts: Counts | None = None, labels: LabelSet | None = None
) -> Batch:
    """Pad examples of an in-memory split; count them into `counts` when given."""
    rows = [split.example(int(k)) for k in indices]
    if counts is not None and labels is not None:
        for k, (ids, lab) in zip(indices, rows, strict=True):
            kept = [x for x in lab if x != IGNORE]
            counts.add_row(len(ids), kept, truncated=split.dropped[int(k)], unknown=0)
            bad = labels.bio_errors(kept)
            if bad:
                counts.add_bio(bad, f"synthetic row {int(k)}")
    return pad_batch(rows)
