"""The unit plan (trainspec/units.py): validation held out as asked, whole blocks where they serve, row ranges
where they do not, every lane rows of its own; no torch, no files."""

from __future__ import annotations

import pytest

from mw_env.base.errors import InputError
from mw_env.trainspec.units import BlockRows, UnitPlan, describe, plan_units, unit_name


def _covered(plan: UnitPlan, blocks: list[BlockRows]) -> None:
    """Training and validation units tile every block's rows exactly once."""
    seen: dict[int, list[tuple[int, int]]] = {}
    for u in (*plan.train, *plan.val):
        assert u.rows > 0
        seen.setdefault(u.block, []).append((u.offset, u.rows))
    for i, b in enumerate(blocks):
        at = 0
        for offset, rows in sorted(seen.get(i, [])):
            assert offset == at
            at += rows
        assert at == b.rows


ONE = [BlockRows(0, "one.parquet", 0, 5000)]  # what pandas' to_parquet writes: one row group


@pytest.mark.parametrize("lanes", [1, 2, 3, 8])
def test_one_row_group_holds_out_the_share_asked_in_ranges_and_gives_every_lane_rows(lanes: int) -> None:
    plan = plan_units(ONE, lanes=lanes, fraction=0.05, seed=1234)
    _covered(plan, ONE)
    assert plan.ranges and unit_name(plan, "row group") == "row ranges"
    assert abs(plan.val_rows - 250) <= 4 and len(plan.val) == 4  # 4 ranges of ~63 rows, spread over the file
    assert len({u.offset // 1250 for u in plan.val}) >= 2
    assert len(plan.train) >= lanes
    # The same validation whatever the lanes: a resume on another world size sees the same held-out rows.
    assert plan.val == plan_units(ONE, lanes=1, fraction=0.05, seed=1234).val
    text = describe(plan, noun="row group", shard_names=[["one.parquet"]])
    assert "one.parquet has 1 row group (5,000 rows)" in text and "validation is 4 ranges" in text
    assert f"({plan.val_rows:,} rows, {plan.val_rows / 5000:.2%})" in text


def test_no_validation_and_one_lane_keeps_the_whole_row_group() -> None:
    plan = plan_units(ONE, lanes=1, fraction=0.0, seed=1)
    assert not plan.val and plan.train[0].rows == 5000 and not plan.ranges and plan.val_share == 0.0
    two = plan_units(ONE, lanes=2, fraction=0.0, seed=1)  # two lanes: ranges of even size
    _covered(two, ONE)
    assert two.ranges and {u.rows for u in two.train} == {625}
    assert "so that each of the 2 lanes has rows of its own" in describe(
        two, noun="row group", shard_names=[["one.parquet"]]
    )


def test_the_share_held_out_is_the_one_asked_whatever_the_file_names() -> None:
    """Row groups of 500 rows: a hash per row group held out 10% of one file and 20% of another; the plan holds
    out the asked share of the rows (as close as whole row groups allow)."""
    for names in (("a.parquet", "b.parquet"), ("train-0.parquet", "zz.parquet")):
        blocks = [BlockRows(0, name, g, 500) for name in names for g in range(10)]
        plan = plan_units(blocks, lanes=2, fraction=0.05, seed=1234)
        _covered(plan, blocks)
        assert plan.val_rows == 500 and not plan.ranges  # one whole row group is exactly 5%
        assert plan.val_share == pytest.approx(0.05)


def test_whole_row_groups_that_cannot_come_close_fall_back_to_ranges() -> None:
    blocks = [BlockRows(0, "f.parquet", g, 2500) for g in range(2)]  # 5% = 250 rows; a row group is 2,500
    plan = plan_units(blocks, lanes=1, fraction=0.05, seed=3)
    _covered(plan, blocks)
    assert plan.sources[0].val_ranges and abs(plan.val_rows - 250) <= 4


def test_a_large_corpus_keeps_whole_row_groups() -> None:
    """128 row groups of 1Mi rows (the 30 GB corpus's layout): whole row groups for validation and for each of
    8 lanes, no range anywhere (its measured read path is unchanged)."""
    blocks = [BlockRows(0, f"s{i:03d}.parquet", g, 1 << 20) for i in range(16) for g in range(8)]
    plan = plan_units(blocks, lanes=8, fraction=0.05, seed=1234)
    assert not plan.ranges and all(u.offset == 0 and u.rows == 1 << 20 for u in (*plan.train, *plan.val))
    assert plan.val_rows == 6 << 20 and abs(plan.val_share - 0.05) < 0.005  # 6 is closer to 5% than 7


def test_each_source_is_split_on_its_own() -> None:
    blocks = [BlockRows(0, "small.parquet", 0, 40)] + [
        BlockRows(1, "large.parquet", g, 100) for g in range(10)
    ]
    plan = plan_units(blocks, lanes=4, fraction=0.1, seed=0, where=["small", "large"])
    _covered(plan, blocks)
    small, large = plan.sources
    assert small.val_rows == 4 and small.val_ranges and small.range_rows  # 40 rows: ranges for 4 lanes
    assert large.val_rows == 100 and not large.val_ranges and not large.range_rows  # one whole row group
    assert sum(1 for u in plan.train if u.block == 0) >= 4


def test_the_plan_is_a_pure_function_of_its_inputs_and_changes_with_the_seed() -> None:
    a = plan_units(ONE, lanes=2, fraction=0.05, seed=7)
    assert (
        a == plan_units(ONE, lanes=2, fraction=0.05, seed=7)
        and a.key() == plan_units(ONE, lanes=2, fraction=0.05, seed=7).key()
    )
    assert a.val != plan_units(ONE, lanes=2, fraction=0.05, seed=8).val


def test_fewer_rows_than_lanes_is_refused_with_a_sentence() -> None:
    with pytest.raises(InputError) as exc:
        plan_units([BlockRows(0, "tiny.parquet", 0, 3)], lanes=4, fraction=0.0, seed=0)
    assert "data.train_files: 3 row(s), of which 3 would train: fewer than the 4 lane(s)" in exc.value.message
    assert exc.value.hint and "fewer processes" in exc.value.hint
    tiny = plan_units([BlockRows(0, "t.jsonl", 0, 5)], lanes=1, fraction=0.01, seed=0)
    assert tiny.val_rows == 1  # a share that rounds to no row still holds one out


def test_train_summary_says_the_share_held_out_and_the_units(tmp_path, capsys, monkeypatch) -> None:
    """`train summary` reads the row counts with the standard library (footers; one scan of a JSONL file) and
    shows the split the trainer makes: the rows held out and their share, and which unit and why."""
    import json

    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from mw_env.cli import main

    rows = [{"tokens": ["12", "Oak", "St"], "tags": ["B-house_number", "B-street", "I-street"]}] * 5000
    pq.write_table(
        pa.Table.from_pylist(rows), tmp_path / "one.parquet"
    )  # pandas' and pyarrow's default: 1 group
    (tmp_path / "one.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:400]))
    monkeypatch.chdir(tmp_path)
    common = ["train", "summary", "--config", "smoke", "--set", "data.source=files"]
    assert main([*common, "--set", "data.train_files=[one.parquet]"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "validation: 251 rows (5.02%) held out of the train rows" in out
    assert (
        "Units: row ranges: one.parquet has 1 row group (5,000 rows); whole row groups cannot hold out" in out
    )
    assert main([*common, "--set", "data.train_files=[one.parquet]", "--set", "data.val_fraction=0"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "validation: none (data.val_fraction is 0): evaluations are skipped" in out
    assert (
        "Units: row groups: one.parquet has 1 row group (5,000 rows); the one lane reads whole row groups"
        in out
    )
    assert main([*common, "--set", "data.train_files=[one.jsonl]", "--json"]) == 0
    split = json.loads(capsys.readouterr().out)["data"]["split"]
    assert (split["unit"], split["val_rows"], split["val_share"]) == ("row ranges", 20, 0.05)
    assert split["why"].startswith("one.jsonl has 1 block of lines (400 rows)")


def test_early_stopping_without_a_validation_split_is_refused_before_training() -> None:
    from mw_env.trainspec.config import resolve_config

    sets = ["data.source=files", "data.train_files=[one.parquet]", "data.val_fraction=0"]
    with pytest.raises(InputError) as exc:
        resolve_config(overrides=[*sets, "runtime.early_stop_patience=3"])
    assert "runtime.early_stop_patience = 3 watches the held-out F1, but there is no validation split" in (
        exc.value.message
    )
    assert exc.value.hint and "data.val_files" in exc.value.hint and "data.val_fraction" in exc.value.hint
    resolve_config(overrides=[*sets, "runtime.early_stop_patience=3", "data.val_files=[v.parquet]"])  # fine
