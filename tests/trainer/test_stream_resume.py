"""Exact resume on a streamed multi-shard Parquet corpus: SIGKILL after a checkpoint, then the same
command, ends bitwise equal to an uninterrupted run (weights, optimizer, RNG states, data position,
data-card counts, every per-step loss) - one process, and 2 gloo processes with accumulation drawing from
two weighted sources (data.sources).
A changed corpus or label set is refused, naming what changed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from mw_env.base.errors import InputError
from proctools import MARKER, assert_none_left, kill_tagged, new_tag

from .helpers import TINY, files_config, step_losses, write_parquet_corpus
from .test_resume import _assert_same

pytestmark = pytest.mark.torch
pytest.importorskip("pyarrow")
REPO = Path(__file__).resolve().parents[2]
EXTRA = ("model.dropout=0.1", "data.shuffle_rows=50", "data.workers=1")  # a worker process per rank

# Runs the trainer's CLI; with MW_TEST_HANG_AT=k, the process touches MW_TEST_MARKER and sleeps when
# step k (0-based) is about to run, so the test can SIGKILL it after the checkpoint of step 4.
ENTRY = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    hang = os.environ.get("MW_TEST_HANG_AT")
    if hang is not None:
        from mw_env.trainer.step import Trainer
        real = Trainer.step
        count = {"n": 0}
        start = int(os.environ.get("MW_TEST_START", "0"))

        def step(self, micro, *args):
            if start + count["n"] == int(hang):
                Path(os.environ["MW_TEST_MARKER"]).touch()
                time.sleep(600)
            count["n"] += 1
            return real(self, micro, *args)

        Trainer.step = step
    from mw_env.trainer.__main__ import main
    sys.exit(main())
    """
)


def _argv(entry: Path, run: Path, corpus: Path, *, nproc: int, extra: tuple[str, ...]) -> list[str]:
    sets = [*TINY, f"runtime.out_dir={run}", "data.source=files", f"data.train_files=[{corpus}/*.parquet]"]
    sets += ["data.val_fraction=0.1", "runtime.eval_batches=2", *EXTRA, *extra]
    if nproc > 1:
        torchrun = Path(sys.executable).parent / "torchrun"
        head = [str(torchrun), "--standalone", f"--nproc-per-node={nproc}", str(entry)]
    else:
        head = [sys.executable, str(entry)]
    argv = [*head, "run", "--config", "smoke"]
    for s in sets:
        argv += ["--set", s]
    return argv


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO / "src"), **extra}


def _run(argv: list[str], **env: str) -> None:
    proc = subprocess.run(argv, cwd=REPO, env=_env(**env), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def _kill_after_checkpoint(argv: list[str], marker: Path) -> None:
    tag = new_tag()
    child = subprocess.Popen(
        argv,
        cwd=REPO,
        env=_env(MW_TEST_HANG_AT="5", MW_TEST_MARKER=str(marker), **{MARKER: tag}),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 240
        while not marker.exists():
            if child.poll() is not None:
                raise AssertionError(child.stderr.read().decode()[-3000:] if child.stderr else "died")
            assert time.monotonic() < deadline, "the child never reached step 6"
            time.sleep(0.05)
        os.killpg(child.pid, signal.SIGKILL)  # torchrun's group (the one process without torchrun)
    finally:
        # and torchrun's workers, each in a session of its own (torch elastic starts them so), with their data
        # workers, which share the run folder's lock.
        kill_tagged(tag)
        child.wait(timeout=60)
    # The same command, next, takes that lock: once nothing of the killed run is left. Without this wait a
    # worker left to notice its torchrun's death still held it at a load of 15 (a full run, 2026-12-08).
    assert_none_left(tag, within=60.0)


def _state(run: Path, step: int = 8) -> dict[str, Any]:
    from mw_env.trainer.ckpt.checkpoint import load_checkpoint

    ckpt = load_checkpoint(run / "checkpoints" / f"step-{step:09d}.pt")
    return {k: ckpt[k] for k in ("model", "optimizer", "scheduler", "loop", "step", "rng", "data", "labels")}


def _card(run: Path) -> dict[str, Any]:
    card = json.loads((run / "report" / "data_card.json").read_text())
    return {
        k: card[k] for k in ("consumed", "tag_distribution", "token_lengths", "bio_inconsistencies", "ranks")
    }


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("corpus")
    write_parquet_corpus(folder, shards=3, rows=120, row_group=32)
    return folder


@pytest.fixture(scope="module")
def entry(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("entry") / "entry.py"
    path.write_text(ENTRY)
    return path


def _weighted(corpus: Path) -> tuple[str, ...]:
    """data.sources instead of data.train_files: shard-00 as a small source (weight 1), the others as a large
    one (weight 3), so the resume covers the mix (mix.py) and each source's own windows."""
    return (
        "data.train_files=[]",
        f"data.sources=[{{name: small, files: ['{corpus}/shard-00.parquet'], weight: 1}}, "
        f"{{name: large, files: ['{corpus}/shard-0[12].parquet'], weight: 3}}]",
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("nproc", "acc", "weighted"),
    [(1, 2, False), (2, 2, True)],
    ids=["single-process-acc2", "ddp-2-gloo-acc2-weighted-sources"],
)
def test_sigkill_then_same_command_is_exact(
    nproc: int, acc: int, weighted: bool, corpus: Path, entry: Path, tmp_path: Path
) -> None:
    if nproc > 1 and not (Path(sys.executable).parent / "torchrun").exists():
        pytest.skip("no torchrun next to this python")
    from mw_env.trainer.loop import train

    extra = (f"optim.accumulation_steps={acc}", *(_weighted(corpus) if weighted else ()))
    ref, run = tmp_path / "ref", tmp_path / "run"
    same_config = files_config(run, corpus, *EXTRA, *extra)  # what the command line resolves to
    if nproc == 1:  # in-process where it can be: one torch import less per run on 2 shared cores
        train(resolved=files_config(ref, corpus, *EXTRA, *extra), echo=lambda _m: None)
    else:
        _run(_argv(entry, ref, corpus, nproc=nproc, extra=extra))
    argv = _argv(entry, run, corpus, nproc=nproc, extra=extra)
    _kill_after_checkpoint(argv, tmp_path / "marker")
    ckpts = sorted(p.name for p in (run / "checkpoints").glob("step-*.pt"))
    assert ckpts == ["step-000000004.pt"]
    if nproc == 1:
        train(resolved=same_config, echo=lambda _m: None)  # the same command: resumes from step 4
    else:
        _run(argv)  # the same command: resumes from step 4
    resumed = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [e["step"] for e in resumed if e["event"] == "resumed"] == [4]
    _assert_same(_state(ref), _state(run))  # weights, optimizer, RNG of every rank, data position + counts
    assert step_losses(run) == step_losses(ref)
    assert _card(run) == _card(ref)
    state = _state(run)
    assert len(state["rng"]) == nproc and len(state["data"]["position"]) == nproc
    assert state["data"]["position"][0]["next_step"] == 8
    if weighted:  # each rank drew 8 steps x 2 micro x 8 rows, one in four from the small source
        mix = json.loads((run / "report" / "data_card.json").read_text())["mix"]
        assert [(m["name"], m["rows_drawn"], m["realised_share"]) for m in mix] == [
            ("small", 64, 0.25),
            ("large", 192, 0.75),
        ]


def test_changed_corpus_and_labels_are_refused(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mw_env.trainer.loop import train

    corpus = tmp_path / "corpus"
    write_parquet_corpus(corpus, shards=2, rows=96, row_group=32)
    run = tmp_path / "run"
    train(
        resolved=files_config(run, corpus, "runtime.max_steps=4", "data.hash_shards=true"),
        echo=lambda _m: None,
    )
    from mw_env.trainer.ckpt.checkpoint import load_checkpoint

    rng = load_checkpoint(run / "checkpoints" / "step-000000004.pt")["rng"][0]
    assert {"torch", "numpy", "python"} <= rng.keys()
    card = json.loads((run / "report" / "data_card.json").read_text())
    assert card["consumed"]["rows"] == 4 * 8 and card["consumed"]["tokens"] > card["consumed"]["words"] > 0
    assert sum(card["tag_distribution"]["train"].values()) == card["consumed"]["words"]
    assert sum(card["token_lengths"]["train"]["counts"]) == 32
    assert card["rows"]["train"] + card["rows"]["val"] == 192 and card["ranks"][0]["next_step"] == 4
    shards = [s for s in card["sources"] if s.get("path")]
    assert [Path(s["path"]).name for s in shards] == ["shard-00.parquet", "shard-01.parquet"]
    assert all(s["rows"] == 96 and s["row_groups"] == 3 and len(s["footer_sha256"]) == 64 for s in shards)
    assert all(s["sha256"] == "pending" or len(s["sha256"]) == 64 for s in shards)  # data.hash_shards

    # A shard rewritten with more rows: refused, naming the shard and what changed.
    shard = corpus / "shard-01.parquet"
    table = pq.read_table(shard)
    pq.write_table(pa.concat_tables([table, table.slice(0, 10)]), shard, row_group_size=32)
    with pytest.raises(InputError) as exc:
        train(resolved=files_config(run, corpus, "runtime.max_steps=6"), echo=lambda _m: None)
    assert "the corpus changed" in exc.value.message and "shard-01.parquet" in exc.value.message
    assert "rows 96 -> 106" in exc.value.message and "allow_changed_corpus" in exc.value.hint
    # An added shard too.
    write_parquet_corpus(tmp_path / "more", shards=1, rows=40, row_group=32)
    (tmp_path / "more" / "shard-00.parquet").rename(corpus / "shard-09.parquet")
    with pytest.raises(InputError, match=r"added .*shard-09.parquet"):
        train(resolved=files_config(run, corpus, "runtime.max_steps=6"), echo=lambda _m: None)
    # The explicit override continues, and says so.
    said: list[str] = []
    result = train(
        resolved=files_config(run, corpus, "runtime.max_steps=6", "data.allow_changed_corpus=true"),
        echo=said.append,
    )
    assert result.step == 6 and any(s.startswith("warning: corpus changed") for s in said)

    # A different label set is refused outright (the model's head depends on it).
    labels = "data.labels=[O, B-street, I-street]"
    with pytest.raises(InputError, match="the label set changed"):
        train(
            resolved=files_config(
                run,
                corpus,
                "runtime.max_steps=8",
                labels,
                "data.unknown_tags=ignore",
                "data.allow_changed_corpus=true",
            ),
            echo=lambda _m: None,
        )


@pytest.mark.slow
def test_a_bad_row_group_mid_run_is_an_error_and_keeps_the_checkpoints(tmp_path: Path, entry: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mw_env.trainer.data import open_corpus
    from mw_env.trainer.data.order import RankOrder

    corpus = tmp_path / "corpus"
    write_parquet_corpus(corpus, shards=2, rows=96, row_group=32)
    sets = ("data.shuffle_rows=32", "runtime.checkpoint_every=1", "runtime.max_steps=30")
    opened = open_corpus(files_config(tmp_path / "x", corpus, *sets).config)
    order = RankOrder(opened.blocks, opened.owned[0], seed=0, rank=0, window_rows=32)
    last_window = order.window(0, order.n_windows() - 1)
    piece = order.pieces(last_window)[0]
    last = opened.blocks[piece.block]  # the unit (a row group, or a range of one) read last in epoch 0
    row = last.offset + piece.first  # the last window's first row, counted in its row group
    shard = opened.shards[last.shard].path
    table = pq.read_table(shard).to_pylist()
    table[last.part * 32 + row]["tags"] = ["O"]  # same row counts (same order), one row made inconsistent
    pq.write_table(pa.Table.from_pylist(table), shard, row_group_size=32)

    run = tmp_path / "run"
    argv = _argv(entry, run, corpus, nproc=1, extra=sets)
    proc = subprocess.run(argv, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    error, hint = proc.stderr.strip().splitlines()[-2:]
    at = last.part * 32 + row  # counted from the file's start, as pandas counts it
    assert error.startswith(f"error: {shard} row {at} (df.iloc[{at}]") and "tokens but 1 tags" in error
    assert hint.startswith("hint: ")
    done = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [e["step"] for e in done if e["event"] == "step"]
    assert steps and (run / "checkpoints" / f"step-{max(steps):09d}.pt").is_file()  # nothing trained is lost
