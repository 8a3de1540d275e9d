"""Render the fault harness's measured cells (MW_FAULT_TABLE=cells.jsonl pytest tests/faults) as the fault
table of docs/reliability.md: one row per (fault, phase, mode, launch) with its outcome, exit code, how to
resume and how many runs measured it.

    MW_FAULT_TABLE=/tmp/cells.jsonl MW_FAULT_MATRIX=full pytest tests/faults
    python -m tests.faults.fault_table /tmp/cells.jsonl --write docs/reliability.md
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

START, END = "<!-- fault-table:start -->", "<!-- fault-table:end -->"
EXIT = {"interrupted": "130", "stopped": "0", "stopped before the first step": "0", "finished": "0"}


def render(cells: list[dict[str, str]]) -> str:
    def where(c: dict[str, str]) -> str:
        return c["phase"] if c.get("write", "-") == "-" else f"{c['phase']}: {c['write']}"

    counts = Counter(
        (c["fault"], where(c), c["mode"], c["launch"], c["outcome"], c.get("resume", "-")) for c in cells
    )
    lines = [
        "| fault | phase (write) | processes | launch | outcome | exit | how to resume | runs |",
        "|---|---|---|---|---|---:|---|---:|",
    ]
    for (fault, phase, mode, launch, outcome, resume), n in sorted(counts.items()):
        code = EXIT.get(outcome) or (outcome.split()[1].rstrip(",") if outcome.startswith("exit ") else "?")
        lines.append(f"| {fault} | {phase} | {mode} | {launch} | {outcome} | {code} | {resume} | {n} |")
    lines.append("")
    lines.append(f"{sum(counts.values())} runs in {len(counts)} cells; every cell a documented outcome.")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cells", type=Path)
    ap.add_argument("--write", type=Path, help="replace the table between the markers in this file")
    args = ap.parse_args()
    cells = [json.loads(line) for line in args.cells.read_text().splitlines() if line.strip()]
    table = render(cells)
    if args.write is None:
        print(table)
        return
    text = args.write.read_text()
    head, _, rest = text.partition(START)
    _, _, tail = rest.partition(END)
    args.write.write_text(f"{head}{START}\n{table}\n{END}{tail}")


if __name__ == "__main__":
    main()
