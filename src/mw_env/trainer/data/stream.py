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

from mw_env.base.errors import InputError
from mw_env.trainer.data.batches import Batch, pad_flat
from mw_env.trainer.data.card import Counts
from mw_env.trainer.data.encode import BAD_ROW, BAD_TAG, BAD_TEXT, Encoded, VectorEncoder
from mw_env.trainer.data.labels import LabelSet
from mw_env.trainer.data.mix import Mix
from mw_env.trainer.data.order import Piece, RankOrder, Window, stream_rows_of
from mw_env.trainer.data.reader import Chunk, PieceReader, check_row, where
from mw_env.trainer.data.shards import Block, Shard
from mw_env.trainspec.rows import tag_error, text_error


@dataclass
class StepData:
    step: int
    micro: list[Batch]
    counts: Counts  # what these rows add to the data card
    position: dict[str, int]  # where the step started in this rank's stream


class Rows:
    """Encoded rows with their locations, from one or more chunks read in turn.

    The Arrow words of a chunk are dropped once it is encoded, except in a chunk with a bad row (to
    name what is wrong when a step reaches it) and the first `head` rows' words (printed samples)."""

    def __init__(
        self, parts: Sequence[tuple[Chunk, Encoded]], labels: LabelSet, shards: Sequence[Shard], head: int = 0
    ) -> None:
        self.labels, self.shards = labels, shards
        self.enc = Encoded.concat([e for _, e in parts])
        self.shard = np.concatenate([c.shard for c, _ in parts])
        self.part = np.concatenate([c.part for c, _ in parts])
        self.local = np.concatenate([c.local for c, _ in parts])
        self.sources: list[tuple[int, Any, Any]] = []  # (first row, tokens, tags) of chunks with a bad row
        start = 0
        for chunk, enc in parts:
            if enc.problem.any():
                self.sources.append((start, chunk.tokens, chunk.tags))
            start += len(enc)
        self.head: list[list[str]] = []
        if head and parts:
            try:
                self.head = parts[0][0].tokens.slice(0, head).to_pylist()
            except UnicodeDecodeError:  # such a row is an error when it is reached; no samples from it
                self.head = []

    def _source(self, i: int) -> tuple[Any, Any]:
        for start, tokens, tags in self.sources:
            if start <= i < start + len(tokens):
                return tokens[i - start].as_py(), tags[i - start].as_py()
        raise AssertionError(f"row {i} is marked bad but its chunk was not kept")

    def where(self, i: int) -> str:
        return where(self.shards, int(self.shard[i]), int(self.part[i]), int(self.local[i]))

    def check(self, idx: np.ndarray) -> None:
        """Raise for the first bad row among idx (in idx order): the error names where it is."""
        bad = self.enc.problem[idx]
        if not bad.any():
            return
        i = int(idx[int(np.argmax(bad != 0))])
        code, here = int(self.enc.problem[i]), self.where(i)
        # The sentences are trainspec/rows.py's: `mw-env train check` says the same of the same row.
        if code == BAD_TEXT:
            raise text_error(here)
        tokens, tags = self._source(i)
        if code == BAD_ROW:
            check_row(here, tokens, tags)
            raise InputError(f"{here}: a null word or tag", hint="every word and tag is a string")
        if code == BAD_TAG:
            unknown = next(t for t in tags if t not in self.labels.index)
            raise tag_error(here, unknown, self.labels.names, self.labels.origin)
        raise AssertionError(f"unknown row problem {code}")

    def check_all(self) -> None:
        """Raise for the first bad row of these rows (the first window, before the first step)."""
        self.check(np.arange(len(self.enc)))


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


ENCODE_ROWS = 16384


def split_pieces(pieces: Sequence[Piece], rows: int) -> list[list[Piece]]:
    """The pieces cut into consecutive groups of at most `rows` rows (a piece may be cut in two)."""
    groups: list[list[Piece]] = [[]]
    room = rows
    for p in pieces:
        first, left = p.first, p.rows
        while left:
            take = min(left, room)
            groups[-1].append(Piece(p.block, first, take))
            first, left, room = first + take, left - take, room - take
            if not room:
                groups.append([])
                room = rows
    return [g for g in groups if g]


class _LoadedWindow:
    def __init__(self, window: Window, rows: Rows) -> None:
        self.window, self.rows, self.perm = window, rows, window.permutation()


class Encoding:
    """Reads pieces and encodes them: in this process, or split across worker processes."""

    def __init__(
        self,
        reader: PieceReader,
        encoder: VectorEncoder,
        labels: LabelSet,
        workers: int = 0,
        *,
        min_rows: int = 0,
    ) -> None:
        self.reader, self.encoder, self.labels = reader, encoder, labels
        # The pool starts when a window first has `min_rows` rows to encode: with the automatic count
        # (min_rows = ENCODE_ROWS) a small corpus never pays for starting processes it cannot use.
        self.workers, self.min_rows = workers, min_rows
        self.pool: Any = None

    def _pool(self, rows: int) -> Any:
        if self.pool is None and self.workers > 0 and rows >= self.min_rows:
            from mw_env.trainer.data.workers import WorkerPool

            self.pool = WorkerPool(self.workers, self.encoder.spec())
        return self.pool

    def rows(self, pieces: Sequence[Piece], head: int = 0) -> Rows:
        # Read and encode ENCODE_ROWS rows at a time (with workers: one such slice per worker): only that
        # many rows are ever held as Arrow words, and the encoder's temporaries stay bounded too.
        pool = self._pool(sum(p.rows for p in pieces))
        step = ENCODE_ROWS * (len(pool) if pool is not None else 1)
        parts = []
        for group in split_pieces(pieces, step):
            chunk = self.reader.read(group)
            if pool is not None and len(chunk) >= 2 * len(pool):
                enc = pool.encode(chunk.tokens, chunk.tags)
            else:
                enc = self.encoder.encode(chunk.tokens, chunk.tags)
            parts.append((chunk, enc))
        if not parts:
            chunk = self.reader.read([])
            parts.append((chunk, self.encoder.encode(chunk.tokens, chunk.tags)))
        return Rows(parts, self.labels, self.reader.shards, head)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None


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


class FileProducer:
    """Micro-batches of one rank over its blocks of a streamed corpus.

    With weighted sources (mix.py) each source is its own stream (its order over its blocks, its windows)
    and row p of the rank's stream is row q of source k's, as the mix says; a micro-batch's rows are then
    gathered source by source (each source's rows in stream order)."""

    def __init__(
        self,
        *,
        order: RankOrder | Sequence[RankOrder],
        encoding: Encoding,
        labels: LabelSet,
        batch_size: int,
        accumulation: int,
        stop: int | None = None,
        mix: Mix | None = None,
    ) -> None:
        orders = [order] if isinstance(order, RankOrder) else list(order)
        self.order, self.orders, self.mix = orders[0], orders, mix
        self.encoding, self.labels = encoding, labels
        self.batch_size, self.accumulation = batch_size, accumulation
        # The stream row after the last step's rows: no window past it is read ahead.
        end = None if stop is None else stop * accumulation * batch_size
        ends = [end] * len(orders) if mix is None or end is None else mix.counts(end)
        self.streams = [_Windows(o, encoding, e) for o, e in zip(orders, ends, strict=True)]

    def _micro(self, rows: range, counts: Counts) -> Batch:
        if self.mix is None:
            return gather(self.streams[0].parts(rows.start, rows.stop), counts)
        ks, qs = self.mix.locate(np.arange(rows.start, rows.stop, dtype=np.int64))
        parts = []
        for k in sorted(set(ks.tolist())):
            mine = qs[ks == k]  # consecutive rows of source k's stream, in order
            parts += self.streams[k].parts(int(mine[0]), int(mine[-1]) + 1)
        return gather(parts, counts)

    def position(self, p: int) -> dict[str, int]:
        """Where stream row p stands (with sources: its row; each source's is the mix's arithmetic)."""
        return self.order.position(p) if self.mix is None else {"stream_row": p}

    def __call__(self, step: int) -> StepData:
        counts = Counts(len(self.labels))
        micro = []
        for m in range(self.accumulation):
            rows = stream_rows_of(
                step=step, micro=m, batch_size=self.batch_size, accumulation=self.accumulation
            )
            micro.append(self._micro(rows, counts))
        first = stream_rows_of(step=step, micro=0, batch_size=self.batch_size, accumulation=self.accumulation)
        return StepData(step, micro, counts, self.position(first.start))

    def close(self) -> None:
        for stream in self.streams:
            stream.close()
        self.encoding.close()


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
