"""Shards: finding them, their identity and blocks from footers, reading one block at a time.

A block is the unit of reading and of shuffling: a Parquet row group (its row count comes from the
footer, so opening a corpus reads footers only), or a ~4 MiB run of whole lines of a JSONL shard
(JSONL has no footer: one scan at start counts its lines, without parsing them).

A shard's identity is cheap: path, size, rows, rows per block, and the sha256 of its Parquet footer
(JSONL: of its block index plus its first and last 64 KiB). A resume compares identities, not the
full-file sha256 (which would be a pass over 30 GB at every start).
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mw_env.errors import InputError
from mw_env.trainspec.extras import bootstrap_hint

JSONL_BLOCK_BYTES = 4 << 20
HINT_DAMAGED = (
    "the shard is damaged or not what it claims: re-export it, or drop it from the file list "
    "(a resume then needs --set data.allow_changed_corpus=true); checkpoints so far are kept"
)


@dataclass(frozen=True)
class Block:
    shard: int  # index into the shard list
    part: int  # Parquet row group, or JSONL block number
    rows: int
    start: int = 0  # JSONL: byte range [start, stop) and the 1-based number of its first line
    stop: int = 0
    first_line: int = 1


@dataclass
class Shard:
    path: Path
    kind: str  # "parquet" | "jsonl"
    size: int
    footer_sha256: str
    blocks: list[Block] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(b.rows for b in self.blocks)

    def identity(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "format": self.kind,
            "size": self.size,
            "rows": self.rows,
            "row_groups" if self.kind == "parquet" else "blocks": len(self.blocks),
            "footer_sha256": self.footer_sha256,
        }


def _is_str_list(t: Any) -> bool:
    import pyarrow as pa

    if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
        return False
    v = t.value_type
    return pa.types.is_string(v) or pa.types.is_large_string(v)


def _read_footer(path: Path) -> tuple[str, Any, int]:
    """The footer's sha256, its parsed metadata and the file's size, from one read of the footer bytes
    (os.pread on one descriptor: an open, a stat and two reads, the fewest system calls a footer takes)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size < 12:
            raise InputError(f"{path}: not a Parquet file ({size} bytes)", hint=HINT_DAMAGED)
        tail = os.pread(fd, 8, size - 8)
        (length,) = struct.unpack("<I", tail[:4])
        if tail[4:] != b"PAR1" or length > size - 12:
            raise InputError(f"{path}: corrupt Parquet footer (no PAR1 trailer)", hint=HINT_DAMAGED)
        footer = os.pread(fd, length, size - 8 - length)
    finally:
        os.close(fd)
    # The same bytes, parsed by pyarrow as a minimal file (magic + footer + trailer): no second read.
    meta = pq.read_metadata(pa.BufferReader(b"PAR1" + footer + tail))
    return hashlib.sha256(footer).hexdigest(), meta, size


def _open_parquet(path: Path, index: int, columns: tuple[str, str]) -> tuple[Shard, Any]:
    try:
        import pyarrow.parquet  # noqa: F401
    except ModuleNotFoundError:
        raise InputError(
            f"{path}: reading Parquet needs pyarrow",
            hint=f"add the `train` extra: {bootstrap_hint(sys.prefix)}",
        ) from None
    try:
        digest, meta, size = _read_footer(path)
        schema = meta.schema.to_arrow_schema()
    except InputError:
        raise
    except OSError as exc:
        raise InputError(f"{path}: cannot read it ({exc.strerror or exc})", hint=HINT_DAMAGED) from None
    except Exception as exc:
        raise InputError(f"{path}: not a readable Parquet file ({exc})", hint=HINT_DAMAGED) from None
    missing = [c for c in columns if c not in schema.names]
    if missing:
        raise InputError(
            f"{path}: missing column(s) {missing} (it has {schema.names})",
            hint="name the columns with data.tokens_column / data.tags_column",
        )
    for c in columns:
        if not _is_str_list(schema.field(c).type):
            raise InputError(
                f"{path}: column {c!r} is {schema.field(c).type}, not a list of strings",
                hint="tokens and tags are list<string> columns, one tag per token",
            )
    blocks = [Block(index, g, meta.row_group(g).num_rows) for g in range(meta.num_row_groups)]
    return Shard(path, "parquet", size, digest, [b for b in blocks if b.rows]), meta


def _open_jsonl(path: Path, index: int) -> Shard:
    blocks: list[Block] = []
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise InputError(f"{path}: {exc.strerror}", hint="name a readable JSONL or Parquet file") from None
    h = hashlib.sha256()
    with fh:
        start = pos = 0
        rows, first = 0, 1
        for line, raw in enumerate(fh, start=1):
            pos += len(raw)
            if raw.strip():
                rows += 1
            if pos - start >= JSONL_BLOCK_BYTES:
                blocks.append(Block(index, len(blocks), rows, start, pos, first))
                start, rows, first = pos, 0, line + 1
        if pos > start:
            blocks.append(Block(index, len(blocks), rows, start, pos, first))
        size = pos
        fh.seek(0)
        h.update(fh.read(65536))
        fh.seek(max(size - 65536, 0))
        h.update(fh.read(65536))
    h.update(json.dumps([(b.start, b.stop, b.rows) for b in blocks]).encode())
    return Shard(path, "jsonl", size, h.hexdigest(), [b for b in blocks if b.rows])


def open_shards(paths: Sequence[Path], columns: tuple[str, str], *, key: str) -> list[Shard]:
    """Footers (or the JSONL line scan) of every shard; an empty or unreadable one is an error."""
    shards = []
    for i, path in enumerate(paths):
        shard = _open_parquet(path, i, columns)[0] if path.suffix == ".parquet" else _open_jsonl(path, i)
        if shard.rows == 0:
            raise InputError(f"{key}: {path} has no rows", hint="drop the empty shard from the file list")
        shards.append(shard)
    return shards


def identity_diff(old: Sequence[dict[str, Any]], new: Sequence[dict[str, Any]]) -> list[str]:
    """What changed between two shard lists, shard by shard (empty: the same corpus)."""
    name = lambda s: s.get("path") or s.get("kind", "?")  # noqa: E731 - synthetic sources have no path
    before = {name(s): s for s in old}
    after = {name(s): s for s in new}
    out = [f"removed {p}" for p in before if p not in after]
    out += [f"added {p}" for p in after if p not in before]
    for p in before.keys() & after.keys():
        a, b = before[p], after[p]
        changed = [
            f"{k} {a.get(k)} -> {b.get(k)}" for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)
        ]
        if changed:
            out.append(f"changed {p} ({'; '.join(changed)})")
    if not out and [name(s) for s in old] != [name(s) for s in new]:
        out.append("the shards are listed in another order")
    return out
