"""The column names and shapes of a Parquet file, from its footer, with the standard library only.

`mw-env train` checks a config's columns on the host before the doctor runs and before anything
imports torch or pyarrow (mw-env's own interpreter has neither). A Parquet file ends with the
Thrift-compact-encoded FileMetaData, its length (4 bytes, little-endian) and `PAR1`; field 2 of
FileMetaData is the schema, a flat list of SchemaElement (field 4 name, field 5 num_children) in
depth-first order whose first element is the root. Only that much is decoded; the rest is skipped.
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

MAGIC = b"PAR1"
MAX_FOOTER = 64 << 20  # a footer larger than this is not one we should read on the host


class FooterError(ValueError):
    """The file is not a readable Parquet file (the message says what is wrong)."""


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise FooterError("the footer ends early")
        b = self.data[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 70:
                raise FooterError("a varint in the footer is too long")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def binary(self) -> bytes:
        n = self.varint()
        if n > len(self.data) - self.pos:
            raise FooterError("a string in the footer runs past its end")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def skip(self, kind: int, depth: int = 0) -> None:
        if depth > 64:
            raise FooterError("the footer nests too deep")
        if kind in (1, 2):  # booleans in a field header carry their value
            return
        if kind == 3:
            self.pos += 1
        elif kind in (4, 5, 6):
            self.varint()
        elif kind == 7:
            self.pos += 8
        elif kind == 8:
            self.binary()
        elif kind in (9, 10):
            size, elem = self.list_header()
            for _ in range(size):
                self.skip_elem(elem, depth + 1)
        elif kind == 11:
            size = self.varint()
            if size:
                kv = self.byte()
                for _ in range(size):
                    self.skip_elem(kv >> 4, depth + 1)
                    self.skip_elem(kv & 0x0F, depth + 1)
        elif kind == 12:
            self.skip_struct(depth + 1)
        else:
            raise FooterError(f"unknown Thrift type {kind} in the footer")

    def skip_elem(self, kind: int, depth: int) -> None:
        if kind in (1, 2):  # a boolean inside a list takes one byte
            self.pos += 1
        else:
            self.skip(kind, depth)

    def list_header(self) -> tuple[int, int]:
        head = self.byte()
        size = head >> 4
        if size == 15:
            size = self.varint()
        return size, head & 0x0F

    def fields(self):
        """(field id, type) for each field of a struct, until its stop byte."""
        last = 0
        while True:
            head = self.byte()
            if head == 0:
                return
            delta, kind = head >> 4, head & 0x0F
            last = last + delta if delta else self.zigzag()
            yield last, kind

    def skip_struct(self, depth: int = 0) -> None:
        for _fid, kind in self.fields():
            self.skip(kind, depth)


def _logical(reader: _Reader) -> int:
    member = -1
    for fid, kind in reader.fields():
        member = fid if member == -1 else member
        reader.skip(kind)
    return member


def _schema(reader: _Reader) -> list[Element]:
    """Each SchemaElement, depth-first."""
    for fid, kind in reader.fields():
        if fid == 2 and kind == 9:
            size, elem = reader.list_header()
            if elem != 12:
                raise FooterError("the footer's schema is not a list of structs")
            out = []
            for _ in range(size):
                f: dict[str, object] = {"name": "", "children": 0}
                for efid, ekind in reader.fields():
                    if efid == 4 and ekind == 8:
                        f["name"] = reader.binary().decode("utf-8", errors="replace")
                    elif ekind == 5 and efid in _INT_FIELDS:
                        f[_INT_FIELDS[efid]] = reader.zigzag()
                    elif efid == 10 and ekind == 12:
                        f["logical"] = _logical(reader)
                    else:
                        reader.skip(ekind)
                out.append(Element(**f))  # type: ignore[arg-type]
            return out
        reader.skip(kind)
    raise FooterError("the footer has no schema")


_INT_FIELDS = {1: "physical", 3: "repetition", 5: "children", 6: "converted"}


def parquet_columns(path: Path) -> list[str]:
    """The top-level column names of the Parquet file at `path` (FooterError when it is not one)."""
    return [e.name for e, _ in _top_level(path)]


def parquet_column_kinds(path: Path) -> dict[str, str]:
    """Each top-level column's shape in the words of trainspec.columns: "list<string>" for a list of
    strings (dictionary-encoded or not: the encoding is not the schema), else what it is ("a struct",
    "a list of int64", "string")."""
    return {e.name: footer_kind(e, subtree) for e, subtree in _top_level(path)}


def parquet_row_counts(path: Path) -> list[int]:
    """The rows of each row group, in order: FileMetaData field 4 (row_groups), each RowGroup's field 3
    (num_rows, an i64)."""
    reader = _Reader(_footer(path))
    for fid, kind in reader.fields():
        if fid == 4 and kind == 9:
            size, elem = reader.list_header()
            if elem != 12:
                raise FooterError("the footer's row groups are not a list of structs")
            out = []
            for _ in range(size):
                rows = 0
                for gfid, gkind in reader.fields():
                    if gfid == 3 and gkind == 6:
                        rows = reader.zigzag()
                    else:
                        reader.skip(gkind)
                out.append(rows)
            return out
        reader.skip(kind)
    return []


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
    schema = _schema(_Reader(_footer(path)))
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


__all__ = ["Element", "FooterError", "parquet_column_kinds", "parquet_columns", "parquet_row_counts"]
