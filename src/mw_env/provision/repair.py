"""Repairing a venv whose installed files differ from their RECORD (venv/integrity.py finds them).

Exactly the damaged packages are reinstalled, at the versions installed: torch and what comes with it from its
index (its companions, the GPU's device packages) by the torch step, from the pinned build's own index or
wheelhouse (`--reinstall-package torch`); every other package by the repair step, `name==version --no-deps`
from the venv's package sources (the project itself from its own arguments). A file that is its installed bytes
with more appended (a CA bundle extended for a proxy) is kept outside torch's packages: said, not undone.

uv's cache: uv links each installed file from its cache, so a file changed in place is changed in the cache too
(the damaged file has other links), and a reinstall would link the same bytes again. Such a package's cache
entry is cleaned first (`uv cache clean NAME`, said in the step's output); a package still damaged after its
reinstall is cleaned and reinstalled once more, and then the step fails naming the files and the cache: a
bootstrap never builds on a damaged cache silently. What a step has just installed is checked the same way
(`after_install`): a NEW venv linked to an edited cache file is found and repaired by the step that made it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path

from mw_env.base.errors import StepFailed
from mw_env.base.shellquote import sh, sh_join
from mw_env.provision import pin as pinmod
from mw_env.provision.model import Plan, Step
from mw_env.sources import uv as uvmod
from mw_env.venv.integrity import Damaged, Scan, canonical, scan_venv

# Reinstall these names (a step's own command with `--reinstall-package` for each), returning uv's run.
Reinstall = Callable[[tuple[str, ...]], uvmod.CommandRun]


def family_names(companions: Collection[str], device_packages: Collection[str]) -> set[str]:
    """What the torch step installs from torch's index: torch, its companions, the GPU's device packages."""
    return {canonical(n) for n in ("torch", *companions, *device_packages)}


def torch_family(p: Plan) -> set[str]:
    return family_names(p.companions, p.device_packages)


def torch_damage(scan: Scan, p: Plan) -> tuple[Damaged, ...]:
    return () if p.adopted else scan.of(torch_family(p))


def other_damage(scan: Scan, p: Plan) -> tuple[Damaged, ...]:
    """The other packages to reinstall: not those whose only change is bytes appended to a file (a CA bundle
    extended on purpose: venv/integrity.py EXTENDED), which a reinstall would undo."""
    family = torch_family(p)
    return tuple(d for d in scan.damaged if canonical(d.name) not in family and not d.extended_only)


def project_name(p: Plan) -> str | None:
    """The project's distribution name (`mw-env`), from its install arguments."""
    args = p.project_args
    if not args:
        return None
    if args[0] == "-e" and len(args) > 1:
        from mw_env.sources.pythons import read_project_meta

        folder = args[1].split("[", 1)[0]
        pyproject = Path(folder) / "pyproject.toml"
        return read_project_meta(pyproject)[0] if pyproject.is_file() else None
    name = args[0].split("[", 1)[0]
    for sep in ("==", ">=", "<=", "~=", "!=", "<", ">", "@", " "):
        name = name.split(sep, 1)[0]
    return name.strip() or None


def with_reinstall(argv: tuple[str, ...], names: Collection[str]) -> tuple[str, ...]:
    """`uv pip install ...` with `--reinstall-package NAME` for each name, right after `install`."""
    if not names:
        return argv
    at = argv.index("install") + 1 if "install" in argv else len(argv)
    flags = tuple(x for n in sorted(names) for x in ("--reinstall-package", n))
    return (*argv[:at], *flags, *argv[at:])


def repair_command(p: Plan, damaged: tuple[Damaged, ...]) -> tuple[str, ...]:
    """The packages other than torch's, reinstalled exactly (`--no-deps`: nothing else is resolved or changed),
    with torch's pin in force and the venv's package sources."""
    uv = p.uv or "uv"
    offline = ["--offline"] if p.options and p.options.offline else []
    pins = p.build_venv / (pinmod.OVERRIDES_FILE if p.adopted else pinmod.CONSTRAINTS_FILE)
    pin = ["--override" if p.adopted else "--constraint", str(pins)] if pins.is_file() else []
    user = [x for c in p.sources.constraints for x in ("--constraint", c)]
    project = canonical(project_name(p) or "")
    reqs: list[str] = []
    for d in damaged:
        if canonical(d.name) == project:
            reqs += [a for a in p.project_args]  # the project as bootstrap installs it (editable, a path)
        else:
            reqs.append(d.requirement)
    names = [d.name for d in damaged]
    argv = (uv, "pip", "install", "--python", str(p.venv_python), "--no-deps", *offline, *pin, *user)
    return with_reinstall((*argv, *p.sources.uv_args(), *reqs), names)


def damage_detail(damaged: tuple[Damaged, ...]) -> str:
    """`; reinstalling what differs from its RECORD: numpy 2.4.6: numpy/version.py missing` (a step's detail)."""
    if not damaged:
        return ""
    cache = (
        " (uv's cache entry cleaned first: it holds the changed files)"
        if any(d.shared for d in damaged)
        else ""
    )
    return f"; reinstalling what differs from its RECORD: {'; '.join(d.words() for d in damaged)}{cache}"


def cache_hint(damaged: Collection[Damaged], p: Plan) -> str:
    names = sorted({d.name for d in damaged})
    return (
        f"`{sh_join(['uv', 'cache', 'clean', *names])}` removes uv's copy of them, then "
        f"`mw-env bootstrap --venv {sh(p.venv)}` installs them again; to keep an edit in one venv out of the "
        "cache and the other venvs, install with copies (`UV_LINK_MODE=copy`, uv's `--link-mode copy`)"
    )


def clean_cache(
    run_command: Callable[[tuple[str, ...]], uvmod.CommandRun], p: Plan, names: list[str]
) -> None:
    """`uv cache clean NAME...`: the cache's copy of a file edited in place is the damaged file itself."""
    res = run_command((p.uv or "uv", "cache", "clean", *sorted(set(names))))
    if not res.ok:
        raise StepFailed(
            f"uv's cache holds damaged files of {', '.join(sorted(set(names)))}, and `uv cache clean` failed "
            f"(exit {res.returncode}): {_last(res.output)}",
            hint="stop other uv processes that use the cache (it is locked while they run), then re-run "
            f"`mw-env bootstrap --venv {sh(p.venv)}`",
        )


def after_install(
    step: Step,
    p: Plan,
    names: Collection[str],
    *,
    run_command: Callable[[tuple[str, ...]], uvmod.CommandRun],
    reinstall: Reinstall,
    before: tuple[Damaged, ...] = (),
    cleaned: bool = False,
) -> str:
    """Check what a step installed (`names`; the files found damaged `before` it are hashed again whatever
    their mtime); reinstall what is damaged (its cache entry cleaned first where a damaged file is linked from
    it, and once more cleaned if the first reinstall did not help); raise StepFailed when it stays damaged.
    Returns what was repaired, in words ("" when nothing was)."""
    recheck = {d.name: [f.path for f in d.faults] for d in before}
    found = scan_venv(p.build_venv, only=names, recheck=recheck).damaged
    said: list[str] = []
    for _attempt in range(2):
        if not found:
            return "; ".join(said)
        clean = not cleaned and (any(d.shared for d in found) or _attempt == 1)
        if clean:
            clean_cache(run_command, p, names_of(found))
            cleaned = True
        cleaned_words = (
            f"uv's cache entry cleaned (`{sh_join(['uv', 'cache', 'clean', *names_of(found)])}`), "
            if clean
            else ""
        )
        said.append(
            f"{'; '.join(d.words() for d in found)}: {cleaned_words}"
            f"reinstalled {', '.join(d.requirement for d in found)}"
        )
        res = reinstall(tuple(d.name for d in found))
        if not res.ok:
            raise StepFailed(
                f"reinstalling the damaged {', '.join(d.requirement for d in found)} failed "
                f"(exit {res.returncode}): {_last(res.output)}",
                hint=f"their files: {'; '.join(d.words() for d in found)}. {cache_hint(found, p)}",
            )
        recheck = {d.name: [f.path for f in d.faults] for d in found}
        found = scan_venv(p.build_venv, only=names, recheck=recheck).damaged
    if found:
        raise StepFailed(
            f"step {step.id}: the installed files still differ from their RECORD after a reinstall from a "
            f"cleaned uv cache: {'; '.join(d.words() for d in found)}",
            hint="the package files themselves (the wheelhouse's wheel, the index's) may be damaged; "
            + cache_hint(found, p),
        )
    return "; ".join(said)


def names_of(damaged: Collection[Damaged]) -> list[str]:
    return sorted({d.name for d in damaged})


def _last(output: str) -> str:
    lines = [ln.strip() for ln in output.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"
