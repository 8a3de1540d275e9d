"""`mw-env bootstrap --lock FILE`: what is checked before anything is installed, and how uv installs it.

Before the plan: the lock is read whole and validated (lockfile), its local wheels must lie in a wheelhouse
or local index of this machine's sources, and its hardware must be this machine's (`--force` overrides);
the venv's Python is the lock's. The install itself is one `uv pip install -r pylock.mw-env.toml`: uv
downloads (or takes from the wheelhouse / its cache) and checks every file's sha256 before it installs any,
so a changed hash leaves the venv empty; nothing is resolved, so no index can swap torch. The project itself
follows with `--no-deps` under the torch pin.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

from mw_env.base.errors import InputError, StepFailed
from mw_env.venv.lock.lockfile import Lock, read_lock
from mw_env.venv.lock.match import hardware_problem, machine_hardware

if TYPE_CHECKING:
    from mw_env.profiles.model import Build, Selection, TorchSource
    from mw_env.sources.wheelhouse import Sources

# uv's own settings that name indexes and wheelhouses (uv reads them itself; mw-env's Sources does not).
UV_SOURCES = ("UV_DEFAULT_INDEX", "UV_INDEX", "UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_FIND_LINKS")


def local_roots(
    sources: Sources, indexes: Sequence[str | None] = (), env: Mapping[str, str] | None = None
) -> list[Path]:
    """The folders a lock's local wheels may come from: the wheelhouses (find-links) and local indexes, the
    torch source's and uv's own among them (a `…/simple` index with its files beside it: its parent)."""
    from mw_env.sources.wheelhouse import local_dir

    roots: list[Path] = []
    uv_own = [u for var in UV_SOURCES for u in (env or {}).get(var, "").split()]
    for link in sources.find_links:
        d = local_dir(link)
        if d is not None:
            roots.append(d)
    for url in (sources.index_url, *sources.extra_index_urls, *indexes, *uv_own):
        d = local_dir(url) if url else None
        if d is not None:
            roots.append(d.parent if d.name == "simple" else d)
    return [r.expanduser().absolute() for r in roots]


def load_for_bootstrap(
    path: Path,
    *,
    selection: Selection,
    sources: Sources,
    force: bool,
    env: Mapping[str, str] | None = None,
    project: Path | None = None,
    extras: Sequence[str] = ("train",),
) -> Lock:
    """The lock, validated, checked whole (envlock.requires: the project's `extras` met, its wheels the
    versions and the Python they claim) and against this machine; InputError before anything is installed.
    `bootstrap --lock` and its `--dry-run` both come here, so the dry run refuses what the real run would."""
    torch = selection.torch
    roots = local_roots(sources, (torch.index_url, *getattr(torch, "extra_index_urls", ())), env)
    lock = read_lock(path, wheelhouses=roots)
    problem = hardware_problem(lock.meta, selection)
    if problem and not force:
        raise InputError(
            f"lock {path} was made for {lock.meta.hardware()}; this machine is {machine_hardware(selection)}: "
            f"{problem}",
            hint="make a lock here: `mw-env bootstrap` writes VENV/pylock.mw-env.toml (or `mw-env lock --venv "
            "VENV` for an existing venv); or pass --force to install this lock anyway",
        )
    missing = [
        (p.name, w.local)
        for p in lock.packages
        for w in p.wheels[:1]
        if w.local is not None and not w.local.is_file()
    ]
    if missing:
        name, where = missing[0]
        raise InputError(
            f"lock {path}: the wheel of {name} is missing: {where} does not exist"
            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""),
            hint="put the wheel back into that wheelhouse, or make a new lock here",
        )
    check_whole(lock, project=project, extras=extras)
    return lock


def check_whole(lock: Lock, *, project: Path | None, extras: Sequence[str]) -> None:
    """InputError naming what the lock lacks or gets wrong, whatever --force says (it is about hardware)."""
    from mw_env.venv.lock.requires import lock_problems, marker_env, project_needs

    env = marker_env(lock.meta.python, lock.meta.platform or "linux-x86_64")
    problems = list(dict.fromkeys(lock_problems(lock, project_needs(project, extras, env))))
    if not problems:
        return
    more = f" (and {len(problems) - 6} more)" if len(problems) > 6 else ""
    wanted = ",".join(extras) or "none"
    raise InputError(
        f"{lock.source} is not whole: {'; '.join(problems[:6])}{more}",
        hint=f"a lock is installed only whole: make a new one from a complete venv (`mw-env lock --venv VENV "
        f"--output FILE`; a bootstrap with --extras {wanted} writes one into the venv), or bootstrap with the extras "
        "the lock was made for; nothing was installed",
    )


def python_request(lock: Lock, given: str | None) -> str:
    """The Python the rebuilt venv uses: the lock's major.minor (wheels are tagged cp311 ...)."""
    m = re.match(r"(\d+)\.(\d+)", lock.meta.python)
    wanted = f"{m.group(1)}.{m.group(2)}" if m else lock.meta.python
    if given is None:
        return wanted
    if re.fullmatch(r"\d+\.\d+(\.\d+)?", given) and not (given + ".").startswith(wanted + "."):
        raise InputError(
            f"--python {given}: the lock was made with Python {lock.meta.python}, its wheels need {wanted}",
            hint=f"omit --python (the lock's {wanted} is used) or pass --python {wanted}",
        )
    return given


def install_command(uv: str, python: str, lock_path: Path, *, offline: bool) -> tuple[str, ...]:
    """The one uv call that installs a lock exactly (the preview flag silences uv's 'experimental' note)."""
    return (
        uv,
        "pip",
        "install",
        "--python",
        python,
        *(["--offline"] if offline else []),
        "--preview-features",
        "pylock",
        "-r",
        str(lock_path),
    )


def install_failure(output: str, lock: Lock, *, returncode: int) -> StepFailed:
    """uv's refusal in the lock's words: the package whose hash differs, the wheel that is not there."""
    text = output.replace("\r", "")
    m = re.search(r"Hash mismatch for `([^`]+)`", text)
    if m:
        want = re.search(r"Expected:\s*(sha256:[0-9a-f]+)", text)
        got = re.search(r"Computed:\s*(sha256:[0-9a-f]+)", text)
        return StepFailed(
            f"the wheel of {m.group(1)} does not match the lock: the lock says "
            f"{want.group(1) if want else '?'}, the file is {got.group(1) if got else '?'}; nothing was installed",
            hint="the lock or the file was changed: make a new lock on a trusted machine, or fetch the file "
            "again from its source",
        )
    m = re.search(r"wasn't found in the cache: (\S+)", text) or re.search(
        r"Failed to download `([^`]+)`", text
    )
    if m:
        return StepFailed(
            f"a wheel of the lock is not available offline: {m.group(1)} (looked in uv's cache, UV_CACHE_DIR, "
            "and the lock's own URL); nothing was installed",
            hint="run once without --offline to fetch it, or put the wheel into a wheelhouse and make the lock "
            "there",
        )
    m = re.search(r"(?:No such file or directory|not found)[^\n]*", text)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    detail = m.group(0) if m else (lines[-1] if lines else "no output")
    return StepFailed(
        f"installing the lock {lock.source} failed (exit {returncode}): {detail}",
        hint="see uv's output above; nothing of a failed install is kept",
    )


def torch_source_for(lock: Lock, source: TorchSource) -> TorchSource:
    """The profile's torch source narrowed to the lock's torch: the exact version, its build and local tag
    (what the verify step and the pin check), even under --force with another build."""
    import dataclasses

    local = lock.meta.torch.partition("+")[2]
    return dataclasses.replace(
        source,
        build=cast("Build", lock.meta.build),  # one of BUILDS: the lock's reader checked it
        version=f"=={lock.meta.torch}",
        local_tag=f"+{local}" if local else "",
    )


def describe(lock: Lock) -> str:
    return f"{len(lock.packages)} packages, torch {lock.meta.torch} (lock sha256 {lock.sha256[:12]})"
