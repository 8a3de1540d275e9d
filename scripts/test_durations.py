"""tests/durations.json from a JUnit XML report: each test file's measured seconds, for the suite's order.

    .cache/test-venv/bin/python -m pytest -n 2 --dist loadfile --junitxml=/tmp/suite.xml
    python scripts/test_durations.py /tmp/suite.xml

pytest-xdist's `--dist loadfile` hands out whole files in the order they were collected, so a long file
collected last runs alone at the end while the other worker idles. tests/conftest.py collects the files
longest first (longest processing time first: within ~1/3 of the best split in theory, and close to it for a
suite of many short files and a few long ones). The seconds only order the files; nothing asserts them, and a
file not in the table (a new one) is placed by its test count. Refresh the table when files were added or
grew, from a run on an otherwise quiet machine.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "tests" / "durations.json"


def per_file(report: Path) -> dict[str, float]:
    seconds: dict[str, float] = defaultdict(float)
    for case in ET.parse(report).getroot().iter("testcase"):
        # classname is the dotted module path (tests.trainer.test_loop[.Class]); file is not always set.
        name = case.get("file") or _file_of(case.get("classname", ""))
        if name:
            seconds[name] += float(case.get("time") or 0.0)
    return {k: round(v, 1) for k, v in sorted(seconds.items(), key=lambda kv: -kv[1])}


def _file_of(classname: str) -> str:
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        candidate = "/".join(parts[:end]) + ".py"
        if (OUT.parent.parent / candidate).is_file():
            return candidate
    return ""


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: test_durations.py JUNIT.xml", file=sys.stderr)
        return 2
    table = per_file(Path(argv[0]))
    OUT.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    print(f"{OUT}: {len(table)} files, {sum(table.values()):.0f} s in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
