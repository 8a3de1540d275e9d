"""Shared helpers for the trainer tests: tiny configs, reading runs back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mw_env.trainspec.config import ResolvedConfig, find_config, resolve_config

# A smoke run shrunk further: enough steps to see the loss fall, small enough for 2 shared cores.
TINY = (
    "data.synthetic_rows=192",
    "data.synthetic_val_rows=24",
    "optim.batch_size=8",
    "runtime.max_steps=8",
    "runtime.eval_every=4",
    "runtime.checkpoint_every=4",
    "runtime.log_every=4",
    "runtime.eval_samples=1",
    "runtime.threads=1",
    # No figures (about a CPU second a run, most of a tiny run's end): the report's tests draw them, and
    # test_loop's smoke run and the docs' smoke run check a real run's figures.
    "runtime.report_figures=false",
)


def tiny_config(out_dir: Path, *extra: str) -> ResolvedConfig:
    return resolve_config(path=find_config("smoke"), overrides=(*TINY, f"runtime.out_dir={out_dir}", *extra))


def events(run_dir: Path, kind: str | None = None) -> list[dict[str, Any]]:
    lines = (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    out = [json.loads(line) for line in lines]
    return [e for e in out if kind is None or e["event"] == kind]


def step_losses(run_dir: Path) -> dict[int, float]:
    """Last logged loss per step (a resumed run re-logs steps after its checkpoint)."""
    return {e["step"]: e["loss"] for e in events(run_dir, "step")}


def synthetic_rows(n: int, *, start: int = 0, seed: int = 5) -> list[dict[str, Any]]:
    """Address rows as a corpus build writes them: {"tokens": [...], "tags": [...]}."""
    from mw_env.trainspec.synthetic import FORMATS, generate_row

    out = []
    for i in range(start, start + n):
        words, tags = generate_row(seed=seed, split="train", index=i, countries=tuple(FORMATS), noise=0.2)
        out.append({"tokens": words, "tags": tags})
    return out


def write_parquet_corpus(
    folder: Path, *, shards: int = 3, rows: int = 120, row_group: int = 32, seed: int = 5
) -> list[Path]:
    """`shards` Parquet files of `rows` rows each, in row groups of `row_group` rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for s in range(shards):
        path = folder / f"shard-{s:02d}.parquet"
        table = pa.Table.from_pylist(synthetic_rows(rows, start=s * rows, seed=seed))
        pq.write_table(table, path, row_group_size=row_group)
        paths.append(path)
    return paths


def files_config(out_dir: Path, corpus: Path, *extra: str) -> ResolvedConfig:
    """The tiny config over a Parquet corpus folder (validation: held-out row groups)."""
    return tiny_config(
        out_dir,
        "data.source=files",
        f"data.train_files=[{corpus}/*.parquet]",
        "data.val_fraction=0.1",
        "runtime.eval_batches=2",
        *extra,
    )


def parameter_table(model: Any) -> list[tuple[str, int]]:
    """(part, parameters) rows of a built TaggerNet: embeddings, each block, the head (the summary's
    parameter_counts must say the same)."""
    rows = [
        ("embeddings", sum(p.numel() for p in (*model.tok_emb.parameters(), *model.pos_emb.parameters())))
    ]
    if model.words is not None:
        rows.append(("word features", sum(p.numel() for p in model.words.parameters())))
    if model.pool is not None:
        rows.append(("word pooling", sum(p.numel() for p in model.pool.parameters())))
    rows += [(f"block {i}", sum(p.numel() for p in b.parameters())) for i, b in enumerate(model.blocks)]
    rows.append(("head", sum(p.numel() for p in (*model.ln_f.parameters(), *model.head.parameters()))))
    return rows


def is_valid(tags: list[str]) -> bool:
    """Whether every transition of a row's tags is valid IOB2 (what the Viterbi decoding never breaks)."""
    prev = "O"
    for tag in tags:
        prefix, _, typ = tag.partition("-")
        if prefix == "I" and typ and prev not in (f"B-{typ}", f"I-{typ}"):
            return False
        prev = tag
    return True
