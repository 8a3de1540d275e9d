"""The one rule for a corpus row, and the one way to name where a row is (torch-free).

Three readers apply it: `mw-env train check` (every row of every shard, trainspec/datacheck.py), the trainer
(trainer/data/encode.py marks each row's problem with `shape_problems` and these codes; a step that reaches a
marked row, or the first window before the first step, raises the sentence built here), and the trainer's
JSONL parser (`check_row`, one row at a time). So a row is refused with the same words wherever it is met.

A row is named by its file and its place counted from the file's start: "line 1235" of a JSONL file (the line
number an editor shows), "row 1234" of a Parquet file, counting from 0 at its first row as pandas does
(`df.iloc[1234]`), never "row group 2 row 234", which a pandas user reads as row 234 or 1234.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from mw_env.base.errors import InputError

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

OK, BAD_ROW, BAD_TAG, BAD_TEXT = 0, 1, 2, 3  # per-row problem codes (the encoder's and the check's)

ROW_HINT = "each row: a list of words and a list of BIO tags, one tag per word"


def jsonl_row(path: Path | str, line: int) -> str:
    return f"{path} line {line}"


def parquet_row(path: Path | str, row: int) -> str:
    """Row `row` of a Parquet file, counted from 0 at the file's first row (pandas' df.iloc[row])."""
    return f"{path} row {row:,} (df.iloc[{row}]: counted from 0 at the file's first row)"


def check_row(
    where: str, tokens: object, tags: object, columns: tuple[str, str] = ("tokens", "tags")
) -> tuple[list[str], list[str]]:
    """One row's words and tags, or an InputError naming the row, the column and what it holds."""
    for name, value in ((columns[0], tokens), (columns[1], tags)):
        if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
            raise InputError(
                f"{where}: {name!r} must be a list of strings (got {_null_words(value)}{value!r:.80})",
                hint=ROW_HINT,
            )
    assert isinstance(tokens, list) and isinstance(tags, list)  # checked above, for the type checker
    if len(tokens) != len(tags):
        raise InputError(
            f"{where}: {len(tokens)} tokens but {len(tags)} tags",
            hint="every token needs exactly one BIO tag: fix or drop the row (`mw-env train check` lists every "
            "such row)",
        )
    return tokens, tags


def _null_words(value: object) -> str:
    if value is None:
        return "null: "
    if isinstance(value, list) and any(v is None for v in value):
        return f"a null at position {[v is None for v in value].index(True)}: "
    return ""


def text_error(where: str) -> InputError:
    return InputError(
        f"{where}: a word or tag is not valid UTF-8",
        hint="string columns must hold UTF-8 text; re-export the shard",
    )


def tag_error(where: str, tag: str, labels: Sequence[str], origin: str) -> InputError:
    return InputError(
        f"{where}: tag {tag!r} is not in the label set ({origin}: "
        f"{', '.join(labels[:12])}{', ...' if len(labels) > 12 else ''})",
        hint="list every tag of the corpus in data.labels, or --set data.unknown_tags=ignore "
        "to train on those words without a label (they are counted in the data card)",
    )


def shape_problems(tokens: pa.Array, tags: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(problem per row: OK or BAD_ROW, words per row, tags per row) of Arrow list<string> columns, vectorised:
    a null list, a null word or tag, or tokens and tags of different lengths make a row BAD_ROW. The counts
    are -1 (words) and -2 (tags) for a null list, so the two never agree."""
    import numpy as np
    import pyarrow.compute as pc

    n_rows = len(tokens)
    n_words = pc.list_value_length(tokens).fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    n_tags = pc.list_value_length(tags).fill_null(-2).to_numpy(zero_copy_only=False).astype(np.int64)
    problem = np.where((n_words < 0) | (n_words != n_tags), BAD_ROW, OK).astype(np.int8)
    for flat, lens in (
        (pc.list_flatten(tokens), np.maximum(n_words, 0)),
        (pc.list_flatten(tags), np.maximum(n_tags, 0)),
    ):
        if flat.null_count:  # a null word or tag: its row is bad
            null_rows = np.repeat(np.arange(n_rows), lens)[flat.is_null().to_numpy(zero_copy_only=False)]
            problem[null_rows] = BAD_ROW
    return problem, n_words, n_tags
