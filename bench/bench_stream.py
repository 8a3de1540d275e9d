"""Streaming a Parquet corpus: memory and start-up independent of its size, throughput, data wait.

Measured in one run, same model (64-d, 2 blocks), same steps, same validation shard:
1. `data.source: files` over a 1-shard corpus (1x) and over 8 such shards (8x): peak RSS of the
   trainer process (os.wait4 rusage) and the time from launch to the first step's metrics event.
   Targets: 8x within 1.25x (memory) and 1.5x (wall) of 1x.
2. The reference: the previous in-memory path (mw-env at REF_COMMIT, which read, tokenized and
   packed every row before step 1) on the 1x corpus: its RSS, time to first step and throughput.
3. Throughput (labelled words/s, the old path's `tokens_per_s`; and input tokens/s) and the share of
   step time the loop waited for data, median over the steps after warm-up.

Corpus: real-shaped address rows (the synthetic generator: 7 countries' formats, noise), written with
pyarrow in row groups of ROW_GROUP rows; the 1x shard has ROWS rows. Distinct rows are generated once
and tiled (generation in Python is the slow part; the shard layout is what is measured).
Knobs: MW_ENV_BENCH_ROWS (default 1,000,000), MW_ENV_BENCH_STEPS (60), MW_ENV_BENCH_REF (the commit).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
ROWS = int(os.environ.get("MW_ENV_BENCH_ROWS", "1000000"))
STEPS = int(os.environ.get("MW_ENV_BENCH_STEPS", "60"))
REF_COMMIT = os.environ.get("MW_ENV_BENCH_REF", "41471ec")  # main before streaming: the in-memory loader
ROW_GROUP = 65536
REPEATS = int(os.environ.get("MW_ENV_BENCH_REPEATS", "3"))
DISTINCT = 100_000

MODEL = (
    "model.d_model=64",
    "model.n_layers=2",
    "model.n_heads=2",
    "model.d_ff=256",
    "optim.batch_size=32",
    "runtime.eval_every=100000",
    "runtime.checkpoint_every=100000",
    "runtime.eval_batches=1",
    "runtime.log_every=1000",
    "runtime.threads=1",
)


def _python_with_torch() -> str:
    for candidate in (os.environ.get("MW_ENV_BENCH_PYTHON"), str(REPO / ".cache/test-venv/bin/python")):
        if candidate and Path(candidate).exists():
            return candidate
    raise SystemExit("bench_stream: no python with torch (set MW_ENV_BENCH_PYTHON or run make test-env)")


GEN = """
import sys, pyarrow as pa, pyarrow.parquet as pq
from mw_env.trainspec.synthetic import FORMATS, generate_row
out, rows, distinct, group = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
cols = {"tokens": [], "tags": []}
for i in range(distinct):
    w, t = generate_row(seed=11, split="train", index=i, countries=tuple(FORMATS), noise=0.15)
    cols["tokens"].append(w); cols["tags"].append(t)
base = pa.table(cols)
reps = -(-rows // distinct)
table = pa.concat_tables([base] * reps).slice(0, rows)
pq.write_table(table, out, row_group_size=group)
val = pa.table({k: v[:2000] for k, v in cols.items()})
pq.write_table(val, out.replace(".parquet", "-val.parquet.v"), row_group_size=group)
"""


def _make_corpora(py: str, tmp: Path) -> tuple[Path, Path, Path]:
    one, eight = tmp / "x1", tmp / "x8"
    one.mkdir()
    eight.mkdir()
    shard = one / "shard-000.parquet"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    subprocess.run([py, "-c", GEN, str(shard), str(ROWS), str(DISTINCT), str(ROW_GROUP)], check=True, env=env)
    val = tmp / "val.parquet"
    (one / "shard-000-val.parquet.v").rename(val)
    for k in range(8):
        os.link(shard, eight / f"shard-{k:03d}.parquet")  # same bytes, 8 shards: the corpus 8x larger
    return one, eight, val


def _measure(argv: list[str], env: dict[str, str], run_dir: Path) -> dict:
    t0 = time.time()
    proc = subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.time() - t0
    err = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"bench_stream: {' '.join(argv[:6])} ... failed:\n{err[-3000:]}")
    events = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [e for e in events if e["event"] == "step"]
    warm = steps[5:] or steps

    def fastest_quarter(key: str) -> float:
        # Other jobs on a shared machine only ever slow a step down: the fastest quarter measures the code.
        rates = sorted(e[key] for e in warm)
        top = rates[-max(len(rates) // 4, 1) :]
        return sum(top) / len(top)

    out = {
        "rss_mb": usage.ru_maxrss / 1024,
        "first_step_s": steps[0]["time"] - t0,
        "wall_s": wall,
        # The old loop's tokens_per_s counted labelled words; the new one logs words_per_s for that.
        "words_per_s": fastest_quarter("words_per_s" if "words_per_s" in warm[0] else "tokens_per_s"),
        "tokens_per_s": fastest_quarter("tokens_per_s") if "words_per_s" in warm[0] else None,
        "median_words_per_s": statistics.median(e.get("words_per_s", e["tokens_per_s"]) for e in warm),
    }
    if "data_wait_s" in warm[0]:
        out["data_wait_share"] = sum(e["data_wait_s"] for e in warm) / sum(e["step_s"] for e in warm)
    return out


def _best(results: list[dict]) -> dict:
    """Fastest time and rate over the repeats (others' load only adds), median peak RSS."""
    out = dict(results[0])
    for key in ("first_step_s", "wall_s"):
        out[key] = min(x[key] for x in results)
    for key in ("words_per_s", "tokens_per_s", "median_words_per_s"):
        if out.get(key) is not None:
            out[key] = max(x[key] for x in results)
    out["rss_mb"] = statistics.median(x["rss_mb"] for x in results)
    if "data_wait_share" in out:
        out["data_wait_share"] = statistics.median(x["data_wait_share"] for x in results)
    return out


def main() -> int:
    sys.path.insert(0, str(HERE))
    from common import machine_line, update_section

    py = _python_with_torch()
    with tempfile.TemporaryDirectory(prefix="mw-env-bench-stream-") as d:
        tmp = Path(d)
        t = time.perf_counter()
        one, eight, val = _make_corpora(py, tmp)
        gen_s = time.perf_counter() - t
        size_mb = (one / "shard-000.parquet").stat().st_size / 1e6
        ref_src = tmp / "ref"
        ref_src.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", REF_COMMIT, "src"], capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", str(ref_src)], input=archive.stdout, check=True)

        def argv(run: Path, corpus: Path, *extra: str) -> list[str]:
            sets = [*MODEL, f"runtime.max_steps={STEPS}", f"runtime.out_dir={run}", "data.source=files"]
            sets += [f"data.train_files=[{corpus}/*.parquet]", f"data.val_files=[{val}]", *extra]
            out = [py, "-m", "mw_env.trainer", "run", "--config", "smoke"]
            for s in sets:
                out += ["--set", s]
            return out

        new_env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}
        old_env = {**os.environ, "PYTHONPATH": str(ref_src / "src"), "OMP_NUM_THREADS": "1"}
        runs: dict[str, list[dict]] = {"1x": [], "8x": [], "ref": []}
        # 1x and 8x interleaved, REPEATS times each: a neighbour's burst slows one run, not one side.
        plan = [("1x", one, new_env), ("8x", eight, new_env)] * REPEATS + [("ref", one, old_env)]
        for k, (name, corpus, env) in enumerate(plan):
            run = tmp / f"run-{k}-{name}"
            print(f"-- {name}", flush=True)
            runs[name].append(_measure(argv(run, corpus), env, run))
            print(json.dumps(runs[name][-1]), flush=True)
    a, b, r = (_best(runs[k]) for k in ("1x", "8x", "ref"))
    body = (
        "## Streaming a Parquet corpus (`bench/bench_stream.py`)\n\n"
        f"_{machine_line()}_\n\n"
        f"Corpus: 1x = one Parquet shard of {ROWS:,} real-shaped address rows ({size_mb:.0f} MB, row groups of "
        f"{ROW_GROUP:,} rows, {DISTINCT:,} distinct rows tiled; generated in {gen_s:.0f} s); 8x = eight such "
        "shards. Same model (2 blocks x 64 channels, batch 32), "
        f"{STEPS} steps, the same 2,000-row validation shard, `data.shuffle_window` 4, one torch thread. "
        f"1x and 8x ran {REPEATS} times each, interleaved: times are the fastest run, peak RSS the median "
        "(the reference ran once).\n\n"
        "| run | peak RSS | time to first step | wall | labelled words/s* | input tokens/s* | data wait |\n"
        "|---|---|---|---|---|---|---|\n"
        f"| in-memory loader (mw-env {REF_COMMIT}, reference), 1x | {r['rss_mb']:,.0f} MB | {r['first_step_s']:.1f} s "
        f"| {r['wall_s']:.1f} s | {r['words_per_s']:,.0f} | – | – |\n"
        f"| streamed, 1x | {a['rss_mb']:,.0f} MB | {a['first_step_s']:.1f} s | {a['wall_s']:.1f} s "
        f"| {a['words_per_s']:,.0f} | {a['tokens_per_s']:,.0f} | {100 * a['data_wait_share']:.1f}% |\n"
        f"| streamed, 8x | {b['rss_mb']:,.0f} MB | {b['first_step_s']:.1f} s | {b['wall_s']:.1f} s "
        f"| {b['words_per_s']:,.0f} | {b['tokens_per_s']:,.0f} | {100 * b['data_wait_share']:.1f}% |\n\n"
        f"- **8x / 1x: memory {b['rss_mb'] / a['rss_mb']:.2f}x (target <= 1.25), time to first step "
        f"{b['first_step_s'] / a['first_step_s']:.2f}x, wall {b['wall_s'] / a['wall_s']:.2f}x (target <= 1.5).**\n"
        f"- Streamed / in-memory, 1x: memory {a['rss_mb'] / r['rss_mb']:.2f}x, time to first step "
        f"{a['first_step_s'] / r['first_step_s']:.2f}x, labelled words/s {a['words_per_s'] / r['words_per_s']:.2f}x.\n"
        "- \\* mean of the fastest quarter of the steps after 5 warm-up steps (the 2 cores are shared with other "
        "jobs, which only ever slow a step down; medians: "
        f"{r['median_words_per_s']:,.0f} / {a['median_words_per_s']:,.0f} / {b['median_words_per_s']:,.0f} "
        "labelled words/s).\n"
        "- Data wait: the share of step time (after 5 warm-up steps) the loop spent waiting for the background "
        "reader. On 2 shared cores the reader thread competes with the step for the CPU (and the GIL), so "
        "a tiny CPU model is the worst case; on a GPU the step's compute releases the GIL.\n"
        "- Time to first step includes starting Python and importing torch; peak RSS is the trainer process's "
        "(`os.wait4` rusage). The old loader's time grows with the corpus (its whole pass runs before step 1); the "
        "issue measured 160 s and 2.4 GB at 4x, 1,023 s and 7.6 GB at 16x on this machine.\n"
    )
    update_section("stream", body)
    print(body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
