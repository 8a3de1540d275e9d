"""A rank's steps from a streamed corpus: its lanes' streams, windowed, and each step's micro-batches.

A lane's stream (order.RankOrder keyed by the lane) is held as its current shuffle window (`data.shuffle_rows`
rows, encoded: ~6 bytes per token plus ~40 per row) while the next one is read and encoded in a second thread,
so memory is about two windows per lane (per source, with data.sources) plus `data.prefetch_steps` steps of
batches, whatever the row-group size. With weighted sources (mix.py) each source is its own stream (its order
over its units, its windows) and row p of the lane's stream is row q of source k's, as the mix says.

Step s of rank r: the runs of lane stream rows that lanes.Layout gives its micro-batches, gathered lane by lane
(and source by source) in stream order. With one lane per rank (the world size of the run's first start) that
is exactly the rank's stream rows [(s·A + m)·B, +B) of micro-batch m.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from mw_env.trainer.data.card import Counts
from mw_env.trainer.data.labels import LabelSet
from mw_env.trainer.data.lanes import Layout
from mw_env.trainer.data.mix import Mix
from mw_env.trainer.data.order import RankOrder, Window
from mw_env.trainer.data.stream import Encoding, Rows, StepData, gather
from mw_env.trainer.data.trace import RowIds


class _LoadedWindow:
    def __init__(self, window: Window, rows: Rows) -> None:
        self.window, self.rows, self.perm = window, rows, window.permutation()


class _Windows:
    """One order's current shuffle window and the next one, read ahead in a second thread."""

    def __init__(self, order: RankOrder, encoding: Encoding, end: int | None) -> None:
        self.order, self.encoding = order, encoding
        self.end = end  # the stream row after the run's last: no window past it is read ahead
        self._current: _LoadedWindow | None = None
        self._next: tuple[tuple[int, int], Future[_LoadedWindow]] | None = None
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="mw-env-read-ahead")
        self._checked = False  # the first window is checked whole before its first step (check_all)

    def _load(self, window: Window) -> _LoadedWindow:
        return _LoadedWindow(window, self.encoding.rows(self.order.pieces(window)))

    def get(self, w: Window) -> _LoadedWindow:
        key = (w.epoch, w.number)
        cur = self._current
        if cur is not None and (cur.window.epoch, cur.window.number) == key:
            return cur
        self._current = None  # release the old window before the new one is held
        if self._next is not None and self._next[0] == key:
            loaded = self._next[1].result()
        else:
            if self._next is not None and not self._next[1].cancel():
                self._next[1].exception()  # let a running read-ahead finish: one read at a time
            loaded = self._load(w)
        if not self._checked:
            # Every row of the first window, not only the first step's: a bad row there stops a 20-step run
            # before its first step as it would stop a longer one, instead of a minute in (or never).
            loaded.rows.check_all()
            self._checked = True
        self._current = loaded
        nxt = self.order.following(w)
        if self.end is None or nxt.epoch * self.order.epoch_rows + nxt.start < self.end:
            self._next = ((nxt.epoch, nxt.number), self._pool.submit(self._load, nxt))
        else:
            self._next = None
        return loaded

    def parts(self, first: int, stop: int) -> list[tuple[Rows, np.ndarray]]:
        """Rows [first, stop) of this order's stream, as (window rows, indices) in stream order."""
        parts = []
        p = first
        while p < stop:
            w, off = self.order.locate(p)
            loaded = self.get(w)
            take = min(stop - p, w.rows - off)
            parts.append((loaded.rows, loaded.perm[off : off + take]))
            p += take
        return parts

    def close(self) -> None:
        if self._next is not None:
            self._next[1].cancel()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._current = self._next = None


class LaneStream:
    """One lane's endless stream of rows: one order (or one per weighted source, drawn by the mix)."""

    def __init__(
        self, orders: Sequence[RankOrder], encoding: Encoding, *, mix: Mix | None, end: int | None
    ) -> None:
        self.order, self.mix = orders[0], mix
        ends = [end] * len(orders) if mix is None or end is None else mix.counts(end)
        self.streams = [_Windows(o, encoding, e) for o, e in zip(orders, ends, strict=True)]

    def parts(self, first: int, stop: int) -> list[tuple[Rows, np.ndarray]]:
        """Stream rows [first, stop): with sources, gathered source by source (each in stream order)."""
        if self.mix is None:
            return self.streams[0].parts(first, stop)
        ks, qs = self.mix.locate(np.arange(first, stop, dtype=np.int64))
        parts = []
        for k in sorted(set(ks.tolist())):
            mine = qs[ks == k]  # consecutive rows of source k's stream, in order
            parts += self.streams[k].parts(int(mine[0]), int(mine[-1]) + 1)
        return parts

    def position(self, p: int) -> dict[str, int]:
        """Where stream row p stands (with sources: its row; each source's is the mix's arithmetic)."""
        return self.order.position(p) if self.mix is None else {"stream_row": p}

    def close(self) -> None:
        for stream in self.streams:
            stream.close()


class FileProducer:
    """Micro-batches of one rank: its share of each global batch, read from the lanes it covers."""

    def __init__(
        self,
        *,
        lanes: dict[int, LaneStream],
        layout: Layout,
        rank: int,
        encoding: Encoding,
        labels: LabelSet,
        ids: RowIds | None = None,
    ) -> None:
        self.lanes, self.layout, self.rank = lanes, layout, rank
        self.encoding, self.labels, self.ids = encoding, labels, ids

    def __call__(self, step: int) -> StepData:
        counts = Counts(len(self.labels))
        micro = []
        ids: list[list[int]] = []
        runs = self.layout.runs(self.rank, step)
        for micro_runs in runs:
            parts = []
            for lane, first, stop in micro_runs:
                parts += self.lanes[lane].parts(first, stop)
            micro.append(gather(parts, counts))
            if self.ids is not None:
                ids += self.ids.of(parts)
        lane, first, _ = runs[0][0]
        return StepData(
            step, micro, counts, self.lanes[lane].position(first), ids if self.ids is not None else None
        )

    def close(self) -> None:
        for stream in self.lanes.values():
            stream.close()
        self.encoding.close()
