"""A JSONL file's blocks: runs of whole lines of about BLOCK_BYTES, with their byte ranges, row counts and first line.

JSONL has no footer: one scan counts the lines (a non-empty line is a row), without parsing them. The trainer's
shards (trainer/data/shards.py) and `train summary` (trainspec/splitscan.py) cut a file the same way, here.
"""

from __future__ import annotations

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
