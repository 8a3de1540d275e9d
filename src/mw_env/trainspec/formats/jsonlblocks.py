"""A JSONL file's blocks: runs of whole lines of about BLOCK_BYTES, with their byte ranges, row counts and first line.

JSONL has no footer: one scan counts the lines (a non-empty line is a row), without parsing them. The trainer's
shards (trainer/data/shards.py) and `train summary` (trainspec/splitscan.py) cut a file the same way, here.
"""

from __future__ import annotations

import hashlib
import json
from typing import BinaryIO

BLOCK_BYTES = 4 << 20

# (start byte, stop byte, rows, the 1-based number of its first line)
LineBlock = tuple[int, int, int, int]


def scan_blocks(fh: BinaryIO, block_bytes: int = BLOCK_BYTES) -> tuple[list[LineBlock], int]:
    """The blocks of the open file (every one, an empty one included) and its size in bytes."""
    blocks: list[LineBlock] = []
    start = pos = 0
    rows, first = 0, 1
    for line, raw in enumerate(fh, start=1):
        pos += len(raw)
        if raw.strip():
            rows += 1
        if pos - start >= block_bytes:
            blocks.append((start, pos, rows, first))
            start, rows, first = pos, 0, line + 1
    if pos > start:
        blocks.append((start, pos, rows, first))
    return blocks, pos


def scan_identity(fh: BinaryIO, block_bytes: int = BLOCK_BYTES) -> tuple[list[LineBlock], int, str]:
    """scan_blocks, and the file's identity digest: sha256 over its first and last 64 KiB and its blocks'
    byte ranges and row counts (a shard's `footer_sha256`, JSONL having no footer): cheap beside a hash of
    30 GB, and any change of a line count, a line's length or the file's ends changes it."""
    spans, size = scan_blocks(fh, block_bytes)
    h = hashlib.sha256()
    fh.seek(0)
    h.update(fh.read(65536))
    fh.seek(max(size - 65536, 0))
    h.update(fh.read(65536))
    h.update(json.dumps([(start, stop, rows) for start, stop, rows, _first in spans]).encode())
    return spans, size, h.hexdigest()
