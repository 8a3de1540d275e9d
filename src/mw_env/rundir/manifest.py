"""MANIFEST.sha256: `sha256sum` format, one `<hex>  <path relative to the run folder>` line per file.

Files that legitimately keep changing after the run (the detached-run log and state files), the
MLflow file store (mlruns/: MLflow's own database, which gets the report as artifacts after this
manifest is written and which `mlflow ui` edits) and temporaries are not listed; everything else the
run produced is.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from mw_env.base.atomic import write_text_atomic
from mw_env.rundir.contract import EXCLUDED_NAMES, MANIFEST, sha256_file

EXCLUDED_DIRS = {"mlruns"}  # only at the top of the run folder


@dataclass(frozen=True)
class ManifestCheck:
    ok: bool
    checked: int
    mismatched: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    unlisted: tuple[str, ...] = ()
    malformed: tuple[str, ...] = ()
    outside: tuple[str, ...] = ()  # listed paths that leave the run folder: never opened
    unreadable: tuple[str, ...] = ()  # "path (reason)": permission denied, a name too long, an I/O error

    def problems(self) -> list[tuple[str, str, tuple[str, ...]]]:
        """Each kind of failure found: (its name in the summary's count, its label before each item, the items)."""
        kinds = (
            ("changed", "changed", self.mismatched),
            ("missing", "missing", self.missing),
            ("not listed", "not in the manifest", self.unlisted),
            ("malformed", "malformed line", self.malformed),
            ("outside the run folder", "outside the run folder (not read)", self.outside),
            ("unreadable", "unreadable", self.unreadable),
        )
        return [kind for kind in kinds if kind[2]]

    def summary(self, run_dir: Path) -> str:
        """`ok: 20 files ...`, or what failed counted by kind (not the number of files listed)."""
        where = Path(run_dir) / MANIFEST
        if self.ok:
            return f"ok: {self.checked} files listed in {where} match"
        kinds = [f"{len(items)} {name}" for name, _label, items in self.problems()]
        return f"FAILED: {', '.join(kinds)} (of {self.checked} files listed in {where})"

    def to_dict(self) -> dict[str, object]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


def _artifacts(run_dir: Path) -> list[str]:
    out = []
    for root, dirs, files in os.walk(run_dir):
        top = Path(root) == Path(run_dir)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not (top and d in EXCLUDED_DIRS))
        for name in files:
            if name in EXCLUDED_NAMES or ".tmp-" in name or name.startswith("."):
                continue
            out.append((Path(root) / name).relative_to(run_dir).as_posix())
    return sorted(out)


def _write(run_dir: Path, entries: dict[str, str]) -> Path:
    path = run_dir / MANIFEST
    write_text_atomic(path, "".join(f"{digest}  {rel}\n" for rel, digest in sorted(entries.items())))
    return path


# A manifest lists one line per file of a run; 64 MiB is ~500 000 files, far past any run folder.
MANIFEST_MAX_BYTES = 64 << 20


def read_manifest(run_dir: Path) -> tuple[dict[str, str], list[str]]:
    """(path -> digest, malformed lines); InputError when the manifest is not a readable UTF-8 file."""
    from mw_env.base import userfile

    entries: dict[str, str] = {}
    malformed: list[str] = []
    text = userfile.read_text(run_dir / MANIFEST, what="manifest", max_bytes=MANIFEST_MAX_BYTES)
    for line in text.splitlines():
        digest, sep, rel = line.partition("  ")
        if not sep or len(digest) != 64 or not rel or "\0" in rel:  # no file name holds a NUL
            malformed.append(line)
            continue
        entries[rel] = digest
    return entries, malformed


def write_manifest(run_dir: Path) -> Path:
    """Hash every artifact under run_dir into MANIFEST.sha256 (replaced atomically)."""
    run_dir = Path(run_dir)
    return _write(run_dir, {rel: sha256_file(run_dir / rel) for rel in _artifacts(run_dir)})


def add_to_manifest(run_dir: Path, paths: Iterable[Path]) -> Path:
    """Add or refresh entries for `paths` (absolute or relative to run_dir), keeping the others."""
    run_dir = Path(run_dir)
    entries = read_manifest(run_dir)[0] if (run_dir / MANIFEST).exists() else {}
    for p in paths:
        p = Path(p)
        full = p if p.is_absolute() else run_dir / p
        entries[full.resolve().relative_to(run_dir.resolve()).as_posix()] = sha256_file(full)
    return _write(run_dir, entries)


def _inside(root: Path, rel: str) -> Path | None:
    """The file `rel` names under `root`, or None when it leaves the run folder (an absolute path, a `..`
    component, a NUL, or a link inside that leads out). A manifest is data of the run folder: it may only
    make verify read files of that folder, never `/etc/shadow`."""
    if "\0" in rel or rel.startswith("/") or ".." in rel.split("/"):
        return None
    path = root / rel
    target = path.resolve()  # not strict: a missing file is reported as missing, not as outside
    if target != root and root not in target.parents:
        return None
    return path


def verify_manifest(run_dir: Path) -> ManifestCheck:
    """Re-hash every listed file inside the run folder; report changed, missing, unlisted, unreadable
    artifacts and listed paths outside the folder (never opened)."""
    import stat

    from mw_env.base.errors import InputError, os_error_in, os_words

    run_dir = Path(run_dir)
    root = run_dir.resolve()
    if not os.path.lexists(run_dir / MANIFEST):
        raise InputError(f"{run_dir}: no {MANIFEST}", hint="is this a finished run folder?")
    if _inside(root, MANIFEST) is None:
        # The manifest is the run folder's too: a link to /etc/shadow would have verify print its lines.
        raise InputError(
            f"{run_dir / MANIFEST} is a link that leads out of the run folder (not read)",
            hint="a run's manifest is a file of its own folder: remove the link; the same training command "
            "writes the manifest again",
        )
    if not (run_dir / MANIFEST).is_file():
        raise InputError(
            f"{run_dir / MANIFEST} is not a regular file (a folder, a FIFO or a device: not read)",
            hint="is this a finished run folder?",
        )
    entries, malformed = read_manifest(run_dir)
    mismatched, missing, outside, unreadable = [], [], [], []
    for rel, digest in entries.items():
        try:
            path = _inside(root, rel)
            if path is None:
                outside.append(rel)
            elif not os.path.lexists(path):
                missing.append(rel)
            elif not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO or device is never opened
                unreadable.append(f"{rel} (not a regular file)")
            elif sha256_file(path) != digest:
                mismatched.append(rel)
        except (OSError, RuntimeError) as exc:  # a name too long, a link loop, permission denied, EIO
            cause = os_error_in(exc)  # pathlib's `RuntimeError: Symlink loop` holds the ELOOP
            unreadable.append(f"{rel} ({os_words(cause) if cause else type(exc).__name__})")
    unlisted = [rel for rel in _artifacts(run_dir) if rel not in entries]
    ok = not (mismatched or missing or unlisted or malformed or outside or unreadable)
    return ManifestCheck(
        ok,
        len(entries),
        tuple(mismatched),
        tuple(missing),
        tuple(unlisted),
        tuple(malformed),
        tuple(outside),
        tuple(unreadable),
    )
