"""Choices a plan makes before any step runs: the interpreter, the torch source, an image torch to adopt.

The rule the seeds teach: torch must come from the profile's build (never the resolver's default).
A wheelhouse that already holds a wheel of that build wins over the remote index; when the index
cannot be reached, the interpreter is chosen to fit the wheel that is at hand, with a warning.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from mw_env.provision import uv as uvmod
from mw_env.provision.wheelhouse import Reach, Sources, WheelFile, matching_torch, probe_index, wheels_in

FALLBACK_PYTHONS = ("3.12", "3.13", "3.11", "3.10")


@dataclass(frozen=True)
class Interpreter:
    path: str
    version: str  # "3.11.7"

    @property
    def minor(self) -> str:
        return ".".join(self.version.split(".")[:2])


@dataclass(frozen=True)
class TorchChoice:
    """Where torch comes from and the requirement that installs it."""

    requirement: str  # "torch==2.13.0+cpu" (a wheelhouse pins exactly) or "torch>=2.9,<2.15"
    origin: str  # "wheelhouse" | "index" | "image" | "installed"
    location: str | None  # the wheel's path, the index URL, or the image's site-packages
    wheel: WheelFile | None = None
    image_version: str | None = None  # adoption: the image's torch version


@dataclass(frozen=True)
class AdoptCandidate:
    """A torch of the profile's build that the base image already ships."""

    python: Interpreter
    version: str
    site: str  # the site-packages folder holding it
    hip: str | None
    cuda: str | None

    @property
    def build(self) -> str:
        return "rocm" if self.hip else "cuda" if self.cuda else "cpu"


def torch_spec_requirement(version_spec: str) -> str:
    return f"torch{version_spec}" if version_spec else "torch"


def exact_requirement(version_spec: str, local_tag: str) -> str:
    """`torch==2.9.1+rocm6.4` when the profile names one release, else the range (the index decides)."""
    m = re.fullmatch(r"\s*==\s*([0-9][^,;\s]*)\s*", version_spec or "")
    if m and local_tag and "+" not in m.group(1) and "*" not in m.group(1):
        return f"torch=={m.group(1)}{local_tag}"
    return torch_spec_requirement(version_spec)


def version_fits(version: str, spec: str) -> bool:
    try:
        return SpecifierSet(spec or "").contains(Version(version).public, prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return False


def supported(version: str, requires_python: str | None) -> bool:
    if not requires_python:
        return True
    try:
        return SpecifierSet(requires_python).contains(version, prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return True


def find_interpreter(uv: str | None, request: str, env: Mapping[str, str]) -> Interpreter | None:
    path = uvmod.find_python(uv, request, env)
    if not path:
        return None
    found = uvmod.python_version(path, env)
    return Interpreter(path=found[1] or path, version=found[0]) if found else None


@dataclass(frozen=True)
class Choice:
    python: Interpreter | None
    torch: TorchChoice | None
    warnings: tuple[str, ...] = ()
    problem: str | None = None  # why nothing workable was found
    problem_hint: str | None = None
    # The problem is the user's input (an explicit --python that cannot be used): exit 2, not a failed step.
    problem_is_input: bool = False
    reach: Reach | None = None
    notes: tuple[str, ...] = ()  # choices worth a line, not a warning (the wheelhouse decided the Python)


def choose(
    *,
    uv: str | None,
    env: Mapping[str, str],
    request: str,
    explicit: bool,
    build: str,
    version_spec: str,
    local_tag: str,
    index_url: str | None,
    sources: Sources,
    offline: bool,
    requires_python: str | None,
) -> Choice:
    """Pick (interpreter, torch source) so that the install can succeed, warning about every fallback."""
    warnings: list[str] = []
    wheels = wheels_in(sources.find_links, "torch")
    good, other_versions = matching_torch(wheels, local_tag=local_tag or None, specifier=version_spec)
    # A wheelhouse whose torch names its Pythons (cp311) and not the default one answers the question
    # alone: looking the default up (a second or more behind pyenv shims) would only be thrown away.
    wheel_pythons = [p for w in good for p in w.pythons()]
    skip_wanted = (
        not explicit and bool(good) and all(w.pythons() for w in good) and request not in wheel_pythons
    )
    wanted = None if skip_wanted else find_interpreter(uv, request, env)
    if wanted is not None and not supported(wanted.version, requires_python):
        if explicit:
            return Choice(
                None,
                None,
                problem=f"--python {request}: Python {wanted.version} does not satisfy the project's "
                f"requires-python {requires_python}",
                problem_hint="pass another --python, or omit it to use an available supported Python",
                problem_is_input=True,
            )
        wanted = None

    def wheel_for(py: Interpreter, pool: Sequence[WheelFile]) -> WheelFile | None:
        return next((w for w in pool if w.fits_python(py.version)), None)

    if wanted is not None and (w := wheel_for(wanted, good)):
        return Choice(wanted, TorchChoice(f"torch=={w.version}", "wheelhouse", str(w.path), wheel=w))
    if not explicit and good:
        # The operator's wheelhouse satisfies the profile: take a Python it fits, found one request at a time
        # (not every Python on PATH), and never ask the torch index to decide (no network at all).
        for minor in dict.fromkeys(wheel_pythons):
            if wanted is not None and minor == wanted.minor:
                continue
            py = find_interpreter(uv, minor, env)
            if py is None or not supported(py.version, requires_python):
                continue
            w = wheel_for(py, good)
            if w is None:
                continue
            why = "has no wheel there" if skip_wanted or wanted is not None else "is not available"
            note = (
                f"Python {py.version} ({py.path}) for the venv: the wheelhouse's torch {w.version} fits Python "
                f"{', '.join(w.pythons())}, and the default Python {request} {why} (--python chooses another)"
            )
            return Choice(
                py, TorchChoice(f"torch=={w.version}", "wheelhouse", str(w.path), wheel=w), notes=(note,)
            )

    reach: Reach | None = None
    index_ok = False
    if index_url and not offline:
        reach = probe_index(index_url, env=env)
        index_ok = reach.ok
    if wanted is not None and index_ok:
        return Choice(
            wanted, TorchChoice(exact_requirement(version_spec, local_tag), "index", index_url), reach=reach
        )

    # The wanted interpreter is missing, or the index cannot be used: take what makes the install possible.
    why_index = (
        "--offline was given"
        if offline
        else f"{index_url} is unreachable ({reach.detail})"
        if reach
        else "the profile names no index"
    )
    if explicit and wanted is None:
        return Choice(
            None,
            None,
            problem=f"--python {request}: Python {request} was not found",
            problem_hint=_python_hint(request),
            reach=reach,
            problem_is_input=True,
        )
    candidates: list[Interpreter] = [wanted] if wanted else []
    if not explicit:
        requests = [
            req
            for req in dict.fromkeys(
                (*(p for w in good + other_versions for p in w.pythons()), *FALLBACK_PYTHONS)
            )
            if not (wanted and req == wanted.minor)
        ]
        # Each lookup starts uv (and, behind pyenv shims, several interpreters): side by side, in order.
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=4) as pool:
            looked_up = list(pool.map(lambda req: find_interpreter(uv, req, env), requests))
        for found in looked_up:
            if found and supported(found.version, requires_python) and found not in candidates:
                candidates.append(found)
    for pool, note in ((good, ""), (other_versions, " (outside the profile's range {spec})")):
        for py in candidates:
            w = wheel_for(py, pool)
            if w is None:
                continue
            if py != wanted:
                fits = ", ".join(w.pythons()) or "any"
                missing = (
                    f"Python {request} is not available; the wheelhouse's torch {w.version} fits Python {fits}"
                    if wanted is None
                    else f"the wheelhouse's torch {w.version} fits only Python {fits}, and {why_index}"
                )
                warnings.append(f"using Python {py.version} ({py.path}): {missing}")
            if note:
                warnings.append(
                    f"using the wheelhouse's torch {w.version}{note.format(spec=version_spec)}: {why_index}"
                )
            return Choice(
                py,
                TorchChoice(f"torch=={w.version}", "wheelhouse", str(w.path), wheel=w),
                tuple(warnings),
                reach=reach,
            )
    if index_ok and candidates:
        py = candidates[0]
        warnings.append(f"using Python {py.version} ({py.path}): Python {request} is not available")
        return Choice(
            py,
            TorchChoice(exact_requirement(version_spec, local_tag), "index", index_url),
            tuple(warnings),
            reach=reach,
        )
    if not candidates:
        return Choice(
            None,
            None,
            problem=f"no Python interpreter satisfying {requires_python or 'the project'} was found",
            problem_hint=_python_hint(request),
            reach=reach,
        )
    if offline:
        problem = (
            f"--offline, and no wheelhouse holds a torch{local_tag} wheel for Python {candidates[0].minor}"
        )
    elif not index_url:
        problem = f"the profile names no torch index and no wheelhouse holds a torch{local_tag} wheel"
    else:
        problem = f"the torch index {index_url} is unreachable: {reach.detail if reach else '?'}"
    from mw_env.provision.wheelhouse import unreachable_hint

    hint = unreachable_hint(reach) if reach else "pass --find-links DIR with a folder holding the torch wheel"
    return Choice(candidates[0], None, tuple(warnings), problem=problem, problem_hint=hint, reach=reach)


def _python_hint(request: str) -> str:
    if os.sep in request:
        return "pass --python with the path of an existing interpreter, or a version such as 3.12"
    return (
        f"install it (`uv python install {request}`, or your distribution's python{request} package) or "
        "pass --python with a version or path that exists"
    )


_ADOPT_PROBE = r"""
import importlib.util, json, os, re, sys
out = {"version": None}
try:
    import importlib.metadata as md
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.submodule_search_locations:
        pkg = list(spec.submodule_search_locations)[0]
        out["version"] = md.version("torch")
        out["site"] = os.path.dirname(pkg)
        text = open(os.path.join(pkg, "version.py")).read()
        for k in ("hip", "cuda"):
            m = re.search(r"^%s\s*(?::\s*[^=]+)?=\s*['\"]([^'\"]+)['\"]" % k, text, re.M)
            out[k] = m.group(1) if m else None
except Exception as exc:
    out["error"] = str(exc)
out["python"] = "%d.%d.%d" % sys.version_info[:3]
print(json.dumps(out))
"""


def find_image_torch(pythons: Sequence[str], env: Mapping[str, str]) -> list[AdoptCandidate]:
    """Interpreters among `pythons` whose site-packages already hold torch (read without importing it)."""
    out: list[AdoptCandidate] = []
    seen: set[tuple[str, ...]] = set()
    unique: list[str] = []
    for path in pythons:
        if not path or not os.path.isfile(path):
            continue
        dirs = _site_dirs(path, env)
        key = tuple(sorted(str(d) for d in dirs))
        if key in seen:
            continue  # python3 and /usr/bin/python3 are often one interpreter: ask it once
        seen.add(key)
        # Starting an interpreter costs 0.1-0.4 s; one whose site folders hold no torch cannot offer one.
        if any((d / "torch").is_dir() for d in dirs):
            unique.append(path)
    from concurrent.futures import ThreadPoolExecutor

    probe_env = {**env, "PYTHONNOUSERSITE": "1"}
    # Side by side: each is an interpreter start (~0.1-0.2 s), and bootstrap waits for all before planning.
    with ThreadPoolExecutor(max_workers=max(1, min(4, len(unique)))) as pool:
        results = list(pool.map(lambda p: uvmod._run_quiet([p, "-c", _ADOPT_PROBE], probe_env, 20.0), unique))
    for path, res in zip(unique, results, strict=True):
        if not res.ok:
            continue
        try:
            data = json.loads(res.stdout.strip().splitlines()[-1])
        except (json.JSONDecodeError, IndexError):
            continue
        if data.get("version") and data.get("site"):
            out.append(
                AdoptCandidate(
                    python=Interpreter(path=path, version=data["python"]),
                    version=data["version"],
                    site=data["site"],
                    hip=data.get("hip"),
                    cuda=data.get("cuda"),
                )
            )
    return out


def _site_dirs(python: str, env: Mapping[str, str]) -> list[Path]:
    """Where `python` looks for packages, from the file system alone: its venv's and its installation's
    site-/dist-packages (Debian's /usr/lib/python3/dist-packages, /usr/local/...), and PYTHONPATH."""
    exe = Path(python)
    prefixes: list[Path] = []
    if (exe.parent.parent / "pyvenv.cfg").is_file():
        prefixes.append(exe.parent.parent)  # a venv: its own site-packages (and maybe the base's)
    prefixes.append(Path(os.path.realpath(exe)).parent.parent)
    dirs: list[Path] = []
    for prefix in dict.fromkeys(prefixes):
        for pattern in (
            "lib/python3*/site-packages",
            "lib/python3*/dist-packages",
            "lib/python3/dist-packages",
            "local/lib/python3*/dist-packages",
        ):
            dirs += sorted(prefix.glob(pattern))
    # .pth files add folders too (mw-env's own adopted-torch file among them): path lines, not `import` lines.
    for site in list(dirs):
        for pth in sorted(site.glob("*.pth")):
            try:
                lines = pth.read_text(encoding="utf-8", errors="replace").splitlines()[:50]
            except OSError:
                continue
            dirs += [Path(x.strip()) for x in lines if x.strip().startswith("/") and Path(x.strip()).is_dir()]
    dirs += [Path(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return dirs


def image_pythons(env: Mapping[str, str], extra: Sequence[str] = ()) -> list[str]:
    """Interpreters an image would ship torch in: python3 on PATH and the usual image venvs/conda.

    Never the shell's active venv ($VIRTUAL_ENV, after `eval "$(mw-env env)"` or `source .../activate`) nor a
    venv mw-env made (it has mw-env.json): their torch is another training venv's, and adopting it would make
    the new venv depend on the old one through a .pth file. Only an image's own interpreter is offered."""
    import shutil

    found = [p for p in extra if p]
    for name in ("python3", "python"):
        p = shutil.which(name, path=env.get("PATH", os.defpath))
        if p:
            found.append(os.path.realpath(p) if "shims" in p else p)
    for p in ("/opt/venv/bin/python", "/opt/conda/bin/python", "/usr/bin/python3"):
        if os.path.isfile(p):
            found.append(p)
    return [p for p in dict.fromkeys(found) if not _another_training_venv(p, env)]


def _another_training_venv(python: str, env: Mapping[str, str]) -> bool:
    prefix = Path(python).parent.parent
    active = env.get("VIRTUAL_ENV")
    if active and os.path.realpath(prefix) == os.path.realpath(active):
        return True
    return (prefix / "mw-env.json").is_file()


def read_project_meta(pyproject: Path) -> tuple[str | None, str | None, dict[str, list[str]] | None]:
    """(name, requires-python, optional-dependencies) of a pyproject.toml; Nones when unreadable."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10: tomli is the same parser, and a declared dependency there
        import tomli as tomllib
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return None, None, None
    project = data.get("project") or {}
    return project.get("name"), project.get("requires-python"), project.get("optional-dependencies") or {}
