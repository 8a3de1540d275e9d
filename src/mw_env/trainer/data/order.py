"""The data order: which row each lane's stream holds at every position, as a pure function of the position.

A lane (lanes.py) is fixed for a run at its first start: one per process then. Every corpus (files, or the
synthetic one as an in-memory shard):
- Units (whole row groups / JSONL blocks, or row ranges of them: trainspec/units.py) are assigned to lanes
  once: in a permutation seeded by runtime.seed, each unit goes to the lane with the fewest rows so far. A
  lane only ever reads its own units.
- Epoch e of lane k: its units in a permutation keyed by (seed, e, k) (the row ranges of one block move
  together, in their order: the block is decoded once an epoch), their rows concatenated into one stream
  and cut into windows of `data.shuffle_rows` rows (a window may start and end inside a unit: memory is
  bounded in rows, whatever size the row groups are). The rows of window w are permuted, keyed by
  (seed, e, k, w). A window is the shuffle's memory: its rows are held while read.
- Row p of lane k's endless stream of epochs is found from row counts (footers), never replayed; step s
  takes rows [s·Q, (s+1)·Q) of every lane (lanes.py), so the position of any step is arithmetic.
- Weighted sources (data.sources, mix.py): each source's units are assigned and ordered as above, on
  their own (keys salted with the source's index); row p of lane k's stream is row q of one source's
  stream, as the mix's fixed schedule says.

The synthetic corpus is an in-memory shard of 64-row blocks (memshard.py) in the same order.
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
    """Unit indices per lane (`world`: the lanes), balanced by rows; fixed for the whole run."""
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
    """Lane k's endless stream: stream row p -> (window, row inside the window's permutation). (`rank` is
    the lane's number: a lane is the rank of that number at the run's first start.)"""

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
        # Row ranges of one block (trainspec/units.py) are permuted together and read in their order, so a
        # block is decoded once an epoch, not once per range; a whole block is a group of one (as before).
        groups: dict[tuple[int, int], list[int]] = {}
        for b in self.owned:
            groups.setdefault((blocks[b].shard, blocks[b].part), []).append(b)
        self.groups = [sorted(g, key=lambda b: blocks[b].offset) for g in groups.values()]
        self._epoch = -1
        self._order: list[int] = []
        self._ends: list[int] = []

    def epoch_blocks(self, epoch: int) -> tuple[list[int], list[int]]:
        """The epoch's units in reading order, and the cumulative row count at the end of each."""
        if epoch != self._epoch:
            perm = (
                _rng(self.seed, _EPOCH, epoch, self.rank, *self.salt).permutation(len(self.groups)).tolist()
            )
            self._order = [b for i in perm for b in self.groups[i]]
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
