"""`mw-env train check`: every row read once before training, each problem counted with the rows that have it,
named by file and row counted from the file's start. The files are written as a new user writes them:
pyarrow's defaults (what pandas' `to_parquet()` uses: one row group up to ~1Mi rows) and JSONL lines."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from tests.trainer.helpers import synthetic_rows

from mw_env.cli import main
from mw_env.trainspec.checkreport import findings, verdict
from mw_env.trainspec.config import find_config, resolve_config
from mw_env.trainspec.datacheck import check_dataset

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def _user_rows() -> list[dict[str, object]]:
    """5,000 addresses with the mistakes users make: a row short of a tag, null tags, an over-long row, an
    I- without its B-, a row with no words."""
    rows: list[dict[str, object]] = [dict(r) for r in synthetic_rows(5000)]
    rows[1234]["tags"] = list(rows[1234]["tags"])[:-1]  # type: ignore[call-overload]
    rows[2000]["tags"] = None
    rows[10]["tokens"] = ["x" * 300]
    rows[10]["tags"] = ["B-street"]
    rows[77]["tags"] = ["I-street" if t == "B-street" else t for t in rows[77]["tags"]]  # type: ignore[attr-defined]
    rows[99] = {"tokens": [], "tags": []}
    return rows


@pytest.fixture(scope="module")
def user_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("data")
    rows = _user_rows()
    pq.write_table(pa.Table.from_pylist(rows), folder / "one.parquet")  # pyarrow's defaults: one row group
    with (folder / "one.jsonl").open("w") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")
        fh.write("{not json\n")
        fh.write(json.dumps({"tokens": "1 Main St", "tags": ["O"]}) + "\n")
    return folder


def _config(path: Path, *sets: str):
    return resolve_config(
        path=find_config("address-tagger-cpu"), overrides=[f"data.train_files=[{path}]", *sets]
    ).config


def test_every_problem_is_counted_with_the_rows_named_from_the_files_start(user_files: Path) -> None:
    path = user_files / "one.parquet"
    assert pq.ParquetFile(path).metadata.num_row_groups == 1
    seen: list[object] = []
    report = check_dataset(_config(path), base=user_files, progress=seen.append).to_dict()
    assert report["rows"] == 5000 and report["scheme"] == "IOB2"
    assert seen and seen[-1].rows == 5000 and seen[-1].done_bytes == seen[-1].total_bytes  # type: ignore[attr-defined]
    problems = report["problems"]
    assert problems["length"]["count"] == 1 and problems["null"]["count"] == 1
    assert re.fullmatch(
        rf"{re.escape(str(path))} row 1,234 \(df\.iloc\[1234\]: counted from 0 at the file's first row\): "
        r"(\d+) tokens but (\d+) tags",
        problems["length"]["examples"][0],
    )
    assert "df.iloc[2000]" in problems["null"]["examples"][0] and "null" in problems["null"]["examples"][0]
    assert problems["too_long"]["count"] == 1 and "df.iloc[10]" in problems["too_long"]["examples"][0]
    assert problems["bio"]["count"] >= 1 and any("df.iloc[77]" in e for e in problems["bio"]["examples"])
    assert problems["empty"]["count"] == 1
    items = findings(report, _config(path))
    levels = {f.text.split(" ", 2)[2][:20]: f.level for f in items if f.level != "info"}
    assert sorted(levels.values()).count("error") == 2, items
    assert verdict(items).startswith("2 problem(s) would stop training")
    labels = next(f for f in items if f.text.startswith("tags: IOB2"))
    assert labels.hint.startswith("to fix the label set and its order: data: labels: [O, ")


def test_jsonl_rows_are_named_by_line_and_broken_lines_counted(user_files: Path) -> None:
    path = user_files / "one.jsonl"
    report = check_dataset(_config(path), base=user_files).to_dict()
    problems = report["problems"]
    assert report["rows"] == 5002
    assert "one.jsonl line 1235: " in problems["length"]["examples"][0]
    assert (
        "one.jsonl line 2001: 'tags' must be a list of strings (got null" in problems["null"]["examples"][0]
    )
    assert problems["unreadable"]["count"] == 1 and "line 5001" in problems["unreadable"]["examples"][0]
    assert (
        problems["type"]["count"] == 1
        and "'tokens' must be a list of strings" in problems["type"]["examples"][0]
    )


def test_plain_tags_and_tags_outside_the_labels_are_errors_with_what_to_paste(tmp_path: Path) -> None:
    rows = [
        {"tokens": r["tokens"], "tags": [t if t == "O" else t[2:] for t in r["tags"]]}
        for r in synthetic_rows(40)
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "plain.parquet")
    config = _config(tmp_path / "plain.parquet")
    report = check_dataset(config, base=tmp_path).to_dict()
    plain = [f for f in findings(report, config) if f.level == "error"]
    assert report["scheme"] == "plain" and len(plain) == 1
    assert "have no B-/I- prefix" in plain[0].text and "pq.write_table" in plain[0].hint
    # data.labels that miss a tag: every row with it is counted.
    pq.write_table(pa.Table.from_pylist(synthetic_rows(40)), tmp_path / "ok.parquet")
    few = _config(tmp_path / "ok.parquet", "data.labels=[O, B-street, I-street]")
    report = check_dataset(few, base=tmp_path).to_dict()
    assert report["problems"]["unknown_tag"]["count"] == 40


def _check(capsys: pytest.CaptureFixture[str], *sets: str) -> tuple[int, str, str]:
    code = main(["train", "check", "--profile", "cpu", *[a for s in sets for a in ("--set", s)]])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_command_exits_1_on_rows_that_stop_training_and_0_when_clean(
    user_files: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(user_files)
    code, out, err = _check(capsys, "data.train_files=[one.parquet]")
    assert code == 1 and "reading every row of 1 file(s)" in err
    assert "error: 1 row(s) whose tokens and tags differ in length: " in out and "df.iloc[1234]" in out
    assert "warning: 1 row(s) longer than model.max_len" in out
    pq.write_table(pa.Table.from_pylist(synthetic_rows(30)), tmp_path / "clean.parquet")
    code, out, _ = _check(capsys, f"data.train_files=[{tmp_path / 'clean.parquet'}]")
    assert code == 0 and out.strip().splitlines()[-1] == "ok: nothing here stops training"


def test_the_command_refuses_what_it_cannot_read_with_the_fix_to_paste(
    user_files: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = _check(capsys)  # the profile's default config: the synthetic corpus
    assert code == 2 and "this config trains on the synthetic corpus" in err
    pq.write_table(pa.table({"words": [["1"]], "labels": [["O"]]}), tmp_path / "cols.parquet")
    code, _, err = _check(capsys, "data.train_files=[cols.parquet]")
    assert code == 2 and "'tokens' (data.tokens_column) or 'tags' (data.tags_column)" in err
    assert (
        "hint: name the file's columns: --set data.tokens_column=words --set data.tags_column=labels" in err
    )
    (tmp_path / "d").mkdir()
    (tmp_path / "cols.parquet").rename(tmp_path / "d" / "cols.parquet")
    code, _, err = _check(capsys, "data.train_files=[d]")
    assert code == 2 and "d is a folder (not a regular file), holding its .parquet files" in err
    assert "hint: name the files in it with a glob: --set 'data.train_files=[d/*.parquet]'" in err


@pytest.mark.slow  # a second interpreter with pyarrow: ~2 s on the loaded test machine
def test_without_pyarrow_here_the_venv_reads_the_rows(
    user_files: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """mw-env's own interpreter has no pyarrow (the `train` extra is the venv's): the venv's python reads."""
    monkeypatch.chdir(user_files)
    monkeypatch.setenv("MW_ENV_VENV", sys.prefix)
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    code, out, _ = _check(capsys, "data.train_files=[one.jsonl]", "data.tokens_column=tokens")
    assert code == 1 and re.search(r"one\.jsonl line 1235: \d+ tokens but \d+ tags", out)


def test_text_that_is_not_utf8_is_counted_and_the_other_rows_still_read(tmp_path: Path) -> None:
    words = pa.array([b"12", b"Oak\xff", b"Leeds"], pa.binary()).cast(pa.string(), safe=False)
    tokens = pa.ListArray.from_arrays(pa.array([0, 1, 3], pa.int32()), words)
    tags = pa.ListArray.from_arrays(
        pa.array([0, 1, 3], pa.int32()), pa.array([b"B-x", b"B-y\xfe", b"I-y"]).cast(pa.string(), safe=False)
    )
    pq.write_table(pa.table({"tokens": tokens, "tags": tags}), tmp_path / "t.parquet")
    report = check_dataset(_config(tmp_path / "t.parquet"), base=tmp_path).to_dict()
    assert (
        report["problems"]["text"]["count"] == 1 and "df.iloc[1]" in report["problems"]["text"]["examples"][0]
    )
    assert report["tags"] == {"B-x": 1}  # the readable row's tags
