"""The one rule for a corpus's tokens and tags columns: each is a list of strings.

Both sides apply it: the trainer to the Arrow schema pyarrow reads (trainer/data/shards.py, `arrow_kind`),
the host (`mw-env train` before the doctor, `train summary`) to the Parquet footer read with the standard
library (trainspec/formats/footer.py, `footer_kind`). Each side describes a column in the same words and
`require_string_lists` refuses the same columns with the same sentence.

A list of strings is what pyarrow reads as one: `list` or `large_list` of `string` or `large_string`, or of a
dictionary of them (what pyarrow writes for a categorical: `list<dictionary<values=string>>`). Dictionary
encoding changes how the strings are stored, not what they are; `as_string_lists` decodes such a column to
plain strings where rows are read (the trainer's reader and the label scan).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from mw_env.base.errors import InputError

if TYPE_CHECKING:  # pyarrow is imported where a column is met: mw-env's own interpreter may lack it
    import pyarrow as pa

STRING_LIST = "list<string>"

_PHYSICAL = ("boolean", "int32", "int64", "int96", "float", "double", "binary", "fixed-size binary")
_UTF8, _LIST, _STRING_LOGICAL, _LIST_LOGICAL = 0, 3, 1, 3
_REPEATED = 2


def require_string_lists(path: Path | str, kinds: Mapping[str, str], columns: Iterable[str]) -> None:
    """InputError (exit 2) for the first of `columns` whose kind is not a list of strings."""
    for c in columns:
        kind = kinds.get(c)
        if kind is not None and kind != STRING_LIST:
            raise InputError(
                f"{path}: column {c!r} is {kind}, not a list of strings",
                hint="tokens and tags are list<string> columns (dictionary-encoded strings too), one tag per token",
            )


# -- the trainer's side: Arrow types -----------------------------------------------------------------------


def _is_text(t: pa.DataType) -> bool:
    import pyarrow as pa

    if pa.types.is_dictionary(t):
        t = t.value_type
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t))


def arrow_kind(t: pa.DataType) -> str:
    """An Arrow type in the rule's words: STRING_LIST, or the type as pyarrow prints it."""
    import pyarrow as pa

    if (pa.types.is_list(t) or pa.types.is_large_list(t)) and _is_text(t.value_type):
        return STRING_LIST
    return str(t)


def as_string_lists(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """A list-of-strings column (Array or ChunkedArray) with dictionary-encoded values decoded to plain
    strings of the same width (the encoder reads string offsets and bytes); any other column as it is."""
    import pyarrow as pa

    t = column.type
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)) or not pa.types.is_dictionary(t.value_type):
        return column
    make = pa.large_list if pa.types.is_large_list(t) else pa.list_
    return column.cast(make(t.value_type.value_type))


# -- the host's side: the Parquet footer's schema ----------------------------------------------------------


class Element(NamedTuple):
    """One SchemaElement of a Parquet footer (trainspec/formats/footer.py reads them): -1 where the footer leaves a field out (a group has no physical type)."""

    name: str
    children: int
    # 0 BOOLEAN 1 INT32 2 INT64 3 INT96 4 FLOAT 5 DOUBLE 6 BYTE_ARRAY 7 FIXED_LEN_BYTE_ARRAY
    physical: int = -1
    repetition: int = -1  # 0 REQUIRED 1 OPTIONAL 2 REPEATED
    converted: int = -1  # 0 UTF8 1 MAP 2 MAP_KEY_VALUE 3 LIST 4 ENUM ...
    logical: int = -1  # the LogicalType union's member: 1 STRING 2 MAP 3 LIST 4 ENUM ...


def _leaf_words(e: Element) -> str:
    if e.physical == 6 and (e.converted == _UTF8 or e.logical == _STRING_LOGICAL):
        return "string"
    if 0 <= e.physical < len(_PHYSICAL):
        return _PHYSICAL[e.physical]
    return "a group"


def footer_kind(top: Element, subtree: list[Element]) -> str:
    """A top-level column (its element and subtree, from footer.py) in the rule's words, as pyarrow's
    conversion would read it: a LIST-annotated group whose repeated child is a string (2-level) or holds
    one string (3-level), or a repeated string with no annotation, is STRING_LIST."""
    if top.children == 0:
        words = _leaf_words(top)
        return STRING_LIST if top.repetition == _REPEATED and words == "string" else words
    if top.converted != _LIST and top.logical != _LIST_LOGICAL:
        return "a map" if top.converted in (1, 2) or top.logical == 2 else "a struct"
    if top.children != 1 or len(subtree) < 2:
        return "a list of groups (structs or lists)"
    rep = subtree[1]
    if rep.children == 0:  # the legacy 2-level list: the repeated field is the element
        words = _leaf_words(rep)
    elif rep.children == 1 and len(subtree) == 3:
        words = _leaf_words(subtree[2])
    else:
        return "a list of groups (structs or lists)"
    return STRING_LIST if words == "string" else f"a list of {words}"
