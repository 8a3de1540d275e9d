"""A Parquet shard's distinct tags, read from the tags column's dictionary page: one small read per shard.

Why: with `data.labels` unset the label set is discovered from every shard before step 1. Decoding rows
for it (even the first 4,096 of a shard) costs ~2 ms of CPU per shard, almost all of it in pyarrow
decompressing and decoding the column's first data page (about 1 MiB); on 80 shards that made opening
a corpus 3x slower than opening one. Parquet writers (pyarrow, Spark, DuckDB, polars) dictionary-encode a
low-cardinality string column, and the dictionary page, written before the chunk's data pages, holds
every distinct value of the row group: for tags, a few hundred bytes. Reading it directly costs a seek,
a read and a small decompress - and it covers the whole row group, not its first rows.

What is read: the page header (Thrift compact protocol, formats/thrift.py: pyarrow exposes no dictionary page),
the page (decompressed with pyarrow's codec), its PLAIN byte arrays. Anything unexpected (no dictionary
page, an unknown codec, a header or page that does not parse exactly, a value that is not UTF-8, a
dictionary over MAX_BYTES, where a writer may have stopped dictionary-encoding part way) gives None, and
the caller decodes rows instead, with its own errors: this is a fast path, never a second set of rules.
No torch here: `train summary` and preflight (trainspec/labelscan.py) read labels the same way.
"""

from __future__ import annotations

import functools
import os
import struct
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from mw_env.trainspec.formats.thrift import read_struct

if TYPE_CHECKING:
    from pyarrow import Codec
    from pyarrow.parquet import ColumnChunkMetaData, FileMetaData

_U32 = struct.Struct("<I")  # a PLAIN byte array's length prefix
MAX_BYTES = 256 << 10  # a tag dictionary is bytes to a few KiB; far below pyarrow's 1 MiB fallback point
DICTIONARY_PAGE = 2  # parquet.thrift PageType
PLAIN_ENCODINGS = (0, 2)  # PLAIN, PLAIN_DICTIONARY (the same bytes in a dictionary page)
CODECS = {  # parquet.thrift CompressionCodec name (pyarrow's spelling) -> pyarrow.Codec name
    "SNAPPY": "snappy",
    "GZIP": "gzip",
    "BROTLI": "brotli",
    "ZSTD": "zstd",
    "LZ4_RAW": "lz4_raw",
}


def field_end(buf: bytes, field: int) -> int | None:
    """Where field `field` of the compact-protocol struct at the start of `buf` ends, when it is there (else
    None, as for bytes that do not parse). For a Parquet footer (FileMetaData), field 2 is the schema:
    buf[:end] is its exact encoding."""
    try:
        fields, end = read_struct(buf, last=field)
    except (IndexError, ValueError):
        return None
    return end if field in fields and end <= len(buf) else None


def _plain_strings(page: bytes, count: int) -> list[str]:
    """`count` PLAIN byte arrays (a 4-byte length, the bytes), filling `page` exactly, as UTF-8 strings."""
    out: list[str] = []
    pos, end, length = 0, len(page), _U32.unpack_from
    for _ in range(count):
        (n,) = length(page, pos)
        pos += 4 + n
        if pos > end:
            raise ValueError("value past the page")
        out.append(page[pos - n : pos].decode("utf-8"))
    if pos != end:
        raise ValueError("bytes after the last value")
    return out


def _leaf(meta: FileMetaData, group: int, column: str, leaf: int | None) -> ColumnChunkMetaData | None:
    """The column chunk of `column`'s one leaf (a list<string> has one: `tags.list.element`); `leaf`: its
    index when the caller knows it from the schema (trainer/data/shards.Schemas): a row group's column
    chunks are its schema's leaves, in order (the Parquet format's rule, which pyarrow's reader enforces)."""
    rg = meta.row_group(group)
    if leaf is not None:
        return rg.column(leaf)
    prefix = column + "."
    leaves = [rg.column(j) for j in range(rg.num_columns) if rg.column(j).path_in_schema.startswith(prefix)]
    return leaves[0] if len(leaves) == 1 else None


@functools.cache
def _codec(name: str, thread: int) -> Codec:
    """One codec object per codec and thread: making one cost as much as the decompress, and a codec
    object may keep stream state (gzip's), so threads do not share one."""
    import pyarrow as pa

    return pa.Codec(name)


def dictionary_values(
    path: Path,
    meta: FileMetaData,
    column: str,
    group: int = 0,
    leaf: int | None = None,
    fd: int | None = None,
) -> list[str] | None:
    """The distinct values of list<string> `column` in row group `group`, from its dictionary page; None
    when it cannot be read that way (the caller then decodes rows). `meta`: the file's parsed footer;
    `fd`: the file, when the caller has it open (else opened here)."""
    try:
        chunk = _leaf(meta, group, column, leaf)
        if chunk is None or not chunk.has_dictionary_page or chunk.physical_type != "BYTE_ARRAY":
            return None
        start, stop = chunk.dictionary_page_offset, chunk.data_page_offset
        if not (4 <= start < stop and stop - start <= MAX_BYTES + 256):
            return None
        codec = chunk.compression
        if codec != "UNCOMPRESSED" and codec not in CODECS:
            return None
        if fd is not None:
            raw = os.pread(fd, stop - start, start)
        else:
            f = os.open(path, os.O_RDONLY)
            try:
                raw = os.pread(f, stop - start, start)
            finally:
                os.close(f)
        header, pos = read_struct(raw)
        page_header = header.get(7)
        if header.get(1) != DICTIONARY_PAGE or not isinstance(page_header, dict):
            return None
        size, packed, count = header.get(2), header.get(3), page_header.get(1)
        if not (isinstance(size, int) and isinstance(packed, int) and isinstance(count, int)):
            return None
        if page_header.get(2) not in PLAIN_ENCODINGS or size > MAX_BYTES or pos + packed > len(raw):
            return None
        body = raw[pos : pos + packed]
        if codec != "UNCOMPRESSED":
            body = (
                _codec(CODECS[codec], threading.get_ident())
                .decompress(body, decompressed_size=size)
                .to_pybytes()
            )
        if len(body) != size:
            return None
        return _plain_strings(body, count)
    except Exception:  # a fast path: whatever fails here, the rows are decoded instead
        return None


def row_groups_tags(
    path: Path,
    meta: FileMetaData,
    column: str,
    groups: list[int],
    leaf: int | None = None,
    fd: int | None = None,
) -> set[str] | None:
    """Every distinct value of `column` in these row groups: the union of their dictionary pages (a rare tag
    may first appear in any row group); None when one of them has none (the caller samples rows)."""
    seen: set[str] = set()
    for group in groups:
        values = dictionary_values(path, meta, column, group, leaf, fd)
        if values is None:
            return None
        seen.update(values)
    return seen


def shard_tags(path: str | Path, column: str, rows: int) -> tuple[set[str], bool]:
    """The tags the trainer discovers in one Parquet shard (trainer/data/index.py) and whether they were
    sampled: every non-empty row group's dictionary (not sampled), else its first `rows` rows (sampled:
    a tag first seen later is not in them). For `train summary` and preflight (trainspec/labelscan.py),
    here or, as text, in the training venv's python."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    meta = pf.metadata
    groups = [g for g in range(meta.num_row_groups) if meta.row_group(g).num_rows]
    if not groups:
        return set(), False
    whole = row_groups_tags(Path(path), meta, column, groups)
    if whole is not None:
        return whole, False
    batch = next(pf.iter_batches(batch_size=rows, columns=[column]), None)
    if batch is None:
        return set(), False
    found = {t for t in pc.unique(pc.list_flatten(batch.column(0))).to_pylist() if t is not None}
    return found, batch.num_rows < meta.num_rows
