"""The base-128 varint of Protocol Buffers and of Thrift's compact protocol, read in one place.

Two readers need it: trainspec/formats/spm_vocab.py (a SentencePiece `.model` is a protobuf) and tagdict.py (a Parquet page
header is compact Thrift). Both take a ValueError as "these bytes do not parse".
"""

from __future__ import annotations


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
