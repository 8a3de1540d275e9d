"""The labels a files corpus will train with, found without torch: `train summary` counts the head with them.

The trainer (trainer/data/corpus.py) takes `data.labels` when set, else the tags of each shard's first
block: a Parquet file's row group 0, a JSONL file's first 4 MiB of lines (to the end of the line that
crosses it), ordered by `label_order`. This reads the same blocks: JSONL with the standard library,
Parquet with pyarrow - here if mw-env's interpreter has it, else in the training venv's python (which
has it: the `train` extra), asked with a small script. None when neither can.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

JSONL_BLOCK_BYTES = 4 << 20  # trainer/data/shards.py: a JSONL shard's blocks
PARQUET_SCRIPT = """
import json, sys
import pyarrow.compute as pc
import pyarrow.parquet as pq
column, paths = sys.argv[1], sys.argv[2:]
seen = set()
for p in paths:
    col = pq.ParquetFile(p).read_row_group(0, columns=[column]).column(0)
    seen.update(t for t in pc.unique(pc.list_flatten(col)).to_pylist() if t is not None)
print(json.dumps(sorted(seen)))
"""


def label_order(tags: Iterable[str]) -> tuple[str, ...]:
    """`O` first, then the other tags, then per entity type B- before I- (trainer/data/labels.py's order;
    tests/trainspec/test_summary_labels.py keeps the two the same)."""
    entities: set[str] = set()
    other: set[str] = set()
    for tag in tags:
        prefix, sep, typ = tag.partition("-")
        if sep and prefix in ("B", "I") and typ:
            entities.add(typ)
        elif tag != "O":
            other.add(tag)
    out = ["O", *sorted(other)]
    for typ in sorted(entities):
        out += [f"B-{typ}", f"I-{typ}"]
    return tuple(out)


def jsonl_tags(path: Path, column: str) -> set[str]:
    seen: set[str] = set()
    consumed = 0
    with open(path, "rb") as fh:
        for raw in fh:
            consumed += len(raw)
            if raw.strip():
                row = json.loads(raw)
                tags = row.get(column) if isinstance(row, dict) else None
                seen.update(t for t in tags or () if isinstance(t, str))
            if consumed >= JSONL_BLOCK_BYTES:
                break
    return seen


def _parquet_tags(paths: Sequence[Path], column: str, venv: Path | None) -> set[str] | None:
    if not paths:
        return set()
    try:
        import pyarrow  # noqa: F401  (mw-env's interpreter may have it: then no subprocess)
    except ImportError:
        python = Path(venv) / "bin" / "python" if venv else None
        if python is None or not python.exists():
            return None
        done = subprocess.run(
            [str(python), "-c", PARQUET_SCRIPT, column, *map(str, paths)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        return set(json.loads(done.stdout)) if done.returncode == 0 else None
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    seen: set[str] = set()
    for p in paths:
        col = pq.ParquetFile(p).read_row_group(0, columns=[column]).column(0)
        seen.update(t for t in pc.unique(pc.list_flatten(col)).to_pylist() if t is not None)
    return seen


def corpus_labels(shards: Sequence[Path], column: str, *, venv: Path | None = None) -> tuple[str, ...] | None:
    """The label set the trainer will discover in these shards (train then val), or None if unreadable here."""
    seen: set[str] = set()
    try:
        for path in shards:
            if path.suffix == ".jsonl":
                seen |= jsonl_tags(path, column)
        found = _parquet_tags([p for p in shards if p.suffix == ".parquet"], column, venv)
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    if found is None:
        return None
    return label_order(seen | found)


__all__ = ["corpus_labels", "jsonl_tags", "label_order"]
