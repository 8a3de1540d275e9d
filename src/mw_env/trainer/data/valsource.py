"""The validation split as the trainer reads it: from the start at every evaluation, sharded over the processes
(rank r of W evaluates the contiguous rows [r·n/W, (r+1)·n/W) of the n held-out rows)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from mw_env.trainer.data.batches import Batch
from mw_env.trainer.data.card import Counts
from mw_env.trainer.data.shards import Block
from mw_env.trainer.data.stream import Encoding, gather, iter_val_rows

# (source, batch_size, max_batches) -> the (batch, words) pairs of a validation pass
ValBatches = Callable[["ValSource", int, int], Iterator[tuple[Batch, list[list[str]]]]]


@dataclass
class ValSource:
    """The validation split, read from the start at every evaluation."""

    rows: int
    _batches: ValBatches
    counts: Counts | None = None  # what the last full evaluation read
    rank: int = 0  # this process's share of the rows: rank r of world evaluates rows [r*n/world, ...)
    world: int = 1

    def share(self) -> tuple[int, int]:
        return self.rows * self.rank // self.world, self.rows * (self.rank + 1) // self.world

    def batches(self, batch_size: int, max_batches: int) -> Iterator[tuple[Batch, list[list[str]]]]:
        return self._batches(self, batch_size, max_batches)


VAL_CHUNK = 4096  # validation rows read and encoded at a time
SAMPLE_ROWS = 16  # rows whose words are kept for the printed samples


def val_batches(encoding: Encoding, blocks: list[Block]) -> ValBatches:
    def batches(src: ValSource, batch_size: int, max_batches: int) -> Iterator[tuple[Batch, list[list[str]]]]:
        import numpy as np

        counts = Counts(len(encoding.labels))
        first, stop = src.share()
        if max_batches:
            stop = min(stop, first + max_batches * batch_size)
        done = 0
        for rows in iter_val_rows(encoding, blocks, first, stop, max(VAL_CHUNK, batch_size), SAMPLE_ROWS):
            for a in range(0, len(rows.enc), batch_size):
                idx = np.arange(a, min(a + batch_size, len(rows.enc)))
                head = rows.head if done < SAMPLE_ROWS and src.rank == 0 else []
                words = [head[i] if i < len(head) else [] for i in idx.tolist()]
                yield gather([(rows, idx)], counts), words
                done += len(idx)
        src.counts = counts

    return batches
