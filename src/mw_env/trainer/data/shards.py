"""Shards: finding them, their identity and blocks from footers, reading one block at a time.

A block is the unit of reading and of shuffling: a Parquet row group (its row count comes from the
footer, so opening a corpus reads footers only), or a ~4 MiB run of whole lines of a JSONL shard
(JSONL has no footer: one scan at start counts its lines, without parsing them).

A shard's identity is cheap: path, size, rows, rows per block, and the sha256 of its Parquet footer
(JSONL: of its block index plus its first and last 64 KiB). A resume compares identities, not the
full-file sha256 (which would be a pass over 30 GB at every start).

During a run, the file must stay the one discovery read: its stamp (size, mtime, inode, taken at
discovery) is compared with a stat at every block the reader starts and every open (plus the footer's
sha256 when a Parquet file is opened), so a shard replaced, truncated or deleted mid-run is an error
naming it and what changed, not rows read from a handle opened before the change (`check_stamp`).
"""

from __future__ import annotations

import functools
import hashlib
import os
import socket
import struct
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mw_env.base.errors import InputError, StepFailed
from mw_env.trainspec.columns import arrow_kind, require_string_lists
from mw_env.trainspec.extras import bootstrap_hint
from mw_env.trainspec.formats.jsonlblocks import BLOCK_BYTES, scan_identity

if TYPE_CHECKING:
    import pyarrow as pa
    from pyarrow import NativeFile
    from pyarrow.parquet import FileMetaData

JSONL_BLOCK_BYTES = BLOCK_BYTES
_U32 = struct.Struct("<I")  # the footer length in a Parquet trailer
HINT_DAMAGED = (
    "the shard is damaged or not what it claims: re-export it, or drop it from the file list "
    "(a resume then needs --set data.allow_changed_corpus=true); checkpoints so far are kept"
)
HINT_CHANGED = (
    "restore the shard as it was and run the same command (it resumes from the newest checkpoint; the "
    "checkpoints so far are kept), or start a new run with --fresh"
)
HOST = socket.gethostname()


@dataclass(frozen=True)
class Block:
    shard: int  # index into the shard list
    part: int  # Parquet row group, or JSONL block number
    rows: int
    start: int = 0  # JSONL: byte range [start, stop) and the 1-based number of its first line
    stop: int = 0
    first_line: int = 1
    # A row range of the block (trainspec/units.py): its first row in the whole block, whose rows `rows` are
    # then a part of. 0 with rows = the block's: the whole block (a shard's own list holds only those).
    offset: int = 0


@dataclass
class Shard:
    path: Path
    kind: str  # "parquet" | "jsonl" | "memory" (the synthetic corpus: rows generated into Arrow arrays)
    size: int
    footer_sha256: str
    blocks: list[Block] = field(default_factory=list)
    # (size, mtime_ns, inode) of the file discovery read, and the host that read it: inode and mtime are
    # compared on that host only (another node may hold its own copy of the corpus at the same path; it
    # takes its first look, checked by size and footer, as its stamp).
    stamp: tuple[int, int, int] | None = None
    host: str = ""
    # kind "memory": the (tokens, tags) arrays the blocks slice (a block's `start` is its first row), and
    # the identity the shard has instead of a file's (the generator's settings)
    memory: tuple[pa.Array, pa.Array] | None = None
    described: dict[str, object] | None = None

    @property
    def rows(self) -> int:
        return sum(b.rows for b in self.blocks)

    def identity(self) -> dict[str, Any]:
        if self.described is not None:
            return dict(self.described)
        return {
            "path": str(self.path),
            "format": self.kind,
            "size": self.size,
            "rows": self.rows,
            "row_groups" if self.kind == "parquet" else "blocks": len(self.blocks),
            "footer_sha256": self.footer_sha256,
        }


def stamp_of(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_size, st.st_mtime_ns, st.st_ino)


def changed(shard: Shard, what: str) -> StepFailed:
    """A shard that is not the file discovery read: the run fails (exit 1), its checkpoints are kept."""
    return StepFailed(f"shard {shard.path} changed during the run ({what})", hint=HINT_CHANGED)


def check_stamp(shard: Shard, st: os.stat_result | None = None) -> None:
    """Raise `changed` when the file at shard.path (or the open file `st` describes) is not the one
    discovery read. One stat: the cost of starting a block, never of a row."""
    if shard.stamp is None:
        return
    if st is None:
        try:
            st = os.stat(shard.path)
        except FileNotFoundError:
            raise changed(shard, "deleted") from None
        except OSError:
            return  # unreadable for another reason: the open that follows names it
    size, mtime, ino = shard.stamp
    what = [f"size {size} -> {st.st_size} bytes"] if st.st_size != size else []
    if shard.host == HOST:
        if st.st_ino != ino:
            what.append(f"replaced by another file: inode {ino} -> {st.st_ino}")
        elif st.st_mtime_ns != mtime:
            what.append(f"modified: mtime {_when(mtime)} -> {_when(st.st_mtime_ns)}")
    if what:
        raise changed(shard, "; ".join(what))


def adopt_stamp(shard: Shard, st: os.stat_result) -> None:
    """On a host other than discovery's, the first look (size and footer checked) becomes the stamp."""
    if shard.stamp is not None and shard.host != HOST:
        shard.stamp, shard.host = stamp_of(st), HOST


def _when(ns: int) -> str:
    import datetime

    t = datetime.datetime.fromtimestamp(ns / 1e9, datetime.timezone.utc)
    return t.strftime("%Y-%m-%d %H:%M:%S.%f UTC")


def _footer_bytes(path: Path, size: int, read_at: Callable[[int, int], bytes]) -> tuple[bytes, bytes]:
    """The footer and the 8-byte trailer of a Parquet file of `size` bytes; read_at(offset, n) -> bytes."""
    if size < 12:
        raise InputError(f"{path}: not a Parquet file ({size} bytes)", hint=HINT_DAMAGED)
    tail = read_at(size - 8, 8)
    length = _U32.unpack_from(tail)[0]
    if tail[4:] != b"PAR1" or length > size - 12:
        raise InputError(f"{path}: corrupt Parquet footer (no PAR1 trailer)", hint=HINT_DAMAGED)
    return read_at(size - 8 - length, length), tail


@functools.cache
def _footer_parser() -> Callable[[bytes], FileMetaData]:
    """A function from a minimal Parquet file's bytes (magic + footer + trailer) to its parsed metadata.
    pyarrow's own reader class, without ParquetFile's wrapper (a filesystem lookup and a map of nested
    column paths, unused here): ~15 us a footer against ~28, on a per-shard path. Not
    `_reconstruct_filemetadata` (what FileMetaData's pickling uses, cheaper still): it aborts the process
    on a damaged footer instead of raising."""
    import pyarrow as pa

    try:
        from pyarrow._parquet import ParquetReader
    except ImportError:  # a pyarrow without the class: the public path, the same parse
        import pyarrow.parquet as pq

        return lambda data: pq.read_metadata(pa.BufferReader(data))

    def parse(data: bytes) -> FileMetaData:
        reader = ParquetReader()
        reader.open(pa.BufferReader(data))
        return reader.metadata

    return parse


def _parse_footer(footer: bytes, tail: bytes) -> FileMetaData:
    # The same bytes, parsed by pyarrow as a minimal file: no second read.
    return _footer_parser()(b"PAR1" + footer + tail)


def _read_footer(path: Path, fd: int | None = None) -> tuple[str, FileMetaData, int, bytes]:
    """The footer's sha256, its parsed metadata, the file's size and the footer, from one read of its bytes
    (os.pread on one descriptor: a stat and two reads, the fewest system calls a footer takes); `fd`: the
    file already open (the caller reads its tags dictionary page with it too), else opened here."""
    f = os.open(path, os.O_RDONLY) if fd is None else fd
    try:
        size = os.fstat(f).st_size
        footer, tail = _footer_bytes(path, size, lambda offset, n: os.pread(f, n, offset))
    finally:
        if fd is None:
            os.close(f)
    return hashlib.sha256(footer).hexdigest(), _parse_footer(footer, tail), size, footer


def open_checked(shard: Shard) -> tuple[NativeFile, FileMetaData]:
    """A Parquet shard opened for reading (a pyarrow file) and its footer's metadata, once the open file is
    checked to be the one discovery read: its stamp, and its footer against the footer's sha256."""
    import pyarrow as pa

    try:
        nf = pa.OSFile(str(shard.path))
    except FileNotFoundError:
        raise changed(shard, "deleted") from None
    except OSError as exc:
        raise InputError(f"{shard.path}: cannot read it ({exc.strerror or exc})", hint=HINT_DAMAGED) from None
    try:
        st = os.fstat(nf.fileno())
        check_stamp(shard, st)
        footer, tail = _footer_bytes(shard.path, st.st_size, lambda offset, n: nf.read_at(n, offset))
        if hashlib.sha256(footer).hexdigest() != shard.footer_sha256:
            raise changed(shard, "its Parquet footer is not the one read at the start")
        adopt_stamp(shard, st)
        return nf, _parse_footer(footer, tail)
    except BaseException:
        nf.close()
        raise


class Schemas:
    """The Parquet schemas one corpus open has checked, each with the leaf index of its tags column: the
    shards of a corpus share one schema, and the check (a conversion to an Arrow schema, the tags leaf
    found by path) cost as much as the footer's parse. Known by the schema's exact encoding: the footer's
    bytes up to the end of its schema field (found once per schema), so a shard whose footer starts with
    the same bytes has the same schema, a byte comparison; where those bytes cannot be located, by the
    schema's printed tree (every node's name, repetition, physical and logical type, field id: all the
    conversion reads). Not by ParquetSchema.equals, which compares leaves only (`words.list.element`
    equals `tokens.list.element`)."""

    MAX_PREFIXES = 64  # distinct schemas remembered by encoding (a corpus has one or a few)

    def __init__(self) -> None:
        self.prefixes: list[tuple[bytes, int | None]] = []
        self.seen: dict[str, int | None] = {}

    def check(self, path: Path, meta: FileMetaData, footer: bytes, columns: tuple[str, str]) -> int | None:
        """Raise InputError when `meta`'s schema (parsed from `footer`) lacks the columns or types; else
        the tags column's leaf index."""
        for prefix, leaf in self.prefixes:
            if footer.startswith(prefix):
                return leaf
        from mw_env.trainspec.formats.tagdict import field_end

        end = field_end(footer, 2)
        key = ""
        if end is None:
            text = str(meta.schema)  # "<object at 0x...>" on its first line, then the tree
            key = text[text.find("\n") + 1 :]
            if key in self.seen:
                return self.seen[key]
        leaf = _check_schema(path, meta, columns)
        if end is None:
            self.seen[key] = leaf
        elif len(self.prefixes) < self.MAX_PREFIXES:
            self.prefixes.append((footer[:end], leaf))
        return leaf


def _check_schema(path: Path, meta: FileMetaData, columns: tuple[str, str]) -> int | None:
    schema = meta.schema
    arrow = schema.to_arrow_schema()
    missing = [c for c in columns if c not in arrow.names]
    if missing:
        raise InputError(
            f"{path}: missing column(s) {missing} (it has {arrow.names})",
            hint="name the columns with data.tokens_column / data.tags_column",
        )
    require_string_lists(path, {c: arrow_kind(arrow.field(c).type) for c in columns}, columns)
    prefix = columns[1] + "."
    leaves = [j for j in range(len(schema)) if schema.column(j).path.startswith(prefix)]
    return leaves[0] if len(leaves) == 1 else None


def _open_parquet(
    path: Path, index: int, columns: tuple[str, str], schemas: Schemas | None = None, fd: int | None = None
) -> tuple[Shard, Any, int | None]:
    """The shard, its parsed footer and its tags column's leaf index (None: not a single leaf); `fd`: the
    file, when the caller has it open."""
    try:
        import pyarrow.parquet  # noqa: F401
    except ModuleNotFoundError:
        raise InputError(
            f"{path}: reading Parquet needs pyarrow",
            hint=f"add the `train` extra: {bootstrap_hint(sys.prefix)}",
        ) from None
    try:
        digest, meta, size, footer = _read_footer(path, fd)
        leaf = (schemas or Schemas()).check(path, meta, footer, columns)
    except InputError:
        raise
    except OSError as exc:
        raise InputError(f"{path}: cannot read it ({exc.strerror or exc})", hint=HINT_DAMAGED) from None
    except Exception as exc:
        raise InputError(f"{path}: not a readable Parquet file ({exc})", hint=HINT_DAMAGED) from None
    blocks = [Block(index, g, meta.row_group(g).num_rows) for g in range(meta.num_row_groups)]
    return Shard(path, "parquet", size, digest, [b for b in blocks if b.rows]), meta, leaf


def _open_jsonl(path: Path, index: int) -> Shard:
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise InputError(f"{path}: {exc.strerror}", hint="name a readable JSONL or Parquet file") from None
    with fh:
        spans, size, digest = scan_identity(fh, JSONL_BLOCK_BYTES)
    blocks = [Block(index, k, rows, start, stop, first) for k, (start, stop, rows, first) in enumerate(spans)]
    return Shard(path, "jsonl", size, digest, [b for b in blocks if b.rows])


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
