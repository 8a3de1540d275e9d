"""The one compact-Thrift reader (the Parquet footer, a page header) and its varint, protobuf's too (spm_vocab)."""

from __future__ import annotations

import pytest

from mw_env.trainspec.formats.thrift import read_varint


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


def test_a_struct_reads_as_its_fields_and_stops_after_the_last_asked() -> None:
    from mw_env.trainspec.formats.thrift import read_struct

    # field 1: i32 -3 (zigzag 5); field 2: binary b"ab"; field 4 (delta 2): a list of two i32, 1 and 2;
    # field 5: a struct holding field 1 = true; then the stop byte.
    data = b"\x15\x05" + b"\x18\x02ab" + b"\x29\x25\x02\x04" + b"\x1c\x11\x00" + b"\x00"
    assert read_struct(data) == ({1: -3, 2: b"ab", 4: [1, 2], 5: {1: True}}, len(data))
    fields, end = read_struct(data, last=2)
    assert (fields, data[end : end + 1]) == ({1: -3, 2: b"ab"}, b"\x29")
    with pytest.raises(IndexError):
        read_struct(data[:-1])
