"""The labels a files corpus will train with, found without torch: `train summary` counts the head with them.

The trainer (trainer/data/index.py) takes `data.labels` when set, else, ordered by `label_order`, the tags
of every row group of each Parquet shard (from the tags column's dictionary pages, trainspec/formats/tagdict.py; a
shard without them: its first LABEL_SAMPLE_ROWS rows, "sampled") and of each JSONL shard's first
LABEL_SAMPLE_ROWS non-empty lines (sampled when the shard has more). Sampled labels are said plainly, with
the `data.labels` line to paste: a tag first met after the sample stops the run there. This reads the same: JSONL with the standard library, Parquet with tagdict.shard_tags -
here if mw-env's interpreter has pyarrow, else in the training venv's python (which has it: the `train`
extra), sent tagdict.py's and thrift.py's texts as a script. None when neither can.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mw_env.base.errors import InputError

LABEL_SAMPLE_ROWS = 4096  # trainer/data/index.py: the rows of each shard the label set is discovered in
# Run by the training venv's python when mw-env's has no pyarrow: thrift.py's and tagdict.py's own texts, each
# run as its module (tagdict's import of thrift then finds it), then the loop: the venv need not have this
# mw-env installed, and reads the shards exactly as the code here would.
PARQUET_LOOP = """
import json, sys, types
for name, text in TEXTS:
    sys.modules[name] = module = types.ModuleType(name)
    exec(compile(text, name, "exec"), module.__dict__)
shard_tags = module.shard_tags
rows, column, paths = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
seen, sampled = set(), []
for p in paths:
    tags, part = shard_tags(p, column, rows)
    seen |= tags
    sampled += [p] if part else []
print(json.dumps({"tags": sorted(seen), "sampled": sampled}))
"""


def _parquet_script() -> str:
    from mw_env.trainspec.formats import tagdict, thrift

    texts = [(m.__name__, Path(str(m.__file__)).read_text(encoding="utf-8")) for m in (thrift, tagdict)]
    return f"TEXTS = {texts!r}\n" + PARQUET_LOOP


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


def jsonl_sample(path: Path, column: str) -> tuple[set[str], bool]:
    """The tags of the first LABEL_SAMPLE_ROWS non-empty lines, and whether the shard has more (sampled)."""
    seen: set[str] = set()
    rows = 0
    with open(path, "rb") as fh:
        for raw in fh:
            if raw.strip():
                if rows >= LABEL_SAMPLE_ROWS:
                    return seen, True
                row = json.loads(raw)
                tags = row.get(column) if isinstance(row, dict) else None
                seen.update(t for t in tags or () if isinstance(t, str))
                rows += 1
    return seen, False


@dataclass(frozen=True)
class CorpusTags:
    """The tags found in a corpus's shards, and the shards whose tags were only sampled."""

    tags: set[str] = field(default_factory=set)
    sampled: tuple[str, ...] = ()


def parquet_found(paths: Sequence[Path], column: str, venv: Path | None) -> CorpusTags | None:
    if not paths:
        return CorpusTags()
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
        if done.returncode != 0:
            return None
        out = json.loads(done.stdout)
        return CorpusTags(set(out["tags"]), tuple(out["sampled"]))
    from mw_env.trainspec.formats.tagdict import shard_tags

    seen: set[str] = set()
    sampled: list[str] = []
    for p in paths:
        tags, part = shard_tags(p, column, LABEL_SAMPLE_ROWS)
        seen |= tags
        sampled += [str(p)] if part else []
    return CorpusTags(seen, tuple(sampled))


def corpus_found(shards: Sequence[Path], column: str, *, venv: Path | None = None) -> CorpusTags | None:
    """The tags the trainer will discover in these shards (train then val), or None if unreadable here."""
    seen: set[str] = set()
    sampled: list[str] = []
    try:
        for path in shards:
            if path.suffix == ".jsonl":
                tags, part = jsonl_sample(path, column)
                seen |= tags
                sampled += [str(path)] if part else []
        found = parquet_found([p for p in shards if p.suffix == ".parquet"], column, venv)
    except (OSError, ValueError, RecursionError, subprocess.SubprocessError):
        return None  # a row Python refuses (nesting, digits) is the trainer's to name, with its line
    if found is None:
        return None
    return CorpusTags(seen | found.tags, (*sampled, *found.sampled))


def not_bio(tags: Iterable[str]) -> list[str]:
    """Tags that are neither `O` nor IOB2 (`B-TYPE`, `I-TYPE`): a plain `StreetName` makes no entity, so
    the entity F1 would be 0 at every evaluation."""
    out = []
    for tag in tags:
        prefix, sep, typ = tag.partition("-")
        if tag != "O" and not (sep and prefix in ("B", "I") and typ):
            out.append(tag)
    return sorted(out)


def not_bio_error(
    tags: Sequence[str], where: str, *, column: str = "tags", jsonl: bool = False
) -> InputError:
    shown = ", ".join(map(repr, tags[:8])) + (f" and {len(tags) - 8} more" if len(tags) > 8 else "")
    return InputError(
        f"{where}: the tags {shown} have no B-/I- prefix; the tagger trains IOB2 tags (O, B-TYPE on an "
        "entity's first word, I-TYPE on the rest) and scores entities from them: these would train and "
        "score an entity F1 of 0",
        hint="convert the corpus to IOB2: for each run of words with one plain tag X, tag the first B-X and "
        "the others I-X (a tag per word that repeats, IO, converts so; docs/training.md shows it), e.g. "
        + iob2_script(column, jsonl=jsonl),
    )


def iob2_script(column: str, *, jsonl: bool) -> str:
    """A one-line command that rewrites a shard's plain (IO) tags as IOB2, to paste (tags already B-/I- and O
    are kept)."""
    tag = (
        "[x if x == 'O' or x[:2] in ('B-', 'I-') else ('I-' if i and r[i - 1] == x else 'B-') + x "
        "for i, x in enumerate(r)]"
    )
    if jsonl:
        return (
            f'python -c "import json, sys; c = {column!r}; [print(json.dumps({{**d, c: (lambda r: {tag})(d[c])}}, '
            'ensure_ascii=False)) for d in map(json.loads, filter(str.strip, sys.stdin))]" < IN.jsonl > OUT.jsonl'
        )
    return (
        f'python -c "import sys, pyarrow as pa, pyarrow.parquet as pq; c = {column!r}; t = pq.read_table(sys.argv[1]); '
        f"v = pa.array([{tag} for r in t.column(c).to_pylist()]); "
        'pq.write_table(t.set_column(t.schema.get_field_index(c), c, v), sys.argv[2])" IN.parquet OUT.parquet'
    )


_YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}


def flow_list(labels: Sequence[str]) -> str:
    """The labels as a YAML flow list for `data.labels` (quoted where YAML would read another type)."""

    def one(tag: str) -> str:
        plain = re.fullmatch(r"[A-Za-z][A-Za-z0-9_.-]*", tag) and tag.lower() not in _YAML_WORDS
        return tag if plain else json.dumps(tag)

    return "[" + ", ".join(one(t) for t in labels) + "]"
