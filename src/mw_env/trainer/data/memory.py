"""Rows held in memory, encoded by the same encoder (encode.py) into the same flat buffers and batched by the
same gather/pad/count (stream.gather) as a streamed corpus's: what `train predict`/`evaluate` tag. (The
synthetic corpus is an in-memory shard read by the file path: memshard.py.)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from mw_env.trainer.data.batches import Batch
from mw_env.trainer.data.card import Counts
from mw_env.trainer.data.encode import VectorEncoder
from mw_env.trainer.data.labels import LabelSet
from mw_env.trainer.data.reader import SYNTHETIC, Chunk
from mw_env.trainer.data.stream import Rows, gather

PREVIEW = 16  # rows whose words are kept for the printed evaluation samples


class Split:
    """Encoded rows held in memory (a few bytes per token), with the first rows' words."""

    def __init__(self, rows: Rows) -> None:
        self.rows = rows
        self.preview: list[list[str]] = rows.head

    def __len__(self) -> int:
        return len(self.rows.enc)


def encode_split(
    examples: Iterable[tuple[list[str], list[str]]], encoder: VectorEncoder, labels: LabelSet
) -> Split:
    import pyarrow as pa

    words, tags = [], []
    for w, t in examples:
        words.append(w)
        tags.append(t)
    typ = pa.list_(pa.string())
    n = len(words)
    chunk = Chunk(
        pa.array(words, typ),
        pa.array(tags, typ),
        np.zeros(n, np.int32),
        np.full(n, SYNTHETIC, np.int32),
        np.arange(n, dtype=np.int64),
    )
    return Split(Rows([(chunk, encoder.encode(chunk.tokens, chunk.tags))], labels, [], head=PREVIEW))


def collate(split: Split, indices: Sequence[int], counts: Counts | None = None, labels: Any = None) -> Batch:
    """Rows `indices` of an in-memory split, padded (counted into `counts` when given)."""
    return gather([(split.rows, np.asarray(indices, dtype=np.int64))], counts)
