"""What checking a venv's files against their RECORD costs (venv/integrity.py), on a real CPU torch venv.

Measures, in-process, CPU seconds (time.process_time: the machine's other jobs inflate wall time, not this),
the page cache warm (each read once, untimed, first), median of REPEATS interleaved rounds:
  sizes   integrity.installed_fingerprint: a stat of every installed file against its RECORD's size (the
          verify key's part; the whole per-plan read before issue 40's check)
  scan    integrity.scan_venv: the same stats, the hash of each file whose mtime is later than its package's
          METADATA, and the fingerprint from the same pass (what every bootstrap plan and every doctor reads)
  full    integrity.scan_venv(full=True): every file hashed (`mw-env doctor -v`; what hashing on every re-run
          would cost)
The venv: MW_ENV_BENCH_VENV, else a new one bootstrapped from the wheelhouse (`--profile cpu --no-doctor`,
uv's shared cache: nothing in it is changed; bootstrap's state, MW_ENV_STATE_DIR, in the bench's own temporary
folder). Writes the `integrity` section of docs/benchmarks.md. Skips
(exit 0) where no wheelhouse holds a CPU torch and no venv is given.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from common import REPO, machine_line, update_section

REPEATS = int(os.environ.get("MW_ENV_BENCH_REPEATS", "5"))


def _venv() -> tuple[Path | None, str]:
    given = os.environ.get("MW_ENV_BENCH_VENV")
    if given:
        return Path(given), f"the venv {given}"
    from mw_env.sources.wheelhouse import discover, matching_torch, wheels_in

    uv = next(
        (c for c in (os.environ.get("UV"), str(REPO / ".tools" / "bin" / "uv"), shutil.which("uv")) if c),
        None,
    )
    good, _ = matching_torch(
        wheels_in(discover(env=os.environ).find_links, "torch"), local_tag="+cpu", specifier=">=2.9,<2.15"
    )
    if uv is None or not os.path.isfile(uv) or not good:
        return None, ""
    venv = Path(tempfile.mkdtemp(prefix="mw-env-bench-integrity-")) / "venv"
    # bootstrap remembers the venv it built last (venv/record.py): in the bench's own folder, never the user's
    # ~/.local/state/mw-env, which would point at a venv this bench removes.
    state = str(venv.parent / "state")
    env = {**os.environ, "UV": uv, "PYTHONPATH": str(REPO / "src")}
    env.update(MW_ENV_STATE_DIR=state, XDG_STATE_HOME=state)
    env.pop("VIRTUAL_ENV", None)
    argv = [sys.executable, "-m", "mw_env", "bootstrap", "--profile", "cpu", "--venv", str(venv)]
    res = subprocess.run(
        [*argv, "--no-adopt-torch", "--no-doctor", "--yes"], env=env, capture_output=True, text=True
    )
    if res.returncode != 0:
        raise SystemExit(f"bootstrap failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    return venv, f"a new CPU venv, torch {good[0].version} from the wheelhouse (the default `train` extra)"


def _cpu(fn: Callable[[], object]) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def main() -> int:
    sys.path.insert(0, str(REPO / "src"))
    from mw_env.venv.integrity import installed_fingerprint, scan_venv

    venv, what = _venv()
    if venv is None:
        print("skip: no uv, or no wheelhouse holds a CPU torch (MW_ENV_BENCH_VENV names a venv instead)")
        return 0
    head = machine_line()
    runs: dict[str, Callable[[], object]] = {
        "sizes": lambda: installed_fingerprint(venv),
        "scan": lambda: scan_venv(venv),
        "full": lambda: scan_venv(venv, full=True),
    }
    for fn in runs.values():  # the page cache warm for each, as a re-run finds it
        fn()
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(REPEATS):
        for name, fn in runs.items():
            times[name].append(_cpu(fn))
    med = {k: statistics.median(v) for k, v in times.items()}
    scan, full = scan_venv(venv), scan_venv(venv, full=True)
    one, five, _ = os.getloadavg()
    rows = [
        (
            "sizes: `installed_fingerprint`, a stat per file (the per-plan read before; reference)",
            med["sizes"],
            "sizes",
        ),
        (
            f"**scan: sizes + the hash of the {scan.hashed} files changed since unpacked + the fingerprint** "
            "(every bootstrap plan, every doctor)",
            med["scan"],
            "scan",
        ),
        (
            f"full: every file's sha256, {full.hashed_bytes / 1e6:,.0f} MB (`mw-env doctor -v`)",
            med["full"],
            "full",
        ),
    ]
    table = "\n".join(f"| {label} | {t * 1000:,.0f} ms | {t / med['sizes']:.2f}x |" for label, t, _ in rows)
    md = f"""## Checking a venv's files (bench/bench_integrity.py)

{head} · {what}: {scan.files:,} files of {scan.packages} packages · CPU time
(`time.process_time`), page cache warm, median of {REPEATS} interleaved rounds · load average {one:.1f}
(5 min {five:.1f}) at the end

| read | CPU time | ratio |
|---|---|---|
{table}

What is checked when (docs/design.md, "A venv's files"): sizes and the fingerprint on every plan and every
doctor, in one pass (before the check, the fingerprint's pass alone); a file's hash only where its mtime says
it changed after its package was unpacked; every hash with `mw-env doctor -v`, and after a repair the files it
was about. Hashing every file on every re-run would cost the "full" row each time (a ROCm torch's 5.7 GB:
about 8 times the CPU build's 0.7 GB).
"""
    update_section("integrity", md)
    print(md)
    if not os.environ.get("MW_ENV_BENCH_VENV"):
        shutil.rmtree(venv.parent, ignore_errors=True)  # the venv this bench made
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
