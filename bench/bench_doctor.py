"""The doctor's cost, as ratios against references measured in the same run on the same machine.

1. Full `mw-env doctor` (CPU profile, real probe on the venv's torch) vs `python -m torch.utils.collect_env`
   in the same venv: the usual "paste your environment" tool, which imports torch in-process and runs ~20
   subprocesses without timeouts, but checks nothing.
2. `mw-env doctor --quick` (no torch import anywhere, asserted) vs `python -c "import torch"` in that venv,
   and where its time goes: detection + profile selection vs the checks themselves.

Usage: python bench/bench_doctor.py [--venv PATH] [--reps N]   (default venv: .cache/test-venv)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, machine_line, update_section

QUICK = (
    "import sys; from mw_env.cli import main; rc = main(%r);"
    "assert 'torch' not in sys.modules, 'the quick doctor imported torch'; raise SystemExit(rc)"
)
SPLIT = """
import json, time
t0 = time.perf_counter()
from mw_env.profiles import resolve
r = resolve(profile="cpu")
t1 = time.perf_counter()
from mw_env.checks import run_doctor
run_doctor(machine=r.machine, selection=r.selection, venv=%r, quick=True, hardware=r.hardware, network=False)
print(json.dumps({"resolve": t1 - t0, "checks": time.perf_counter() - t1}))
"""


EXPLAIN = """
import json, time
from mw_env.checks.catalogue import load_catalogue
cat = load_catalogue()
lines = [f"step {i} loss {1 + 1 / (i + 1):.4f} lr 3e-4 tokens/s {12000 + i % 977}.5 grad_norm 0.88" for i in range(200000)]
lines[100000] = "RuntimeError: HIP error: invalid device function"
lines[150000] = "/opt/amdgpu/share/libdrm/amdgpu.ids: No such file or directory"
text = "\\n".join(lines)
t0 = time.perf_counter(); fast = cat.scan(text); t1 = time.perf_counter()
slow = cat.scan_lines(text.splitlines()); t2 = time.perf_counter()
assert fast == slow and len(fast) == 2
print(json.dumps({"scan": t1 - t0, "per_line": t2 - t1}))
"""


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO, check=False)
    return time.perf_counter() - start, proc


def checked(
    proc: subprocess.CompletedProcess[str], ok: tuple[int, ...] = (0,)
) -> subprocess.CompletedProcess[str]:
    if proc.returncode not in ok:
        raise SystemExit(f"{proc.args[:4]} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return proc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", default=str(REPO / ".cache" / "test-venv"))
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    venv_py = Path(args.venv) / "bin" / "python"
    if not venv_py.exists():
        print(f"no venv python at {venv_py}", file=sys.stderr)
        return 1
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    venv_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    mw = [sys.executable, "-m", "mw_env"]
    runs: dict[str, list[float]] = {
        k: [] for k in ("doctor", "collect_env", "quick", "import_torch", "resolve", "checks")
    }
    facts: dict = {}
    loads = []
    for _ in range(args.reps):  # interleaved, so drift on a shared machine hits every side alike
        loads.append(os.getloadavg()[0])
        t, proc = timed([*mw, "doctor", "--venv", args.venv, "--json", "--offline", "--profile", "cpu"], env)
        facts = json.loads(checked(proc, (0, 1)).stdout).get("facts", {})
        runs["doctor"].append(t)
        t, proc = timed([str(venv_py), "-m", "torch.utils.collect_env"], venv_env)
        checked(proc)
        runs["collect_env"].append(t)
        argv = ["doctor", "--venv", args.venv, "--json", "--offline", "--profile", "cpu", "--quick"]
        t, proc = timed([sys.executable, "-c", QUICK % argv], env)
        checked(proc, (0, 1))
        runs["quick"].append(t)
        t, proc = timed([str(venv_py), "-c", "import torch"], venv_env)
        checked(proc)
        runs["import_torch"].append(t)
        _, proc = timed([sys.executable, "-c", SPLIT % args.venv], env)
        split = json.loads(checked(proc).stdout)
        runs["resolve"].append(split["resolve"])
        runs["checks"].append(split["checks"])
    for _ in range(args.reps):
        _, proc = timed([sys.executable, "-c", EXPLAIN], env)
        split = json.loads(checked(proc).stdout)
        runs.setdefault("explain", []).append(split["scan"])
        runs.setdefault("explain_ref", []).append(split["per_line"])
    med = {k: statistics.median(v) for k, v in runs.items()}
    tflops = facts.get("tflops") or {}
    torch_version = (facts.get("torch") or {}).get("version")
    md = f"""## doctor

`bench/bench_doctor.py` · {machine_line()} · venv `{Path(args.venv).name}` (torch {torch_version}) ·
median of {args.reps} interleaved runs · load average {statistics.median(loads):.1f} on 2 vCPUs shared with other jobs
(absolute times are inflated by it; the ratios compare runs made under the same load).

| measurement | wall (s) | ratio |
|---|---|---|
| `mw-env doctor` (CPU profile, full probe: fp32/bf16/fp16 matmul vs float64 + timing, Linear+SDPA step) | {med["doctor"]:.2f} | **{med["doctor"] / med["collect_env"]:.2f}x** `collect_env` |
| `python -m torch.utils.collect_env` (reference: reports, checks nothing, no timeouts) | {med["collect_env"]:.2f} | 1.00 |
| `mw-env doctor --quick` (no torch import; asserted) | {med["quick"]:.2f} | **{med["quick"] / med["import_torch"]:.2f}x** `import torch` |
| `python -c "import torch"` (reference) | {med["import_torch"]:.2f} | 1.00 |
| - of which detection + profile selection (`resolve`, in-process) | {med["resolve"]:.2f} | {med["resolve"] / med["import_torch"]:.2f}x |
| - of which the checks (`run_doctor(quick=True)`, in-process) | {med["checks"]:.2f} | {med["checks"] / med["import_torch"]:.2f}x |
| `--explain` scan of a 200k-line (12 MB) training log, keyword-screened (`Catalogue.scan`) | {med["explain"]:.2f} | **{med["explain"] / med["explain_ref"]:.2f}x** per-line |
| every catalogue regex on every line (`Catalogue.scan_lines`, the exact definition; same hits asserted) | {med["explain_ref"]:.2f} | 1.00 |

Probe figures from the last full run: fp32 {tflops.get("fp32") or 0:.3f}, bf16 {tflops.get("bf16") or 0:.3f},
fp16 {tflops.get("fp16") or 0:.4f} TFLOP/s on the CPU. The full doctor's time is the probe's (import torch, then per dtype a
float64-checked product and 0.25 s of timed products on the CPU profile, 0.5 s on a GPU); every other check runs concurrently with it. `--offline` skips the network check
(bounded by its own timeout).
"""
    update_section("doctor", md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
