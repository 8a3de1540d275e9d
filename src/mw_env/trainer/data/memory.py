"""The in-memory split (the synthetic source) on the same data path as files.

Its rows go through the same encoder (encode.py) into the same flat buffers, and its batches through
the same gather/pad/count (stream.gather) as a streamed corpus's: only the order differs. Synthetic
rows are one global stream (order.Order: position p is a pure function of (seed, p)), so world ranks
x A micro-batches see exactly the rows of 1 rank x world*A, which tests/trainer/test_ddp.py relies on
to check DDP against one process.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from mw_env.trainer.data.batches import Batch
from mw_env.trainer.data.card import Counts
from mw_env.trainer.data.encode import VectorEncoder
from mw_env.trainer.data.labels import LabelSet
from mw_env.trainer.data.order import Order, micro_batch_indices
from mw_env.trainer.data.reader import SYNTHETIC, Chunk
from mw_env.trainer.data.stream import Rows, StepData, gather

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


class MemoryProducer:
    """Micro-batches of one rank over an in-memory split (the synthetic source)."""

    def __init__(
        self,
        *,
        split: Split,
        labels: LabelSet,
        seed: int,
        rank: int,
        world: int,
        batch_size: int,
        accumulation: int,
    ) -> None:
        self.split, self.labels, self.order = split, labels, Order(len(split), seed)
        self.rank, self.world, self.batch_size, self.accumulation = rank, world, batch_size, accumulation

    def __call__(self, step: int) -> StepData:
        counts = Counts(len(self.labels))
        micro = []
        for m in range(self.accumulation):
            idx = micro_batch_indices(
                self.order,
                step=step,
                micro=m,
                rank=self.rank,
                world=self.world,
                batch_size=self.batch_size,
                accumulation=self.accumulation,
            )
            micro.append(collate(self.split, idx, counts))
        p = step * self.batch_size * self.accumulation * self.world
        return StepData(step, micro, counts, {"epoch": p // len(self.split), "stream_row": p})

    def close(self) -> None:
        pass
