"""Weighted sources (data.sources): what the mix costs the input pipeline. The same two Parquet shards are read
by one producer as `data.train_files` and by another as two sources weighted 1:3 (the small one repeated);
each produces the same number of rows, in a fresh process, interleaved 3 times; the figure is the ratio of
CPU seconds per row (the mix's schedule lookups, the per-source windows and gathers) in the same run."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
ROWS, BATCH, GROUP = 60_000, 64, 2_000

GEN = """
import sys, pyarrow as pa, pyarrow.parquet as pq
from mw_env.trainspec.synthetic import FORMATS, generate_row
out, rows, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cols = {"tokens": [], "tags": []}
for i in range(rows):
    w, t = generate_row(seed=seed, split="train", index=i, countries=tuple(FORMATS), noise=0.15)
    cols["tokens"].append(w); cols["tags"].append(t)
pq.write_table(pa.table(cols), out, row_group_size=int(sys.argv[4]))
"""

MEASURE = r"""
import json, sys, time
mode, small, large, val, out, rows_wanted, batch = sys.argv[1:8]
rows_wanted, batch = int(rows_wanted), int(batch)
import numpy, pyarrow, torch
from mw_env.trainspec.config import find_config, resolve_config
sets = ["data.source=files", f"data.val_files=[{val}]", f"runtime.out_dir={out}", f"optim.batch_size={batch}",
        "data.workers=0", "data.shuffle_rows=16384"]
if mode == "mixed":
    sets += [f"data.sources=[{{name: small, files: [{small}], weight: 1}}, {{name: large, files: [{large}], weight: 3}}]"]
else:
    sets += [f"data.train_files=[{small}, {large}]"]
cfg = resolve_config(path=find_config("smoke"), overrides=sets).config
from mw_env.trainer.data import open_corpus
corpus = open_corpus(cfg)
steps = -(-rows_wanted // batch)
producer = corpus.producer(stop=steps)
c0 = time.process_time()
rows = tokens = 0
for step in range(steps):
    data = producer(step)
    rows, tokens = rows + data.counts.rows, tokens + data.counts.tokens
cpu = time.process_time() - c0
producer.close()
print(json.dumps({"rows": rows, "tokens": tokens, "cpu_s": cpu}))
"""


def _python() -> str:
    for candidate in (os.environ.get("MW_ENV_BENCH_PYTHON"), str(REPO / ".cache/test-venv/bin/python")):
        if candidate and Path(candidate).exists():
            return candidate
    raise SystemExit("bench_sources: no python with torch (set MW_ENV_BENCH_PYTHON or run make test-env)")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}


def main() -> int:
    sys.path.insert(0, str(HERE))
    from common import machine_line, update_section

    py = _python()
    started = machine_line()
    with tempfile.TemporaryDirectory(prefix="mw-env-bench-sources-") as d:
        tmp = Path(d)
        small, large, val = tmp / "small.parquet", tmp / "large.parquet", tmp / "val.parquet"
        for path, rows, seed in ((small, 8_000, 1), (large, 40_000, 2), (val, 1_000, 3)):
            subprocess.run(
                [py, "-c", GEN, str(path), str(rows), str(seed), str(GROUP)], check=True, env=_env()
            )
        got: dict[str, list[dict]] = {"plain": [], "mixed": []}
        for k in range(3):
            for mode in ("plain", "mixed"):
                argv = [py, "-c", MEASURE, mode, str(small), str(large), str(val), str(tmp / f"{mode}-{k}")]
                proc = subprocess.run(
                    [*argv, str(ROWS), str(BATCH)], env=_env(), capture_output=True, text=True
                )
                if proc.returncode != 0:
                    raise SystemExit(f"bench_sources: {mode} failed:\n{proc.stderr[-3000:]}")
                got[mode].append(json.loads(proc.stdout.strip().splitlines()[-1]))
                print(mode, got[mode][-1], flush=True)
    per_row = {m: statistics.median(x["cpu_s"] / x["rows"] for x in got[m]) for m in got}
    spread = {m: (min(x["cpu_s"] for x in got[m]), max(x["cpu_s"] for x in got[m])) for m in got}
    ratio = per_row["mixed"] / per_row["plain"]
    load = os.getloadavg()
    update_section(
        "sources",
        f"""
## Weighted sources (`bench/bench_sources.py`)

{started}; load average {load[0]:.1f} at the end. The machine is shared with other developers' jobs: CPU
seconds are less affected by them than wall time, but not immune.

The producer (read, encode, shuffle, gather; no model) over the same two shards (8,000 and 40,000 synthetic
rows, row groups of {GROUP:,}), {ROWS:,} rows in batches of {BATCH}, no worker processes, in a fresh process each,
interleaved 3 times: as `data.train_files` (one stream) and as `data.sources` weighted 1:3 (the small shard
repeated: 15,000 of the rows, almost twice over).

| reading | CPU ms per 1,000 rows (median of 3) | CPU s of a run, min - max |
|---|---|---|
| `data.train_files` | {1e6 * per_row["plain"]:.1f} | {spread["plain"][0]:.2f} - {spread["plain"][1]:.2f} |
| `data.sources` 1:3 | {1e6 * per_row["mixed"]:.1f} | {spread["mixed"][0]:.2f} - {spread["mixed"][1]:.2f} |

The mix costs **{ratio:.2f}x** the CPU of one stream per row (in this run). What it adds: each micro-batch's
rows located in the 10,000-row schedule (numpy, one lookup a row), a gather per source instead of one, and a
shuffle window per source (a small source's window is re-read and re-encoded each of its epochs).
""",
    )
    print(f"mixed / plain CPU per row: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
