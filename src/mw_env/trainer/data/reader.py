"""Reading rows: ranges of blocks (pieces) as Arrow columns, with where each row came from.

Parquet row groups are read in batches (`iter_batches`), never whole: a window that starts inside
a 1Mi-row group decodes only the rows it needs, and the next window continues the same batch
iterator where the previous one stopped (a cursor per block), so an epoch reads each row once.
Page reads are buffered (`buffer_size`), so a column chunk is not loaded whole either.
JSONL blocks (~4 MiB of whole lines) are parsed with the json module, one block at a time.
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from mw_env.base.errors import InputError, MwEnvError
from mw_env.base.userjson import json_refusal, loads
from mw_env.trainer.data.shards import (
    HINT_DAMAGED,
    Block,
    Shard,
    adopt_stamp,
    changed,
    check_stamp,
    open_checked,
)
from mw_env.trainspec.columns import as_string_lists
from mw_env.trainspec.rows import check_row, jsonl_row, parquet_row

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mw_env.trainer.data.order import Piece

BATCH_ROWS = 8192  # rows decoded at a time inside a row group
OPEN_FILES = 8  # Parquet files kept open per process
CURSORS = 4  # blocks whose batch iterator is kept where it stopped


@dataclass
class Chunk:
    """Rows read from one or more pieces: Arrow columns plus each row's location."""

    tokens: pa.Array  # list<string>
    tags: pa.Array
    shard: np.ndarray  # int32: index into the shard list
    part: np.ndarray  # int32: row group (Parquet), -1 (JSONL) or SYNTHETIC
    local: np.ndarray  # int64: row inside the row group (Parquet) or line number (JSONL)

    def __len__(self) -> int:
        return len(self.shard)


SYNTHETIC = -2  # Chunk.part of a generated row (no shard)


def where(shards: Sequence[Shard], shard: int, part: int, local: int) -> str:
    """A row by its file and its place counted from the file's start (trainspec/rows.py says how)."""
    if part == SYNTHETIC:
        return f"synthetic row {local}"
    s = shards[shard]
    if part < 0:
        return jsonl_row(s.path, local)
    return parquet_row(s.path, sum(b.rows for b in s.blocks if b.part < part) + local)


def parse_jsonl(
    shard: Shard, block: Block, columns: tuple[str, str], limit: int = 0
) -> tuple[list[Any], list[Any], list[int]]:
    """A JSONL block's rows (tokens, tags, line numbers); a bad line is an error naming it."""
    tcol, gcol = columns
    hint = f'one JSON object per line: {{"{tcol}": [...], "{gcol}": [...]}}'
    try:
        with shard.path.open("rb") as fh:
            st = os.fstat(fh.fileno())
            check_stamp(shard, st)  # the file discovery scanned, not one put in its place since
            adopt_stamp(shard, st)
            fh.seek(block.start)
            data = fh.read(block.stop - block.start)
    except FileNotFoundError:
        if shard.stamp is None:
            raise InputError(f"{shard.path}: No such file or directory", hint=HINT_DAMAGED) from None
        raise changed(shard, "deleted") from None
    except OSError as exc:
        raise InputError(f"{shard.path}: {exc.strerror}", hint=HINT_DAMAGED) from None
    tokens, tags, lines = [], [], []
    for offset, raw in enumerate(data.split(b"\n")):
        lineno = block.first_line + offset
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(
                f"{shard.path} line {lineno}: not UTF-8 (byte {raw[exc.start]:#04x} at column {exc.start + 1})",
                hint="JSONL shards must be UTF-8 text; re-encode the file",
            ) from None
        if not text.strip():
            continue
        try:
            obj = loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(
                f"{shard.path} line {lineno}: not valid JSON ({exc.msg} at column {exc.colno})", hint=hint
            ) from None
        except (ValueError, RecursionError) as exc:
            # Valid JSON that Python refuses (nesting past the recursion limit, an integer of more than
            # 4300 digits), or a key written twice in one row.
            raise InputError(
                f"{shard.path} line {lineno}: not a usable JSON row ({json_refusal(exc)})", hint=hint
            ) from None
        if not isinstance(obj, dict) or tcol not in obj or gcol not in obj:
            has = (
                f"its keys: {', '.join(map(repr, list(obj)[:8]))}"
                if isinstance(obj, dict)
                else "not an object"
            )
            raise InputError(
                f"{shard.path} line {lineno}: expected an object with the tokens {tcol!r} (data.tokens_column) "
                f"and the tags {gcol!r} (data.tags_column) ({has})",
                hint=hint,
            )
        a, b = check_row(jsonl_row(shard.path, lineno), obj[tcol], obj[gcol], (tcol, gcol))
        tokens.append(a)
        tags.append(b)
        lines.append(lineno)
        if limit and len(lines) >= limit:
            return tokens, tags, lines
    if len(lines) != block.rows:
        raise changed(
            shard, f"the block at byte {block.start} has {len(lines)} rows, {block.rows} at the start"
        )
    return tokens, tags, lines


def _unreadable(shard: Shard, block: Block, exc: BaseException) -> InputError:
    return InputError(
        f"{shard.path} row group {block.part}: unreadable ({type(exc).__name__}: {exc})", hint=HINT_DAMAGED
    )


class _Cursor:
    """Where the batch iterator of one block stands: the next row it yields, and a partly used batch."""

    def __init__(self, batches: Iterator[pa.RecordBatch]) -> None:
        self.batches, self.next_row, self.pending = batches, 0, None


class PieceReader:
    """Reads pieces (block ranges) of one shard list; thread-safe (one read at a time)."""

    def __init__(self, shards: Sequence[Shard], blocks: Sequence[Block], columns: tuple[str, str]) -> None:
        self.shards, self.blocks, self.columns = shards, blocks, columns
        self._files: OrderedDict[int, pq.ParquetFile] = OrderedDict()
        # Keyed by the whole block (shard, part): the row ranges of one block continue one batch iterator.
        self._cursors: OrderedDict[tuple[int, int], _Cursor] = OrderedDict()
        self._jsonl: tuple[tuple[int, int], Any] | None = None
        self._whole: dict[tuple[int, int], Block] = {}
        self._lock = threading.Lock()

    def whole(self, block: Block) -> Block:
        """The whole block a unit (maybe a row range of it) belongs to, as the shard's footer or scan gave it."""
        key = (block.shard, block.part)
        if key not in self._whole:
            found = [b for b in self.shards[block.shard].blocks if b.part == block.part]
            self._whole[key] = found[0] if found else block
        return self._whole[key]

    def _file(self, s: int) -> pq.ParquetFile:
        """The open ParquetFile of shard s; a stat at each call (each block started): a shard replaced,
        truncated or deleted since discovery is an error, never rows read from a handle opened before."""
        import pyarrow.parquet as pq

        if s in self._files:
            check_stamp(self.shards[s])
            self._files.move_to_end(s)
            return self._files[s]
        nf, meta = open_checked(self.shards[s])
        f = pq.ParquetFile(nf, metadata=meta, buffer_size=1 << 20, pre_buffer=False)
        self._files[s] = f
        while len(self._files) > OPEN_FILES:
            self._files.popitem(last=False)
        return f

    def _parquet(self, b: int, first: int, rows: int) -> list[pa.RecordBatch]:
        """Rows [first, first + rows) of the row group unit b is part of (`first` counted in the row group)."""
        block = self.whole(self.blocks[b])
        shard = self.shards[block.shard]
        key = (block.shard, block.part)
        cur = self._cursors.pop(key, None)
        try:
            if cur is None or cur.next_row > first:
                it = self._file(block.shard).iter_batches(
                    batch_size=BATCH_ROWS, row_groups=[block.part], columns=list(self.columns)
                )
                cur = _Cursor(it)
            out: list[pa.RecordBatch] = []
            while rows > 0:
                batch = cur.pending
                if batch is None:
                    batch = next(cur.batches, None)
                    if batch is None:
                        raise InputError(
                            f"{shard.path} row group {block.part}: {cur.next_row} rows, the footer said "
                            f"{block.rows}",
                            hint=HINT_DAMAGED,
                        )
                cur.pending = None
                skip = max(first - cur.next_row, 0)
                if skip >= batch.num_rows:
                    cur.next_row += batch.num_rows
                    continue
                take = min(batch.num_rows - skip, rows)
                out.append(batch.slice(skip, take))
                if skip + take < batch.num_rows:
                    cur.pending = batch.slice(skip + take)
                cur.next_row += skip + take
                first, rows = first + take, rows - take
        except MwEnvError:  # bad input (exit 2) or a shard changed during the run (exit 1)
            raise
        except Exception as exc:
            raise _unreadable(shard, block, exc) from None
        if cur.next_row < block.rows:
            self._cursors[key] = cur
            while len(self._cursors) > CURSORS:
                self._cursors.popitem(last=False)
        return out

    def read(self, pieces: Sequence[Piece]) -> Chunk:
        """pieces: objects with .block, .first, .rows (order.Piece)."""
        import pyarrow as pa

        tokens, tags, shard_ix, part, local = [], [], [], [], []
        with self._lock:
            for p in pieces:
                block = self.blocks[p.block]
                memory = self.shards[block.shard].memory
                at = block.offset + p.first  # the piece's first row in the whole block
                if memory is not None:  # the synthetic corpus: rows [start, start + rows) of its arrays
                    first = block.start + at
                    tokens.append(memory[0].slice(first, p.rows))
                    tags.append(memory[1].slice(first, p.rows))
                    local.append(np.arange(first, first + p.rows, dtype=np.int64))
                    part.append(np.full(p.rows, SYNTHETIC, dtype=np.int32))
                elif self.shards[block.shard].kind == "parquet":
                    for rb in self._parquet(p.block, at, p.rows):
                        # Dictionary-encoded strings (a categorical) as plain ones: the encoder reads
                        # string offsets and bytes, and batches with different dictionaries concatenate.
                        tokens.append(as_string_lists(rb.column(0)))
                        tags.append(as_string_lists(rb.column(1)))
                    local.append(np.arange(at, at + p.rows, dtype=np.int64))
                    part.append(np.full(p.rows, block.part, dtype=np.int32))
                else:
                    key = (block.shard, block.part)  # a JSONL block is parsed whole, once for all its ranges
                    if self._jsonl is None or self._jsonl[0] != key:
                        a, b, line_nos = parse_jsonl(
                            self.shards[block.shard], self.whole(block), self.columns
                        )
                        typ = pa.list_(pa.string())
                        self._jsonl = (key, (pa.array(a, typ), pa.array(b, typ), np.array(line_nos)))
                    else:  # rows parsed before: the file must still be the one they came from
                        check_stamp(self.shards[block.shard])
                    ta, ga, lines = self._jsonl[1]
                    tokens.append(ta.slice(at, p.rows))
                    tags.append(ga.slice(at, p.rows))
                    local.append(lines[at : at + p.rows].astype(np.int64))
                    part.append(np.full(p.rows, -1, dtype=np.int32))
                shard_ix.append(np.full(p.rows, block.shard, dtype=np.int32))
        return Chunk(
            _concat(tokens),
            _concat(tags),
            np.concatenate(shard_ix) if shard_ix else np.zeros(0, np.int32),
            np.concatenate(part) if part else np.zeros(0, np.int32),
            np.concatenate(local) if local else np.zeros(0, np.int64),
        )


def _concat(arrays: list[pa.Array]) -> pa.Array:
    import pyarrow as pa

    if not arrays:
        return pa.array([], pa.list_(pa.string()))
    # Shards may differ in string vs large_string: one type for the whole chunk.
    typ = arrays[0].type
    return pa.concat_arrays([a if a.type == typ else a.cast(typ) for a in arrays])
