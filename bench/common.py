"""Helpers for bench scripts: each writes its own section of docs/benchmarks.md between markers."""

from __future__ import annotations

import importlib.util
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BENCHMARKS = REPO / "docs" / "benchmarks.md"
HEADER = """# Benchmarks

Measured by the scripts in bench/ (`make bench`, or one script at a time). Every figure is a ratio
against a reference measured in the same run on the same machine; absolute times are for orientation.
Each section says when and where it was measured, and under what load (`uptime`'s load average: the
machine's 2 CPUs are shared with other jobs, which inflate wall times, rarely ratios).
"""


def machine_line() -> str:
    import os

    # The load at the start: every figure says what the machine was doing (issue 30), the section may add more.
    one, five, _ = os.getloadavg()
    return (
        f"{time.strftime('%Y-%m-%d')} · {platform.machine()} · {os.cpu_count()} CPUs · "
        f"Python {platform.python_version()} · {platform.platform(terse=True)} · "
        f"load average {one:.1f} (5 min {five:.1f}) at the start"
    )


def update_section(name: str, markdown: str) -> None:
    """Replace (or append) the section between <!-- bench:NAME --> and <!-- /bench:NAME -->."""
    text = BENCHMARKS.read_text() if BENCHMARKS.exists() else HEADER
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    block = f"{start}\n{markdown.strip()}\n{end}"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    text = (
        pattern.sub(lambda _: block, text) if pattern.search(text) else text.rstrip() + "\n\n" + block + "\n"
    )
    BENCHMARKS.parent.mkdir(parents=True, exist_ok=True)
    BENCHMARKS.write_text(text)


def reexec_with_torch(script: str) -> int | None:
    """None when this python has torch; else the exit code of `script` re-run under one that has
    (MW_ENV_BENCH_PYTHON, or the test venv `make test-env` builds), or 1 saying there is none."""
    if importlib.util.find_spec("torch") is not None:
        return None
    for candidate in (os.environ.get("MW_ENV_BENCH_PYTHON"), str(REPO / ".cache/test-venv/bin/python")):
        if candidate and Path(candidate).exists():
            return subprocess.run([candidate, script, *sys.argv[1:]], check=False).returncode
    print(f"{Path(script).stem}: no python with torch (set MW_ENV_BENCH_PYTHON)", file=sys.stderr)
    return 1
