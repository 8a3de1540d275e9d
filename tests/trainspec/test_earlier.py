"""The run already in a run folder against the config about to start there (trainspec/earlier.py): another
dataset or model into a finished folder is refused naming the difference and the ways on. No torch: the
finished run is described by what its report holds (hyperparameters.json, data_card.json)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mw_env.base.errors import InputError
from mw_env.trainspec.config import find_config, resolve_config
from mw_env.trainspec.earlier import check_earlier_run, elsewhere_hint


def _finished(config: Any, card_sources: list[dict[str, Any]]) -> dict[str, Any]:
    return {"hyperparameters": {"config": config.to_dict()}, "card": {"sources": card_sources}}


def _synthetic_card(c: Any) -> list[dict[str, Any]]:
    d = c.data
    return [
        {
            "kind": "synthetic",
            "generator": "mw_env.trainspec.synthetic",
            "seed": d.seed,
            "rows": d.synthetic_rows,
            "val_rows": d.synthetic_val_rows,
            "countries": list(d.countries),
            "noise": d.noise,
        }
    ]


def _check(
    tmp_path: Path, before: dict[str, Any], config: Any, step: int = 200, reason: str = "max_steps"
) -> bool:
    return check_earlier_run(
        out_dir=tmp_path / "runs" / "train",
        step=step,
        reason=reason,
        hyperparameters=before["hyperparameters"],
        card=before["card"],
        config=config,
        base=tmp_path,
    )


def test_a_second_dataset_into_a_finished_folder_is_refused_with_the_ways_on(tmp_path: Path) -> None:
    smoke = find_config("smoke")
    first = resolve_config(path=smoke, overrides=["runtime.max_steps=200"]).config
    before = _finished(first, _synthetic_card(first))
    (tmp_path / "mine.jsonl").write_text('{"tokens": ["1"], "tags": ["B-x"]}\n')
    second = resolve_config(path=smoke, overrides=["runtime.max_steps=200", "data.train_files=[mine.jsonl]"])
    with pytest.raises(InputError) as exc:
        _check(tmp_path, before, second.config)
    msg, hint = exc.value.message, exc.value.hint or ""
    assert "finished at step 200 on other data" in msg and "synthetic corpus, this config reads files" in msg
    assert "continue that model on this data" in msg
    assert f"--set runtime.out_dir={tmp_path / 'runs' / 'train-2'}" in hint and "--fresh" in hint
    assert "max_steps" not in hint  # raising it would continue the old model on the other data


def test_files_that_changed_or_were_added_are_other_data(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text('{"tokens": ["1"], "tags": ["B-x"]}\n')
    b.write_text('{"tokens": ["1"], "tags": ["B-x"]}\n')
    config = resolve_config(
        path=find_config("smoke"), overrides=[f"data.train_files=[{a}]", "runtime.max_steps=200"]
    ).config
    before = _finished(config, [{"kind": "train", "path": str(a), "size": a.stat().st_size}])
    assert _check(tmp_path, before, config) is True  # the same run, nothing left: said as a note by launch
    a.write_text('{"tokens": ["1", "2"], "tags": ["B-x", "I-x"]}\n')
    with pytest.raises(InputError, match="changed size"):
        _check(tmp_path, before, config)
    more = resolve_config(
        path=find_config("smoke"),
        overrides=[f"data.train_files=[{tmp_path}/*.jsonl]", "runtime.max_steps=200"],
    ).config
    with pytest.raises(InputError, match=r"b\.jsonl is new"):
        _check(tmp_path, _finished(more, [{"kind": "train", "path": str(a), "size": a.stat().st_size}]), more)


def test_another_config_with_nothing_left_is_refused_but_a_larger_max_steps_trains_on(tmp_path: Path) -> None:
    smoke = find_config("smoke")
    first = resolve_config(path=smoke, overrides=["runtime.max_steps=200"]).config
    before = _finished(first, _synthetic_card(first))
    lower_lr = resolve_config(path=smoke, overrides=["runtime.max_steps=200", "optim.lr=1e-4"]).config
    with pytest.raises(InputError) as exc:
        _check(tmp_path, before, lower_lr)
    assert "on another config (optim.lr: 0.003 -> 0.0001)" in exc.value.message
    longer = resolve_config(path=smoke, overrides=["runtime.max_steps=400", "optim.lr=1e-4"]).config
    assert _check(tmp_path, before, longer) is False  # continues; the trainer warns about the lr
    # Another model is never continued, whatever max_steps says.
    wider = resolve_config(path=smoke, overrides=["runtime.max_steps=400", "model.d_model=64"]).config
    with pytest.raises(InputError, match="on another model"):
        _check(tmp_path, before, wider)


def test_the_hint_names_a_folder_that_is_not_there_yet(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (tmp_path / "run-2").mkdir()
    assert f"runtime.out_dir={tmp_path / 'run-3'}" in elsewhere_hint(run)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_relabelled_file_of_the_same_size_is_other_data(tmp_path: Path, fmt: str) -> None:
    """B- and I- swapped keeps a file's size: the run's recorded identity (the trainer's own footer_sha256,
    as the data card holds it) tells the files apart."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mw_env.trainer.data.shards import _open_jsonl, _open_parquet

    path = tmp_path / f"rows.{fmt}"
    tokens = [["12", "Main", "St"], ["9", "Elm", "Ave"]] * 50

    def write(first_tag: str) -> None:
        tags = [[first_tag, "B-street", "I-street"]] * len(tokens)
        if fmt == "jsonl":
            path.write_text(
                "".join(
                    f'{{"tokens": {t!r}, "tags": {g!r}}}\n' for t, g in zip(tokens, tags, strict=True)
                ).replace("'", '"')
            )
        else:
            table = pa.table({"tokens": tokens, "tags": tags})
            pq.write_table(table, path, compression="none", use_dictionary=False)

    write("B-number")
    shard = _open_jsonl(path, 0) if fmt == "jsonl" else _open_parquet(path, 0, ("tokens", "tags"))[0]
    config = resolve_config(
        path=find_config("smoke"), overrides=[f"data.train_files=[{path}]", "runtime.max_steps=200"]
    ).config
    before = _finished(config, [{"kind": "train", **shard.identity()}])
    assert _check(tmp_path, before, config) is True  # unchanged: the same run, nothing left to train
    size = path.stat().st_size
    write("I-number")
    assert path.stat().st_size == size
    with pytest.raises(InputError, match=r"changed \(the same size, other content"):
        _check(tmp_path, before, config)
