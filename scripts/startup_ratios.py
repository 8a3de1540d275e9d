#!/usr/bin/env python3
"""Start-up ratios, paired (stdlib only): `mw-env detect --root` vs `mw-env --help`, and `mw-env --help` vs
`python -c "import click"` (issue 28 asks detect <= 2.5x help and help <= 1.3x import click).

The three commands take turns in every round, so a load spike on a shared machine hits them alike; each
figure is the median over the rounds of the wall time and of the CPU time (user + sys of the child), and the
ratios are taken per round and their median reported (a paired ratio). Run it before and after a change on
the same machine, in the same minute if you can, and say the load (`uptime`) beside the figures.

    python3 scripts/startup_ratios.py [--rounds 30] [--venv .venv]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def one(argv: list[str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, cwd=REPO, stdout=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--venv", type=Path, default=REPO / ".venv")
    args = ap.parse_args()
    py, cli = str(args.venv / "bin" / "python"), str(args.venv / "bin" / "mw-env")
    cases = {
        "import click": [py, "-c", "import click"],
        "mw-env --help": [cli, "--help"],
        "mw-env detect --root": [cli, "detect", "--json", "--root", "tests/fixtures/machines/cpu-only"],
    }
    # Bytecode as an installed package has it: under PYTHONDONTWRITEBYTECODE every run would compile each
    # module it imports again (that, not the code, was most of a run). Then one untimed run of each.
    subprocess.run([py, "-m", "compileall", "-q", "src"], cwd=REPO, check=True)
    for argv in cases.values():
        one(argv)
    runs: dict[str, list[tuple[float, float]]] = {k: [] for k in cases}
    for _ in range(args.rounds):
        for name, argv in cases.items():
            runs[name].append(one(argv))
    load = os.getloadavg()
    print(
        f"{args.rounds} rounds, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {os.cpu_count()} CPUs"
    )
    for name, got in runs.items():
        wall = statistics.median(w for w, _ in got) * 1000
        cpu = statistics.median(c for _, c in got) * 1000
        print(f"  {name:22} wall {wall:7.1f} ms   cpu {cpu:7.1f} ms")
    for a, b in (("mw-env detect --root", "mw-env --help"), ("mw-env --help", "import click")):
        for i, kind in ((0, "wall"), (1, "cpu")):
            ratio = statistics.median(x[i] / y[i] for x, y in zip(runs[a], runs[b], strict=True) if y[i] > 0)
            print(f"  {a} / {b} ({kind}): {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
