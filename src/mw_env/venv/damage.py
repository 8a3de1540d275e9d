"""The installed files that differ from what their RECORD says: the verify key's fingerprint reads them here.

Plain strings and os.stat, not Path objects: a torch venv has some 20,000 files (pathlib's joins were half of
the 0.11 s this took).
"""

from __future__ import annotations

import csv
import os


def damage(root: str, record: str) -> tuple[bytes, ...]:
    """The files of one RECORD whose size differs from the recorded one, as digest lines."""
    try:
        with open(record, encoding="utf-8", errors="replace") as fh:
            rows = list(csv.reader(fh.read().splitlines()))
    except (OSError, csv.Error):
        return (f"{os.path.basename(os.path.dirname(record))}\0unreadable\n".encode(),)
    stat = os.stat
    lines: list[bytes] = []
    for row in rows:
        if len(row) < 3 or not row[2].isdigit() or row[0].startswith(".."):
            continue  # RECORD itself and byte-code have no size; files outside site-packages are not torch's
        try:
            size = stat(root + row[0]).st_size
        except OSError:
            size = -1
        if size != int(row[2]):
            lines.append(f"{row[0]}\0{size}\n".encode())
    return tuple(lines)


def records(site: str) -> list[str]:
    """Every `*.dist-info/RECORD` in `site`, as the paths pathlib's glob gives (`site/name/RECORD`)."""
    try:
        names = os.listdir(site)
    except OSError:
        return []
    out = [os.path.join(site, n, "RECORD") for n in names if n.endswith(".dist-info")]
    return [p for p in out if os.path.exists(p)]  # what the glob lists: any node of that name
