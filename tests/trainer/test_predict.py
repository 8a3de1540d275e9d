"""`train predict` / `train evaluate` on a fixture run: the figures agree with an independent computation (the
model run row by row on the reference encoding, scored by seqeval), the inputs' formats, bad input."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from .helpers import synthetic_rows, tiny_config

pytestmark = pytest.mark.torch
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mw_env.trainer.loop import train

    out = tmp_path_factory.mktemp("predict") / "run"
    train(resolved=tiny_config(out, "runtime.max_steps=4", "runtime.eval_every=4"), echo=lambda _m: None)
    return out


@pytest.fixture(scope="module")
def labelled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Held-out rows, one of them too long for max_len (its tail words are past what the model sees)."""
    rows = synthetic_rows(30, start=5000, seed=11)
    rows.append(
        {
            "tokens": ["Flat", "9"] + ["Longstreetname"] * 20,
            "tags": ["B-unit", "I-unit"] + ["B-street"] + ["I-street"] * 19,
        }
    )
    path = tmp_path_factory.mktemp("data") / "held-out.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _call(*argv: str, tmp: Path) -> tuple[int, dict]:
    from mw_env.trainer.predict import main

    result = tmp / "result.json"
    code = main([*argv, "--device", "cpu", "--result", str(result)])
    return code, json.loads(result.read_text())


def _reference(run: Path, rows: list[dict], dropped: list[int] | None = None) -> list[list[str]]:
    """Each row through the reference per-row encoder and the model alone (no batching, no padding)."""
    import torch

    from mw_env.trainer.ckpt.checkpoint import latest_valid_checkpoint, load_checkpoint, model_from_checkpoint
    from mw_env.trainer.data import IGNORE, encode_row
    from mw_env.trainer.export.runtime import transitions, viterbi

    ckpt = load_checkpoint(latest_valid_checkpoint(run / "checkpoints"))
    model, tok, labels = model_from_checkpoint(ckpt)
    out = []
    for r in rows:
        ids, lab, n_dropped = encode_row(
            tok,
            r["tokens"],
            [labels[0]] * len(r["tokens"]),
            ckpt["config"]["model"]["max_len"],
            {labels[0]: 0},
        )
        with torch.no_grad():
            logits = model(torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.bool))[0]
        words = logits[[i for i, x in enumerate(lab) if x != IGNORE]].numpy()
        # The run decodes with model.decode (viterbi): the export helper's own copy of it, an implementation
        # independent of decoding.py (tests/trainer/test_decoding.py holds them equal).
        assert ckpt["config"]["model"]["decode"] == "viterbi"
        seen = [labels[k] for k in viterbi(words, *transitions(labels))]
        if dropped is not None:
            dropped.append(n_dropped)
        out.append(seen + ["O"] * (len(r["tokens"]) - len(seen)))
    return out


@pytest.mark.slow  # seqeval's import (scikit-learn) and the model run row by row: ~8 s on the loaded 2 cores
def test_evaluate_agrees_with_an_independent_computation(run: Path, labelled: Path, tmp_path: Path) -> None:
    metrics = pytest.importorskip("seqeval.metrics")
    scheme = pytest.importorskip("seqeval.scheme")
    code, got = _call("evaluate", str(run), "--data", str(labelled), tmp=tmp_path)
    assert code == 0, got
    rows = [json.loads(line) for line in labelled.read_text().splitlines()]
    gold = [r["tags"] for r in rows]
    dropped: list[int] = []
    pred = _reference(run, rows, dropped)
    assert got["rows"] == len(rows) and got["words"] == sum(len(g) for g in gold)
    assert got["truncated_words"] == sum(dropped) > 0  # the long row's tail: scored as tagged O
    words = [(g, p) for gs, ps in zip(gold, pred, strict=True) for g, p in zip(gs, ps, strict=True)]
    assert got["word_accuracy"] == pytest.approx(sum(g == p for g, p in words) / len(words))
    assert got["exact_address_rate"] == pytest.approx(
        sum(g == p for g, p in zip(gold, pred, strict=True)) / len(rows)
    )
    strict = {"mode": "strict", "scheme": scheme.IOB2}
    for mode, kw in (("conlleval", {}), ("strict", strict)):
        e = got["entity"][mode]
        assert e["f1"] == pytest.approx(metrics.f1_score(gold, pred, **kw)), mode
        assert e["precision"] == pytest.approx(metrics.precision_score(gold, pred, **kw)), mode
        assert e["recall"] == pytest.approx(metrics.recall_score(gold, pred, **kw)), mode
    assert got["f1_mode"] == "conlleval" and got["step"] == 4
    wrong = {}
    for g, p in words:
        if g != p:
            wrong[(g, p)] = wrong.get((g, p), 0) + 1
    top = max(wrong.values()) if wrong else 0
    assert [c["count"] for c in got["confusions"]][:1] == ([top] if wrong else [])


def test_predict_reads_every_format_and_writes_jsonl_or_parquet(
    run: Path, labelled: Path, tmp_path: Path
) -> None:
    rows = [json.loads(line) for line in labelled.read_text().splitlines()][:6]
    expected = _reference(run, rows)
    text = tmp_path / "addresses.txt"
    text.write_text("".join(" ".join(r["tokens"]) + "\n\n" for r in rows))  # blank lines are skipped
    parquet_in = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist([{"address": " ".join(r["tokens"])} for r in rows]), parquet_in)
    jsonl_in = tmp_path / "in.jsonl"
    jsonl_in.write_text("".join(json.dumps(r["tokens"]) + "\n" for r in rows))
    for source, out in ((text, "a.jsonl"), (parquet_in, "b.parquet"), (jsonl_in, "c.jsonl")):
        code, got = _call(
            "predict", str(run), "--input", str(source), "--output", str(tmp_path / out), tmp=tmp_path
        )
        assert code == 0, got
        assert (got["rows"], got["output"]) == (6, str(tmp_path / out))
        if out.endswith(".parquet"):
            back = pq.read_table(tmp_path / out).to_pylist()
        else:
            back = [json.loads(line) for line in (tmp_path / out).read_text().splitlines()]
        assert [b["tokens"] for b in back] == [r["tokens"] for r in rows]
        assert [b["tags"] for b in back] == expected


@pytest.mark.parametrize(
    ("name", "content", "command", "message"),
    [
        ("bad.jsonl", '{"tokens": ["a"]}\n{"tokens": [1]\n', "predict", r"bad.jsonl line 2: not JSON"),
        (
            "n.jsonl",
            '{"tokens": ["a", "b"], "tags": ["O"]}\n',
            "evaluate",
            r"n.jsonl line 1: 2 words but 1 tags",
        ),
        ("k.jsonl", '{"words": ["a"]}\n', "predict", r"k.jsonl line 1: no 'tokens' .* its keys: words"),
        ("t.txt", "12 Oak Street\n", "evaluate", r"t.txt: plain text has no tags"),
        ("e.jsonl", "\n", "predict", r"e.jsonl: no rows"),
        ("missing.jsonl", None, "predict", r"missing.jsonl: cannot read it"),
        ("x.parquet", "not parquet", "predict", r"x.parquet: not a readable Parquet file"),
    ],
)
def test_bad_input_is_an_error_naming_the_file(
    run: Path, tmp_path: Path, name: str, content: str | None, command: str, message: str
) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    flag = "--input" if command == "predict" else "--data"
    code, got = _call(command, str(run), flag, str(path), tmp=tmp_path)
    assert code == 2 and got["hint"]
    assert re.search(message, got["error"]), got["error"]


def test_predict_without_output_writes_jsonl_to_stdout(
    run: Path, labelled: Path, tmp_path: Path, capfd
) -> None:
    code, got = _call("predict", str(run), "--input", str(labelled), tmp=tmp_path)
    assert code == 0 and got["output"] is None and got["truncated_words"] > 0
    lines = [json.loads(x) for x in capfd.readouterr().out.splitlines()]
    assert len(lines) == 31 and all(set(x) == {"tokens", "tags"} for x in lines)
    assert all(len(x["tokens"]) == len(x["tags"]) for x in lines)


@pytest.mark.slow
def test_the_cli_runs_them_in_the_training_venv(
    run: Path, labelled: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    from mw_env.cli import main

    venv = str(Path(sys.executable).parent.parent)
    assert (
        main(["train", "evaluate", str(run), "--data", str(labelled), "--venv", venv, "--device", "cpu"]) == 0
    )
    out = capfd.readouterr().out
    assert "entity F1 strict" in out and "entity F1 conlleval" in out and "(the run's runtime.f1_mode)" in out
    # A missing input is refused here, before the venv's python (and torch) starts.
    assert main(["train", "predict", str(run), "--input", str(tmp_path / "nope.txt"), "--venv", venv]) == 2
    assert "error: --input" in capfd.readouterr().err
