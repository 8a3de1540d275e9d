"""The installed files that differ from what their RECORD says: stdlib only, and runnable as a script.

Why a script: bootstrap reads the damage of torch's 19,000 files for the verify key while the extras install
(steps BackgroundVerify). Read in bootstrap's own process that is ~50 ms of Python beside uv, which took a
share of uv's cores (the extras step ran ~20 ms longer than bare uv's, measured); run as
`python -I -S damage.py SITE` under SCHED_IDLE (sched(7): only on a core nothing else wants; nice 19 where
refused) it takes none. A child process, not a low-priority thread: such a thread could be starved while
holding the GIL and stall the thread that runs the steps. One implementation serves both: venvinfo's
fingerprint calls these functions, and the script prints their result as JSON (`to_json` / `from_json`).
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import sys

# A RECORD file's identity: its damage read earlier stands while the file is the same (uv writes a new RECORD
# whenever it installs a package, so a package replaced in between is read again).
RecordIdentity = tuple[int, int, int, int]
# RECORD path -> (its identity when read, the damage lines it gave)
KnownDamage = dict[str, tuple[RecordIdentity, tuple[bytes, ...]]]


def identity(path: str) -> RecordIdentity | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def damage(root: str, record: str) -> tuple[bytes, ...]:
    """The files of one RECORD whose size differs from the recorded one, as digest lines."""
    try:
        with open(record, encoding="utf-8", errors="replace") as fh:
            rows = list(csv.reader(fh.read().splitlines()))
    except (OSError, csv.Error):
        return (f"{os.path.basename(os.path.dirname(record))}\0unreadable\n".encode(),)
    # Plain strings and os.stat, not Path objects: a torch venv has some 20,000 files (pathlib's joins were half
    # of the 0.11 s this took).
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


def record_damage(site: str) -> KnownDamage:
    """Every package's damage lines now, with each RECORD's identity (venvinfo.installed_fingerprint)."""
    root = site.rstrip(os.sep) + os.sep
    known: KnownDamage = {}
    for path in records(site):
        ident = identity(path)
        if ident is not None:
            known[path] = (ident, damage(root, path))
    return known


def to_json(known: KnownDamage) -> str:
    # The lines are UTF-8 by construction (encoded from text above): carried as text, encoded back exactly.
    return json.dumps({p: [list(i), [line.decode() for line in lines]] for p, (i, lines) in known.items()})


def from_json(text: str) -> KnownDamage:
    """The script's answer; ValueError for anything it would not print."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    known: KnownDamage = {}
    try:
        for path, (ident, lines) in data.items():
            if len(ident) != 4 or not all(isinstance(x, int) for x in ident):
                raise ValueError(f"bad identity for {path}")
            known[str(path)] = ((ident[0], ident[1], ident[2], ident[3]), tuple(str(x).encode() for x in lines))
    except TypeError as exc:  # an entry of another shape
        raise ValueError(str(exc)) from None
    return known


def _lowest_priority() -> None:
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (OSError, AttributeError):
        with contextlib.suppress(OSError):
            os.nice(19)


if __name__ == "__main__":
    _lowest_priority()
    sys.stdout.write(to_json(record_damage(sys.argv[1])))
