"""The labels a files corpus will train with, found without torch: `train summary` counts the head with them.

The trainer (trainer/data/index.py) takes `data.labels` when set, else, ordered by `label_order`, the tags
of each Parquet shard's first row group (from the tags column's dictionary page, trainspec/tagdict.py; a
shard without one: its first LABEL_SAMPLE_ROWS rows) and of each JSONL shard's first LABEL_SAMPLE_ROWS
non-empty lines. This reads the same: JSONL with the standard library, Parquet with tagdict.shard_tags -
here if mw-env's interpreter has pyarrow, else in the training venv's python (which has it: the `train`
extra), sent tagdict.py's text as a script. None when neither can.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

LABEL_SAMPLE_ROWS = 4096  # trainer/data/index.py: the rows of each shard the label set is discovered in
# Run by the training venv's python when mw-env's has no pyarrow: tagdict.py's own text, then the loop (the
# venv need not have this mw-env installed, and reads the shards exactly as the code here would).
PARQUET_LOOP = """
import json, sys
rows, column, paths = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
seen = set()
for p in paths:
    seen |= shard_tags(p, column, rows)
print(json.dumps(sorted(seen)))
"""


def _parquet_script() -> str:
    from mw_env.trainspec import tagdict

    return Path(tagdict.__file__).read_text(encoding="utf-8") + PARQUET_LOOP


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
            [str(python), "-c", _parquet_script(), str(LABEL_SAMPLE_ROWS), column, *map(str, paths)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        return set(json.loads(done.stdout)) if done.returncode == 0 else None
    from mw_env.trainspec.tagdict import shard_tags

    seen: set[str] = set()
    for p in paths:
        seen |= shard_tags(p, column, LABEL_SAMPLE_ROWS)
    return seen


def corpus_labels(shards: Sequence[Path], column: str, *, venv: Path | None = None) -> tuple[str, ...] | None:
    """The label set the trainer will discover in these shards (train then val), or None if unreadable here."""
    seen: set[str] = set()
    try:
        for path in shards:
            if path.suffix == ".jsonl":
                seen |= jsonl_tags(path, column)
        found = parquet_tags([p for p in shards if p.suffix == ".parquet"], column, venv)
    except (OSError, ValueError, RecursionError, subprocess.SubprocessError):
        return None  # a row Python refuses (nesting, digits) is the trainer's to name, with its line
    if found is None:
        return None
    return label_order(seen | found)


__all__ = ["corpus_labels", "jsonl_tags", "label_order", "parquet_tags"]
