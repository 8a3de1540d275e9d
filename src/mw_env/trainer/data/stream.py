"""Producing each step's micro-batches off the training step's critical path.

A producer computes the micro-batches of step s (a pure function of s: order.py). The Prefetcher
runs it in a background thread for steps start, start+1, ... into a bounded queue; the loop takes
step s and measures how long it waited. The reader's whole state is "the next step": a resume
starts a new reader at the checkpoint's step.

A file producer holds the current shuffle window (`data.shuffle_rows` rows, encoded: ~6 bytes per
token plus ~40 per row) and reads and encodes the next window in a second thread while the current
one is read, so memory is about two windows plus `data.prefetch_steps` steps of batches, whatever
the row-group size. With `data.workers` > 0 the encoding of each window is split across worker
processes (workers.py).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from mw_env.errors import InputError
from mw_env.trainer.data.batches import Batch, Split, collate, pad_flat
from mw_env.trainer.data.card import Counts
from mw_env.trainer.data.encode import BAD_ROW, BAD_TAG, BAD_TEXT, Encoded, VectorEncoder
from mw_env.trainer.data.labels import LabelSet
from mw_env.trainer.data.order import Order, Piece, RankOrder, Window, micro_batch_indices, stream_rows_of
from mw_env.trainer.data.reader import Chunk, PieceReader, check_row, where
from mw_env.trainer.data.shards import Block, Shard


@dataclass
class StepData:
    step: int
    micro: list[Batch]
    counts: Counts  # what these rows add to the data card
    position: dict[str, int]  # where the step started in this rank's stream


class Rows:
    """Encoded rows with their locations; the Arrow source is kept only when some row is bad."""

    def __init__(
        self, chunk: Chunk, enc: Encoded, labels: LabelSet, shards: Sequence[Shard], head: int = 0
    ) -> None:
        self.enc, self.labels, self.shards = enc, labels, shards
        self.shard, self.part, self.local = chunk.shard, chunk.part, chunk.local
        self.src = (chunk.tokens, chunk.tags) if enc.problem.any() else None
        # The words of the first `head` rows (printed evaluation samples); nothing else keeps words.
        self.head: list[list[str]] = []
        if head:
            try:
                self.head = chunk.tokens.slice(0, head).to_pylist()
            except UnicodeDecodeError:  # such a row is an error when it is reached; no samples from it
                self.head = []

    def where(self, i: int) -> str:
        return where(self.shards, int(self.shard[i]), int(self.part[i]), int(self.local[i]))

    def check(self, idx: np.ndarray) -> None:
        """Raise for the first bad row among idx (in idx order): the error names where it is."""
        bad = self.enc.problem[idx]
        if not bad.any():
            return
        i = int(idx[int(np.argmax(bad != 0))])
        code, here = int(self.enc.problem[i]), self.where(i)
        if code == BAD_TEXT:
            raise InputError(
                f"{here}: a word or tag is not valid UTF-8",
                hint="string columns must hold UTF-8 text; re-export the shard",
            )
        tokens, tags = self.src[0][i].as_py(), self.src[1][i].as_py()  # type: ignore[index]
        if code == BAD_ROW:
            check_row(here, tokens, tags)
            raise InputError(f"{here}: a null word or tag", hint="every word and tag is a string")
        if code == BAD_TAG:
            unknown = next(t for t in tags if t not in self.labels.index)
            names = self.labels.names
            raise InputError(
                f"{here}: tag {unknown!r} is not in the label set ({self.labels.origin}: "
                f"{', '.join(names[:12])}{', ...' if len(names) > 12 else ''})",
                hint="list every tag of the corpus in data.labels, or --set data.unknown_tags=ignore "
                "to train on those words without a label (they are counted in the data card)",
            )
        raise AssertionError(f"unknown row problem {code}")


def gather(parts: Sequence[tuple[Rows, np.ndarray]], counts: Counts | None) -> Batch:
    """Rows idx of each Rows, in order, padded into one batch (counted into `counts`)."""
    ids, labels, lens = [], [], []
    for rows, idx in parts:
        rows.check(idx)
        e = rows.enc
        n = e.lengths[idx]
        from mw_env.trainer.data.encode import _ranges

        src = _ranges(e.offsets[idx], n)
        ids.append(e.ids[src])
        labels.append(e.labels[src])
        lens.append(n)
        if counts is not None:
            bio = e.bio[idx]
            examples = [rows.where(int(i)) for i in idx[bio > 0][:5]]
            counts.add_rows(n, e.labels[src], e.kept[idx], e.truncated[idx], e.unknown[idx], bio, examples)
    return pad_flat(np.concatenate(ids), np.concatenate(labels), np.concatenate(lens))


class _LoadedWindow:
    def __init__(self, window: Window, rows: Rows) -> None:
        self.window, self.rows, self.perm = window, rows, window.permutation()


class Encoding:
    """Reads pieces and encodes them: in this process, or split across worker processes."""

    def __init__(
        self, reader: PieceReader, encoder: VectorEncoder, labels: LabelSet, workers: int = 0
    ) -> None:
        self.reader, self.encoder, self.labels = reader, encoder, labels
        self.pool: Any = None
        if workers > 0:
            from mw_env.trainer.data.workers import WorkerPool

            self.pool = WorkerPool(workers, encoder.spec())

    def rows(self, pieces: Sequence[Piece], head: int = 0) -> Rows:
        chunk = self.reader.read(pieces)
        if self.pool is not None and len(chunk) >= 2 * len(self.pool):
            enc = self.pool.encode(chunk.tokens, chunk.tags)
        else:
            enc = self.encoder.encode(chunk.tokens, chunk.tags)
        return Rows(chunk, enc, self.labels, self.reader.shards, head)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None


class FileProducer:
    """Micro-batches of one rank over its blocks of a streamed corpus."""

    def __init__(
        self, *, order: RankOrder, encoding: Encoding, labels: LabelSet, batch_size: int, accumulation: int
    ) -> None:
        self.order, self.encoding, self.labels = order, encoding, labels
        self.batch_size, self.accumulation = batch_size, accumulation
        self._current: _LoadedWindow | None = None
        self._next: tuple[tuple[int, int], Future[_LoadedWindow]] | None = None
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="mw-env-read-ahead")

    def _load(self, window: Window) -> _LoadedWindow:
        return _LoadedWindow(window, self.encoding.rows(self.order.pieces(window)))

    def _window(self, w: Window) -> _LoadedWindow:
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
        self._current = loaded
        nxt = self.order.following(w)
        self._next = ((nxt.epoch, nxt.number), self._pool.submit(self._load, nxt))
        return loaded

    def _micro(self, rows: range, counts: Counts) -> Batch:
        parts = []
        p = rows.start
        while p < rows.stop:
            w, off = self.order.locate(p)
            loaded = self._window(w)
            take = min(rows.stop - p, w.rows - off)
            parts.append((loaded.rows, loaded.perm[off : off + take]))
            p += take
        return gather(parts, counts)

    def __call__(self, step: int) -> StepData:
        counts = Counts(len(self.labels))
        micro = []
        for m in range(self.accumulation):
            rows = stream_rows_of(
                step=step, micro=m, batch_size=self.batch_size, accumulation=self.accumulation
            )
            micro.append(self._micro(rows, counts))
        first = stream_rows_of(step=step, micro=0, batch_size=self.batch_size, accumulation=self.accumulation)
        return StepData(step, micro, counts, self.order.position(first.start))

    def close(self) -> None:
        if self._next is not None:
            self._next[1].cancel()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._current = self._next = None
        self.encoding.close()


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


def val_pieces(blocks: Sequence[Block], first: int, stop: int) -> list[Piece]:
    """Rows [first, stop) of the validation stream (its blocks in order), as pieces."""
    out, begin = [], 0
    for k, b in enumerate(blocks):
        end = begin + b.rows
        lo, hi = max(first, begin), min(stop, end)
        if lo < hi:
            out.append(Piece(k, lo - begin, hi - lo))
        begin = end
    return out


def iter_val_rows(
    encoding: Encoding, blocks: Sequence[Block], first: int, stop: int, chunk: int, head: int
) -> Iterator[Rows]:
    """This rank's share of the validation rows, `chunk` rows at a time, in corpus order."""
    for a in range(first, stop, chunk):
        yield encoding.rows(val_pieces(blocks, a, min(a + chunk, stop)), head if a == first else 0)
