"""The data order: which row every (step, micro-batch, rank) reads, as a pure function of the step.

Every corpus (files, or the synthetic one as an in-memory shard):
- Blocks (row groups) are assigned to ranks once: in a permutation seeded by runtime.seed, each block
  goes to the rank with the fewest rows so far. Rank r only ever reads its own blocks.
- Epoch e of rank r: its blocks in a permutation keyed by (seed, e, r), their rows concatenated into
  one stream and cut into windows of `data.shuffle_rows` rows (a window may start and end inside a
  row group: memory is bounded in rows, whatever size the row groups are). The rows of window w are
  permuted, keyed by (seed, e, r, w). A window is the shuffle's memory: its rows are held while read.
- Rank r's micro-batch m of step s is rows [(s*A + m)*B, +B) of its endless stream of epochs, so
  the position of any step is computed from row counts (footers), never replayed.
- Weighted sources (data.sources, mix.py): each source's blocks are assigned and ordered as above, on
  their own (keys salted with the source's index); row p of rank r's stream is row q of one source's
  stream, as the mix's fixed schedule says.

The synthetic corpus is an in-memory shard of 64-row blocks (corpus._memory_shard) in the same order.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import TYPE_CHECKING

from mw_env.trainer.data.shards import Block

if TYPE_CHECKING:
    import numpy as np

_ASSIGN, _EPOCH, _WINDOW = 0xA551, 0xE90C, 0x3D0


def _rng(*key: int) -> np.random.Generator:
    import numpy as np  # lazily: the torch-free test venv imports this package without numpy

    # SeedSequence over a tuple of integers: independent streams per key, same on every rank/host.
    return np.random.default_rng([k & 0xFFFFFFFF for k in key])


def assign_blocks(blocks: Sequence[Block], world: int, seed: int) -> list[list[int]]:
    """Block indices per rank, balanced by rows; fixed for the whole run."""
    loads = [0] * world
    owned: list[list[int]] = [[] for _ in range(world)]
    for b in _rng(seed, _ASSIGN).permutation(len(blocks)).tolist():
        r = min(range(world), key=lambda k: (loads[k], k))
        owned[r].append(b)
        loads[r] += blocks[b].rows
    return [sorted(o) for o in owned]


@dataclass(frozen=True)
class Window:
    epoch: int
    number: int  # window number within the epoch
    start: int  # its first row in the epoch's stream
    rows: int
    seed: tuple[int, ...]

    def permutation(self) -> np.ndarray:
        return _rng(*self.seed).permutation(self.rows)


@dataclass(frozen=True)
class Piece:
    """Rows [first, first + rows) of one block: what a window reads from that block."""

    block: int  # index into the corpus's block list
    first: int
    rows: int


class RankOrder:
    """Rank r's endless stream: stream row p -> (window, row inside the window's permutation)."""

    def __init__(
        self,
        blocks: Sequence[Block],
        owned: Sequence[int],
        *,
        seed: int,
        rank: int,
        window_rows: int,
        salt: tuple[int, ...] = (),
    ):
        self.blocks, self.owned = blocks, list(owned)
        self.seed, self.rank, self.window_rows = seed, rank, window_rows
        self.salt = salt  # weighted sources: (source index,), so each source has its own permutations
        self.epoch_rows = sum(blocks[b].rows for b in self.owned)
        self._epoch = -1
        self._order: list[int] = []
        self._ends: list[int] = []

    def epoch_blocks(self, epoch: int) -> tuple[list[int], list[int]]:
        """The epoch's blocks in reading order, and the cumulative row count at the end of each."""
        if epoch != self._epoch:
            perm = _rng(self.seed, _EPOCH, epoch, self.rank, *self.salt).permutation(len(self.owned)).tolist()
            self._order = [self.owned[i] for i in perm]
            self._ends = list(accumulate(self.blocks[b].rows for b in self._order))
            self._epoch = epoch
        return self._order, self._ends

    def n_windows(self) -> int:
        return -(-self.epoch_rows // self.window_rows)

    def window(self, epoch: int, number: int) -> Window:
        start = number * self.window_rows
        rows = min(self.window_rows, self.epoch_rows - start)
        return Window(epoch, number, start, rows, (self.seed, _WINDOW, epoch, self.rank, number, *self.salt))

    def following(self, w: Window) -> Window:
        if w.number + 1 < self.n_windows():
            return self.window(w.epoch, w.number + 1)
        return self.window(w.epoch + 1, 0)

    def pieces(self, w: Window) -> list[Piece]:
        """The block ranges that make up window w, in stream order."""
        order, ends = self.epoch_blocks(w.epoch)
        out: list[Piece] = []
        p, stop = w.start, w.start + w.rows
        k = bisect.bisect_right(ends, p)
        while p < stop:
            begin = ends[k - 1] if k else 0
            take = min(ends[k], stop) - p
            out.append(Piece(order[k], p - begin, take))
            p += take
            k += 1
        return out

    def locate(self, p: int) -> tuple[Window, int]:
        """Stream row p -> (its window, its index in the window's permutation)."""
        epoch, q = divmod(p, self.epoch_rows)
        w = q // self.window_rows
        return self.window(epoch, w), q - w * self.window_rows

    def position(self, p: int) -> dict[str, int]:
        window, offset = self.locate(p)
        return {"epoch": window.epoch, "window": window.number, "row_in_window": offset, "stream_row": p}


def stream_rows_of(*, step: int, micro: int, batch_size: int, accumulation: int) -> range:
    start = (step * accumulation + micro) * batch_size
    return range(start, start + batch_size)
