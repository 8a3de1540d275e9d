"""Build small real wheels and package indexes for tests (offline, milliseconds).

    from wheelfactory import build_wheel, fake_torch, simple_index, flat_dir  # tests/ is on sys.path

    whl = build_wheel(tmp / "dist", "needs-torch", "1.0", requires=["torch>=2.10"])
    rocm = fake_torch(tmp / "dist", "2.9.1+rocm6.4", hip="6.4.43482")
    index = simple_index(tmp / "rocm-index", [rocm])      # PEP 503 folder; index.as_uri() for --index-url
    links = flat_dir(tmp / "wheelhouse", [rocm, whl])     # a --find-links folder

Wheels are pure Python (`py3-none-any`) unless tags are given, so any interpreter installs them.
`fake_torch` writes a `torch` package whose `__version__`, `torch.version.hip` and `torch.version.cuda`
look like the real build's, which is all the installer and the doctor's build check read.
"""

from __future__ import annotations

import base64
import hashlib
import re
import shutil
import urllib.parse
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path


def normalize(name: str) -> str:
    """PEP 503 project name normalisation."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def build_wheel(
    dest: Path,
    name: str,
    version: str,
    *,
    files: Mapping[str, str] | None = None,
    requires: Sequence[str] = (),
    python_tag: str = "py3",
    abi_tag: str = "none",
    platform_tag: str = "any",
    requires_python: str | None = None,
    extras: Mapping[str, Sequence[str]] | None = None,
) -> Path:
    """Write `<name>-<version>-<py>-<abi>-<plat>.whl` into `dest` and return its path.

    `extras` maps an extra to its requirements (`torch[device-gfx1103]` -> `amd-torch-device-gfx1103`).

    `files` maps paths inside the wheel to their text; by default a package `<name>` with an
    `__init__.py` that sets `__version__`.
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    dist = re.sub(r"[-_.]+", "_", name)
    pkg = dist.lower()
    if files is None:
        files = {f"{pkg}/__init__.py": f"__version__ = {version!r}\n"}
    dist_info = f"{dist}-{version}.dist-info"
    metadata = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    if requires_python:
        metadata.append(f"Requires-Python: {requires_python}")
    metadata += [f"Requires-Dist: {r}" for r in requires]
    for extra, reqs in (extras or {}).items():
        metadata.append(f"Provides-Extra: {extra}")
        metadata += [f'Requires-Dist: {r} ; extra == "{extra}"' for r in reqs]
    wheel_meta = (
        "Wheel-Version: 1.0\nGenerator: mw-env-tests\nRoot-Is-Purelib: true\n"
        f"Tag: {python_tag}-{abi_tag}-{platform_tag}\n"
    )
    entries: dict[str, bytes] = {p: t.encode() for p, t in files.items()}
    entries[f"{dist_info}/METADATA"] = ("\n".join(metadata) + "\n").encode()
    entries[f"{dist_info}/WHEEL"] = wheel_meta.encode()
    record = [_record_line(p, d) for p, d in entries.items()] + [f"{dist_info}/RECORD,,"]
    entries[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = dest / f"{dist}-{version}-{python_tag}-{abi_tag}-{platform_tag}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for p, d in entries.items():
            zf.writestr(p, d)
    return path


def fake_torch(
    dest: Path,
    version: str,
    *,
    hip: str | None = None,
    cuda: str | None = None,
    requires: Sequence[str] = (),
    extra_files: Mapping[str, str] | None = None,
    extras: Mapping[str, Sequence[str]] | None = None,
    **tags: str,
) -> Path:
    """A tiny `torch` wheel that reports `version` and the given HIP/CUDA runtime (None = CPU build)."""
    files = {
        "torch/__init__.py": f"from . import version, cuda\n__version__ = {version!r}\n",
        "torch/version.py": f"__version__ = {version!r}\nhip = {hip!r}\ncuda = {cuda!r}\ngit_version = 'fake'\n",
        "torch/cuda.py": "def is_available():\n    return False\n\ndef device_count():\n    return 0\n",
    }
    files.update(extra_files or {})
    return build_wheel(dest, "torch", version, files=files, requires=requires, extras=extras, **tags)


def simple_index(root: Path, wheels: Iterable[Path]) -> Path:
    """A PEP 503 simple index folder (root/<project>/index.html) holding copies of `wheels`.

    Use `root.as_uri()` as an index URL for pip and uv.
    """
    root = Path(root)
    files = root / "files"
    files.mkdir(parents=True, exist_ok=True)
    projects: dict[str, list[str]] = {}
    for whl in wheels:
        shutil.copy2(whl, files / whl.name)
        projects.setdefault(normalize(whl.name.split("-")[0]), []).append(whl.name)
    for project, names in projects.items():
        page = root / project
        page.mkdir(parents=True, exist_ok=True)
        links = "\n".join(
            f'<a href="../files/{urllib.parse.quote(n)}#sha256={hashlib.sha256((files / n).read_bytes()).hexdigest()}">{n}</a><br/>'
            for n in sorted(names)
        )
        (page / "index.html").write_text(f"<!DOCTYPE html>\n<html><body>\n{links}\n</body></html>\n")
    top = "\n".join(f'<a href="{p}/">{p}</a><br/>' for p in sorted(projects))
    (root / "index.html").write_text(f"<!DOCTYPE html>\n<html><body>\n{top}\n</body></html>\n")
    return root


def flat_dir(root: Path, wheels: Iterable[Path]) -> Path:
    """A `--find-links` folder: the wheels side by side."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    for whl in wheels:
        shutil.copy2(whl, root / whl.name)
    return root


_BACKEND = '''"""A dependency-free PEP 517/660 backend for test projects (no setuptools/hatchling download)."""
import base64, hashlib, os, zipfile

NAME = {name!r}
VERSION = {version!r}
REQUIRES = {requires!r}
EXTRAS = {extras!r}
ROOT = os.path.dirname(os.path.abspath(__file__))


def _meta():
    lines = ["Metadata-Version: 2.1", "Name: " + NAME, "Version: " + VERSION]
    lines += ["Requires-Dist: " + r for r in REQUIRES]
    for extra, reqs in EXTRAS.items():
        lines.append("Provides-Extra: " + extra)
        lines += ["Requires-Dist: %s ; extra == %r" % (r, extra) for r in reqs]
    return "\\n".join(lines) + "\\n"


def _wheel(wheel_directory, files):
    dist = NAME.replace("-", "_")
    info = "%s-%s.dist-info" % (dist, VERSION)
    files = dict(files)
    files[info + "/METADATA"] = _meta()
    files[info + "/WHEEL"] = "Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"
    rec = []
    for p, t in files.items():
        d = hashlib.sha256(t.encode()).digest()
        rec.append("%s,sha256=%s,%d" % (p, base64.urlsafe_b64encode(d).rstrip(b"=").decode(), len(t.encode())))
    files[info + "/RECORD"] = "\\n".join(rec + [info + "/RECORD,,"]) + "\\n"
    name = "%s-%s-py3-none-any.whl" % (dist, VERSION)
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as zf:
        for p, t in files.items():
            zf.writestr(p, t)
    return name


def get_requires_for_build_wheel(config_settings=None):
    return []


get_requires_for_build_editable = get_requires_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    pkg = NAME.replace("-", "_")
    src = os.path.join(ROOT, pkg, "__init__.py")
    return _wheel(wheel_directory, {{pkg + "/__init__.py": open(src).read()}})


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, {{"_%s_editable.pth" % NAME.replace("-", "_"): ROOT + "\\n"}})
'''


def write_project(
    root: Path,
    name: str = "demo-train",
    version: str = "0.1.0",
    *,
    requires: Sequence[str] = (),
    extras: Mapping[str, Sequence[str]] | None = None,
    requires_python: str = ">=3.10",
) -> Path:
    """A small installable project (editable too) with `[extras]`, built by an in-tree backend.

    Needs no build backend from an index, so tests stay offline.
    """
    root = Path(root)
    pkg = root / name.replace("-", "_")
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(f"__version__ = {version!r}\n")
    extras = {k: list(v) for k, v in (extras or {"train": ["torch>=2.4"]}).items()}
    (root / "_backend.py").write_text(
        _BACKEND.format(name=name, version=version, requires=list(requires), extras=extras)
    )
    opt = "\n".join(f"{k} = {list(v)!r}" for k, v in extras.items()).replace("'", '"')
    (root / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "_backend"\nbackend-path = ["."]\n\n'
        f'[project]\nname = "{name}"\nversion = "{version}"\nrequires-python = "{requires_python}"\n'
        f"dependencies = {list(requires)!r}\n\n[project.optional-dependencies]\n{opt}\n".replace("'", '"')
    )
    return root


def pip_wheel() -> Path | None:
    """The pip wheel bundled with this interpreter's ensurepip (to seed pip offline), if any."""
    try:
        import ensurepip
    except ImportError:
        return None
    found = sorted((Path(ensurepip.__file__).parent / "_bundled").glob("pip-*.whl"))
    return found[-1] if found else None
