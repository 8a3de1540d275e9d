"""The Pythons a bootstrap can use: an interpreter found by request, and an image's interpreters that
already hold torch (read from their site folders without importing it)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from mw_env.sources import uv as uvmod


@dataclass(frozen=True)
class Interpreter:
    path: str
    version: str  # "3.11.7"

    @property
    def minor(self) -> str:
        return ".".join(self.version.split(".")[:2])


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


def supported(version: str, requires_python: str | None) -> bool:
    if not requires_python:
        return True
    from packaging.specifiers import InvalidSpecifier, SpecifierSet  # here: planning seldom needs it
    from packaging.version import InvalidVersion

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
    if not unique:
        return out  # the usual fresh container: no image torch, no thread pool (3 ms of bootstrap's start)
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


def image_pythons(env: Mapping[str, str]) -> list[str]:
    """Interpreters an image would ship torch in: python3 on PATH and the usual image venvs/conda.

    Never the shell's active venv ($VIRTUAL_ENV, after `eval "$(mw-env env)"` or `source .../activate`) nor a
    venv mw-env made (it has mw-env.json): their torch is another training venv's, and adopting it would make
    the new venv depend on the old one through a .pth file. Only an image's own interpreter is offered."""
    import shutil

    found = []
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
