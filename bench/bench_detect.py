"""detect()'s cost, as ratios against references measured in the same run on the same machine.

1. `detect()` on this real machine vs py-cpuinfo's `get_cpu_info()`: the CPU probe detection avoids by
   reading /proc/cpuinfo (py-cpuinfo is only the fallback when that fails).
2. `detect()` on every fake machine root in tests/fixtures/machines vs the same reference: the part of
   detection that reads sysfs/procfs and runs the fake nvidia-smi, without interpreter discovery.
3. The whole command `mw-env detect --root tests/fixtures/machines/cpu-only --json` (a fresh process, this
   host's PATH: none of its Pythons or its uv runs for a fake root) vs `mw-env --version` (the CLI's start-up
   alone), the runs interleaved so both see the same load. Wall and CPU time (user + sys of the child): on a
   loaded machine the CPU time is the fairer figure. `--against REV` adds the same command from git revision
   REV's src/ (extracted with `git archive`), interleaved too: the before/after of a change in one run.

Usage: python bench/bench_detect.py [--reps N] [--cli-reps N] [--against REV]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
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


def one_run(argv: list[str], src: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one command run in a fresh process (its output discarded)."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, env=env, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def interleaved(cases: dict[str, tuple[list[str], Path]], reps: int) -> dict[str, tuple[float, float]]:
    """Median wall and CPU seconds per case, the cases taking turns so a load spike hits them alike."""
    for argv, src in cases.values():
        # Bytecode as an installed package has it (PYTHONDONTWRITEBYTECODE would otherwise leave a new module
        # to be compiled on every run), then one untimed run to warm the page cache.
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(src)], check=True)
        one_run(argv, src)
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
    for _ in range(reps):
        for name, (argv, src) in cases.items():
            runs[name].append(one_run(argv, src))
    return {
        name: (statistics.median(w for w, _ in r), statistics.median(c for _, c in r))
        for name, r in runs.items()
    }


def extract(rev: str, into: Path) -> Path:
    """src/ of git revision `rev`, extracted under `into`."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "src"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into / "src"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--cli-reps", type=int, default=10, help="runs of each whole command (median)")
    parser.add_argument("--against", metavar="REV", help="also time the command from this git revision")
    args = parser.parse_args()

    import cpuinfo

    from mw_env.hardware.detect import detect
    from mw_env.hardware.machine import Machine

    machines = REPO / "tests" / "fixtures" / "machines"
    # py-cpuinfo caches nothing between calls in-process, so each rep pays its full probe.
    reference = median_time(cpuinfo.get_cpu_info, args.reps)
    real = median_time(lambda: detect(Machine.from_env(root="/")), args.reps)
    # Interpreter discovery runs each real python3* on PATH once; a pyenv shim (a bash script running pyenv's
    # programs, ~100 processes a start) is never run: pyenv's versions folder is read instead.
    from mw_env.hardware.system import _pyenv_root

    host = Machine.from_env(root="/")
    on_path = sorted(
        {
            str(Path(d, n))
            for d in os.environ.get("PATH", "").split(os.pathsep)
            if d and Path(d).is_dir()
            for n in os.listdir(d)
            if re.fullmatch(r"python3(\.\d+)?", n)
        }
    )
    shims = sum(1 for p in on_path if _pyenv_root(host, p) is not None)
    rows = []
    for root in sorted(p for p in machines.iterdir() if p.is_dir() and not p.name.startswith("doctor-")):
        env = {"PATH": str(root / ".mw-env-bin") + ":/usr/bin:/bin"}
        t = median_time(lambda root=root, env=env: detect(Machine(root=root, env=env)), args.reps)
        rows.append((root.name, t))
    cli = [sys.executable, "-m", "mw_env"]
    detect_argv = [*cli, "detect", "--root", str(machines / "cpu-only"), "--json"]
    with tempfile.TemporaryDirectory() as tmp:
        cases = {"version": ([*cli, "--version"], REPO / "src"), "detect": (detect_argv, REPO / "src")}
        if args.against:
            cases["before"] = (detect_argv, extract(args.against, Path(tmp)))
        load_before = os.getloadavg()[0]
        timed = interleaved(cases, args.cli_reps)
        load_after = os.getloadavg()[0]
    lines = [
        "## detect()",
        "",
        f"Measured {machine_line()}, median of {args.reps} runs each (`python bench/bench_detect.py`).",
        f"Reference: py-cpuinfo `get_cpu_info()` = {reference * 1000:.0f} ms.",
        "",
        "| what | time | ratio to the reference |",
        "|---|---|---|",
        f"| detect() on this machine ({len(on_path)} python3* on PATH, {shims} of them pyenv shims: read, not "
        f"run) | {real * 1000:.0f} ms "
        f"| {real / reference:.2f} |",
    ]
    lines += [
        f"| detect() on fake root `{name}` | {t * 1000:.1f} ms | {t / reference:.3f} |" for name, t in rows
    ]
    startup, fake_cli = timed["version"], timed["detect"]
    lines += [
        "",
        f"The whole command, a fresh process each time: median of {args.cli_reps} runs, the commands taking "
        f"turns (reference: `mw-env --version`, the CLI's start-up alone). Load average {load_before:.2f} "
        f"before and {load_after:.2f} after, on {os.cpu_count()} CPUs shared with other jobs: the CPU time is "
        "the figure that measures the code. Before the Machine seam held (issue 19) the same command ran every "
        "Python on the host's PATH and `uv python list`: 5.9 s wall, 1.4 s CPU on this host under load 16.",
        "",
        "| command | wall | CPU (user+sys) | ratio (wall) to `--version` |",
        "|---|---|---|---|",
        f"| `mw-env --version` (reference) | {startup[0] * 1000:.0f} ms | {startup[1] * 1000:.0f} ms | 1.00 |",
        f"| `mw-env detect --root tests/fixtures/machines/cpu-only --json` (host PATH: none of its "
        f"{len(on_path)} python3* runs) | {fake_cli[0] * 1000:.0f} ms | {fake_cli[1] * 1000:.0f} ms "
        f"| {fake_cli[0] / startup[0]:.2f} |",
    ]
    if "before" in timed:
        before = timed["before"]
        lines.append(
            f"| the same command from `{args.against}` (before) | {before[0] * 1000:.0f} ms "
            f"| {before[1] * 1000:.0f} ms | {before[0] / startup[0]:.2f} |"
        )
    update_section("detect", "\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
