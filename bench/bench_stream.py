"""The input pipeline at the users' scale, side by side in one run (docs/benchmarks.md, section "stream").

Corpus: real-shaped address rows (the synthetic generator: 7 countries' formats, noise), written with
pyarrow; DISTINCT_SHARDS shards from different seeds, copied up to 80; `data.labels` NOT set (the labels
are discovered, as a user who leaves them out gets).

1. Start-up, 80 shards vs 1 (the same shards, 200k-row groups): the trainer CLI, 3 steps; corpus open
   (the trainer's own line), time to the first step's metrics event, and the process's CPU seconds.
2. Memory, 1Mi-row groups (pyarrow's default) vs 200k-row groups: the same rows, read by the rank's
   producer past a whole 1Mi group; peak RSS, and peak RSS above the process's RSS after imports.
3. Tokens per CPU-second of the pipeline (no workers: everything in one process) vs a plain pyarrow loop
   producing the same ids and padded batches (iter_batches, to_pylist, the tokenizer per row), byte
   tokenizer and a 48k-piece SentencePiece model (trained here on generated text).
4. Tokens/s with 0, 1 and 2 encoder workers (wall and CPU, workers' CPU included).
5. Cores per rank an H200-class step rate needs (a 30M encoder consumes ~2.2M tokens/s), from 3.

CPU time, not wall time, is the figure for 1 and 3: the machine is shared by other jobs, which stretch wall
time but not the CPU seconds this code spends. Each measurement runs in its own process.
Knobs: MW_ENV_BENCH_ROWS (rows per shard, default 200,000), MW_ENV_BENCH_SHARDS (distinct shards, 16).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
ROWS = int(os.environ.get("MW_ENV_BENCH_ROWS", "200000"))
DISTINCT_SHARDS = int(os.environ.get("MW_ENV_BENCH_SHARDS", "16"))
MANY = 80
BIG_GROUP, SMALL_GROUP = 1 << 20, 200_000
BATCH = 320  # divides ROWS: the pipeline's epoch and the plain loop's pass are the same rows
H200_TOKENS_PER_S = 2.2e6  # a 30M-parameter encoder's step rate on an H200 (the figure)

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
    "data.workers=0",
)


def _python_with_torch() -> str:
    for candidate in (os.environ.get("MW_ENV_BENCH_PYTHON"), str(REPO / ".cache/test-venv/bin/python")):
        if candidate and Path(candidate).exists():
            return candidate
    raise SystemExit("bench_stream: no python with torch (set MW_ENV_BENCH_PYTHON or run make test-env)")


GEN = """
import sys, pyarrow as pa, pyarrow.parquet as pq
from mw_env.trainspec.synthetic import FORMATS, generate_row
out, rows, seed, group = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
distinct = min(rows, 20000)
cols = {"tokens": [], "tags": []}
for i in range(distinct):
    w, t = generate_row(seed=seed, split="train", index=i, countries=tuple(FORMATS), noise=0.15)
    cols["tokens"].append(w); cols["tags"].append(t)
base = pa.table(cols)
table = pa.concat_tables([base] * -(-rows // distinct)).slice(0, rows)
pq.write_table(table, out, row_group_size=group)
"""

SPM = """
import io, random, sys
import sentencepiece as spm
from mw_env.trainspec.synthetic import FORMATS, generate_row
rng = random.Random(0)
# Addresses plus invented place names: the generator's own vocabulary is too small for 48k pieces.
names = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(4, 10))).capitalize()
         for _ in range(60000)]
rows = [" ".join(generate_row(seed=3, split="train", index=i, countries=tuple(FORMATS), noise=0.15)[0])
        + " " + " ".join(rng.sample(names, 3)) for i in range(30000)]
model = io.BytesIO()
spm.SentencePieceTrainer.train(sentence_iterator=iter(rows), model_writer=model, vocab_size=48000,
                               model_type="unigram", minloglevel=2, num_threads=2)
open(sys.argv[1], "wb").write(model.getvalue())
"""

# One measurement of the producer (or the plain loop) in a fresh process; prints one JSON line.
MEASURE = r"""
import json, os, resource, sys, time
mode, train, val, out, rows_wanted, batch, tokenizer, spm_model, workers = sys.argv[1:10]
rows_wanted, batch, workers = int(rows_wanted), int(batch), int(workers)
import numpy, pyarrow, torch  # imports first: the RSS they cost is the baseline
from mw_env.trainspec.config import find_config, resolve_config
sets = ["data.source=files", f"data.train_files=[{train}]", f"data.val_files=[{val}]",
        f"runtime.out_dir={out}", f"optim.batch_size={batch}", f"data.workers={workers}",
        f"data.tokenizer={tokenizer}"] + ([f"data.spm_model={spm_model}"] if spm_model != "-" else [])
cfg = resolve_config(path=find_config("smoke"), overrides=sets).config
from mw_env.trainer.data import open_corpus
import gc
# The garbage collector is paused while an open is timed (as timeit does): with torch imported a full
# collection costs ~75 ms, and it falls on whichever code crosses the allocation threshold.
gc.collect(); gc.disable()
o0 = time.process_time()
corpus = open_corpus(cfg)  # the first open: footers and label samples read (and cached in out)
open_cpu = time.process_time() - o0
o0 = time.process_time()
corpus = open_corpus(cfg)  # a resume's open: from the cache
open_cached_cpu = time.process_time() - o0
gc.enable()
base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
c0, w0 = time.process_time(), time.perf_counter()
tokens = words = rows = 0
if mode == "idle":  # the worker processes started and stopped: their start-up CPU, to subtract
    producer = corpus.producer(stop=1)
    if workers:  # the same pool the producer would start for its first window
        from mw_env.trainer.data.workers import WorkerPool
        WorkerPool(workers, producer.encoding.encoder.spec()).close()
    producer.close()
elif mode == "pipeline":
    producer = corpus.producer(stop=-(-rows_wanted // batch))
    step = 0
    while rows < rows_wanted:
        data = producer(step)
        tokens, words, rows = tokens + data.counts.tokens, words + data.counts.words, rows + data.counts.rows
        step += 1
    producer.close()
else:  # the plain pyarrow loop: what a user writes without this pipeline, producing the same ids
    import glob
    import numpy as np, pyarrow.parquet as pq
    from mw_env.trainer.data import IGNORE, PAD, encode_row
    tok, index = corpus.tokenizer, corpus.labels.index
    max_len = cfg.model.max_len
    sp = getattr(tok, "sp", None)
    def row_ids(ws, ts):
        if sp is None:
            return encode_row(tok, ws, ts, max_len, index)[:2]
        ids, labels = [1], [IGNORE]  # CLS; one SentencePiece call per row (a list of words)
        for w, t, p in zip(ws, ts, sp.encode(ws)):
            p = [i + 4 for i in p] or [3]
            if len(ids) + len(p) + 1 > max_len:
                break
            labels += [index.get(t, IGNORE)] + [IGNORE] * (len(p) - 1)
            ids += p
        return ids + [2], labels + [IGNORE]
    for path in sorted(glob.glob(train)):
        for rb in pq.ParquetFile(path).iter_batches(batch_size=batch, columns=["tokens", "tags"]):
            out_rows = [row_ids(ws, ts) for ws, ts in zip(rb.column(0).to_pylist(), rb.column(1).to_pylist())]
            width = max(len(a) for a, _ in out_rows)
            ids = np.full((len(out_rows), width), PAD, dtype=np.int64)
            lab = np.full((len(out_rows), width), IGNORE, dtype=np.int64)
            for i, (a, b) in enumerate(out_rows):
                ids[i, : len(a)] = a
                lab[i, : len(b)] = b
            t_ids, t_lab = torch.from_numpy(ids), torch.from_numpy(lab)
            tokens += sum(len(a) for a, _ in out_rows)
            words += int((lab != IGNORE).sum())
            rows += len(out_rows)
            if rows >= rows_wanted:
                break
        if rows >= rows_wanted:
            break
wall, cpu = time.perf_counter() - w0, time.process_time() - c0
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"open_cpu_s": open_cpu, "open_cached_cpu_s": open_cached_cpu, "tokens": tokens, "words": words, "rows": rows, "wall_s": wall, "cpu_s": cpu,
                  "children_cpu_s": kids.ru_utime + kids.ru_stime,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "base_rss_mb": base_rss / 1024}))
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}


def _measure(py: str, *args: object) -> dict:
    proc = subprocess.run(
        [py, "-c", MEASURE, *map(str, args)], env=_env(), capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(f"bench_stream: measurement {args[:2]} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _make_corpora(py: str, tmp: Path) -> dict[str, Path]:
    env = _env()
    gen = lambda out, rows, seed, group: subprocess.run(  # noqa: E731
        [py, "-c", GEN, str(out), str(rows), str(seed), str(group)], check=True, env=env
    )
    many, one, big, small = (tmp / n for n in ("x80", "x1", "big", "small"))
    for d in (many, one, big, small):
        d.mkdir()
    for k in range(DISTINCT_SHARDS):
        gen(many / f"shard-{k:03d}.parquet", ROWS, 100 + k, SMALL_GROUP)
    for k in range(DISTINCT_SHARDS, MANY):  # copies of the distinct ones, up to 80 shards
        shutil.copyfile(many / f"shard-{k % DISTINCT_SHARDS:03d}.parquet", many / f"shard-{k:03d}.parquet")
    shutil.copyfile(many / "shard-000.parquet", one / "shard-000.parquet")
    gen(tmp / "val.parquet", 4000, 99, SMALL_GROUP)
    for d, group in ((big, BIG_GROUP), (small, SMALL_GROUP)):
        for k in range(2):
            gen(d / f"shard-{k}.parquet", BIG_GROUP + 100_000, 200 + k, group)
    return {"many": many, "one": one, "big": big, "small": small, "val": tmp / "val.parquet"}


def _trainer(py: str, corpus: Path, val: Path, run: Path) -> dict:
    sets = [*MODEL, "runtime.max_steps=3", f"runtime.out_dir={run}", "data.source=files"]
    sets += [f"data.train_files=[{corpus}/*.parquet]", f"data.val_files=[{val}]"]
    argv = [py, "-m", "mw_env.trainer", "run", "--config", "smoke"]
    for s in sets:
        argv += ["--set", s]
    t0 = time.time()
    proc = subprocess.Popen(argv, env=_env(), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"bench_stream: trainer failed:\n{err.decode()[-3000:]}")
    events = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    first = next(e for e in events if e["event"] == "step")
    wait = next(e for e in events if e["event"] == "data_wait")
    opened = re.search(r"opened in ([0-9.]+) s", out.decode())
    return {
        "first_step_s": first["time"] - t0,
        "open_s": float(opened.group(1)) if opened else float("nan"),
        "first_fill_s": wait.get("first_fill_s", 0.0),
        "labels": re.search(r"(\d+) labels \(discovered", out.decode()) is not None,
    }


def _trainer_cpu(py: str, corpus: Path, val: Path, run: Path) -> dict:
    """The same trainer run, with its CPU seconds (children included) from resource accounting."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = _trainer(py, corpus, val, run)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    out["cpu_s"] = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return out


def main() -> int:
    sys.path.insert(0, str(HERE))
    from common import machine_line, update_section

    py = _python_with_torch()
    with tempfile.TemporaryDirectory(prefix="mw-env-bench-stream-") as d:
        tmp = Path(d)
        t = time.perf_counter()
        c = _make_corpora(py, tmp)
        spm_model = tmp / "spm48k.model"
        subprocess.run([py, "-c", SPM, str(spm_model)], check=True, env=_env())
        gen_s = time.perf_counter() - t
        shard_mb = (c["one"] / "shard-000.parquet").stat().st_size / 1e6
        print(f"-- corpora in {gen_s:.0f} s", flush=True)

        # 1. start-up, 80 vs 1, interleaved twice (the best of each: other jobs only ever add)
        start: dict[str, list[dict]] = {"one": [], "many": []}
        for k in range(2):
            for name in ("one", "many"):
                start[name].append(_trainer_cpu(py, c[name], c["val"], tmp / f"run-{name}-{k}"))
                print(name, json.dumps(start[name][-1]), flush=True)
        # the open alone, in CPU seconds (threads included), 3 times each interleaved: first open and cached
        opens: dict[str, list[dict]] = {"one": [], "many": []}
        for k in range(3):
            for name in ("one", "many"):
                corpus = f"{c[name]}/*.parquet"
                out = tmp / f"o-{name}-{k}"
                opens[name].append(_measure(py, "idle", corpus, c["val"], out, 0, BATCH, "byte", "-", 0))
                print("open", name, json.dumps(opens[name][-1]), flush=True)
        o1, o80 = (
            {k: statistics.median(x[k] for x in opens[n]) for k in ("open_cpu_s", "open_cached_cpu_s")}
            for n in ("one", "many")
        )
        per_shard_ms = 1000 * (o80["open_cpu_s"] - o1["open_cpu_s"]) / (MANY - 1)
        open_ratio = o80["open_cpu_s"] / o1["open_cpu_s"]
        budget_ms = 1000 * 0.5 * o1["open_cpu_s"] / (MANY - 1)
        close = (
            ": a margin smaller than this machine's run-to-run spread of CPU seconds (above), so a run here can"
            " land on either side of 1.5x"
            if abs(budget_ms - per_shard_ms) < 0.25 * budget_ms
            else ""
        )
        open_verdict = f"""- {"The first open is within the target" if open_ratio <= 1.5 else "The first open is above 1.5x"}:
  {per_shard_ms:.3f} ms a shard, where 1.5x allows {budget_ms:.3f} ms{close}. What a shard costs is the work that
  defines it: its glob match resolved (one lstat), a stat (the cache key), an open and two reads of its
  footer, the footer's sha256 (the resume's identity check) and pyarrow's parse of it (the largest part,
  ~0.02-0.03 ms: pyarrow's reader also decodes the Arrow schema pyarrow stores in the footer; the one parser
  that skips it aborts the process on a damaged footer), the schema check (once per distinct schema in an
  open), an open and one read of the tags dictionary page and its decode, and the shard's cache entry. It
  was 0.13 ms (`pq.read_metadata`'s wrapper, an Arrow schema built and a full path resolve per shard), and
  2.2 ms before that (the tags of 4,096 decoded rows per shard, in a pool of 8 threads)."""
        s1 = {k: min(x[k] for x in start["one"]) for k in ("first_step_s", "open_s", "cpu_s", "first_fill_s")}
        s80 = {
            k: min(x[k] for x in start["many"]) for k in ("first_step_s", "open_s", "cpu_s", "first_fill_s")
        }

        # 2. memory: 1Mi-row groups vs 200k-row groups, the same rows, past a whole 1Mi group
        rss = {}
        for name in ("big", "small"):
            rss[name] = _measure(
                py, "pipeline", f"{c[name]}/*.parquet", c["val"], tmp / f"m-{name}", BIG_GROUP + 50_000,
                1024, "byte", "-", 0,
            )  # fmt: skip
            print(name, json.dumps(rss[name]), flush=True)

        # 3. tokens per CPU-second: the pipeline vs the plain loop, byte and SentencePiece 48k
        one = f"{c['one']}/*.parquet"
        rate: dict[tuple[str, str], dict] = {}
        for tok, model in (("byte", "-"), ("sentencepiece", spm_model)):
            for mode in ("pipeline", "plain"):
                rate[(tok, mode)] = _measure(
                    py, mode, one, c["val"], tmp / f"r-{tok}-{mode}", ROWS, BATCH, tok, model, 0
                )
                print(tok, mode, json.dumps(rate[(tok, mode)]), flush=True)
            assert rate[(tok, "pipeline")]["tokens"] == rate[(tok, "plain")]["tokens"], "not the same ids"

        # 4. workers: 0, 1, 2 encoder processes (SentencePiece: where the encoding is the work), 3 epochs
        work: dict[int, dict] = {}
        idle: dict[int, dict] = {}
        for n in (0, 1, 2):
            work[n] = _measure(
                py, "pipeline", one, c["val"], tmp / f"w-{n}", 3 * ROWS, BATCH, "sentencepiece", spm_model, n
            )
            idle[n] = _measure(
                py, "idle", one, c["val"], tmp / f"i-{n}", 0, BATCH, "sentencepiece", spm_model, n
            )
            print("workers", n, json.dumps(work[n]), "idle", json.dumps(idle[n]), flush=True)

    def per_cpu(m: dict) -> float:
        return m["tokens"] / (m["cpu_s"] + m["children_cpu_s"])

    rows = []
    for tok, label in (("byte", "byte tokenizer"), ("sentencepiece", "SentencePiece, 48k pieces")):
        p, q = rate[(tok, "pipeline")], rate[(tok, "plain")]
        rows.append(
            f"| {label} | {per_cpu(p) / 1e6:.2f}M | {per_cpu(q) / 1e6:.2f}M | **{per_cpu(p) / per_cpu(q):.2f}x** "
            f"| {H200_TOKENS_PER_S / per_cpu(p):.1f} | {H200_TOKENS_PER_S / per_cpu(q):.1f} |"
        )
    big, small = rss["big"], rss["small"]
    grow = lambda m: m["rss_mb"] - m["base_rss_mb"]  # noqa: E731
    w_rows = []
    steady = {n: max(work[n]["children_cpu_s"] - idle[n]["children_cpu_s"], 1e-9) for n in work}
    for n, m in work.items():
        per_worker = f"{m['tokens'] / steady[n] / 1e6:.2f}M" if n else "–"
        w_rows.append(
            f"| {n} | {m['tokens'] / m['wall_s'] / 1e6:.2f}M | {m['cpu_s']:.2f} | {steady[n]:.2f} "
            f"| {idle[n]['children_cpu_s']:.2f} | {m['tokens'] / m['cpu_s'] / 1e6:.2f}M "
            f"| {per_worker} |"
        )
    speedup = (work[2]["tokens"] / work[2]["wall_s"]) / (work[1]["tokens"] / work[1]["wall_s"])
    # On free cores: n workers deliver min(n x a worker's rate, the rank thread's rate) (both per CPU-second).
    rank_rate = (work[1]["tokens"] / work[1]["cpu_s"] + work[2]["tokens"] / work[2]["cpu_s"]) / 2
    worker_rate = work[1]["tokens"] / steady[1]
    projected = {n: min(n * worker_rate, rank_rate) for n in (1, 2, 4, 8)}
    need_workers = -(-H200_TOKENS_PER_S // worker_rate)

    body = f"""## The input pipeline at the users' scale (`bench/bench_stream.py`)

_{machine_line()}_

Corpus: real-shaped address rows (the synthetic generator: 7 countries' formats, noise), {DISTINCT_SHARDS}
distinct shards (different seeds) of {ROWS:,} rows ({shard_mb:.0f} MB, 200k-row groups) copied up to {MANY};
`data.labels` **not set** (discovered); a 4,000-row validation shard. Generated in {gen_s:.0f} s. CPU seconds
are the figure where it matters: the 2 cores are shared with other jobs, which stretch wall time many times
over; CPU seconds move far less, but they move too (up to ~2x between runs of the same loop on this machine,
when another job shares a core and its caches), so every ratio below compares figures of this one run,
each measurement in its own process.

**Start-up, 80 shards vs 1** (the trainer CLI, 3 steps, best of 2 interleaved runs each):

| corpus | corpus open, CPU s (first / cached) | corpus open, wall | time to first step | CPU s, whole run | first fill |
|---|---|---|---|---|---|
| 1 shard | {o1["open_cpu_s"]:.3f} / {o1["open_cached_cpu_s"]:.3f} | {s1["open_s"]:.2f} s | {s1["first_step_s"]:.1f} s | {s1["cpu_s"]:.1f} | {s1["first_fill_s"]:.2f} s |
| 80 shards | {o80["open_cpu_s"]:.3f} / {o80["open_cached_cpu_s"]:.3f} | {s80["open_s"]:.2f} s | {s80["first_step_s"]:.1f} s | {s80["cpu_s"]:.1f} | {s80["first_fill_s"]:.2f} s |

- **80 / 1: time to first step {s80["first_step_s"] / s1["first_step_s"]:.2f}x, CPU of the whole run
  {s80["cpu_s"] / s1["cpu_s"]:.2f}x (target <= 1.5x).** The corpus open itself (median of 3, CPU seconds,
  pyarrow already imported, the garbage collector paused while timed, as `timeit` does):
  **{o80["open_cpu_s"] / o1["open_cpu_s"]:.2f}x** on a first open: 80 footers and 80 tags dictionary pages,
  read once, by rank 0 only, one after the other; {per_shard_ms:.2f} ms of CPU per shard beyond the first
  (~{per_shard_ms * 600 / 1000:.2f} s for 600 shards), on a 1-shard open of {1000 * o1["open_cpu_s"]:.0f} ms that is
  itself mostly one-time imports (`pyarrow.parquet`, `numpy.random`). From the cache a resume or second
  run uses (`<run>/corpus-index.json`): {1000 * o1["open_cached_cpu_s"]:.1f} ms vs {1000 * o80["open_cached_cpu_s"]:.1f} ms
  ({o80["open_cached_cpu_s"] / max(o1["open_cached_cpu_s"], 1e-9):.1f}x of next to nothing: a stat per shard).
  Wall times are the best of 2 and move with the machine's load, CPU seconds much less.
{open_verdict}

**Memory, 1Mi-row groups vs 200k-row groups** (the same 2 x {BIG_GROUP + 100_000:,} rows; the rank's producer
reads {BIG_GROUP + 50_000:,} rows, past a whole 1Mi group; `data.shuffle_rows` 65,536):

| row groups | peak RSS | above the RSS after imports and open |
|---|---|---|
| 1Mi rows | {big["rss_mb"]:,.0f} MB | {grow(big):,.0f} MB |
| 200k rows | {small["rss_mb"]:,.0f} MB | {grow(small):,.0f} MB |

- **1Mi / 200k: peak RSS {big["rss_mb"] / small["rss_mb"]:.2f}x (target <= 1.25x); the pipeline's own part
  {grow(big) / max(grow(small), 1e-9):.2f}x.**

**Tokens per CPU-second, the pipeline vs a plain pyarrow loop producing the same ids** ({ROWS:,} rows, batches
of {BATCH} padded into tensors; the plain loop: `iter_batches`, `to_pylist`, the tokenizer per row (`encode_row`
for bytes, one `sp.encode(words)` per row for SentencePiece), numpy padding; the token totals of both are
checked equal):

| tokenizer | pipeline tokens/CPU-s | plain loop tokens/CPU-s | pipeline / plain | cores per rank for 2.2M tokens/s (pipeline) | (plain loop) |
|---|---|---|---|---|---|
{chr(10).join(rows)}

- Cores per rank = 2.2M tokens/s (a 30M-parameter encoder's step rate on an H200) / the measured tokens per
  CPU-second; the pipeline's figure counts the reader, the encoder and the padding, everything but the step.

**Workers** (SentencePiece 48k, 3 epochs of the {ROWS:,}-row shard; the workers' CPU without their start-up,
measured separately by starting and stopping the same pool):

| data.workers | tokens/s (wall) | rank CPU s | workers CPU s | workers start-up CPU s | tokens per rank CPU-s | tokens per worker CPU-s |
|---|---|---|---|---|---|---|
{chr(10).join(w_rows)}

- **Measured wall rate: 0 / 1 / 2 workers {" / ".join(f"{work[n]['tokens'] / work[n]['wall_s'] / 1e6:.2f}M" for n in work)}
  tokens/s; 2 workers / 1 worker {speedup:.2f}x. This is not a measurement of scaling**: the machine has 2 cores
  for everything (the rank's thread, the workers, and the other jobs that share it; load average
  {os.getloadavg()[0]:.1f} at the end of this run), so a worker mostly waits for a core, and the wall figures move
  by tens of percent from run to run in either direction. 4 workers are not measured: on 2 cores they would
  only show the same contention. What this machine can measure is CPU time: with workers the rank's own
  thread only decodes Parquet, joins slices and pads batches ({rank_rate / 1e6:.1f}M tokens per CPU-second),
  and each worker encodes {worker_rate / 1e6:.1f}M tokens per CPU-second (no shared state: a worker is a process
  with its own slice). **Computed, not measured**: on free cores n workers deliver min(n x
  {worker_rate / 1e6:.1f}M, {rank_rate / 1e6:.1f}M) tokens/s: {", ".join(f"{n} -> {v / 1e6:.1f}M" for n, v in projected.items())};
  i.e. the rate grows linearly with the workers until the rank's thread is the limit.
- **Cores per rank for an H200-class step rate** (2.2M tokens/s, SentencePiece 48k): in one process (0 workers)
  {H200_TOKENS_PER_S / per_cpu(rate[("sentencepiece", "pipeline")]):.1f} cores of CPU time, but one process is one
  thread of Python; with workers, {int(need_workers)} worker(s) (2.2M / {worker_rate / 1e6:.1f}M) plus the rank's
  thread ({H200_TOKENS_PER_S / rank_rate:.2f} of a core): `data.workers: {int(need_workers)}`, {int(need_workers) + 1}
  cores per rank. The byte tokenizer needs
  {H200_TOKENS_PER_S / per_cpu(rate[("byte", "pipeline")]):.2f} of a core: no workers.
"""
    update_section("stream", body)
    print(body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
