"""`mw-env train check`: every row of a files corpus read once, against the rules training applies.

What training would meet one step at a time (a row whose tokens and tags differ in length, a null, a tag
outside `data.labels`, text that is not UTF-8), and what it would only count (rows longer than `model.max_len`,
an `I-X` without its `B-X`), found in one pass before any training, each problem with its count and the first
rows that have it, named by file and row counted from the file's start (trainspec/rows.py). Plus what the
corpus is: its files and rows, its tags (IOB2 or plain, and the conversion to paste) and the labels the
trainer would take (the `data: labels:` line to paste).

Reads with pyarrow: Parquet in batches of BATCH_ROWS rows (the two columns only), JSONL line by line with the
trainer's JSON reader. The per-row rule is `rows.shape_problems`, the trainer's own; the counts are numpy over
whole batches. mw-env's own interpreter may lack pyarrow: the command then runs this module in the training
venv (`python -m mw_env.trainspec.datacheck REQUEST`), which prints JSON lines (progress, then the report).
"""

from __future__ import annotations

import functools
import json
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from mw_env.base.errors import InputError, MwEnvError
from mw_env.trainspec.config import TrainConfig, config_from_dict
from mw_env.trainspec.rows import OK, check_row, jsonl_row, parquet_row, shape_problems

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

BATCH_ROWS = 65536  # Parquet rows decoded at a time
JSONL_BATCH = 8192  # JSONL rows gathered before the counts over them
MAX_EXAMPLES = 5
# Problem kinds: (what the rows have, an error (training stops there) or a warning (training counts it)).
KINDS: dict[str, tuple[str, bool]] = {
    "unreadable": ("line(s) not a JSON object with both columns", True),
    "type": ("row(s) whose tokens or tags are not lists of strings", True),
    "null": ("row(s) with a null list, word or tag", True),
    "length": ("row(s) whose tokens and tags differ in length", True),
    "text": ("row(s) with a word or tag that is not valid UTF-8", True),
    "unknown_tag": ("row(s) with a tag outside data.labels", True),
    "too_long": ("row(s) longer than model.max_len (the trainer drops their last words)", False),
    "bio": ("row(s) with an I-X whose previous word is neither B-X nor I-X", False),
    "empty": ("row(s) with no words (they train nothing)", False),
}


@dataclass
class ProblemRows:
    count: int = 0
    examples: list[str] = field(default_factory=list)

    def counted(self) -> bool:
        """Count one more row; True while its example is still wanted (the first MAX_EXAMPLES)."""
        self.count += 1
        return len(self.examples) < MAX_EXAMPLES


@dataclass(frozen=True)
class ReadProgress:
    path: str
    rows: int  # rows read so far, all files
    done_bytes: int  # of all files: the bytes of the files read, plus the share of the current one
    total_bytes: int


@dataclass
class DataReport:
    files: list[dict[str, object]] = field(default_factory=list)  # path, format, split, rows
    rows: int = 0
    tags: Counter[str] = field(default_factory=Counter)
    problems: dict[str, ProblemRows] = field(default_factory=lambda: {k: ProblemRows() for k in KINDS})
    labels: tuple[str, ...] = ()
    labels_from: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def errors(self) -> int:
        return sum(t.count for k, t in self.problems.items() if KINDS[k][1]) + len(self.plain_tags)

    @property
    def plain_tags(self) -> list[str]:
        from mw_env.trainspec.labelscan import not_bio

        return not_bio(self.tags)

    def to_dict(self) -> dict[str, object]:
        return {
            "files": self.files,
            "rows": self.rows,
            "tags": dict(self.tags.most_common()),
            "scheme": "plain" if self.plain_tags else "IOB2",
            "labels": list(self.labels),
            "labels_from": self.labels_from,
            "problems": {
                k: {"what": KINDS[k][0], "error": KINDS[k][1], "count": t.count, "examples": t.examples}
                for k, t in self.problems.items()
            },
            "errors": self.errors,
            "notes": self.notes,
        }


class _Rules:
    """The checks of one config over Arrow batches of rows that passed `shape_problems`."""

    def __init__(self, config: TrainConfig, report: DataReport) -> None:
        self.report, self.config = report, config
        self.labels = set(config.data.labels)
        self.max_len = config.model.max_len
        self.byte = config.data.tokenizer == "byte"

    def batch(self, tokens: pa.Array, tags: pa.Array, where: Callable[[int], str]) -> None:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        r = self.report
        problem, n_words, n_tags = shape_problems(tokens, tags)
        bad = np.flatnonzero(problem != OK)
        for i in bad.tolist():
            kind = "length" if n_words[i] >= 0 and n_tags[i] >= 0 and n_words[i] != n_tags[i] else "null"
            if (t := r.problems[kind]).counted():
                t.examples.append(_row_sentence(where(i), tokens[i].as_py(), tags[i].as_py()))
        ok = np.flatnonzero(problem == OK)
        if len(bad):
            mask = pa.array(problem == OK)
            tokens, tags, n_words = tokens.filter(mask), tags.filter(mask), n_words[ok]
        words, tag_words = pc.list_flatten(tokens), pc.list_flatten(tags)
        not_text = self._not_text(words, tag_words, n_words)
        for i in not_text.tolist():
            if (t := r.problems["text"]).counted():
                t.examples.append(f"{where(int(ok[i]))}: a word or tag is not valid UTF-8")
        if len(not_text):  # counted: the rest of the checks read the text of the other rows
            keep = np.ones(len(n_words), dtype=bool)
            keep[not_text] = False
            mask = pa.array(keep)
            tokens, tags, n_words, ok = tokens.filter(mask), tags.filter(mask), n_words[keep], ok[keep]
            words, tag_words = pc.list_flatten(tokens), pc.list_flatten(tags)
        values, counts = (a.to_pylist() for a in pc.value_counts(tag_words).flatten())
        r.tags.update(dict(zip(values, counts, strict=True)))
        for i in np.flatnonzero(n_words == 0).tolist():
            if (t := r.problems["empty"]).counted():
                t.examples.append(where(int(ok[i])))
        row_of = np.repeat(np.arange(len(n_words)), n_words)
        if self.byte:
            self._too_long(words, n_words, lambda i: where(int(ok[i])))
        if self.labels and self.config.data.unknown_tags == "error":
            outside = ~pc.is_in(tag_words, value_set=pa.array(sorted(self.labels), pa.string())).to_numpy(
                zero_copy_only=False
            )
            for i in np.unique(row_of[outside]).tolist():
                if (t := r.problems["unknown_tag"]).counted():
                    tag = next(x for x in tags[i].as_py() if x not in self.labels)
                    t.examples.append(f"{where(int(ok[i]))}: tag {tag!r}")
        for i in _bio_rows(tag_words, row_of).tolist():
            if (t := r.problems["bio"]).counted():
                t.examples.append(where(int(ok[i])))

    def _not_text(self, words: pa.Array, tag_words: pa.Array, n_words: np.ndarray) -> np.ndarray:
        import numpy as np
        import pyarrow as pa

        rows = np.repeat(np.arange(len(n_words)), n_words)
        found = []
        for flat in (words, tag_words):
            try:
                flat.validate(full=True)
            except pa.ArrowInvalid:  # Arrow does not check Parquet strings on read: find the words
                bad = [not _utf8(b) for b in flat.cast(pa.binary()).to_pylist()]
                found.append(rows[np.array(bad, dtype=bool)])
        return np.unique(np.concatenate(found)) if found else np.zeros(0, np.int64)

    def _too_long(self, words: pa.Array, n_words: np.ndarray, where: Callable[[int], str]) -> None:
        """Rows whose byte-tokenizer length (CLS, the words' UTF-8 bytes joined by spaces, SEP) passes max_len."""
        import numpy as np
        import pyarrow.compute as pc

        lengths = pc.binary_length(words).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        csum = np.concatenate([[0], np.cumsum(lengths)])
        offsets = np.concatenate([[0], np.cumsum(n_words)])
        ids = 2 + csum[offsets[1:]] - csum[offsets[:-1]] + np.maximum(n_words - 1, 0)
        for i in np.flatnonzero(ids > self.max_len).tolist():
            if (t := self.report.problems["too_long"]).counted():
                t.examples.append(f"{where(i)}: {int(ids[i])} byte ids")


def _utf8(b: bytes | None) -> bool:
    try:
        (b or b"").decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _bio_rows(tag_words: pa.Array, row_of: np.ndarray) -> np.ndarray:
    """Rows with an I-X whose previous word (in the row) is neither B-X nor I-X: the data card's BIO count."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if not len(tag_words):
        return np.zeros(0, np.int64)
    enc = pc.dictionary_encode(tag_words)
    if isinstance(enc, pa.ChunkedArray):
        enc = enc.combine_chunks()
    types: dict[str, int] = {}
    inside, typ = [], []
    for tag in enc.dictionary.to_pylist():
        prefix, sep, t = str(tag).partition("-")
        tid = types.setdefault(t, len(types)) if sep and prefix in ("B", "I") else -1
        typ.append(tid)
        inside.append(tid if sep and prefix == "I" else -1)
    idx = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    ins, ty = np.array(inside)[idx], np.array(typ)[idx]
    prev = np.concatenate([[-1], ty[:-1]])
    prev[np.concatenate([[True], row_of[1:] != row_of[:-1]])] = -1
    return np.unique(row_of[(ins >= 0) & (prev != ins)])


def _row_sentence(where: str, tokens: object, tags: object) -> str:
    try:
        check_row(where, tokens, tags)
    except InputError as exc:
        return exc.message
    return f"{where}: a null word or tag"


def _parquet_batches(
    path: Path, columns: tuple[str, str]
) -> Iterator[tuple[pa.Array, pa.Array, Callable[[int], str], float]]:
    """(tokens, tags, the name of batch row i, the share of the file read) per batch."""
    import pyarrow.parquet as pq

    from mw_env.trainspec.columns import as_string_lists

    f = pq.ParquetFile(path)
    total, first = max(f.metadata.num_rows, 1), 0
    for rb in f.iter_batches(batch_size=BATCH_ROWS, columns=list(columns)):
        start = first
        yield (
            as_string_lists(rb.column(0)),
            as_string_lists(rb.column(1)),
            functools.partial(_offset_row, path, start),
            (first + rb.num_rows) / total,
        )
        first += rb.num_rows


def _offset_row(path: Path, start: int, i: int) -> str:
    return parquet_row(path, start + i)


def _jsonl_batches(
    path: Path, columns: tuple[str, str], report: DataReport
) -> Iterator[tuple[pa.Array, pa.Array, Callable[[int], str], float]]:
    """JSONL rows that parse as objects with lists of strings (the others are counted here), in batches."""
    import pyarrow as pa

    from mw_env.base.userjson import json_refusal, loads

    size = max(path.stat().st_size, 1)
    tcol, gcol = columns
    tokens: list[object] = []
    tags: list[object] = []
    lines: list[int] = []

    def flush(done: int) -> tuple[pa.Array, pa.Array, Callable[[int], str], float]:
        typ = pa.list_(pa.string())
        at = list(lines)
        out = (pa.array(tokens, typ), pa.array(tags, typ), lambda i: jsonl_row(path, at[i]), done / size)
        del tokens[:], tags[:], lines[:]
        return out

    def refused(kind: str, example: str) -> None:  # a row that joins no batch: counted here, as its problem
        report.rows += 1
        if (t := report.problems[kind]).counted():
            t.examples.append(example)

    done = 0
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            done += len(raw)
            if not raw.strip():
                continue
            here = jsonl_row(path, lineno)
            try:
                obj = loads(raw)
            except (ValueError, RecursionError) as exc:
                refused("unreadable", f"{here}: {json_refusal(exc)}")
                continue
            if not isinstance(obj, dict) or tcol not in obj or gcol not in obj:
                keys = ", ".join(map(repr, list(obj)[:6])) if isinstance(obj, dict) else type(obj).__name__
                refused("unreadable", f"{here}: has {keys}, not {tcol!r} and {gcol!r}")
                continue
            a, b = obj[tcol], obj[gcol]
            if not all(
                isinstance(v, list) and all(isinstance(x, str) or x is None for x in v) for v in (a, b)
            ):
                refused("null" if a is None or b is None else "type", _row_sentence(here, a, b))
                continue
            tokens.append(a)
            tags.append(b)
            lines.append(lineno)
            if len(lines) >= JSONL_BATCH:
                yield flush(done)
    if lines:
        yield flush(done)


def check_dataset(
    config: TrainConfig, *, base: Path, progress: Callable[[ReadProgress], None] | None = None
) -> DataReport:
    """Every row of the config's train and validation files, read once (InputError for what stops the read:
    a file that cannot be opened or decoded)."""
    import pyarrow

    from mw_env.trainspec.files import expand_files
    from mw_env.trainspec.labelscan import label_order

    d = config.data
    report = DataReport()
    if d.tokenizer != "byte":
        report.notes.append(
            "over-long rows are counted for the byte tokenizer only; with SentencePiece the run's data card "
            "counts the words dropped at model.max_len"
        )
    files = [(p, "train") for key, globs in d.train_globs() for p in expand_files(globs, key, base)]
    files += [(p, "val") for p in expand_files(d.val_files, "data.val_files", base)]
    total = sum(p.stat().st_size for p, _ in files)
    rules, columns, before = _Rules(config, report), (d.tokens_column, d.tags_column), 0
    for path, split in files:
        size, rows0 = path.stat().st_size, report.rows
        batches = (
            _parquet_batches(path, columns)
            if path.suffix == ".parquet"
            else _jsonl_batches(path, columns, report)
        )
        try:
            for tokens, tags, where, share in batches:
                rules.batch(tokens, tags, where)
                report.rows += len(tokens)
                if progress is not None:
                    progress(ReadProgress(str(path), report.rows, before + int(share * size), total))
        except (pyarrow.ArrowException, OSError) as exc:  # a damaged file, a column of another type
            raise InputError(
                f"{path}: cannot be read ({type(exc).__name__}: {str(exc)[:200]})",
                hint="re-export the file, or drop it from the file list",
            ) from None
        report.files.append(
            {"path": str(path), "format": path.suffix[1:], "split": split, "rows": report.rows - rows0}
        )
        before += size
    report.labels = tuple(d.labels) or label_order(report.tags)
    report.labels_from = "data.labels" if d.labels else "every tag of every row read"
    return report


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m mw_env.trainspec.datacheck REQUEST`: REQUEST is JSON {"config": ..., "base": ...}; prints one
    JSON object a line: {"progress": ...} while reading, then {"report": ...} or {"error": ...}."""
    request = json.loads((argv if argv is not None else sys.argv[1:])[0])

    def say(p: ReadProgress) -> None:
        print(json.dumps({"progress": p.__dict__}), flush=True)

    try:
        config = config_from_dict(request["config"])
        report = check_dataset(config, base=Path(request["base"]), progress=say)
    except MwEnvError as exc:
        print(json.dumps({"error": {"message": exc.message, "hint": exc.hint, "exit": exc.exit_code}}))
        return 0
    print(json.dumps({"report": report.to_dict()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
