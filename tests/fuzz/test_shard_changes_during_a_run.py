"""A corpus shard that changes between the corpus open and a later read (issue 22): replaced, truncated in
place, or deleted. Shards are re-read block by block while training (trainer/data/reader.py: a JSONL block
by its byte range, a Parquet row group through a file handle opened at its first read), so the change is
met at the next read of a block. Outcome: an InputError naming the shard with a hint (the run's
`error:`/`hint:`, exit 2, checkpoints kept: HINT_DAMAGED), or, where the reader still holds the file open
(a Parquet shard replaced or deleted by rename/unlink after its first read), the rows it opened: never a
traceback, never wrong-length rows, never a hang.

The change happens at a chosen step of the producer, in this process: no timing is involved.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tests.fuzz.fuzz_support import deadline

from mw_env.errors import InputError

pytestmark = pytest.mark.torch

LABELS = "data.labels=[O, B-house_number, I-house_number, B-locality, I-locality]"
ROWS = 96


def _row(i: int) -> dict[str, list[str]]:
    return {"tokens": [str(i), "Oak"], "tags": ["B-house_number", "B-locality"]}


def _write(path: Path, kind: str, rows: int = ROWS) -> None:
    if kind == "jsonl":
        path.write_text("".join(json.dumps(_row(i)) + "\n" for i in range(rows)))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist([_row(i) for i in range(rows)]), path, row_group_size=8)


def _change(path: Path, how: str, kind: str) -> None:
    if how == "deleted":
        path.unlink()
    elif how == "truncated":
        with path.open("r+b") as fh:  # in place: the same inode, as a copy over the file leaves it
            fh.truncate(path.stat().st_size // 3)
    else:  # replaced: a new file renamed over the old one, with fewer rows
        new = path.with_name("new-" + path.name)
        _write(new, kind, rows=ROWS // 4)
        os.replace(new, path)


@pytest.mark.parametrize("how", ["replaced", "truncated", "deleted"])
@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_a_shard_changing_between_open_and_read(
    tmp_path: Path, kind: str, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mw_env.trainer.data import open_corpus, shards
    from mw_env.trainspec.config import resolve_config

    monkeypatch.setattr(shards, "JSONL_BLOCK_BYTES", 512)  # many blocks from a tiny shard
    shard, val = tmp_path / f"train.{kind}", tmp_path / f"val.{kind}"
    _write(shard, kind)
    _write(val, kind, rows=8)
    overrides = [
        "data.source=files",
        f"data.train_files=[{shard}]",
        f"data.val_files={val}",
        LABELS,
        "optim.batch_size=4",
        "data.shuffle_rows=8",
    ]
    cfg = resolve_config(overrides=overrides).config
    with deadline():
        corpus = open_corpus(cfg)
        steps = -(-corpus.train_rows // cfg.optim.batch_size)
        producer = corpus.producer()
        try:
            producer(0)
            _change(shard, how, kind)
            try:
                for s in range(1, steps):
                    producer(s)
            except InputError as exc:
                assert str(shard) in exc.message and exc.hint and exc.exit_code == 2, exc.message
                assert "checkpoints so far are kept" in exc.hint
                return
        finally:
            producer.close()
    # Read to the end without an error: only where the reader kept the file it opened before the change.
    assert kind == "parquet" and how in ("replaced", "deleted"), f"{kind} {how}: the change went unnoticed"


@pytest.mark.slow
def test_a_real_run_whose_shard_is_truncated_mid_run(tmp_path: Path) -> None:
    """The real trainer, held after step 2 (MW_ENV_TEST_HOLD: an event, not a sleep) while its Parquet shard
    is truncated in place: `error:` naming the shard, `hint:`, exit 2, the checkpoints written so far intact."""
    import subprocess
    import sys

    from tests.faults.fault_support import checkpoints_intact
    from tests.runs.runs_helpers import wait_until

    shard, val, run, hold = (
        tmp_path / "train.parquet",
        tmp_path / "val.parquet",
        tmp_path / "run",
        tmp_path / "go",
    )
    _write(shard, "parquet", rows=192)
    _write(val, "parquet", rows=8)
    argv = [
        sys.executable,
        "-m",
        "mw_env",
        "train",
        "--config",
        "smoke",
        "--venv",
        sys.prefix,
        "--skip-doctor",
    ]
    for item in (
        f"runtime.out_dir={run}",
        "runtime.max_steps=40",
        "runtime.checkpoint_every=2",
        "runtime.eval_every=100",
        "runtime.eval_samples=0",
        "runtime.threads=1",
        "data.source=files",
        f"data.train_files=[{shard}]",
        f"data.val_files={val}",
        LABELS,
        "data.shuffle_rows=8",
        "optim.batch_size=4",
    ):
        argv += ["--set", item]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MW_ENV_TEST_HOLD": f"step-2:{hold}"}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: Path(f"{hold}.waiting").exists() or proc.poll() is not None, 300, "step 2")
        assert proc.poll() is None, proc.communicate()
        with shard.open("r+b") as fh:
            fh.truncate(shard.stat().st_size // 3)
        hold.touch()
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 2, (out + err)[-3000:]
    assert "Traceback" not in err and f"error: {shard}" in err and "hint:" in err, err[-3000:]
    kept = checkpoints_intact(run)  # runtime.keep_last rotates the oldest out: the step-2 one may be gone
    assert kept and all(int(name[5:-3]) >= 2 for name in kept), kept
