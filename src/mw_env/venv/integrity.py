"""A venv's installed files checked against their RECORD (the sha256 and size the wheel's installer wrote for
each file, PEP 376/627), not only its records: the packages whose files are missing or changed.

Issue 40: with numpy's version.py deleted, bootstrap called the venv complete and the doctor passed; with
torch/version.py edited in place, every NEW venv failed its verify with the same edited file. uv installs by
hard-linking each file from its cache (on Linux where the filesystem cannot clone), so an edit in place in one
venv is an edit of the cache's copy and of every venv linked to it: such a file's inode has more than one link
(`FileFault.shared`), and reinstalling only links the same edited file again until the cache's entry is
cleaned (`uv cache clean NAME`; `--refresh-package` does not re-extract, checked with uv 0.13).

What is checked when (the cost of hashing a torch's files is seconds: 1.8 s of CPU for the CPU build's 700 MB,
about 15 s for a ROCm build's 5.7 GB; a stat of every file is 50 ms; bench/bench_integrity.py):
- always: every file's size (a stat): a deleted or truncated file;
- a file's hash where its mtime is later than its package's METADATA (an edit after the package was unpacked:
  the installer writes every file of a wheel before its dist-info, and an edit in place or a rewrite moves the
  mtime; uv's cache keeps the unpack time, so a new venv linked to an edited cache file is caught too), unless
  the mtime falls inside one of bootstrap's own uv commands (venv/installtimes.py: uv unpacks a wheel's files
  in parallel, so a share of them is later than METADATA on every fresh install); the dist-info's own files
  are left to the size check (the installer writes INSTALLER, REQUESTED, ... later);
- every file's hash with `full` (`mw-env doctor -v`), and the files found changed before after a repair.
An edit that keeps both size and mtime (a bit flip on the disk, `touch -r`), or one made while a bootstrap's uv
command ran, is found by `full` only.

Plain strings and os.stat over the RECORD's rows, not Path objects: a torch venv has some 20,000 files
(pathlib's joins were half of the 0.11 s a pass took).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import os
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from mw_env.venv import installtimes

# What a fault is, in the words a finding uses. EXTENDED: the file is its installed bytes with more appended
# (a CA bundle extended for a company's proxy: `cat corp.pem >> certifi/cacert.pem`, as this project's own
# build machine had it), a change made on purpose that a repair would undo: told, and kept outside torch's.
MISSING, SIZE, CHANGED, UNREADABLE, EXTENDED = "missing", "size", "changed", "unreadable", "extended"


@dataclass(frozen=True)
class FileFault:
    path: str  # as the RECORD names it, relative to site-packages
    kind: str  # MISSING | SIZE | CHANGED | UNREADABLE
    shared: bool = False  # its inode has other links: uv's cache (or another venv) holds the same bytes

    def words(self) -> str:
        return {
            MISSING: f"{self.path} missing",
            SIZE: f"{self.path} changed (size)",
            CHANGED: f"{self.path} changed (sha256)",
            EXTENDED: f"{self.path} extended (its installed bytes with more appended)",
        }.get(self.kind, f"{self.path} unreadable")


@dataclass(frozen=True)
class Damaged:
    """One installed package whose files differ from its RECORD."""

    name: str  # the project name as its dist-info folder spells it (`numpy`, `torch`)
    version: str
    dist_info: str  # the folder, relative to site-packages
    faults: tuple[FileFault, ...]

    @property
    def extended_only(self) -> bool:
        """Every fault is an appended file (kept outside torch's packages: see EXTENDED)."""
        return all(f.kind == EXTENDED for f in self.faults)

    @property
    def shared(self) -> bool:
        """A changed file is linked from elsewhere: uv's cache holds the change too (`uv cache clean NAME`)."""
        return any(f.shared for f in self.faults)

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"

    def words(self, most: int = 3) -> str:
        """`numpy 2.4.6: numpy/version.py missing, ... (and 12 more)`."""
        shown = ", ".join(f.words() for f in self.faults[:most])
        more = f" (and {len(self.faults) - most} more)" if len(self.faults) > most else ""
        return f"{self.name} {self.version}: {shown}{more}"


@dataclass(frozen=True)
class Scan:
    damaged: tuple[Damaged, ...] = ()
    files: int = 0  # files checked
    hashed: int = 0  # of them, files hashed
    hashed_bytes: int = 0
    packages: int = 0
    unowned: tuple[str, ...] = field(default=())  # dist-info folders without a RECORD (nothing to check)
    # The digest of every file whose size differs from its RECORD (a whole scan only: installed_fingerprint).
    fingerprint: str = ""

    def of(self, names: Collection[str]) -> tuple[Damaged, ...]:
        wanted = {canonical(n) for n in names}
        return tuple(d for d in self.damaged if canonical(d.name) in wanted)

    def words(self, most: int = 4) -> str:
        shown = "; ".join(d.words() for d in self.damaged[:most])
        more = f" (and {len(self.damaged) - most} more packages)" if len(self.damaged) > most else ""
        return shown + more


def canonical(name: str) -> str:
    """PEP 503's name normalisation (`Torch_Audio` -> `torch-audio`), without importing packaging."""
    return re.sub(r"[-_.]+", "-", name).lower()


def scan(
    site: str | os.PathLike[str],
    *,
    full: bool = False,
    only: Collection[str] | None = None,
    recheck: Mapping[str, Collection[str]] | None = None,
    windows: Sequence[installtimes.InstallTime] = (),
    sizes_only: bool = False,
) -> Scan:
    """The packages in `site` whose files differ from their RECORD (see the module's docstring for what is
    hashed). `only`: these project names; `recheck`: name -> RECORD paths to hash whatever their mtime (the
    files found changed before a reinstall: one linked again from an edited cache keeps the cache's mtime);
    `windows`: when bootstrap's uv commands ran (installtimes.load()), a file written then is not hashed;
    `sizes_only`: no file is hashed."""
    root = os.fspath(site).rstrip(os.sep) + os.sep
    wanted = {canonical(n) for n in only} if only is not None else None
    again = {canonical(k): set(v) for k, v in (recheck or {}).items()}
    damaged: list[Damaged] = []
    unowned: list[str] = []
    files = hashed = hashed_bytes = packages = 0
    digest = hashlib.sha256()
    try:
        names = sorted(os.listdir(root))  # the fingerprint's order
    except OSError:
        return Scan(fingerprint=digest.hexdigest()[:16] if wanted is None else "")
    for folder in names:
        if not folder.endswith(".dist-info"):
            continue
        name, _, version = folder[: -len(".dist-info")].rpartition("-")
        key = canonical(name)
        if wanted is not None and key not in wanted:
            continue
        record = root + folder + "/RECORD"
        rows = _rows(record)
        if rows is None:
            unowned.append(folder)
            if os.path.exists(record):  # a RECORD there but unreadable is damage too
                digest.update(f"{folder}\0unreadable\n".encode())
            continue
        packages += 1
        pkg = _check_package(
            root,
            folder,
            rows,
            full=full,
            recheck=again.get(key, set()),
            windows=windows,
            hashes=not sizes_only,
        )
        files, hashed, hashed_bytes = files + pkg.files, hashed + pkg.hashed, hashed_bytes + pkg.hashed_bytes
        for line in pkg.size_lines:
            digest.update(line)
        if pkg.faults:
            damaged.append(Damaged(name, version, folder, tuple(pkg.faults)))
    fingerprint = digest.hexdigest()[:16] if wanted is None else ""
    return Scan(tuple(damaged), files, hashed, hashed_bytes, packages, tuple(unowned), fingerprint)


def _rows(record: str) -> list[list[str]] | None:
    try:
        with open(record, encoding="utf-8", errors="replace") as fh:
            return list(csv.reader(fh.read().splitlines()))
    except (OSError, csv.Error, ValueError):  # ValueError: a NUL in the file (csv refuses it)
        return None


@dataclass
class _Package:
    files: int = 0
    hashed: int = 0
    hashed_bytes: int = 0
    faults: list[FileFault] = field(default_factory=list)
    size_lines: list[bytes] = field(default_factory=list)  # the files whose size differs, for the fingerprint


def _check_package(
    root: str,
    folder: str,
    rows: list[list[str]],
    *,
    full: bool,
    recheck: set[str],
    windows: Sequence[installtimes.InstallTime],
    hashes: bool,
) -> _Package:
    out = _Package()
    try:
        unpacked = os.stat(root + folder + "/METADATA").st_mtime_ns
    except OSError:
        unpacked = -1  # no METADATA: every file is suspect
    stat, within = os.stat, installtimes.within
    own = folder + "/"  # the dist-info's own files: written by the installer itself (INSTALLER, RECORD, ...)
    for row in rows:
        # RECORD itself and byte-code have no hash or size; files outside site-packages (scripts in bin/,
        # rewritten by the installer for this venv's python) are not compared.
        if len(row) < 3 or not row[2].isdigit() or row[0].startswith(".."):
            continue
        rel, digest, size = row[0], row[1], int(row[2])
        out.files += 1
        path = root + rel
        try:
            st = stat(path)
        except OSError as exc:
            out.faults.append(FileFault(rel, MISSING if isinstance(exc, FileNotFoundError) else UNREADABLE))
            out.size_lines.append(f"{rel}\0-1\n".encode())
            continue
        shared = st.st_nlink > 1
        algo, _, want = digest.partition("=")
        if st.st_size != size:
            grown = appended(path, digest, size, st.st_size)
            out.faults.append(FileFault(rel, EXTENDED if grown else SIZE, shared))
            if not grown:  # an appended file (a change made on purpose) leaves the fingerprint alone
                out.size_lines.append(f"{rel}\0{st.st_size}\n".encode())
            continue
        mtime = st.st_mtime_ns
        later = mtime > unpacked and not rel.startswith(own) and not within(mtime, windows)
        if not want or not hashes or not (full or later or rel in recheck):
            continue
        got = file_hash(path, algo)
        out.hashed += 1
        out.hashed_bytes += size
        if got is None:
            out.faults.append(FileFault(rel, UNREADABLE))
        elif got != want:
            out.faults.append(FileFault(rel, CHANGED, shared))
    return out


def scan_venv(
    venv: str | os.PathLike[str],
    *,
    full: bool = False,
    only: Collection[str] | None = None,
    recheck: Mapping[str, Collection[str]] | None = None,
    sizes_only: bool = False,
) -> Scan:
    """`scan` of the venv's site-packages (an empty Scan where it has none), with the windows recorded."""
    from pathlib import Path

    from mw_env.venv.venvinfo import site_packages

    site = site_packages(Path(venv))
    if site is None:  # no files, no damage: the digest of nothing
        return Scan(fingerprint=hashlib.sha256().hexdigest()[:16])
    windows = () if full or sizes_only else installtimes.load()
    return scan(site, full=full, only=only, recheck=recheck, windows=windows, sizes_only=sizes_only)


def installed_fingerprint(venv: str | os.PathLike[str]) -> str:
    """A digest of the installed files whose size differs from their RECORD (a stat per file, no hash).

    Part of the verify step's key: a venv that was verified and later lost or damaged a file (a disk that
    filled during an install leaves numpy without version.py; a user's `rm`) no longer matches, so bootstrap
    verifies again instead of saying "already complete" over a torch that does not import. Only the damage
    is digested, not the list of packages: a later `pip install` of something else leaves a healthy venv's
    key unchanged, so a re-run stays a no-op."""
    return scan_venv(venv, sizes_only=True).fingerprint


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
