"""The column names and shapes of a Parquet file, from its footer, with the standard library only.

`mw-env train` checks a config's columns on the host before the doctor runs and before anything
imports torch or pyarrow (mw-env's own interpreter has neither). A Parquet file ends with the
Thrift-compact-encoded FileMetaData, its length (4 bytes, little-endian) and `PAR1`; field 2 of
FileMetaData is the schema, a flat list of SchemaElement (field 4 name, field 5 num_children) in
depth-first order whose first element is the root. Reading stops after the field asked for (formats/thrift.py).
`parquet_column_kinds` also reads each element's physical type (1), repetition (3), converted type (6)
and logical type (10), enough to tell a list of strings (what the trainer reads) from anything else as
pyarrow's schema conversion does; trainspec/columns.py holds the rule both sides apply.
"""

from __future__ import annotations

import hashlib
import os
import struct
from pathlib import Path

from mw_env.trainspec.columns import Element, footer_kind
from mw_env.trainspec.formats.thrift import Thrift, read_struct

MAGIC = b"PAR1"
MAX_FOOTER = 64 << 20  # a footer larger than this is not one we should read on the host


class FooterError(ValueError):
    """The file is not a readable Parquet file (the message says what is wrong)."""


def _metadata(path: Path, last: int) -> dict[int, Thrift]:
    """FileMetaData's fields up to `last` (2: the schema, 4: the row groups), the rest unread."""
    data = _footer(path)
    try:
        return read_struct(data, last=last)[0]
    except IndexError:
        raise FooterError("the footer ends early") from None
    except ValueError as exc:
        raise FooterError(f"the footer does not parse: {exc}") from None


def _structs(value: Thrift, what: str) -> list[dict[int, Thrift]]:
    structs = [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []
    if not isinstance(value, list) or len(structs) != len(value):
        raise FooterError(f"the footer's {what} are not a list of structs")
    return structs


def _element(e: dict[int, Thrift]) -> Element:
    """A SchemaElement: name (4), num_children (5), type (1), repetition_type (3), converted_type (6) and the
    member of its LogicalType union (10)."""

    def number(fid: int, default: int = -1) -> int:
        v = e.get(fid)
        return v if isinstance(v, int) and not isinstance(v, bool) else default

    name, logical = e.get(4), e.get(10)
    return Element(
        name=name.decode("utf-8", errors="replace") if isinstance(name, bytes) else "",
        children=number(5, 0),
        physical=number(1),
        repetition=number(3),
        converted=number(6),
        logical=next(iter(logical), -1) if isinstance(logical, dict) else -1,
    )


def parquet_columns(path: Path) -> list[str]:
    """The top-level column names of the Parquet file at `path` (FooterError when it is not one)."""
    return [e.name for e, _ in _top_level(path)]


def parquet_column_kinds(path: Path) -> dict[str, str]:
    """Each top-level column's shape in the words of trainspec.columns: "list<string>" for a list of
    strings (dictionary-encoded or not: the encoding is not the schema), else what it is ("a struct",
    "a list of int64", "string")."""
    return {e.name: footer_kind(e, subtree) for e, subtree in _top_level(path)}


def parquet_row_counts(path: Path) -> list[int]:
    """The rows of each row group, in order: each RowGroup's num_rows (3)."""
    groups = _metadata(path, 4).get(4)
    if groups is None:
        return []
    return [rows if isinstance(rows := g.get(3), int) else 0 for g in _structs(groups, "row groups")]


def parquet_footer_sha256(path: Path) -> str:
    """The sha256 of the file's footer: a shard's `footer_sha256`, as the trainer's shards record it."""
    return hashlib.sha256(_footer(path)).hexdigest()


def _footer(path: Path) -> bytes:
    """The footer's bytes (FileMetaData), checked to be one."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise FooterError(exc.strerror or str(exc)) from None
    try:
        size = os.fstat(fd).st_size
        if size < 12:
            raise FooterError(f"{size} bytes: too short for a Parquet file")
        tail = os.pread(fd, 8, size - 8)
        length, magic = struct.unpack("<I4s", tail)
        if magic != MAGIC:
            raise FooterError("no PAR1 at its end: not a Parquet file (or cut short)")
        if length > min(size - 12, MAX_FOOTER):
            raise FooterError(f"its footer claims {length} bytes, more than the file holds")
        return os.pread(fd, length, size - 8 - length)
    finally:
        os.close(fd)


def _top_level(path: Path) -> list[tuple[Element, list[Element]]]:
    """The root's children, each with the elements of its subtree (itself first)."""
    elements = _metadata(path, 2).get(2)
    if elements is None:
        raise FooterError("the footer has no schema")
    schema = [_element(e) for e in _structs(elements, "schema elements")]
    if not schema:
        raise FooterError("the footer's schema is empty")
    # Depth-first: the root's children are the columns; skip each column's own subtree.
    out, i, remaining = [], 1, schema[0].children
    while remaining and i < len(schema):
        end = _after_subtree(schema, i)
        out.append((schema[i], schema[i:end]))
        i = end
        remaining -= 1
    return out


def _after_subtree(schema: list[Element], i: int) -> int:
    pending = 1
    while pending and i < len(schema):
        pending += schema[i].children - 1
        i += 1
    return i
