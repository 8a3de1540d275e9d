"""Corpus shards as a hostile user writes them: every case opens the corpus and reads every row, as training
would, and must end in success or an InputError naming the shard (never another exception, never a hang).

Named regressions (issue 22, cases 1-3): Parquet strings that are not UTF-8, symbolic link loops in a glob,
JSONL nesting past the stack and numbers past 4300 digits, a key written twice in a row. Generated cases
(seeded, replayable by index): mutated JSONL lines and Parquet tables with hostile strings.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
from tests.fuzz.fuzz_support import NASTY, cases, deadline, mutate

from mw_env.base.errors import InputError

pytestmark = pytest.mark.torch

LABELS = "data.labels=[O, B-house_number, I-house_number, B-locality, I-locality]"
GOOD = {"tokens": ["12", "Oak"], "tags": ["B-house_number", "B-locality"]}


def _read_all(*train: str, val: str | None = None) -> None:
    """Open the corpus over `train` and read every row once (both splits), as a run would."""
    from mw_env.trainer.data import open_corpus
    from mw_env.trainspec.config import resolve_config

    overrides = ["data.source=files", f"data.train_files=[{', '.join(train)}]", LABELS, "optim.batch_size=4"]
    overrides.append(f"data.val_files={val or train[0]}")
    overrides.append(f"runtime.out_dir={Path(train[0]).parent / 'run'}")  # its corpus index: not in the repo
    cfg = resolve_config(overrides=overrides).config
    with deadline():
        corpus = open_corpus(cfg)
        list(corpus.val.batches(64, 0))
        producer = corpus.producer()
        try:
            for s in range(-(-corpus.train_rows // cfg.optim.batch_size)):
                producer(s)
        finally:
            producer.close()


def _refused(*train: str, expect: str, val: str | None = None) -> InputError:
    with pytest.raises(InputError) as info:
        _read_all(*train, val=val)
    assert expect in info.value.message, info.value.message
    assert info.value.hint and info.value.exit_code == 2
    return info.value


def _bad_utf8_parquet(path: Path, *, column: str = "tokens", rows: int = 64) -> Path:
    """A string column holding bytes that are not UTF-8: written with from_buffers, which skips validation."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    raw = pa.array([[b"\xff\xfeabc", b"x"]] * rows, pa.list_(pa.binary()))
    bad = pa.ListArray.from_arrays(
        raw.offsets, pa.Array.from_buffers(pa.string(), len(raw.values), raw.values.buffers())
    )
    good_tags = pa.array([["B-house_number", "B-locality"]] * rows, pa.list_(pa.string()))
    good_toks = pa.array([["12", "Oak"]] * rows, pa.list_(pa.string()))
    cols = {"tokens": bad, "tags": good_tags} if column == "tokens" else {"tokens": good_toks, "tags": bad}
    pq.write_table(pa.table(cols), path, row_group_size=16)
    return path


@pytest.mark.parametrize("column", ["tokens", "tags"])
def test_parquet_strings_that_are_not_utf8(tmp_path: Path, column: str) -> None:
    shard = _bad_utf8_parquet(tmp_path / "bad.parquet", column=column)
    err = _refused(str(shard), expect=str(shard))
    assert "UTF-8" in err.message or "UTF-8" in (err.hint or "")


@pytest.mark.parametrize("kind", ["loop", "self"])
def test_symlink_loops_matched_by_a_glob(tmp_path: Path, kind: str) -> None:
    d = tmp_path / "loop"
    d.mkdir()
    if kind == "loop":
        os.symlink("l2.parquet", d / "l1.parquet")
        os.symlink("l1.parquet", d / "l2.parquet")
    else:
        os.symlink("self.parquet", d / "self.parquet")
    err = _refused(f"{d}/*.parquet", expect="cannot read")
    assert "loop" in err.message or "many levels" in err.message


@pytest.mark.parametrize(
    ("line", "expect"),
    [
        ('{"tokens": ' + "[" * 100_000 + "]" * 100_000 + ', "tags": []}', "nested too deeply"),
        ('{"tokens": [' + "9" * 5000 + '], "tags": ["O"]}', "4300 digits"),
        ('{"tokens": ["a"], "tags": ["O"], "tokens": ["b"]}', "appears twice"),
        ('{"tokens": ["\\ud800x"], "tags": ["O"]}', "surrogate pair: not text"),
        ('{"tokens": ["a"], "tags": ["B-\\udfff"]}', "surrogate pair: not text"),
        ('{"tokens": ["a"], "tags": ["O"], "\\ud83d": 1}', "surrogate pair: not text"),
        (
            '{"tokens": ["a"], "tags": ["O"], "x": {"y": ' + "[" * 5000 + "]" * 5000 + "}}",
            "nested too deeply",
        ),
    ],
    ids=["deep", "bigint", "duplicate", "surrogate-token", "surrogate-tag", "surrogate-key", "deep-extra"],
)
@pytest.mark.parametrize("where", ["train", "val"])
def test_jsonl_lines_python_refuses(tmp_path: Path, line: str, expect: str, where: str) -> None:
    good = tmp_path / "good.jsonl"
    good.write_text("\n".join(json.dumps(GOOD) for _ in range(8)) + "\n")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(GOOD) + "\n" + line + "\n")
    if where == "train":
        err = _refused(str(bad), expect="line 2", val=str(good))
    else:
        err = _refused(str(good), expect="line 2", val=str(bad))
    assert str(bad) in err.message and expect in err.message


def test_an_unreadable_shard_is_named(tmp_path: Path) -> None:
    if os.geteuid() == 0 and _can_override():
        pytest.skip("root reads mode-000 files (CAP_DAC_OVERRIDE)")
    shard = tmp_path / "s.jsonl"
    shard.write_text(json.dumps(GOOD) + "\n")
    shard.chmod(0)
    _refused(str(shard), expect=str(shard))


def _can_override() -> bool:
    try:
        caps = next(
            line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("CapEff")
        )
        return bool(int(caps.split()[1], 16) & (1 << 1))  # CAP_DAC_OVERRIDE
    except (OSError, StopIteration, ValueError):
        return False


# -- generated cases ---------------------------------------------------------------------------------------

JSONL_CASES = 24
PARQUET_CASES = 8


def _hostile_jsonl(rng: random.Random) -> bytes:
    lines = [json.dumps(GOOD).encode() for _ in range(rng.randint(1, 6))]
    i = rng.randrange(len(lines))
    lines[i] = mutate(rng, lines[i])
    if rng.random() < 0.3:
        lines.insert(rng.randrange(len(lines) + 1), rng.choice(NASTY))
    return b"\n".join(lines) + b"\n"


@pytest.mark.parametrize("index", range(JSONL_CASES))
def test_generated_jsonl_shards(tmp_path: Path, index: int) -> None:
    rng = cases(seed=2201, n=JSONL_CASES)[index]
    shard = tmp_path / "s.jsonl"
    shard.write_bytes(_hostile_jsonl(rng))
    try:
        _read_all(str(shard))
    except InputError as exc:  # the only way to refuse: naming the shard, with a hint
        assert str(shard) in exc.message or "data." in exc.message, (index, exc.message)
        assert exc.hint, index


def _hostile_strings(rng: random.Random) -> list[str]:
    pool = [s.decode("utf-8", "surrogateescape") for s in NASTY] + ["", " ", "O", "B-locality", "\x00"]
    return [rng.choice(pool) for _ in range(rng.randint(0, 4))]


@pytest.mark.parametrize("index", range(PARQUET_CASES))
def test_generated_parquet_shards(tmp_path: Path, index: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = cases(seed=2202, n=PARQUET_CASES)[index]
    rows = []
    for _ in range(rng.randint(1, 40)):
        toks = _hostile_strings(rng)
        tags = _hostile_strings(rng) if rng.random() < 0.3 else ["O"] * len(toks)
        rows.append(
            {
                "tokens": [t.encode("utf-8", "surrogatepass").decode("utf-8", "replace") for t in toks],
                "tags": [t.encode("utf-8", "surrogatepass").decode("utf-8", "replace") for t in tags],
            }
        )
    shard = tmp_path / "s.parquet"
    pq.write_table(pa.Table.from_pylist(rows), shard, row_group_size=rng.randint(1, 16))
    if rng.random() < 0.3:
        data = bytearray(shard.read_bytes())
        at = rng.randrange(len(data))
        data[at] ^= 0xFF
        shard.write_bytes(bytes(data))
    try:
        _read_all(str(shard))
    except InputError as exc:
        assert exc.hint, (index, exc.message)


@pytest.mark.parametrize(
    "line",
    [
        '{"tokens": ' + "[" * 100_000 + "]" * 100_000 + ', "tags": []}',
        '{"tokens": ["a"], "tags": [' + "[" * 3000 + "]" * 3000 + "]}",
    ],
    ids=["deep-first-row", "deep-tags"],
)
def test_the_hosts_preflight_and_summary_on_rows_python_refuses(tmp_path: Path, line: str) -> None:
    """Case 3 as written, on the host's side of `mw-env train` (preflight reads a JSONL shard's first row,
    `train summary` its label sample) before the trainer: exit 2 naming the file and line, or the summary
    without the labels; never the RecursionError that came back when preflight was added."""
    import sys

    from tests.fuzz.test_regressions import mw

    shard = tmp_path / "deep.jsonl"
    shard.write_text(line + "\n")
    files = [
        "--set",
        "data.source=files",
        "--set",
        f"data.train_files=[{shard}]",
        "--set",
        f"data.val_files={shard}",
    ]
    rc, _, err = mw(["train", "--config", "smoke", "--skip-doctor", "--venv", sys.prefix, *files])
    assert rc == 2 and f"{shard} line 1 is not a usable JSON row (nested too deeply)" in err, err
    rc, _, err = mw(["train", "summary", "--config", "smoke", *files])
    assert rc in (0, 2), err  # mw() asserts no traceback


@pytest.mark.parametrize("content", ["[" * 100_000, "[1, 2]", '"x"', "{"])
def test_a_hostile_corpus_cache_in_the_run_folder_is_read_again(tmp_path: Path, content: str) -> None:
    """The run folder's caches (corpus-index.json, shard-sha256.json) are run-folder data: anything there that
    is not what mw-env wrote is ignored and rebuilt, never a RecursionError or AttributeError."""
    from mw_env.rundir.contract import CORPUS_INDEX, SHARD_DIGESTS
    from mw_env.trainer.data import index
    from mw_env.trainer.data.digest import ShardHasher

    (tmp_path / CORPUS_INDEX).write_text(content)
    (tmp_path / SHARD_DIGESTS).write_text(content)
    assert index.load_cache(tmp_path) == {}
    ShardHasher([], tmp_path).close()


def test_a_full_disk_at_the_shard_hash_cache_is_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A write the fault table did not list (data.hash_shards: shard-sha256.json, written from a background
    thread): a full disk there printed `Exception in thread mw-env-shard-sha256: Traceback …` mid-run. It is a
    cache: one warning line, the hashes still reach the data card."""
    import threading

    from mw_env.trainer.data.digest import ShardHasher

    shard = tmp_path / "s.jsonl"
    shard.write_text(json.dumps(GOOD) + "\n")
    ident = {"path": str(shard), "format": "jsonl", "size": shard.stat().st_size, "footer_sha256": "x"}
    failures: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: failures.append(args.exc_value))
    monkeypatch.setenv("MW_ENV_FAULTS", "ENOSPC:shard-sha256.json")
    hasher = ShardHasher([ident], tmp_path)
    hasher._thread.join(timeout=60)  # the thread ends when every shard is hashed: an event, not a sleep
    hasher.close()
    assert not failures and "the disk is full" in capsys.readouterr().err
    assert hasher.annotate([ident])[0]["sha256"] != "pending"
