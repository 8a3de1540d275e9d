"""detect()'s cost, as ratios against references measured in the same run on the same machine.

1. `detect()` on this real machine vs py-cpuinfo's `get_cpu_info()`: the CPU probe detection avoids by
   reading /proc/cpuinfo (py-cpuinfo is only the fallback when that fails).
2. `detect()` on every fake machine root in tests/fixtures/machines vs the same reference: the part of
   detection that reads sysfs/procfs and runs the fake nvidia-smi, without interpreter discovery.
3. The whole command `mw-env detect --root tests/fixtures/machines/cpu-only --json` (a fresh process, this
   host's PATH: none of its Pythons or its uv runs for a fake root) vs `mw-env --version` (the CLI's start-up
   alone). Wall and CPU time (user + sys of the child): on a loaded machine the CPU time is the fairer figure.

Usage: python bench/bench_detect.py [--reps N]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, machine_line, update_section

sys.path.insert(0, str(REPO / "src"))


def median_time(func, reps: int) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def command_time(argv: list[str], reps: int) -> tuple[float, float]:
    """Median wall and CPU seconds of one command run in a fresh process (its output discarded)."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    walls, cpus = [], []
    for _ in range(reps):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, env=env, check=True)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()

    import cpuinfo

    from mw_env.detect import detect
    from mw_env.machine import Machine

    machines = REPO / "tests" / "fixtures" / "machines"
    # py-cpuinfo caches nothing between calls in-process, so each rep pays its full probe.
    reference = median_time(cpuinfo.get_cpu_info, args.reps)
    real = median_time(lambda: detect(Machine.from_env(root="/")), args.reps)
    # Interpreter discovery runs every python3* on PATH once; pyenv shims (a bash script each) dominate.
    on_path = sorted(
        {
            str(Path(d, n))
            for d in os.environ.get("PATH", "").split(os.pathsep)
            if d and Path(d).is_dir()
            for n in os.listdir(d)
            if re.fullmatch(r"python3(\.\d+)?", n)
        }
    )
    rows = []
    for root in sorted(p for p in machines.iterdir() if p.is_dir() and not p.name.startswith("doctor-")):
        env = {"PATH": str(root / ".mw-env-bin") + ":/usr/bin:/bin"}
        t = median_time(lambda root=root, env=env: detect(Machine(root=root, env=env)), args.reps)
        rows.append((root.name, t))
    cli = [sys.executable, "-m", "mw_env"]
    startup = command_time([*cli, "--version"], max(args.reps, 5))
    fake_cli = command_time(
        [*cli, "detect", "--root", str(machines / "cpu-only"), "--json"], max(args.reps, 5)
    )
    lines = [
        "## detect()",
        "",
        f"Measured {machine_line()}, median of {args.reps} runs each (`python bench/bench_detect.py`).",
        f"Reference: py-cpuinfo `get_cpu_info()` = {reference * 1000:.0f} ms.",
        "",
        "| what | time | ratio to the reference |",
        "|---|---|---|",
        f"| detect() on this machine (runs the {len(on_path)} python3* on PATH) | {real * 1000:.0f} ms "
        f"| {real / reference:.2f} |",
    ]
    lines += [
        f"| detect() on fake root `{name}` | {t * 1000:.1f} ms | {t / reference:.3f} |" for name, t in rows
    ]
    load = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"
    lines += [
        "",
        "The whole command, a fresh process each time (median of "
        f"{max(args.reps, 5)}; reference: `mw-env --version`, the CLI's start-up alone; load average "
        f"{load} on {os.cpu_count()} CPUs when measured, so the CPU time is the figure to compare). Before the "
        "Machine seam held (issue 19) the same command ran every Python on the host's PATH and `uv python "
        "list`: 5.9 s wall, 1.4 s CPU on this host under load 16, against 1.1 s and 0.23 s after, same run.",
        "",
        "| command | wall | CPU (user+sys) | ratio (wall) to `--version` |",
        "|---|---|---|---|",
        f"| `mw-env --version` (reference) | {startup[0] * 1000:.0f} ms | {startup[1] * 1000:.0f} ms | 1.00 |",
        f"| `mw-env detect --root tests/fixtures/machines/cpu-only --json` (host PATH: none of its "
        f"{len(on_path)} python3* runs) | {fake_cli[0] * 1000:.0f} ms | {fake_cli[1] * 1000:.0f} ms "
        f"| {fake_cli[0] / startup[0]:.2f} |",
    ]
    update_section("detect", "\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
