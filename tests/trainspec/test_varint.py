"""The one varint reader of the protobuf (formats.spm_vocab) and compact-Thrift (tagdict) parsers."""

from __future__ import annotations

import pytest

from mw_env.trainspec.formats.varint import read_varint


@pytest.mark.parametrize(
    ("data", "pos", "value", "end"),
    [(b"\x00", 0, 0, 1), (b"\x7f", 0, 127, 1), (b"\xac\x02", 0, 300, 2), (b"xx\x96\x01", 2, 150, 4)],
)
def test_values_and_where_they_end(data: bytes, pos: int, value: int, end: int) -> None:
    assert read_varint(data, pos) == (value, end)


@pytest.mark.parametrize("data", [b"", b"\x80", b"\xff\xff", b"\x80" * 10 + b"\x01"])
def test_truncated_or_overlong_is_a_value_error(data: bytes) -> None:
    with pytest.raises(ValueError):
        read_varint(data, 0)
