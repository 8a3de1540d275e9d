"""A user's one Parquet file and a resume on another world size, end to end (gloo, CPU, torchrun as test_ddp.py
runs it).

One 5,000-row file as pandas' `DataFrame.to_parquet()` writes it (pyarrow's defaults: one row group) trains on
1 and on 2 processes, validation held out by rows at the share asked (the card and the summary say it); a
SIGKILLed run resumes bitwise; and a run checkpointed on N processes and resumed on M (1 -> 2, 2 -> 1) reads at
every step the global batch an uninterrupted run reads: the rows each rank read come from the row trace
(MW_ENV_TRACE_ROWS, trainer/data/trace.py), and the ranks' rows of a step, in rank order, are the uninterrupted
run's rows of that step. Dropout off, so the resumed run's losses can be compared with the uninterrupted run's
(the same rows and the same update, summed in another order: within 1e-4 relative).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from .helpers import files_config, step_losses, synthetic_rows
from .test_resume import _assert_same
from .test_stream_resume import ENTRY, _argv, _kill_after_checkpoint, _run, _state
from .test_stream_resume import EXTRA as STREAM_EXTRA

pytestmark = [pytest.mark.torch, pytest.mark.slow]
pytest.importorskip("pyarrow")
TORCHRUN = Path(sys.executable).parent / "torchrun"
# After test_stream_resume's EXTRA in its _argv (later --set values win): no dropout, the file's one row group.
EXTRA = ("model.dropout=0.0", "data.val_fraction=0.05", "data.shuffle_rows=64", "data.workers=0")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("one")
    rows = synthetic_rows(5000)
    try:
        import pandas as pd

        pd.DataFrame(rows).to_parquet(folder / "one.parquet")
    except ImportError:  # the same file without pandas: pyarrow's defaults, which to_parquet uses
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), folder / "one.parquet")
    import pyarrow.parquet as pq

    assert pq.ParquetFile(folder / "one.parquet").metadata.num_row_groups == 1
    return folder


@pytest.fixture(scope="module")
def entry(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("entry") / "entry.py"
    path.write_text(ENTRY)
    return path


@pytest.fixture(scope="module")
def traced_module() -> Any:
    """The row trace on in this process and every trainer it starts, for the module's fixtures (conftest.py
    clears MW_ENV_* for each test: the tests set it again with `traced`)."""
    with pytest.MonkeyPatch.context() as m:
        m.setenv("MW_ENV_TRACE_ROWS", "1")
        m.setenv("OMP_NUM_THREADS", "1")
        yield


@pytest.fixture
def traced(traced_module: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MW_ENV_TRACE_ROWS", "1")


def _config(run: Path, corpus: Path) -> Any:
    """What the command line of `_argv` resolves to."""
    return files_config(run, corpus, *STREAM_EXTRA, *EXTRA)


def _trace(run: Path, folder: str = "row-trace") -> dict[int, list[list[int]]]:
    """step -> the rows of its global batch: every rank's rows of the step, in rank order."""
    out: dict[int, list[list[int]]] = {}
    files = sorted((run / folder).glob("rank-*.jsonl"), key=lambda p: int(p.stem.split("-")[1]))
    for path in files:
        steps: dict[int, list[list[int]]] = {}
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            steps[entry["step"]] = entry["rows"]  # a step run again after a resume: its last line
        for step, rows in steps.items():
            out.setdefault(step, []).extend(rows)
    return out


def _card(run: Path) -> dict[str, Any]:
    return json.loads((run / "report" / "data_card.json").read_text())


@pytest.fixture(scope="module")
def one(corpus: Path, traced_module: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """The uninterrupted run on 1 process (in-process), and what it said."""
    from mw_env.trainer.loop import train

    run = tmp_path_factory.mktemp("one-proc") / "run"
    said: list[str] = []
    train(resolved=_config(run, corpus), echo=said.append)
    return run, said


@pytest.fixture(scope="module")
def two(corpus: Path, entry: Path, traced_module: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The uninterrupted run on 2 processes (torchrun)."""
    if not TORCHRUN.exists():
        pytest.skip("no torchrun next to this python")
    run = tmp_path_factory.mktemp("two-proc") / "run"
    _run(_argv(entry, run, corpus, nproc=2, extra=EXTRA))
    return run


def test_one_row_group_file_trains_on_one_process_with_validation_by_rows(
    one: tuple[Path, list[str]], corpus: Path
) -> None:
    from mw_env.trainspec.summary import summarize

    run, said = one
    card = _card(run)
    val = card["validation"]
    assert (
        card["units"]["unit"] == "row ranges"
        and "one.parquet has 1 row group (5,000 rows)" in card["units"]["why"]
    )
    assert abs(val["rows"] - 250) <= 4 and val["share"] == pytest.approx(val["rows"] / 5000)
    assert card["rows"] == {"train": 5000 - val["rows"], "val": val["rows"]}
    # The console and `train summary` say the same share.
    assert f"validation: {val['rows']:,} rows ({val['share']:.2%} of the rows)" in "\n".join(said)
    split = summarize(_config(run, corpus).config)["data"]["split"]
    assert (split["val_rows"], split["val_share"], split["unit"]) == (val["rows"], val["share"], "row ranges")
    evals = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if '"eval"' in x]
    assert evals and all(e["val_rows"] == val["rows"] for e in evals)
    # Every step read 8 distinct training rows; none of them held out.
    steps = _trace(run)
    assert sorted(steps) == list(range(8)) and all(
        len({tuple(r) for r in rows}) == 8 for rows in steps.values()
    )


def test_one_row_group_file_trains_on_two_processes(two: Path) -> None:
    card = _card(two)
    assert card["batch"] == {
        "lanes": 2,
        "lane_rows": 8,
        "global_rows": 16,
        "world_size": 2,
        "rows_per_process": 8,
        "micro_batches": 1,
    }
    assert [lane["ranks"] for lane in card["lanes"]] == [[0], [1]]
    assert "so that each of the 2 lanes has rows of its own" in card["units"]["why"]
    steps = _trace(two)
    assert all(len({tuple(r) for r in rows}) == 16 for rows in steps.values())  # the two lanes: disjoint rows


def _killed(entry: Path, corpus: Path, nproc: int, folder: Path) -> Path:
    """A run on `nproc` processes SIGKILLed after its checkpoint at step 4; its row trace moved aside."""
    run = folder / "run"
    _kill_after_checkpoint(_argv(entry, run, corpus, nproc=nproc, extra=EXTRA), folder / "marker")
    assert sorted(p.name for p in (run / "checkpoints").glob("step-*.pt")) == ["step-000000004.pt"]
    (run / "row-trace").rename(run / "row-trace.killed")
    return run


def _same_global_batches(ref: Path, resumed: Path) -> None:
    before, after, want = _trace(resumed, "row-trace.killed"), _trace(resumed), _trace(ref)
    assert sorted(after) == [
        4,
        5,
        6,
        7,
    ]  # the resumed run ran steps 4.. (step 4 again: it was not checkpointed)
    for step in range(8):
        got = before[step] if step < 4 else after[step]
        assert got == want[step], step  # the same rows, in the same global order


@pytest.mark.skipif(not TORCHRUN.exists(), reason="no torchrun next to this python")
def test_sigkill_on_one_process_resumes_bitwise_and_on_two_in_the_same_global_order(
    one: tuple[Path, list[str]], corpus: Path, entry: Path, traced: Any, tmp_path: Path
) -> None:
    from mw_env.trainer.loop import train

    ref = one[0]
    killed = _killed(entry, corpus, 1, tmp_path / "a")
    on_two = tmp_path / "b" / "run"
    shutil.copytree(killed, on_two)
    # The same command on one process: bitwise what the uninterrupted run holds.
    train(resolved=_config(killed, corpus), echo=lambda _m: None)
    _assert_same(_state(ref), _state(killed))
    assert step_losses(killed) == step_losses(ref)
    _same_global_batches(ref, killed)
    # The same run resumed on two processes: the same global batches, split between the ranks.
    _run(_argv(entry, on_two, corpus, nproc=2, extra=EXTRA))
    _same_global_batches(ref, on_two)
    log = (on_two / "metrics.jsonl").read_text()
    assert '"event": "resumed"' in log
    card, want = _card(on_two), _card(ref)
    assert (
        card["batch"]["lanes"] == 1
        and card["batch"]["world_size"] == 2
        and card["lanes"][0]["ranks"] == [0, 1]
    )
    for key in ("consumed", "tag_distribution", "token_lengths", "rows", "validation"):
        assert card[key] == want[key], key  # the counts carried over; the same rows read
    ref_losses, losses = step_losses(ref), step_losses(on_two)
    for step in range(5, 9):  # optimizer and scheduler state carried: the same updates, summed otherwise
        assert losses[step] == pytest.approx(ref_losses[step], rel=1e-4), step


@pytest.mark.skipif(not TORCHRUN.exists(), reason="no torchrun next to this python")
def test_sigkill_on_two_processes_resumes_on_one_in_the_same_global_order(
    two: Path, corpus: Path, entry: Path, traced: Any, tmp_path: Path
) -> None:
    from mw_env.trainer.loop import train

    killed = _killed(entry, corpus, 2, tmp_path)
    said: list[str] = []
    train(resolved=_config(killed, corpus), echo=said.append)
    _same_global_batches(two, killed)
    note = next(line for line in said if line.startswith("global batch kept at 16 rows a step"))
    assert (
        "(2 lanes x 8 rows" in note
        and "the one process takes 16 rows a step in 2 micro-batches of up to 8" in note
    )
    card, want = _card(killed), _card(two)
    for key in ("consumed", "tag_distribution", "token_lengths"):
        assert card[key] == want[key], key
    ref_losses, losses = step_losses(two), step_losses(killed)
    for step in range(5, 9):
        assert losses[step] == pytest.approx(ref_losses[step], rel=1e-4), step


def test_no_validation_split_trains_on_every_row_and_skips_evaluation(
    corpus: Path, traced: Any, tmp_path: Path
) -> None:
    from mw_env.trainer.loop import train

    run = tmp_path / "run"
    said: list[str] = []
    train(resolved=files_config(run, corpus, *STREAM_EXTRA, *EXTRA, "data.val_fraction=0"), echo=said.append)
    none = [line for line in said if line.startswith("validation: none")]
    assert len(none) == 1 and "evaluations are skipped" in none[0]  # said once, at start
    assert not [line for line in said if line.startswith("eval step")]
    assert '"event": "eval"' not in (run / "metrics.jsonl").read_text()
    card = _card(run)
    assert card["rows"] == {"train": 5000, "val": 0} and card["validation"]["rows"] == 0
    assert card["units"]["unit"] == "row groups"  # one lane, nothing held out: the row group whole
    assert "no evaluation ran" in (run / "report" / "report.md").read_text()
