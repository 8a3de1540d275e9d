"""Bootstrap vs the seed's manual sequence, on the same wheelhouse, side by side in one run.

Measures (CPU profile, torch from the wheelhouse that pip's configuration names):
  manual   `uv venv --seed` + `pip install torch==<the wheelhouse's build>` + `pip install -e .[train]`
           (the seed guide's sequence, with the right torch named by hand; pip's cache as it is)
  cold     `mw-env bootstrap --no-doctor` into a new venv with an EMPTY uv cache
  warm     the same into another new venv, uv's cache now filled (a new container sharing the cache)
  no-op    `mw-env bootstrap --no-doctor` again over the finished venv
Every figure is a ratio against `manual` from the same run. Writes the `bootstrap` section of
docs/benchmarks.md. Skips (exit 0) where no wheelhouse holds a CPU torch.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import REPO, machine_line, update_section


def _uv() -> str | None:
    for cand in (os.environ.get("UV"), str(REPO / ".tools" / "bin" / "uv"), shutil.which("uv")):
        if cand and os.path.isfile(cand):
            return cand
    return None


def _timed(argv: list[str], env: dict[str, str], cwd: Path = REPO) -> float:
    start = time.perf_counter()
    res = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if res.returncode != 0:
        raise SystemExit(f"failed: {' '.join(argv)}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    return elapsed


def main() -> int:
    sys.path.insert(0, str(REPO / "src"))
    from mw_env.provision.wheelhouse import discover, matching_torch, wheels_in

    uv = _uv()
    good, _ = matching_torch(
        wheels_in(discover(env=os.environ).find_links, "torch"), local_tag="+cpu", specifier=">=2.9,<2.15"
    )
    minor = f"{sys.version_info[0]}.{sys.version_info[1]}"
    wheel = next((w for w in good if w.fits_python(minor + ".0")), None)
    if uv is None or wheel is None:
        print("skip: no uv, or no wheelhouse holds a CPU torch for this Python")
        return 0
    work = Path(tempfile.mkdtemp(prefix="mw-env-bench-"))
    env = {**os.environ, "UV": uv, "PYTHONPATH": str(REPO / "src")}
    env.pop("VIRTUAL_ENV", None)
    mw = [
        sys.executable,
        "-m",
        "mw_env",
        "bootstrap",
        "--profile",
        "cpu",
        "--python",
        sys.executable,
        "--yes",
        "--no-doctor",
    ]
    try:
        manual_venv = work / "manual"
        t_manual = _timed([uv, "venv", "-q", "--seed", "--python", sys.executable, str(manual_venv)], env)
        t_manual += _timed(
            [str(manual_venv / "bin" / "pip"), "install", "-q", f"torch=={wheel.version}"], env
        )
        t_manual += _timed([str(manual_venv / "bin" / "pip"), "install", "-q", "-e", f"{REPO}[train]"], env)

        cold_env = {**env, "UV_CACHE_DIR": str(work / "uv-cache")}
        t_cold = _timed([*mw, "--venv", str(work / "cold")], cold_env)
        t_warm = _timed([*mw, "--venv", str(work / "warm")], cold_env)
        t_noop = _timed([*mw, "--venv", str(work / "warm")], cold_env)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    rows = [
        ("seed's manual sequence (reference)", t_manual),
        ("`mw-env bootstrap`, empty uv cache", t_cold),
        ("`mw-env bootstrap`, new venv, shared uv cache", t_warm),
        ("`mw-env bootstrap` re-run (no-op)", t_noop),
    ]
    table = "\n".join(f"| {name} | {t:.1f} s | {t / t_manual:.2f} |" for name, t in rows)
    md = f"""## Bootstrap (bench/bench_bootstrap.py)

{machine_line()} · torch {wheel.version} from `{wheel.path.parent}` · doctor step excluded (`--no-doctor`)

| run | wall time | ratio to manual |
|---|---|---|
{table}

The manual sequence is the seed guide's (`uv venv` + `pip install torch` + `pip install -e .[train]`), given the
right torch build by hand; bootstrap additionally verifies the build, pins it and writes the env. A new
container that mounts the same uv cache provisions in the "shared uv cache" time.
"""
    update_section("bootstrap", md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
