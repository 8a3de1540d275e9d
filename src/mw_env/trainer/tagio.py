"""Reading addresses to tag (or labelled ones to score) and writing tagged ones: `mw-env train predict` and
`mw-env train evaluate`. No torch here (pyarrow only for Parquet).

Formats, by the file's extension:
- `.jsonl` / `.ndjson`: one JSON value a line: an object with the words as a list (the tokens column,
  `tokens` by default) or as one string under `text` or `address` (split on white space), or a bare
  string, or a list of strings; labelled rows also carry the tags column (`tags`), one tag per word.
- `.parquet`: the tokens column (list<string>), or a string column `text` / `address`; and the tags column.
- anything else: plain text, one address a line (split on white space); blank lines are skipped.
Output (predict): JSONL `{"tokens": [...], "tags": [...]}` per row, the training format, or Parquet with the
same two columns when the output file ends in `.parquet`.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mw_env.base.errors import InputError

MAX_TEXT_BYTES = 512 << 20  # a JSONL or text input is read whole: split a larger file
TEXT_KEYS = ("text", "address")


@dataclass(frozen=True)
class Row:
    words: list[str]
    tags: list[str] | None
    where: str  # "FILE line N" / "FILE row N", for messages


def read_rows(
    path: Path, *, tokens_column: str = "tokens", tags_column: str = "tags", need_tags: bool = False
) -> list[Row]:
    """Every row of an input file; InputError naming the file, the line or row, and what was expected."""
    _check_file(path)
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        rows = _parquet(path, tokens_column, tags_column, need_tags)
    elif suffix in (".jsonl", ".ndjson"):
        rows = _jsonl(path, tokens_column, tags_column, need_tags)
    else:
        if need_tags:
            raise InputError(
                f"{path}: plain text has no tags to score against",
                hint=f"evaluate reads labelled rows: .jsonl or .parquet with {tokens_column!r} and {tags_column!r}",
            )
        rows = [
            Row(line.split(), None, f"{path} line {n}")
            for n, line in enumerate(_text(path).splitlines(), 1)
            if line.strip()
        ]
    if not rows:
        raise InputError(f"{path}: no rows", hint="the input holds one address a row")
    return rows


def _check_file(path: Path) -> None:
    try:
        st = os.stat(path)
    except OSError as exc:
        raise InputError(f"{path}: cannot read it: {exc.strerror or exc}", hint="check the path") from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{path} is not a regular file", hint="name a .jsonl, .parquet or text file")


def _text(path: Path) -> str:
    from mw_env.base import userfile

    return userfile.read_text(path, what="input", max_bytes=MAX_TEXT_BYTES)


def _words(value: object, where: str, what: str) -> list[str]:
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list) and all(isinstance(w, str) for w in value):
        return list(value)
    raise InputError(
        f"{where}: {what} must be a list of strings (or one string of words), got {type(value).__name__}",
        hint="each row's words are a list of strings",
    )


def _jsonl(path: Path, tokens_column: str, tags_column: str, need_tags: bool) -> list[Row]:
    rows = []
    for n, line in enumerate(_text(path).splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path} line {n}"
        try:
            value = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise InputError(f"{where}: not JSON ({exc})", hint="one JSON value a line") from None
        tags = None
        if isinstance(value, dict):
            key = next((k for k in (tokens_column, *TEXT_KEYS) if k in value), None)
            if key is None:
                raise InputError(
                    f"{where}: no {tokens_column!r} (nor {' or '.join(map(repr, TEXT_KEYS))}) key; "
                    f"its keys: {', '.join(map(str, list(value)[:8])) or 'none'}",
                    hint="name the words' key with --tokens-column",
                )
            words = _words(value[key], where, repr(key))
            if tags_column in value:
                tags = _tags(value[tags_column], words, where, tags_column)
        else:
            words = _words(value, where, "the line")
        if need_tags and tags is None:
            raise InputError(
                f"{where}: no {tags_column!r} key: evaluate needs each word's gold tag",
                hint="name the tags' key with --tags-column",
            )
        rows.append(Row(words, tags, where))
    return rows


def _tags(value: object, words: Sequence[str], where: str, column: str) -> list[str]:
    if not (isinstance(value, list) and all(isinstance(t, str) for t in value)):
        raise InputError(f"{where}: {column!r} must be a list of strings", hint="one BIO tag per word")
    if len(value) != len(words):
        raise InputError(
            f"{where}: {len(words)} words but {len(value)} tags in {column!r}", hint="one BIO tag per word"
        )
    return list(value)


def _parquet(path: Path, tokens_column: str, tags_column: str, need_tags: bool) -> list[Row]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
        names = schema.names
        key = next((k for k in (tokens_column, *TEXT_KEYS) if k in names), None)
        if key is None:
            raise InputError(
                f"{path}: no column {tokens_column!r} (nor {' or '.join(map(repr, TEXT_KEYS))}); "
                f"its columns: {', '.join(names) or 'none'}",
                hint="name the words' column with --tokens-column",
            )
        if need_tags and tags_column not in names:
            raise InputError(
                f"{path}: no column {tags_column!r}: evaluate needs each word's gold tag "
                f"(its columns: {', '.join(names)})",
                hint="name the tags' column with --tags-column",
            )
        columns = [key] + ([tags_column] if tags_column in names else [])
        table = pq.read_table(path, columns=columns)
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"{path}: not a readable Parquet file ({exc})", hint="re-export the file") from None
    words_col = table.column(key).to_pylist()
    tags_col = table.column(tags_column).to_pylist() if tags_column in table.column_names else None
    rows = []
    for i, value in enumerate(words_col):
        where = f"{path} row {i}"
        words = _words(value, where, repr(key))
        tags = _tags(tags_col[i], words, where, tags_column) if tags_col is not None else None
        rows.append(Row(words, tags, where))
    return rows


def write_tagged(path: Path | None, rows: Sequence[tuple[Sequence[str], Sequence[str]]]) -> None:
    """(words, tags) per row as JSONL (to stdout when `path` is None) or Parquet (a .parquet path); the file
    is written whole under a temporary name first, so a failure leaves no half-written output."""
    import sys

    from mw_env.base.atomic import atomic_path

    if path is None:
        for words, tags in rows:
            sys.stdout.write(
                json.dumps({"tokens": list(words), "tags": list(tags)}, ensure_ascii=False) + "\n"
            )
        sys.stdout.flush()
        return
    with atomic_path(path) as tmp:
        if path.suffix.lower() == ".parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            table = pa.table(
                {"tokens": [list(w) for w, _ in rows], "tags": [list(t) for _, t in rows]},
                schema=pa.schema([("tokens", pa.list_(pa.string())), ("tags", pa.list_(pa.string()))]),
            )
            pq.write_table(table, tmp)
        else:
            with open(tmp, "w", encoding="utf-8") as fh:
                for words, tags in rows:
                    fh.write(
                        json.dumps({"tokens": list(words), "tags": list(tags)}, ensure_ascii=False) + "\n"
                    )
