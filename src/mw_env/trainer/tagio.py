"""Reading addresses to tag (or labelled ones to score): `mw-env train predict` and `mw-env train evaluate`.
No torch here (pyarrow only for Parquet).

Formats, by the file's extension:
- `.jsonl` / `.ndjson`: one JSON value a line: an object with the words as a list (the tokens column,
  `tokens` by default) or as one string under `text` or `address` (split on white space), or a bare
  string, or a list of strings; labelled rows also carry the tags column (`tags`), one tag per word.
- `.parquet`: the tokens column (list<string>), or a string column `text` / `address`; and the tags column.
- anything else: plain text, one address a line (split on white space); blank lines are skipped.

The input is streamed (`iter_rows`): a line or a Parquet batch at a time, so memory does not grow with the
file (a 2 GB input is read as a 20 MB one; docs/benchmarks.md). Lines end at `\\n` only (a `\\r` before it is
dropped): a form feed, a NEL (U+0085) or a U+2028 inside an address is white space between its words, never
a new row, as the docs' "one address a line" says (`str.splitlines` split there). Every line is UTF-8 text,
checked where it is read: bad bytes, a `\\ud800` escape without its pair and a key written twice are an
`InputError` naming the file and the line (row), as the trainer's own JSONL reader says them.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from mw_env.base.errors import InputError

if TYPE_CHECKING:
    import pyarrow as pa

MAX_LINE_BYTES = 4 << 20  # one address (or one labelled row) a line: a longer line is not one
PARQUET_BATCH_ROWS = 4096  # rows decoded at a time from a Parquet row group
TEXT_KEYS = ("text", "address")


@dataclass(frozen=True)
class Row:
    words: list[str]
    tags: list[str] | None
    where: str  # "FILE line N" / "FILE row N", for messages


def iter_rows(
    path: Path, *, tokens_column: str = "tokens", tags_column: str = "tags", need_tags: bool = False
) -> Iterator[Row]:
    """Every row of an input file, in order, read as it is consumed; InputError naming the file, the line or
    row, and what was expected. A file without a single row is an error once it has been read through."""
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
        rows = (Row(line.split(), None, f"{path} line {n}") for n, line in _lines(path) if line.strip())
    seen = False
    for row in rows:
        seen = True
        yield row
    if not seen:
        raise InputError(f"{path}: no rows", hint="the input holds one address a row")


def _check_file(path: Path) -> None:
    try:
        st = os.stat(path)
    except OSError as exc:
        raise InputError(f"{path}: cannot read it: {exc.strerror or exc}", hint="check the path") from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{path} is not a regular file", hint="name a .jsonl, .parquet or text file")


def _open(path: Path) -> IO[bytes]:
    """The file, opened without blocking on a FIFO swapped in since the check, and checked again on the
    descriptor (a regular file: its flag is then cleared)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise InputError(f"{path}: cannot read it: {exc.strerror or exc}", hint="check the path") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InputError(f"{path} is not a regular file", hint="name a .jsonl, .parquet or text file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb", buffering=1 << 20)


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line, split at `\\n` only, decoded strictly; a line of over 4 MiB or bytes
    that are not UTF-8 is an InputError naming the line."""
    with _open(path) as fh:
        n = 0
        while True:
            raw = fh.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            n += 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                raise InputError(
                    f"{path} line {n}: longer than {MAX_LINE_BYTES >> 20} MiB, which no address is",
                    hint="one address (or one labelled row) a line: is this the file you meant?",
                )
            raw = raw.removesuffix(b"\n").removesuffix(b"\r")
            if n == 1:
                raw = raw.removeprefix(b"\xef\xbb\xbf")  # a byte-order mark some editors write
            try:
                yield n, raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(
                    f"{path} line {n}: not UTF-8 (byte {raw[exc.start]:#04x} at column {exc.start + 1})",
                    hint="the input must be UTF-8 text; re-encode the file (e.g. `iconv -t UTF-8`)",
                ) from None


def _words(value: object, where: str, what: str) -> list[str]:
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list) and all(isinstance(w, str) for w in value):
        return list(value)
    raise InputError(
        f"{where}: {what} must be a list of strings (or one string of words), got {type(value).__name__}",
        hint="each row's words are a list of strings",
    )


def _jsonl(path: Path, tokens_column: str, tags_column: str, need_tags: bool) -> Iterator[Row]:
    from mw_env.base.userjson import json_refusal, loads

    hint = "one JSON value a line"
    for n, line in _lines(path):
        if not line.strip():
            continue
        where = f"{path} line {n}"
        try:
            value = loads(line)  # a key twice and a lone surrogate escape are refused, as in training
        except (ValueError, RecursionError) as exc:
            raise InputError(f"{where}: not JSON ({json_refusal(exc)})", hint=hint) from None
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
        yield Row(words, tags, where)


def _tags(value: object, words: Sequence[str], where: str, column: str) -> list[str]:
    if not (isinstance(value, list) and all(isinstance(t, str) for t in value)):
        raise InputError(f"{where}: {column!r} must be a list of strings", hint="one BIO tag per word")
    if len(value) != len(words):
        raise InputError(
            f"{where}: {len(words)} words but {len(value)} tags in {column!r}", hint="one BIO tag per word"
        )
    return list(value)


def _parquet(path: Path, tokens_column: str, tags_column: str, need_tags: bool) -> Iterator[Row]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    def unreadable(exc: BaseException) -> InputError:
        return InputError(f"{path}: not a readable Parquet file ({exc})", hint="re-export the file")

    try:
        pf = pq.ParquetFile(path)
        names = pf.schema_arrow.names
    except (pa.ArrowException, OSError) as exc:
        raise unreadable(exc) from None
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
    first = 0
    try:
        batches = pf.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=columns)
        for batch in batches:
            words_col = _pylist(batch.column(0), path, first, key)
            tags_col = _pylist(batch.column(1), path, first, tags_column) if len(columns) > 1 else None
            for i, value in enumerate(words_col):
                where = f"{path} row {first + i}"
                words = _words(value, where, repr(key))
                tags = _tags(tags_col[i], words, where, tags_column) if tags_col is not None else None
                yield Row(words, tags, where)
            first += batch.num_rows
    except (pa.ArrowException, OSError) as exc:
        raise unreadable(exc) from None


def _pylist(column: pa.Array, path: Path, first: int, name: str) -> list[object]:
    """A batch's column as Python values; bytes that are not UTF-8 (Arrow does not check Parquet strings on
    read) are an InputError naming the row, found by decoding row by row once the batch failed."""
    try:
        return list(column.to_pylist())
    except UnicodeDecodeError:
        pass
    for i in range(len(column)):
        try:
            column[i].as_py()
        except UnicodeDecodeError as exc:
            raise InputError(
                f"{path} row {first + i}: column {name!r} holds bytes that are not UTF-8 text "
                f"(byte {exc.object[exc.start]:#04x})",
                hint="the strings of a Parquet file must be UTF-8; re-export it from text",
            ) from None
    raise InputError(  # the batch failed, none of its rows alone did: say so all the same
        f"{path} rows {first}-{first + len(column) - 1}: column {name!r} holds bytes that are not UTF-8 text",
        hint="the strings of a Parquet file must be UTF-8; re-export it from text",
    )
