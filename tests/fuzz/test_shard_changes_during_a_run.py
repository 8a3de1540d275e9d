"""A corpus shard that changes between the corpus open and a later read (issue 22): replaced (by rename, with
fewer rows or with the same size), truncated in place, rewritten in place with the same size, or deleted.
Shards are re-read block by block while training (trainer/data/reader.py): a JSONL block by its byte range,
a Parquet row group through a file handle kept open. The file is compared with the stamp discovery took
(size, mtime, inode; shards.check_stamp) at every block the reader starts, and a Parquet file's footer at
every open, so the change is met at the next block even where an open handle would still read the old
rows. Outcome: `shard X changed during the run (what changed)` (StepFailed: the run's `error:`/`hint:`,
exit 1, checkpoints kept: HINT_CHANGED), never a traceback, never rows of another file, never a hang.

The change happens at a chosen step of the producer, in this process: no timing is involved.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tests.fuzz.fuzz_support import deadline

from mw_env.base.errors import MwEnvError

pytestmark = pytest.mark.torch

LABELS = "data.labels=[O, B-house_number, I-house_number, B-locality, I-locality]"
ROWS = 96
# An mtime long before any change the test makes (2001): no clock tick to wait for.
PAST = 1_000_000_000 * 10**9


def _row(i: int) -> dict[str, list[str]]:
    return {"tokens": [str(i), "Oak"], "tags": ["B-house_number", "B-locality"]}


def _write(path: Path, kind: str, rows: int = ROWS) -> None:
    if kind == "jsonl":
        path.write_text("".join(json.dumps(_row(i)) + "\n" for i in range(rows)))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist([_row(i) for i in range(rows)]), path, row_group_size=8)
    os.utime(path, ns=(PAST, PAST))


def _flip_middle(data: bytes) -> bytes:
    """The same bytes with one in the middle changed (a digit of a JSONL row; a Parquet data page)."""
    i = len(data) // 2
    if data[i : i + 1].isdigit():
        return data[:i] + (b"7" if data[i : i + 1] != b"7" else b"3") + data[i + 1 :]
    return data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1 :]


# how -> what the error says changed
CHANGES = {
    "replaced": "size",  # a new file with fewer rows renamed over the old one
    "replaced-same-size": "inode",  # a new file of the same size renamed over it
    "rewritten-in-place": "mtime",  # the same inode and size, other bytes (a copy over the file)
    "truncated": "size",  # in place
    "deleted": "deleted",
}


def _change(path: Path, how: str, kind: str) -> None:
    if how == "deleted":
        path.unlink()
    elif how == "truncated":
        with path.open("r+b") as fh:  # in place: the same inode, as a copy over the file leaves it
            fh.truncate(path.stat().st_size // 3)
    elif how == "rewritten-in-place":
        data = _flip_middle(path.read_bytes())
        with path.open("r+b") as fh:
            fh.write(data)
    else:
        new = path.with_name("new-" + path.name)
        if how == "replaced":
            _write(new, kind, rows=ROWS // 4)
        else:
            new.write_bytes(_flip_middle(path.read_bytes()))
            os.utime(new, ns=(PAST, PAST))  # even the mtime kept: the inode tells
        os.replace(new, path)


@pytest.mark.parametrize("how", list(CHANGES))
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
        f"runtime.out_dir={tmp_path / 'run'}",  # the corpus index: here, not in the checkout
    ]
    cfg = resolve_config(overrides=overrides).config
    with deadline():
        corpus = open_corpus(cfg)
        steps = -(-corpus.train_rows // cfg.optim.batch_size)
        producer = corpus.producer()
        try:
            producer(0)
            _change(shard, how, kind)
            with pytest.raises(MwEnvError) as caught:
                for s in range(1, steps):
                    producer(s)
        finally:
            producer.close()
    exc = caught.value
    assert exc.exit_code == 1 and exc.hint, (exc.message, exc.exit_code)
    assert exc.message.startswith(f"shard {shard} changed during the run ("), exc.message
    assert CHANGES[how] in exc.message, exc.message
    assert "checkpoints so far are kept" in exc.hint and "--fresh" in exc.hint


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_a_validation_shard_changing_between_evaluations(tmp_path: Path, kind: str) -> None:
    """The validation reader is the same reader: a val shard replaced between two evaluations is named."""
    from mw_env.trainer.data import open_corpus
    from mw_env.trainspec.config import resolve_config

    shard, val = tmp_path / f"train.{kind}", tmp_path / f"val.{kind}"
    _write(shard, kind, rows=16)
    _write(val, kind, rows=16)
    overrides = [
        "data.source=files",
        f"data.train_files=[{shard}]",
        f"data.val_files={val}",
        LABELS,
        f"runtime.out_dir={tmp_path / 'run'}",
    ]
    cfg = resolve_config(overrides=overrides).config
    with deadline():
        corpus = open_corpus(cfg)
        assert sum(1 for _ in corpus.val.batches(4, 0)) == 4
        _change(val, "replaced-same-size", kind)
        with pytest.raises(MwEnvError) as caught:
            list(corpus.val.batches(4, 0))
    assert caught.value.exit_code == 1 and f"shard {val} changed during the run" in caught.value.message


def test_another_host_takes_its_first_look_as_the_stamp(tmp_path: Path) -> None:
    """A rank on another node may read its own copy of the corpus at the same path (another inode and
    mtime): it checks size and footer, then its first look is the stamp; a later change is still met."""
    import dataclasses

    from mw_env.trainer.data import shards
    from mw_env.trainer.data.index import index_shards

    path = tmp_path / "train.parquet"
    _write(path, "parquet")
    [(shard, _tags)] = index_shards([path], ("tokens", "tags"), key="k", labels=False, cache={})
    copy = tmp_path / "copy.parquet"
    copy.write_bytes(path.read_bytes())  # the other node's copy: same bytes, other inode and mtime
    os.replace(copy, path)
    elsewhere = dataclasses.replace(shard, host="another-node")
    nf, _meta = shards.open_checked(elsewhere)
    nf.close()
    assert elsewhere.host == shards.HOST and elsewhere.stamp == shards.stamp_of(path.stat())
    with pytest.raises(MwEnvError, match="changed during the run"):
        shards.open_checked(shard)  # on the host that took the stamp the inode tells
    with path.open("r+b") as fh:
        fh.truncate(path.stat().st_size - 1)
    with pytest.raises(MwEnvError, match="size"):
        shards.check_stamp(elsewhere)


@pytest.mark.slow
def test_a_real_run_whose_shard_is_truncated_mid_run(tmp_path: Path) -> None:
    """The real trainer, held after step 2 (MW_ENV_TEST_HOLD: an event, not a sleep) while its Parquet shard
    is truncated in place: `error:` naming the shard and what changed, `hint:`, exit 1, the checkpoints
    written so far intact."""
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
    assert proc.returncode == 1, (out + err)[-3000:]
    assert "Traceback" not in err and f"error: shard {shard} changed during the run (size" in err, err[-3000:]
    assert "hint: restore the shard" in err, err[-3000:]
    kept = checkpoints_intact(run)  # runtime.keep_last rotates the oldest out: the step-2 one may be gone
    assert kept and all(int(name[5:-3]) >= 2 for name in kept), kept
