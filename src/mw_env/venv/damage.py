"""The installed files that differ from what their RECORD says: the verify key's fingerprint reads them here;
and a file's hash as a RECORD writes it (venv/integrity.py hashes with it too).

Plain strings and os.stat, not Path objects: a torch venv has some 20,000 files (pathlib's joins were half of
the 0.11 s this took).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import os


def damage(root: str, record: str) -> tuple[bytes, ...]:
    """The files of one RECORD whose size differs from the recorded one, as digest lines. A file that is its
    installed bytes with more appended (a CA bundle extended for a proxy) is not: a change made on purpose,
    which bootstrap keeps (venv/integrity.py's EXTENDED), so it does not make every re-run verify again."""
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
        if size != int(row[2]) and not appended(root + row[0], row[1], int(row[2]), size):
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


def appended(path: str, digest: str, recorded: int, size: int) -> bool:
    """The file is longer than recorded and its first `recorded` bytes are the recorded ones (read only for a
    file whose size already differs: rare, and then one file)."""
    algo, _, want = digest.partition("=")
    return size > recorded and bool(want) and file_hash(path, algo, recorded) == want


def file_hash(path: str, algo: str, limit: int | None = None) -> str | None:
    """The file's digest (of its first `limit` bytes) as a RECORD writes it (urlsafe base64 without padding);
    None when unreadable."""
    try:
        h = hashlib.new(algo)
    except ValueError:
        return None
    left = -1 if limit is None else limit
    try:
        with open(path, "rb") as fh:
            while left and (chunk := fh.read(1 << 20 if left < 0 else min(left, 1 << 20))):
                h.update(chunk)
                left = left - len(chunk) if left > 0 else left
    except OSError:
        return None
    return base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode()
