"""One rule for the tokens and tags columns (issue 29, classes 8 and 9), with shards written by real pyarrow.

Class 9: `list<dictionary<string>>` (what pyarrow writes for a categorical) and the large variants were "not
a list of strings", exit 2. They are lists of strings: the footer (host), the trainer's schema check, the
trainer's reader, its label discovery and `shard_tags` (summary, preflight) all read them as strings.
Class 8: a struct-typed tokens column passed `train summary` (exit 0) and the host's preflight, and only
the trainer refused it. trainspec.columns holds the rule; each side describes a column in its words.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from mw_env.base.errors import InputError  # noqa: E402
from mw_env.cli import main  # noqa: E402
from mw_env.trainer.data import open_corpus  # noqa: E402
from mw_env.trainspec.columns import (  # noqa: E402
    STRING_LIST,
    arrow_kind,
    as_string_lists,
    require_string_lists,
)
from mw_env.trainspec.config import resolve_config  # noqa: E402
from mw_env.trainspec.formats.footer import parquet_column_kinds  # noqa: E402
from mw_env.trainspec.formats.tagdict import shard_tags  # noqa: E402
from mw_env.trainspec.preflight import check_on_host  # noqa: E402
from mw_env.trainspec.synthetic import FORMATS, generate_row  # noqa: E402

ROWS = [generate_row(seed=3, split="train", index=i, countries=tuple(FORMATS), noise=0.3) for i in range(40)]
TOKENS = [r[0] for r in ROWS]
TAGS = [r[1] for r in ROWS]


def _dict(value: object) -> object:
    return pa.dictionary(pa.int32(), value)


# Every list-of-strings variant pyarrow writes; "plain" is the reference the others must read as.
VARIANTS = {
    "plain": pa.list_(pa.string()),
    "list<dictionary<string>>": pa.list_(_dict(pa.string())),
    "large_list<dictionary<string>>": pa.large_list(_dict(pa.string())),
    "list<dictionary<large_string>>": pa.list_(_dict(pa.large_string())),
    "large_list<large_string>": pa.large_list(pa.large_string()),
    "list<large_string>": pa.list_(pa.large_string()),
}
# Columns the trainer refuses, with the words the footer (host) and Arrow (trainer) give.
REFUSED = {
    "struct": (pa.array([{"w": "x"}] * 40), "a struct"),
    "list<int64>": (pa.array([[1, 2]] * 40, pa.list_(pa.int64())), "a list of int64"),
    "string": (pa.array(["x"] * 40), "string"),
    "list<binary>": (pa.array([[b"x"]] * 40, pa.list_(pa.binary())), "a list of binary"),
    "list<list<string>>": (pa.array([[["x"]]] * 40, pa.list_(pa.list_(pa.string()))), "a list of groups"),
}


def _shard(path: Path, tokens: object, tags: object, **kw: object) -> Path:
    pq.write_table(pa.table({"tokens": tokens, "tags": tags}), path, **kw)
    return path


def _variant(tmp_path: Path, name: str) -> Path:
    t = VARIANTS[name]
    return _shard(
        tmp_path / f"{name.replace('<', '_').replace('>', '_')}.parquet",
        pa.array(TOKENS, t),
        pa.array(TAGS, t),
        row_group_size=16,
    )


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_every_list_of_strings_variant_is_one_on_both_sides(tmp_path: Path, name: str) -> None:
    path = _variant(tmp_path, name)
    # What the trainer meets: pyarrow reads the dictionary back as one (with string values).
    assert ("dictionary" in str(pq.read_schema(path).field("tokens").type)) == ("dictionary" in name)
    assert parquet_column_kinds(path) == {"tokens": STRING_LIST, "tags": STRING_LIST}
    assert arrow_kind(pq.read_schema(path).field("tokens").type) == STRING_LIST
    assert shard_tags(path, "tags", 4096) == ({t for row in TAGS for t in row}, False)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_as_string_lists_decodes_in_memory_columns_of_each_type(name: str) -> None:
    column = pa.array(TOKENS, VARIANTS[name])
    for given in (column, pa.chunked_array([column.slice(0, 10), column.slice(10)])):
        out = as_string_lists(given)
        assert arrow_kind(given.type) == STRING_LIST and out.to_pylist() == TOKENS
        assert not pa.types.is_dictionary(out.type.value_type)
        assert pa.types.is_large_list(out.type) == pa.types.is_large_list(given.type)


@pytest.mark.parametrize("name", sorted(set(VARIANTS) - {"plain"}))
def test_the_trainer_reads_each_variant_as_the_plain_strings(tmp_path: Path, name: str) -> None:
    """Schema check, label discovery, the reader and the encoder: the same batches as list<string>."""

    def batches(path: Path) -> list[object]:
        cfg = resolve_config(
            overrides=[
                "data.source=files",
                f"data.train_files=[{path}]",
                f"data.val_files=[{path}]",
                f"runtime.out_dir={path.parent / 'run'}",  # the corpus index is cached there, not in the repo
            ]
        ).config
        corpus = open_corpus(cfg)
        out = []
        for batch, words in corpus.val.batches(8, 0):
            out.append(([t.tolist() for t in (batch.input_ids, batch.labels)], words))
        producer = corpus.producer()
        try:
            producer(0)
        finally:
            producer.close()
        return out

    ref = batches(_variant(tmp_path, "plain"))
    assert ref and batches(_variant(tmp_path, name)) == ref


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_column_that_is_not_a_list_of_strings_is_refused_alike(tmp_path: Path, name: str) -> None:
    column, words = REFUSED[name]
    path = _shard(tmp_path / "bad.parquet", column, pa.array(TAGS))
    host = parquet_column_kinds(path)["tokens"]
    trainer = arrow_kind(pq.read_schema(path).field("tokens").type)
    assert host.startswith(words) and host != STRING_LIST and trainer != STRING_LIST
    pattern = r"bad.parquet: column 'tokens' is .*, not a list of strings"
    # The host's preflight (before the doctor), `train summary`, and the trainer's corpus open.
    overrides = ["data.source=files", f"data.train_files=[{path}]", f"runtime.out_dir={tmp_path / 'run'}"]
    with pytest.raises(InputError, match=pattern):
        check_on_host(resolve_config(overrides=overrides).config, venv=None, base=tmp_path)
    with pytest.raises(InputError, match=pattern):
        open_corpus(resolve_config(overrides=overrides).config)
    with pytest.raises(InputError, match=pattern):
        require_string_lists(path, {"tokens": trainer}, ["tokens"])


def test_train_summary_exits_2_on_a_struct_tokens_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _shard(tmp_path / "s.parquet", REFUSED["struct"][0], pa.array(TAGS))
    code = main(
        [
            "train",
            "summary",
            "--config",
            "smoke",
            "--set",
            "data.source=files",
            "--set",
            f"data.train_files=[{path}]",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "column 'tokens' is a struct, not a list of strings" in err, err
    good = _variant(tmp_path, "list<dictionary<string>>")
    code = main(
        [
            "train",
            "summary",
            "--config",
            "smoke",
            "--set",
            "data.source=files",
            "--set",
            f"data.train_files=[{good}]",
            "--json",
        ]
    )
    assert code == 0, capsys.readouterr().err


def test_label_discovery_reads_dictionary_tags_without_a_dictionary_page(tmp_path: Path) -> None:
    """Dictionary encoding off in the file (the tags then come from rows, not the page): still strings."""
    t = VARIANTS["list<dictionary<string>>"]
    path = _shard(
        tmp_path / "nodict.parquet",
        pa.array(TOKENS, t),
        pa.array(TAGS, t),
        use_dictionary=False,
        row_group_size=16,
    )
    assert shard_tags(path, "tags", 4096) == ({t for row in TAGS for t in row}, False)
    cfg = resolve_config(
        overrides=[
            "data.source=files",
            f"data.train_files=[{path}]",
            f"data.val_files=[{path}]",
            f"runtime.out_dir={tmp_path / 'run'}",
        ]
    ).config
    assert {t for row in TAGS for t in row} <= set(open_corpus(cfg).labels.names)
