"""The label sample's fast path: a row group's tags from the tags column's dictionary page (trainspec/formats/tagdict.py),
equal to decoding the row group, for every codec it reads; anything else answers None (the rows are decoded)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from mw_env.base.errors import InputError
from mw_env.trainspec.formats.tagdict import dictionary_values, shard_tags

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pc = pytest.importorskip("pyarrow.compute")

TAGS = ["O", "B-street", "I-street", "B-city", "I-city", "B-postcode", "B-ünïcode", "I-🏠"]


def _table(rows: int = 300) -> pa.Table:
    # Tag k appears first at row 37*k: a sample of the first rows would miss the late ones.
    tags = [[TAGS[min(i // 37, len(TAGS) - 1)], "O"] for i in range(rows)]
    return pa.table({"tokens": [["a", "b"]] * rows, "tags": tags})


def _decoded(path: Path, group: int) -> set[str]:
    col = pq.ParquetFile(path).read_row_group(group, columns=["tags"]).column(0)
    return {t for t in pc.unique(pc.list_flatten(col)).to_pylist() if t is not None}


@pytest.mark.parametrize("codec", ["NONE", "SNAPPY", "GZIP", "ZSTD", "BROTLI", "LZ4"])
def test_the_dictionary_is_the_row_groups_tags(tmp_path: Path, codec: str) -> None:
    path = tmp_path / "a.parquet"
    pq.write_table(_table(), path, compression=codec, row_group_size=200)
    meta = pq.read_metadata(path)
    for group in range(meta.num_row_groups):
        got = dictionary_values(path, meta, "tags", group)
        if codec == "LZ4":  # Parquet's old LZ4 is Hadoop-framed: not read here, the rows are decoded instead
            assert got is None
        else:
            assert got is not None and len(got) == len(set(got)) and set(got) == _decoded(path, group)
    # What summary/preflight read: every row group whole (all 8 tags: the last two first appear in row
    # group 1), not the first rows (LZ4: no dictionary read, so the first 40 rows, sampled, as the trainer).
    assert _decoded(path, 0) == set(TAGS[:6]) and _decoded(path, 1) >= set(TAGS[6:])
    want = ({"O", "B-street"}, True) if codec == "LZ4" else (set(TAGS), False)
    assert shard_tags(path, "tags", 40) == want


def test_without_a_dictionary_the_first_rows_are_decoded(tmp_path: Path) -> None:
    path = tmp_path / "plain.parquet"
    pq.write_table(_table(), path, use_dictionary=["tokens"], row_group_size=200)
    assert dictionary_values(path, pq.read_metadata(path), "tags") is None
    assert shard_tags(path, "tags", 40) == ({"O", "B-street"}, True)  # rows 0-39 only: sampled
    assert dictionary_values(path, pq.read_metadata(path), "missing") is None


def test_a_damaged_dictionary_page_is_not_an_answer(tmp_path: Path) -> None:
    path = tmp_path / "a.parquet"
    pq.write_table(_table(), path, compression="NONE", row_group_size=200)
    meta = pq.read_metadata(path)
    chunk = meta.row_group(0).column(1)
    data = bytearray(path.read_bytes())
    good = dictionary_values(path, meta, "tags")
    assert good is not None
    start, stop = chunk.dictionary_page_offset, chunk.data_page_offset
    for where in range(start, stop):  # every byte of the page, flipped: a value, a length or the header
        damaged = bytearray(data)
        damaged[where] ^= 0xFF
        path.write_bytes(bytes(damaged))
        got = dictionary_values(path, meta, "tags")  # never raises
        assert got is None or len(got) == len(good)  # at most a value's bytes changed, never a count
    path.write_bytes(bytes(data[: start + 3]))  # cut short inside the header
    assert dictionary_values(path, meta, "tags") is None


def test_the_venv_script_reads_as_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without pyarrow in mw-env's interpreter, the venv's python runs tagdict.py's own text."""
    import subprocess

    from mw_env.trainspec import labelscan

    path = tmp_path / "a.parquet"
    pq.write_table(_table(), path, row_group_size=200)
    block = tmp_path / "block"  # a venv without this mw-env installed: `import mw_env` fails there
    block.mkdir()
    (block / "sitecustomize.py").write_text("import sys\nsys.modules['mw_env'] = None\n")
    done = subprocess.run(
        [sys.executable, "-c", labelscan._parquet_script(), "40", "tags", str(path)],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(block)},
    )
    out = json.loads(done.stdout)
    assert (set(out["tags"]), bool(out["sampled"])) == shard_tags(path, "tags", 40) == (set(TAGS), False)


def test_field_end_is_the_footers_schema_encoding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import mw_env.trainer.data.shards as shards
    from mw_env.trainer.data.shards import Schemas, _check_schema, _read_footer
    from mw_env.trainspec.formats.tagdict import field_end

    pq.write_table(_table(), tmp_path / "a.parquet")
    pq.write_table(_table(50), tmp_path / "b.parquet", row_group_size=10)  # other row groups, same schema
    pq.write_table(_table().rename_columns(["words", "tags"]), tmp_path / "c.parquet")  # leaves equal a's
    footers = {p.stem: _read_footer(p) for p in sorted(tmp_path.glob("*.parquet"))}
    ends = {k: field_end(f[3], 2) for k, f in footers.items()}
    assert all(isinstance(e, int) and 0 < e < len(footers[k][3]) for k, e in ends.items())
    assert footers["a"][3][: ends["a"]] == footers["b"][3][: ends["b"]] != footers["c"][3][: ends["c"]]
    assert field_end(b"", 2) is None and field_end(b"\x15\x04\x00", 2) is None  # cut short; no field 2
    # The schema check runs once per encoding: b reuses a's, c is checked (and refused) on its own.
    checked: list[str] = []
    schemas = Schemas()

    def counted(path, meta, columns):
        checked.append(path.stem)
        return _check_schema(path, meta, columns)

    monkeypatch.setattr(shards, "_check_schema", counted)
    for k in ("a", "b"):
        _digest, meta, _size, footer = footers[k]
        assert schemas.check(tmp_path / f"{k}.parquet", meta, footer, ("tokens", "tags")) == 1
    with pytest.raises(InputError, match=r"missing column\(s\) \['tokens'\]"):
        schemas.check(tmp_path / "c.parquet", footers["c"][1], footers["c"][3], ("tokens", "tags"))
    assert checked == ["a", "c"]
