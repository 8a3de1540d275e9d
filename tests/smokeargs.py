"""The argument list of a smoke-config training run on the CPU profile (shared by the runs, faults and trainer
suites): one place that knows how a test asks for the bundled smoke model, so a changed flag is changed once."""

from __future__ import annotations

import sys
from pathlib import Path

# The venv running the tests: it has torch and this mw-env importable, so it serves as the training venv.
TEST_VENV = Path(sys.executable).parent.parent
# `mw-env train` as a child process of the test, from this checkout: `[*TRAIN, *smoke_args(...)]`.
TRAIN = [sys.executable, "-m", "mw_env", "train"]


def smoke_args(
    run: Path,
    max_steps: int | None = None,
    *sets: str,
    venv: Path = TEST_VENV,
    skip_doctor: bool = True,
) -> list[str]:
    """`--config smoke --venv V [--skip-doctor] --profile cpu --set runtime.out_dir=RUN --set
    runtime.report_figures=false [--set runtime.max_steps=N] [--set ITEM]...`, the arguments after `train` / `train
    start`. No figures: a matplotlib import and six figures were a CPU second or two of each child run's end,
    and no test of these reads them (tests/trainer/test_report*.py and the docs' smoke run do; an ITEM
    `runtime.report_figures=true` turns them on)."""
    argv = ["--config", "smoke", "--venv", str(venv)]
    if skip_doctor:
        argv.append("--skip-doctor")
    argv += ["--profile", "cpu", "--set", f"runtime.out_dir={run}", "--set", "runtime.report_figures=false"]
    if max_steps is not None:
        argv += ["--set", f"runtime.max_steps={max_steps}"]
    for item in sets:
        argv += ["--set", item]
    return argv
