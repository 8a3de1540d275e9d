"""The piece count of a SentencePiece `.model` file, without torch and without requiring sentencepiece.

`train summary` runs in mw-env's own interpreter, which need not have the sentencepiece package. A
`.model` file is a serialized `ModelProto` (sentencepiece_model.proto) whose field 1 is the repeated
`SentencePiece pieces`; the vocabulary size is the number of those entries. When the sentencepiece
package is importable it is asked instead (it also validates the whole file); otherwise the protobuf
wire format's top level is walked here, which is all the count needs.
"""

from __future__ import annotations

from pathlib import Path

from mw_env.base.errors import InputError
from mw_env.trainspec.formats.thrift import read_varint as _varint

_PIECES_FIELD = 1
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


def count_pieces_wire(data: bytes) -> int:
    """Top-level field-1 (length-delimited) entries of a ModelProto; ValueError if it is not one."""
    pos, pieces = 0, 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        field, wire = key >> 3, key & 7
        if field == 0:
            raise ValueError("field number 0")
        if wire == _VARINT:
            _, pos = _varint(data, pos)
        elif wire == _I64:
            pos += 8
        elif wire == _I32:
            pos += 4
        elif wire == _LEN:
            length, pos = _varint(data, pos)
            pos += length
            if field == _PIECES_FIELD:
                pieces += 1
        else:  # groups (3, 4) and 6, 7 do not occur in a ModelProto
            raise ValueError(f"wire type {wire}")
        if pos > len(data):
            raise ValueError("truncated field")
    return pieces


def _count_with_sentencepiece(data: bytes) -> int | None:
    try:
        import sentencepiece
    except ImportError:
        return None
    sp = sentencepiece.SentencePieceProcessor()
    try:
        sp.LoadFromSerializedProto(data)
    except Exception as exc:  # its parser's own error type varies between releases
        raise ValueError(str(exc)) from exc
    return int(sp.get_piece_size())


def spm_piece_count(path: str | Path, *, key: str = "data.spm_model") -> int:
    """The number of pieces in the SentencePiece model at `path` (InputError naming `key` if unreadable)."""
    try:
        data = Path(path).expanduser().read_bytes()
    except OSError as exc:
        raise InputError(
            f"{key} {path}: {exc.strerror or exc}", hint="point it at a SentencePiece .model file"
        ) from None
    try:
        count = _count_with_sentencepiece(data)
        if count is None:
            count = count_pieces_wire(data)
    except ValueError as exc:
        count, why = 0, str(exc)
    else:
        why = "it holds no pieces"
    if count <= 0:
        raise InputError(
            f"{key} {path}: not a SentencePiece model ({why})",
            hint="point it at the .model file that spm_train / SentencePieceTrainer wrote (not the .vocab)",
        )
    return count
