"""Labels told before the run (issue 30 #10), with real pyarrow files: a rare tag that first appears after the
first row group is in the label set from the start; a shard whose tags could only be sampled is said plainly
with the `data.labels` line to paste; tags without a B-/I- prefix are refused before step 1."""

from __future__ import annotations

from pathlib import Path

import pytest

from mw_env.base.errors import InputError
from mw_env.trainer.data import open_corpus
from mw_env.trainer.data.labels import LabelSet
from mw_env.trainspec.config import resolve_config
from mw_env.trainspec.summary import summarize

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def _rows(n: int, rare_at: int | None, tags: tuple[str, str] = ("B-road", "I-road")) -> list[dict]:
    rows = [{"tokens": ["main", "st", "x"], "tags": [*tags, "O"]} for _ in range(n)]
    if rare_at is not None:
        rows[rare_at] = {"tokens": ["12345", "6789"], "tags": ["B-zip4", "I-zip4"]}  # 1 row of n
    return rows


def _config(tmp_path: Path, *extra: str):
    return resolve_config(
        overrides=[
            "data.source=files",
            f"data.train_files=[{tmp_path}/*.parquet]",
            "data.val_fraction=0.2",
            f"runtime.out_dir={tmp_path / 'run'}",
            *extra,
        ]
    ).config


def test_a_rare_tag_after_the_first_row_group_is_found_before_the_run(tmp_path: Path) -> None:
    # 5 row groups of 40 rows; the rare tag's only row is in row group 3.
    pq.write_table(pa.Table.from_pylist(_rows(200, rare_at=130)), tmp_path / "a.parquet", row_group_size=40)
    cfg = _config(tmp_path)
    corpus = open_corpus(cfg)
    assert {"B-zip4", "I-zip4"} <= set(corpus.labels.names) and corpus.labels.note == ""
    assert "all of their tags" in corpus.labels.origin
    info = summarize(cfg, base=tmp_path)  # `train summary` reads the same
    assert {"B-zip4", "I-zip4"} <= set(info["data"]["labels"]) and not info["warnings"]


def test_sampled_labels_are_said_with_the_line_to_paste(tmp_path: Path) -> None:
    # No dictionary for the tags column: the first 4,096 rows are sampled; the rare tag comes after them.
    rows = _rows(5000, rare_at=4500)
    pq.write_table(
        pa.Table.from_pylist(rows), tmp_path / "a.parquet", row_group_size=1000, use_dictionary=False
    )
    cfg = _config(tmp_path)
    corpus = open_corpus(cfg)
    assert "zip4" not in " ".join(corpus.labels.names)
    note = corpus.labels.note
    assert "a.parquet" in note and "first 4,096 rows only" in note and "stops the run there" in note
    assert "data: labels: [O, B-road, I-road]" in note
    info = summarize(cfg, base=tmp_path)
    (warning,) = info["warnings"]
    assert "first 4,096 rows only" in warning and "data: labels: [O, B-road, I-road]" in warning


def test_tags_without_a_bio_prefix_are_refused_before_step_1(tmp_path: Path) -> None:
    pq.write_table(
        pa.Table.from_pylist(_rows(100, None, tags=("StreetName", "StreetName"))),
        tmp_path / "a.parquet",
        row_group_size=20,
    )
    cfg = _config(tmp_path)
    with pytest.raises(InputError, match=r"the tags 'StreetName' have no B-/I- prefix") as info:
        open_corpus(cfg)
    assert "convert the corpus to IOB2" in (info.value.hint or "")
    (warning,) = summarize(cfg, base=tmp_path)["warnings"]
    assert "'StreetName' have no B-/I- prefix" in warning and "would stop at start" in warning
    with pytest.raises(InputError, match=r"data.labels: the tags 'City', 'Street' have no B-/I- prefix"):
        LabelSet(("O", "Street", "City"), "config")
    from mw_env.trainspec.preflight import check_labels

    with pytest.raises(InputError, match=r"data.labels: the tags 'StreetName' have no B-/I- prefix"):
        check_labels(_config(tmp_path, "data.labels=[O, StreetName]"))
