"""What a run's end costs: the time after the last step of a 400-step CPU smoke run, with the report's figures
drawn as before (one after another, matplotlib imported at the end) and as now (trainer/figure_pool.py:
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
    from mw_env.trainer.figure_pool import FigurePool
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
    update_section(
        "report-end",
        f"""## A run's end: the report's figures (`bench/bench_report_end.py`)

{machine}. A {len(steps)}-step CPU smoke run ({steps_s:.1f} s from its first event to its last step; the
final eval and checkpoint then took {tail:.2f} s). The report written {REPEATS} times each way, interleaved,
each in a fresh process on a copy of the run folder (medians). `before`: every figure drawn in the report's
process in turn (matplotlib imported at the end); `now`: the figure pool (trainer/figure_pool.py), started
and warmed as with the run, draws the curves and the data card's histograms in parallel while the report's
process writes the rest. End = the final eval and checkpoint + the report (manifest included); share = end /
(steps + end).

| figures | report | end after the last step | share of the run |
|---|---|---|---|
{chr(10).join(rows)}

The report with the pool takes **{ratio:.2f}x** the time of the report without it. The machine is shared
with other developers' jobs (the load above): wall times and the share move with it, the ratio less. The
share is small here because the loaded machine made the steps slow; against the issue's light-load 400-step
run (52 s of steps, where the end took 6.3 s), this end would be {100 * (tail + statistics.median(times["now"])) / (52 + tail + statistics.median(times["now"])):.1f}% (an illustration mixing two loads, not a
measurement): the 2% the issue asks for is not shown on this machine.
""",
    )
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
