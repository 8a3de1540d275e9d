"""Encoded rows and the background reader: what a producer (producer.py) reads, and how steps reach the loop.

A producer computes the micro-batches of step s (a pure function of s: order.py, lanes.py). The Prefetcher
runs it in a background thread for steps start, start+1, ... into a bounded queue; the loop takes
step s and measures how long it waited. The reader's whole state is "the next step": a resume
starts a new reader at the checkpoint's step.

`Encoding` reads pieces of blocks and encodes them (in this process, or split across worker processes:
workers.py, with `data.workers` > 0); `Rows` holds the encoded rows with where each came from; `gather` pads
rows of several windows into one batch. Validation is read here too, from the start at every evaluation (`ValSource`).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from mw_env.base.errors import InputError
from mw_env.trainer.data.batches import Batch, pad_flat
from mw_env.trainer.data.card import Counts
from mw_env.trainer.data.encode import BAD_ROW, BAD_TAG, BAD_TEXT, Encoded, VectorEncoder, _ranges
from mw_env.trainer.data.labels import LabelSet
from mw_env.trainer.data.order import Piece
from mw_env.trainer.data.reader import Chunk, PieceReader, check_row, where
from mw_env.trainer.data.shards import Block, Shard
from mw_env.trainspec.rows import tag_error, text_error

if TYPE_CHECKING:
    from mw_env.trainer.data.workers import WorkerPool


@dataclass
class StepData:
    step: int
    micro: list[Batch]
    counts: Counts  # what these rows add to the data card
    position: dict[str, int]  # where the step started in this rank's (first) lane
    ids: list[list[int]] | None = None  # with the row trace on (trace.py): [shard, row in file] of each row


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


class _Shared:
    """What the Encodings of one rank share: the worker pool, started once, and the lock around its use."""

    def __init__(self) -> None:
        self.pool: WorkerPool | None = None
        self.lock = threading.Lock()


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
        # The worker pool and the lock that keeps it to one caller at a time: shared by the Encodings of one
        # rank's lanes and sources (`for_reader`), whose read-ahead threads may encode at the same time.
        self._shared = _Shared()

    def for_reader(self, reader: PieceReader) -> Encoding:
        """The same encoder and worker pool over another reader (a lane's own: its own cursors)."""
        other = Encoding(reader, self.encoder, self.labels, self.workers, min_rows=self.min_rows)
        other._shared = self._shared
        return other

    def _pool(self, rows: int) -> WorkerPool | None:
        if self._shared.pool is None and self.workers > 0 and rows >= self.min_rows:
            from mw_env.trainer.data.workers import WorkerPool

            self._shared.pool = WorkerPool(self.workers, self.encoder.spec())
        return self._shared.pool

    def rows(self, pieces: Sequence[Piece], head: int = 0) -> Rows:
        with self._shared.lock:
            return self._rows(pieces, head)

    def _rows(self, pieces: Sequence[Piece], head: int) -> Rows:
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
        if self._shared.pool is not None:
            self._shared.pool.close()
            self._shared.pool = None


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


VAL_CHUNK = 4096  # validation rows read and encoded at a time
SAMPLE_ROWS = 16  # rows whose words are kept for the printed samples


@dataclass
class ValSource:
    """The validation split, read from the start at every evaluation, sharded over the processes (rank r of W
    evaluates the contiguous rows [r·n/W, (r+1)·n/W) of the n held-out rows)."""

    rows: int
    encoding: Encoding
    blocks: Sequence[Block]
    counts: Counts | None = None  # what the last full evaluation read
    rank: int = 0
    world: int = 1

    def batches(self, batch_size: int, max_batches: int) -> Iterator[tuple[Batch, list[list[str]]]]:
        """This rank's share (at most `max_batches` batches of it; 0: all), in corpus order, with the words of
        rank 0's first SAMPLE_ROWS rows (the printed samples)."""
        counts = Counts(len(self.encoding.labels))
        first, stop = self.rows * self.rank // self.world, self.rows * (self.rank + 1) // self.world
        if max_batches:
            stop = min(stop, first + max_batches * batch_size)
        done, chunk = 0, max(VAL_CHUNK, batch_size)
        for a in range(first, stop, chunk):
            rows = self.encoding.rows(
                val_pieces(self.blocks, a, min(a + chunk, stop)), SAMPLE_ROWS if a == first else 0
            )
            for b in range(0, len(rows.enc), batch_size):
                idx = np.arange(b, min(b + batch_size, len(rows.enc)))
                head = rows.head if done < SAMPLE_ROWS and self.rank == 0 else []
                words = [head[i] if i < len(head) else [] for i in idx.tolist()]
                yield gather([(rows, idx)], counts), words
                done += len(idx)
        self.counts = counts
