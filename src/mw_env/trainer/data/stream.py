"""Producing each step's micro-batches off the training step's critical path.

A producer computes the micro-batches of step s (a pure function of s: order.py). The Prefetcher
runs it in a background thread for steps start, start+1, ... into a bounded queue; the loop takes
step s and measures how long it waited. The reader's whole state is "the next step": a resume
starts a new reader at the checkpoint's step. A file producer holds the current shuffle window's
blocks and loads the next window in a second thread while the current one is read, so memory is
about two windows (2 x data.shuffle_window row groups) plus `data.prefetch_steps` steps of batches.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from mw_env.errors import InputError
from mw_env.trainer.data.batches import Batch, Encoder, Split, collate, pad_batch
from mw_env.trainer.data.card import Counts
from mw_env.trainer.data.labels import LabelSet
from mw_env.trainer.data.order import Order, RankOrder, Window, micro_batch_indices, stream_rows_of
from mw_env.trainer.data.shards import Block, RowBlock, Shard, read_block


@dataclass
class StepData:
    step: int
    micro: list[Batch]
    counts: Counts  # what these rows add to the data card
    position: dict[str, int]  # where the step started in this rank's stream


class _LoadedWindow:
    def __init__(self, window: Window, blocks: list[RowBlock]) -> None:
        import numpy as np

        self.window = window
        self.blocks = blocks
        self.starts = np.cumsum([0] + [len(b) for b in blocks])
        self.perm = window.permutation()


class FileProducer:
    """Micro-batches of one rank over its blocks of a streamed corpus."""

    def __init__(
        self,
        *,
        order: RankOrder,
        shards: Sequence[Shard],
        blocks: Sequence[Block],
        columns: tuple[str, str],
        encoder: Encoder,
        batch_size: int,
        accumulation: int,
    ) -> None:
        self.order, self.shards, self.blocks, self.columns = order, shards, blocks, columns
        self.encoder, self.batch_size, self.accumulation = encoder, batch_size, accumulation
        self._current: _LoadedWindow | None = None
        self._next: tuple[tuple[int, int], Future[_LoadedWindow]] | None = None
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="mw-env-read-ahead")

    def _load(self, window: Window) -> _LoadedWindow:
        rows = [
            read_block(self.shards[self.blocks[b].shard], self.blocks[b], self.columns) for b in window.blocks
        ]
        return _LoadedWindow(window, rows)

    def _following(self, w: Window) -> Window:
        windows = self.order.windows(w.epoch)
        if w.number + 1 < len(windows):
            return windows[w.number + 1]
        return self.order.windows(w.epoch + 1)[0]

    def _window(self, w: Window) -> _LoadedWindow:
        key = (w.epoch, w.number)
        cur = self._current
        if cur is not None and (cur.window.epoch, cur.window.number) == key:
            return cur
        self._current = None  # release the old window before the new one is held
        if self._next is not None and self._next[0] == key:
            loaded = self._next[1].result()
        else:
            if self._next is not None:
                self._next[1].cancel()
            loaded = self._load(w)
        self._current = loaded
        nxt = self._following(w)
        self._next = ((nxt.epoch, nxt.number), self._pool.submit(self._load, nxt))
        return loaded

    def _rows(self, stream_rows: range) -> list[tuple[list[str], list[str], str]]:
        import numpy as np

        picks: list[tuple[_LoadedWindow, int, int]] = []
        for p in stream_rows:
            w, offset = self.order.locate(p)
            loaded = self._window(w)
            g = int(loaded.perm[offset])
            k = int(np.searchsorted(loaded.starts, g, side="right")) - 1
            picks.append((loaded, k, g - int(loaded.starts[k])))
        # One take per block (Arrow gathers are vectorised), then back into stream order.
        out: list[Any] = [None] * len(picks)
        groups: dict[tuple[int, int], list[int]] = {}
        for i, (loaded, k, _) in enumerate(picks):
            groups.setdefault((id(loaded), k), []).append(i)
        for members in groups.values():
            loaded, k, _ = picks[members[0]]
            block = loaded.blocks[k]
            local = [picks[i][2] for i in members]
            for i, j, (words, tags) in zip(members, local, block.take(local), strict=True):
                out[i] = (words, tags, block.where(j))
        return out

    def __call__(self, step: int) -> StepData:
        counts = Counts(len(self.encoder.labels))
        micro = []
        for m in range(self.accumulation):
            rows = self._rows(
                stream_rows_of(step=step, micro=m, batch_size=self.batch_size, accumulation=self.accumulation)
            )
            encoded = [self.encoder.encode(words, tags, where, counts) for words, tags, where in rows]
            micro.append(pad_batch(encoded))
        first = stream_rows_of(step=step, micro=0, batch_size=self.batch_size, accumulation=self.accumulation)
        return StepData(step, micro, counts, self.order.position(first.start))

    def close(self) -> None:
        if self._next is not None:
            self._next[1].cancel()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._current = self._next = None


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
            micro.append(collate(self.split, idx, counts, self.labels))
        p = step * self.batch_size * self.accumulation * self.world
        return StepData(step, micro, counts, {"epoch": p // len(self.split), "stream_row": p})

    def close(self) -> None:
        pass


class Prefetcher:
    """A background thread filling a bounded queue with steps start..stop-1 (or the error it hit)."""

    def __init__(
        self, produce: Callable[[int], StepData], *, start: int, stop: int, depth: int, pin: bool = False
    ):
        self._produce, self._pin = produce, pin
        self._q: queue.Queue[Any] = queue.Queue(maxsize=max(depth, 1))
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(start, stop), name="mw-env-reader", daemon=True
        )
        self._thread.start()

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self, start: int, stop: int) -> None:
        try:
            for step in range(start, stop):
                if self._stop.is_set():
                    return
                item = self._produce(step)
                if self._pin:
                    item.micro = [b.pin_memory() for b in item.micro]
                if not self._put(item):
                    return
        except BaseException as exc:  # handed to the training thread, which raises it there
            self._put(exc)

    def get(self, step: int) -> tuple[StepData, float]:
        """Step `step`'s data and the seconds the caller waited for it."""
        t = time.perf_counter()
        while True:
            try:
                item = self._q.get(timeout=1.0)
                break
            except queue.Empty:
                if not self._thread.is_alive() and self._q.empty():
                    raise InputError(f"the data reader stopped before step {step + 1}") from None
        waited = time.perf_counter() - t
        if isinstance(item, BaseException):
            raise item
        if item.step != step:  # a bug, never an input problem: fail loudly
            raise RuntimeError(f"data reader out of step: expected {step}, got {item.step}")
        return item, waited

    def close(self) -> None:
        self._stop.set()
        while True:  # unblock a producer waiting on a full queue
            try:
                self._q.get_nowait()
            except queue.Empty:
                break
        self._thread.join(timeout=30)


def iter_val_blocks(
    shards: Sequence[Shard], blocks: Sequence[Block], columns: tuple[str, str]
) -> Iterator[tuple[list[str], list[str], str]]:
    """Validation rows in corpus order, one block in memory at a time."""
    for b in blocks:
        rb = read_block(shards[b.shard], b, columns)
        for chunk in range(0, len(rb), 4096):
            local = list(range(chunk, min(chunk + 4096, len(rb))))
            for j, (words, tags) in zip(local, rb.take(local), strict=True):
                yield words, tags, rb.where(j)
