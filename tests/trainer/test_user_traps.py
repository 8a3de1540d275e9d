"""The traps between a user's data and a run (issue 37), each tried as a new user would (files written with
pyarrow's defaults, which pandas' `to_parquet()` uses: one row group), each ending in a sentence before any
training step. One short run of the real trainer here: the finished folder the second dataset meets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mw_env.base.errors import InputError
from mw_env.cli import main
from smokeargs import TEST_VENV

from .helpers import TINY, events, synthetic_rows, tiny_config

pytestmark = pytest.mark.torch

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def _user_parquet(path: Path, n: int, *, bad: int | None = None) -> Path:
    rows = synthetic_rows(n)
    if bad is not None:
        rows[bad]["tags"] = rows[bad]["tags"][:-1]  # a row short of one tag
    pq.write_table(pa.Table.from_pylist(rows), path)  # pyarrow's defaults: one row group
    return path


def test_the_first_window_is_checked_whole_before_its_first_step(tmp_path: Path) -> None:
    """Step 0 reads 8 of the window's 2,000 rows; the bad row 1,234 among the others stops it all the same."""
    from mw_env.trainer.data import open_corpus

    data = _user_parquet(tmp_path / "addresses.parquet", 2000, bad=1234)
    val = _user_parquet(tmp_path / "val.parquet", 40)
    config = tiny_config(tmp_path / "run", f"data.train_files=[{data}]", f"data.val_files=[{val}]").config
    producer = open_corpus(config).producer(stop=3)
    try:
        with pytest.raises(InputError, match=r"addresses\.parquet row 1,234 \(df\.iloc\[1234\]"):
            producer(0)
    finally:
        producer.close()


@pytest.mark.slow  # the trainer's start in this process (torch's lazy imports: seconds on a loaded machine)
def test_a_bad_row_in_the_first_window_stops_a_short_run_before_its_first_step(tmp_path: Path) -> None:
    """A 3-step run reads 24 of 5,000 rows: it used to exit 0 over row 1,234, which a longer run died on."""
    from mw_env.trainer.loop import train

    data = _user_parquet(tmp_path / "addresses.parquet", 5000, bad=1234)
    val = _user_parquet(tmp_path / "val.parquet", 40)
    out = tmp_path / "run"
    resolved = tiny_config(
        out, f"data.train_files=[{data}]", f"data.val_files=[{val}]", "runtime.max_steps=3"
    )
    assert resolved.config.data.source == "files"  # implied by the files
    with pytest.raises(InputError) as exc:
        train(resolved=resolved, echo=lambda _line: None)
    assert exc.value.message.startswith(
        f"{data} row 1,234 (df.iloc[1234]: counted from 0 at the file's first row): "
    )
    assert "tokens but" in exc.value.message and "`mw-env train check`" in (exc.value.hint or "")
    assert not events(out, "step")  # nothing trained


@pytest.mark.slow  # one short run of the real trainer (in this process), then the CLI's refusal
def test_a_second_dataset_into_a_finished_folder_is_refused_before_anything_trains(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from mw_env.trainer.loop import train

    out = tmp_path / "run"
    said: list[str] = []
    result = train(resolved=tiny_config(out, "runtime.eval_batches=1"), echo=said.append)
    assert result.reason == "max_steps"
    # The F1 says what it was measured on: 1 batch of 8 of the 24 validation rows.
    evals = [line for line in said if line.startswith("eval step")]
    assert evals and all("on 8 of 24 validation rows (33%: runtime.eval_batches limits" in e for e in evals)
    card = json.loads((out / "report" / "data_card.json").read_text())
    assert card["evaluation"]["rows"] == 8 and card["evaluation"]["val_rows"] == 24
    assert "on 8 of 24 validation rows" in (out / "report" / "report.md").read_text()

    # The user's own data, into the same folder: refused with the ways on, nothing trains (exit 2).
    monkeypatch.chdir(tmp_path)
    _user_parquet(tmp_path / "mine.parquet", 60)
    before = (out / "metrics.jsonl").read_text()
    argv = ["train", "--config", "smoke", "--venv", str(TEST_VENV), "--skip-doctor", "--profile", "cpu"]
    for item in (
        *TINY,
        f"runtime.out_dir={out}",
        "runtime.eval_batches=1",
        "data.train_files=[mine.parquet]",
    ):
        argv += ["--set", item]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"error: the run in {out} finished at step 8 on other data" in err
    assert "the earlier run trained on the synthetic corpus, this config reads files" in err
    assert f"hint: train it as a new run in a new folder: --set runtime.out_dir={out}-2 (add --set " in err
    # The same model on other data: the new folder may start from the earlier run's weights (a fine-tune).
    assert f"--set model.init_from={out} to start from the earlier run's weights" in err
    assert "; or start over" in err
    assert "--fresh" in err and "max_steps" not in err.split("hint:")[1]
    assert (out / "metrics.jsonl").read_text() == before


def test_evaluate_refuses_plain_gold_tags_as_training_does(tmp_path: Path) -> None:
    """It scored F1 0.0 over a support of 0 and exited 0."""
    from mw_env.trainer.predict import refuse_plain_tags

    gold = tmp_path / "held-out.jsonl"
    with pytest.raises(InputError) as exc:
        refuse_plain_tags({"O", "StreetName", "City"}, gold, "tags")
    assert "the gold tags ('tags'): the tags 'City', 'StreetName' have no B-/I- prefix" in exc.value.message
    assert "json.loads" in (exc.value.hint or "")  # the JSONL conversion to paste
    refuse_plain_tags({"O", "B-City", "I-City"}, gold, "tags")  # IOB2 passes
