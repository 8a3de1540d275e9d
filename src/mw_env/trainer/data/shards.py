"""Shards: finding them, their identity and blocks from footers, reading one block at a time.

A block is the unit of reading and of shuffling: a Parquet row group (its row count comes from the
footer, so opening a corpus reads footers only), or a ~4 MiB run of whole lines of a JSONL shard
(JSONL has no footer: one scan at start counts its lines, without parsing them).

A shard's identity is cheap: path, size, rows, rows per block, and the sha256 of its Parquet footer
(JSONL: of its block index plus its first and last 64 KiB). A resume compares identities, not the
full-file sha256 (which would be a pass over 30 GB at every start).
"""

from __future__ import annotations

import glob
import hashlib
import json
import stat
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mw_env.errors import InputError
from mw_env.userjson import json_refusal, loads

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


def expand_files(patterns: Sequence[str], key: str) -> list[Path]:
    out: list[Path] = []
    for pattern in patterns:
        matches = sorted(glob.glob(str(Path(pattern).expanduser())))
        if not matches:
            raise InputError(f"{key}: no file matches {pattern!r}", hint="check the path (globs are allowed)")
        for m in matches:
            try:
                # strict: a link loop (or a self-link) is a fault of the file list, said as one; Python 3.11
                # raises RuntimeError for a loop, later versions OSError(ELOOP).
                path = Path(m).resolve(strict=True)
            except (OSError, RuntimeError) as exc:
                reason = getattr(exc, "strerror", None) or (
                    "a symbolic link loop" if isinstance(exc, RuntimeError) else str(exc)
                )
                raise InputError(
                    f"{key}: cannot read {m}: {reason}",
                    hint="point the glob at real .jsonl/.parquet files (a link must lead to one)",
                ) from None
            if path.suffix not in (".jsonl", ".parquet"):
                raise InputError(
                    f"{key}: {path} is neither .jsonl nor .parquet", hint="data files are .jsonl or .parquet"
                )
            # A FIFO or a device named as a shard would block the footer read forever (or stream /dev/zero):
            # only regular files are shards.
            try:
                regular = stat.S_ISREG(path.stat().st_mode)
            except OSError as exc:
                raise InputError(
                    f"{key}: cannot read {path}: {exc.strerror or exc}", hint="check the path and permissions"
                ) from None
            if not regular:
                raise InputError(
                    f"{key}: {path} is not a regular file (a FIFO, device or folder)",
                    hint="data files are regular .jsonl or .parquet files",
                )
            out.append(path)
    return out


def _is_str_list(t: Any) -> bool:
    import pyarrow as pa

    if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
        return False
    v = t.value_type
    return pa.types.is_string(v) or pa.types.is_large_string(v)


def _footer_sha256(path: Path) -> str:
    with path.open("rb") as fh:
        fh.seek(0, 2)
        size = fh.tell()
        if size < 12:
            raise InputError(f"{path}: not a Parquet file ({size} bytes)", hint=HINT_DAMAGED)
        fh.seek(size - 8)
        tail = fh.read(8)
        (length,) = struct.unpack("<I", tail[:4])
        if tail[4:] != b"PAR1" or length > size - 12:
            raise InputError(f"{path}: corrupt Parquet footer (no PAR1 trailer)", hint=HINT_DAMAGED)
        fh.seek(size - 8 - length)
        return hashlib.sha256(fh.read(length)).hexdigest()


def _open_parquet(path: Path, index: int, columns: tuple[str, str]) -> Shard:
    try:
        import pyarrow.parquet as pq
    except ModuleNotFoundError:
        raise InputError(f"{path}: reading Parquet needs pyarrow", hint="install mw-env[train]") from None
    try:
        digest = _footer_sha256(path)
        meta = pq.ParquetFile(path).metadata
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
    return Shard(path, "parquet", path.stat().st_size, digest, [b for b in blocks if b.rows])


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
        shard = _open_parquet(path, i, columns) if path.suffix == ".parquet" else _open_jsonl(path, i)
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


class RowBlock:
    """One block's rows in memory: Parquet as Arrow arrays (compact), JSONL as parsed lists."""

    def __init__(self, shard: Shard, block: Block, tokens: Any, tags: Any, lines: list[int] | None) -> None:
        self.shard, self.block = shard, block
        self._tokens, self._tags, self._lines = tokens, tags, lines

    def __len__(self) -> int:
        return self.block.rows

    def where(self, i: int) -> str:
        if self._lines is not None:
            return f"{self.shard.path} line {self._lines[i]}"
        return f"{self.shard.path} row group {self.block.part} row {i}"

    def take(self, local: Sequence[int]) -> list[tuple[list[str], list[str]]]:
        if self._lines is not None:
            toks = [self._tokens[i] for i in local]
            tags = [self._tags[i] for i in local]
        else:
            import pyarrow as pa

            idx = pa.array(local, type=pa.int64())
            try:
                toks = self._tokens.take(idx).to_pylist()
                tags = self._tags.take(idx).to_pylist()
            except (UnicodeDecodeError, pa.ArrowException) as exc:
                # A writer that skipped validation can leave bytes that are not UTF-8 in a string column.
                raise InputError(
                    f"{self.shard.path} row group {self.block.part}: unreadable text "
                    f"({type(exc).__name__}: {exc})",
                    hint="string columns must hold UTF-8; " + HINT_DAMAGED,
                ) from None
        out = []
        for i, a, b in zip(local, toks, tags, strict=True):
            out.append(check_row(self.where(i), a, b))
        return out


def check_row(where: str, tokens: Any, tags: Any) -> tuple[list[str], list[str]]:
    hint = "each row: a list of words and a list of BIO tags, one tag per word"
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise InputError(f"{where}: 'tokens' must be a list of strings (got {tokens!r:.80})", hint=hint)
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise InputError(f"{where}: 'tags' must be a list of strings (got {tags!r:.80})", hint=hint)
    if len(tokens) != len(tags):
        raise InputError(
            f"{where}: {len(tokens)} tokens but {len(tags)} tags",
            hint="every token needs exactly one BIO tag",
        )
    return tokens, tags


def read_block(shard: Shard, block: Block, columns: tuple[str, str]) -> RowBlock:
    """Load one block; a damaged one is an error naming the shard and the row group / line."""
    if shard.kind == "parquet":
        import pyarrow.parquet as pq

        try:
            table = pq.ParquetFile(shard.path).read_row_group(block.part, columns=list(columns))
        except Exception as exc:
            raise InputError(
                f"{shard.path} row group {block.part}: unreadable ({type(exc).__name__}: {exc})",
                hint=HINT_DAMAGED,
            ) from None
        if table.num_rows != block.rows:
            raise InputError(
                f"{shard.path} row group {block.part}: {table.num_rows} rows, the footer said {block.rows}",
                hint=HINT_DAMAGED,
            )
        return RowBlock(shard, block, table.column(0), table.column(1), None)
    return _read_jsonl_block(shard, block, columns)


def _read_jsonl_block(shard: Shard, block: Block, columns: tuple[str, str]) -> RowBlock:
    tcol, gcol = columns
    hint = f'one JSON object per line: {{"{tcol}": [...], "{gcol}": [...]}}'
    try:
        with shard.path.open("rb") as fh:
            fh.seek(block.start)
            data = fh.read(block.stop - block.start)
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
            raise InputError(
                f"{shard.path} line {lineno}: expected an object with {tcol!r} and {gcol!r}", hint=hint
            )
        tokens.append(obj[tcol])
        tags.append(obj[gcol])
        lines.append(lineno)
    if len(lines) != block.rows:
        raise InputError(
            f"{shard.path}: changed while training (block at byte {block.start} has {len(lines)} rows, "
            f"{block.rows} at start)",
            hint=HINT_DAMAGED,
        )
    return RowBlock(shard, block, tokens, tags, lines)
