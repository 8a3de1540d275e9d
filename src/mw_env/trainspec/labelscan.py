"""The labels a files corpus will train with, found without torch: `train summary` counts the head with them.

The trainer (trainer/data/index.py) takes `data.labels` when set, else the tags of each shard's first
LABEL_SAMPLE_ROWS rows (a Parquet file's first rows, a JSONL file's first non-empty lines), ordered by
`label_order`. This reads the same rows: JSONL with the standard library,
Parquet with pyarrow - here if mw-env's interpreter has it, else in the training venv's python (which
has it: the `train` extra), asked with a small script. None when neither can.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

LABEL_SAMPLE_ROWS = 4096  # trainer/data/index.py: the rows of each shard the label set is discovered in
PARQUET_SCRIPT = """
import json, sys
import pyarrow.compute as pc
import pyarrow.parquet as pq
rows, column, paths = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
seen = set()
for p in paths:
    batch = next(pq.ParquetFile(p).iter_batches(batch_size=rows, columns=[column]), None)
    if batch is not None:
        seen.update(t for t in pc.unique(pc.list_flatten(batch.column(0))).to_pylist() if t is not None)
print(json.dumps(sorted(seen)))
"""


def label_order(tags: Iterable[str]) -> tuple[str, ...]:
    """`O` first, then the other tags, then per entity type (alphabetical) B- before I-; every entity gets
    both. The one ordering: the trainer's LabelSet (trainer/data/labels.py) takes it from here."""
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
    rows = 0
    with open(path, "rb") as fh:
        for raw in fh:
            if raw.strip():
                row = json.loads(raw)
                tags = row.get(column) if isinstance(row, dict) else None
                seen.update(t for t in tags or () if isinstance(t, str))
                rows += 1
                if rows >= LABEL_SAMPLE_ROWS:
                    break
    return seen


def parquet_tags(paths: Sequence[Path], column: str, venv: Path | None) -> set[str] | None:
    if not paths:
        return set()
    try:
        import pyarrow  # noqa: F401  (mw-env's interpreter may have it: then no subprocess)
    except ImportError:
        python = Path(venv) / "bin" / "python" if venv else None
        if python is None or not python.exists():
            return None
        done = subprocess.run(
            [str(python), "-c", PARQUET_SCRIPT, str(LABEL_SAMPLE_ROWS), column, *map(str, paths)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        return set(json.loads(done.stdout)) if done.returncode == 0 else None
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    seen: set[str] = set()
    for p in paths:
        batch = next(pq.ParquetFile(p).iter_batches(batch_size=LABEL_SAMPLE_ROWS, columns=[column]), None)
        if batch is not None:
            seen.update(t for t in pc.unique(pc.list_flatten(batch.column(0))).to_pylist() if t is not None)
    return seen


def corpus_labels(shards: Sequence[Path], column: str, *, venv: Path | None = None) -> tuple[str, ...] | None:
    """The label set the trainer will discover in these shards (train then val), or None if unreadable here."""
    seen: set[str] = set()
    try:
        for path in shards:
            if path.suffix == ".jsonl":
                seen |= jsonl_tags(path, column)
        found = parquet_tags([p for p in shards if p.suffix == ".parquet"], column, venv)
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    if found is None:
        return None
    return label_order(seen | found)


__all__ = ["corpus_labels", "jsonl_tags", "label_order", "parquet_tags"]
