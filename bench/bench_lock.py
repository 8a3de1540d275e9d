"""What locks cost: writing a venv's lock, and rebuilding a venv from one, against references in the same run.

Measures (CPU profile, torch from the wheelhouse pip's configuration names, uv's cache shared and warm):
  bootstrap  `mw-env bootstrap --no-doctor` into a new venv (the reference for the rebuild); its own lock step
             is reported as a share of it
  rebuild    `mw-env bootstrap --lock VENV/pylock.mw-env.toml --offline --no-doctor` into another new venv
  bare       `uv pip freeze` + one `uv pip compile --format pylock.toml` of it with the same sources (the
             reference for writing a lock: what `mw-env lock` automates, without the hardware table)
  lock       `mw-env lock --venv VENV --output FILE` (what is installed, read from the dist-info folders as uv pip
             freeze reads them; then uv resolves each pin's file and hash)
Each pair runs REPEATS times, interleaved; medians are compared. Writes the `lock` section of
docs/benchmarks.md. Skips (exit 0) where no wheelhouse holds a CPU torch.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import REPO, machine_line, update_section

REPEATS = int(os.environ.get("MW_ENV_BENCH_REPEATS", "3"))


def _timed(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    res = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if res.returncode != 0:
        raise SystemExit(f"failed: {' '.join(argv)}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    return elapsed, res.stdout


def main() -> int:
    sys.path.insert(0, str(REPO / "src"))
    from mw_env.sources.wheelhouse import discover, matching_torch, wheels_in
    from mw_env.venv.lock import LOCK_FILE

    uv = next(
        (c for c in (os.environ.get("UV"), str(REPO / ".tools" / "bin" / "uv"), shutil.which("uv")) if c),
        None,
    )
    found = discover(env=os.environ)
    sources = found.uv_args()  # the wheelhouse and indexes bootstrap reads from pip's configuration
    good, _ = matching_torch(wheels_in(found.find_links, "torch"), local_tag="+cpu", specifier=">=2.9,<2.15")
    if uv is None or not os.path.isfile(uv) or not good:
        print("skip: no uv, or no wheelhouse holds a CPU torch")
        return 0
    work = Path(tempfile.mkdtemp(prefix="mw-env-bench-lock-"))
    env = {**os.environ, "UV": uv, "PYTHONPATH": str(REPO / "src")}
    # Bootstrap records the user's last venv in its state folder: the bench's own, never the user's.
    env.update(MW_ENV_STATE_DIR=str(work / "state"), XDG_STATE_HOME=str(work / "state"))
    env.pop("VIRTUAL_ENV", None)
    mw = [sys.executable, "-m", "mw_env"]
    boot = [*mw, "bootstrap", "--profile", "cpu", "--no-adopt-torch", "--no-doctor", "--json"]
    fresh: list[float] = []
    rebuild: list[float] = []
    step: list[float] = []
    freeze: list[float] = []
    lock: list[float] = []
    try:
        first = work / "first"
        _timed([*boot, "--venv", str(first)], env)  # fills uv's cache: every later run is a warm one
        for i in range(REPEATS):
            t, out = _timed([*boot, "--venv", str(work / f"fresh-{i}")], env)
            fresh.append(t)
            step += [s["duration_s"] for s in json.loads(out)["steps"] if s["id"] == "lock"]
            lock_file = str(first / LOCK_FILE)
            rebuild.append(
                _timed([*boot, "--lock", lock_file, "--offline", "--venv", str(work / f"re-{i}")], env)[0]
            )
            py = str(first / "bin" / "python")
            t, pins = _timed([uv, "pip", "freeze", "--python", py], env)
            req = work / f"req-{i}.txt"
            req.write_text(pins)
            compile_ = [uv, "pip", "compile", "-q", "--format", "pylock.toml", "--python", py, *sources]
            t += _timed([*compile_, str(req), "-o", str(work / f"pylock.bare{i}.toml")], env)[0]
            freeze.append(t)
            lock.append(
                _timed([*mw, "lock", "--venv", str(first), "--output", str(work / f"l-{i}.toml")], env)[0]
            )
        packages = sum(1 for line in (first / LOCK_FILE).read_text().splitlines() if line == "[[packages]]")
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def med(values: list[float]) -> float:
        return statistics.median(values)

    md = f"""## Locks (bench/bench_lock.py)

{machine_line()} · CPU profile, torch from the wheelhouse, uv's cache warm and shared · {packages} packages
locked · median of {REPEATS} interleaved runs

| run | wall time | ratio |
|---|---|---|
| `mw-env bootstrap --no-doctor`, new venv (reference) | {med(fresh):.2f} s | 1.00 |
| **`mw-env bootstrap --lock VENV/{LOCK_FILE} --offline`**, new venv | {med(rebuild):.2f} s | **{med(rebuild) / med(fresh):.2f}x** |
| - of which the bootstrap's lock step (the installed set, torch's entry from the early hash, uv pip compile) | {med(step):.2f} s | {med(step) / med(fresh):.2f}x |
| bare uv: `uv pip freeze` + `uv pip compile --format pylock.toml` (reference) | {med(freeze):.2f} s | 1.00 |
| **`mw-env lock --venv VENV`** | {med(lock):.2f} s | **{med(lock) / med(freeze):.2f}x** |

Rebuilding from a lock runs no resolution (one `uv pip install -r pylock.toml`, every hash checked before
anything is installed), then the project with `--no-deps`. Writing a lock reads what is installed from the
dist-info folders (as `uv pip freeze` reads them), then runs `uv pip compile --format pylock.toml --no-deps`
per group (torch's from its own source); a torch bootstrap installed from a local wheelhouse gets its entry
from mw-env (the wheel's sha256, read while bootstrap's other steps ran, or by `mw-env lock` itself), plus
mw-env's interpreter start and profile detection.
"""
    update_section("lock", md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
