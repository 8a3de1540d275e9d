"""`train summary` counts the labels a files corpus will actually use (issue 20 #4: it printed "58 labels",
the length of the text "discovered at start (...)", and sized the head for the bundled 15 while the corpus
had 17)."""

from __future__ import annotations

import json

import pytest

from mw_env.cli import main
from mw_env.trainspec.config import resolve_config
from mw_env.trainspec.labelscan import label_order
from mw_env.trainspec.summary import summarize

TYPES = ["CITY", "COUNTRY", "HOUSE", "LEVEL", "POSTCODE", "REGION", "ROAD", "UNIT"]  # 8 types: 17 labels


def _corpus(tmp_path, suffix: str):
    rows = [{"tokens": ["x", "y"], "tags": [f"B-{t}", f"I-{t}"]} for t in TYPES] + [
        {"tokens": ["z"], "tags": ["O"]}
    ]
    if suffix == ".jsonl":
        (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        pa = pytest.importorskip("pyarrow")
        pq = pytest.importorskip("pyarrow.parquet")
        pq.write_table(
            pa.table({k: [r[k] for r in rows] for k in ("tokens", "tags")}), tmp_path / "a.parquet"
        )
    (tmp_path / "cfg.yaml").write_text(f"data:\n  source: files\n  train_files: [a{suffix}]\n")


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_the_head_is_counted_for_the_corpus_labels(tmp_path, suffix, monkeypatch, capsys):
    _corpus(tmp_path, suffix)
    monkeypatch.chdir(tmp_path)
    config = resolve_config(path=tmp_path / "cfg.yaml").config
    info = summarize(config, base=tmp_path)
    labels = info["data"]["labels"]
    assert (
        labels == list(label_order(["O"] + [f"{p}-{t}" for t in TYPES for p in "BI"])) and len(labels) == 17
    )
    d = config.model.d_model
    head = next(r["parameters"] for r in info["model"]["parameters"] if r["part"] == "head")
    assert head == 2 * d + d * 17 + 17
    assert "17 BIO labels" in info["model"]["architecture"]
    assert main(["train", "summary", "--config", "cfg.yaml", "--profile", "cpu"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "17 labels (discovered in 1 shard(s): all of their tags)" in out and "58 labels" not in out


@pytest.mark.torch
def test_the_order_is_the_trainers():
    from mw_env.trainer.data import label_order as trainers

    tags = ["I-ROAD", "O", "B-CITY", "X-ODD", "B-ROAD", "MISC", "I-CITY"]
    assert label_order(tags) == trainers(tags)
