"""Thrift's compact protocol, read: a Parquet footer (footer.py) and a page header (tagdict.py) are written in it.

A struct reads as {field id: value}: integers (zigzag-decoded) and booleans as they are, binary as bytes, lists
and sets as lists; a double is skipped (None: no field read here is one). parquet.thrift declares no map, so a
map is bytes that do not parse: those raise ValueError or IndexError. Standard library only, and nothing of mw-env: the training venv runs this file's text
(trainspec/labelscan.py). The base-128 varint is protobuf's too (spm_vocab.py).
"""

from __future__ import annotations

from typing import TypeAlias

Thrift: TypeAlias = "int | bool | bytes | list[Thrift] | dict[int, Thrift] | None"
MAX_DEPTH = 64


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """(the value, the position after it); ValueError when `buf` ends inside it or it exceeds 64 bits."""
    value = shift = 0
    end = len(buf)
    while True:
        if pos >= end or shift > 63:
            raise ValueError("truncated or overlong varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _zigzag(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def read_value(buf: bytes, pos: int, kind: int, depth: int = 0) -> tuple[Thrift, int]:
    """One value of type `kind` at `pos`: (the value, the position after it)."""
    if depth > MAX_DEPTH:
        raise ValueError("nested too deep")
    if kind in (1, 2):  # a boolean field carries its value in its type
        return kind == 1, pos
    if kind == 3:
        return buf[pos], pos + 1
    if kind in (4, 5, 6):
        n, pos = read_varint(buf, pos)
        return _zigzag(n), pos
    if kind == 7:
        return None, pos + 8
    if kind == 8:
        n, pos = read_varint(buf, pos)
        if pos + n > len(buf):
            raise ValueError("a string runs past the end")
        return buf[pos : pos + n], pos + n
    if kind in (9, 10):  # list, set
        head = buf[pos]
        size, elem = head >> 4, head & 0x0F
        pos += 1
        if size == 15:
            size, pos = read_varint(buf, pos)
        items: list[Thrift] = []
        for _ in range(size):
            item: Thrift
            if elem in (1, 2):  # a boolean inside a container is one byte
                item, pos = buf[pos] == 1, pos + 1
            else:
                item, pos = read_value(buf, pos, elem, depth + 1)
            items.append(item)
        return items, pos
    if kind == 12:
        return read_struct(buf, pos, depth + 1)
    raise ValueError(f"unknown Thrift type {kind}")


def read_struct(
    buf: bytes, pos: int = 0, depth: int = 0, *, last: int | None = None
) -> tuple[dict[int, Thrift], int]:
    """The struct at `pos`: ({field id: value}, the position after it). `last`: stop after that field, the
    rest unread (fields come in ascending order from every Thrift writer); the position is then its end."""
    fields: dict[int, Thrift] = {}
    fid = 0
    while True:
        head = buf[pos]
        if head == 0:
            return fields, pos + 1
        delta, kind = head >> 4, head & 0x0F
        if delta:
            fid, at = fid + delta, pos + 1
        else:
            n, at = read_varint(buf, pos + 1)
            fid = _zigzag(n)
        if last is not None and fid > last:
            return fields, pos
        fields[fid], pos = read_value(buf, at, kind, depth)
        if fid == last:
            return fields, pos
