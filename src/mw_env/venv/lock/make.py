"""Write the lock of a venv: uv locks the packages, mw-env adds its `[tool.mw-env]` table.

    what `uv pip freeze` lists (read_installed)      what is installed, exactly (the project itself left out)
    uv pip compile --format pylock.toml --no-deps    per group: torch (+ companions) with the torch index,
                                                     the rest with the user's sources; uv finds each file's
                                                     URL and sha256
    merge the two groups' [[packages]], append [tool.mw-env], validate (parse_lock), write atomically

A wheel bootstrap installed from a local wheelhouse (torch) is the exception: its entry is written by
localwheel.py in uv's form, from a hash read while the other steps ran, since uv would unpack it again.

Two groups because the torch index (download.pytorch.org) also serves numpy & co. with its own files: the
lock must name the files bootstrap installed, and bootstrap takes only torch from that index.
"""

from __future__ import annotations

import json
import platform
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mw_env.base.errors import InputError, StepFailed
from mw_env.base.shellquote import sh
from mw_env.base.textsafe import redact, safe
from mw_env.venv.lock.lockfile import FORMAT, Lock, LockMeta, normalize, parse_lock

if TYPE_CHECKING:
    from mw_env.profiles.model import Selection

HEADER = (
    "# Written by mw-env: the exact packages of a training venv, for the hardware in [tool.mw-env].\n"
    "# Rebuild it with `mw-env bootstrap --lock THIS_FILE`; the packages part is uv's (PEP 751).\n"
)


@dataclass(frozen=True)
class Frozen:
    """What `uv pip freeze` says is installed, split into what a lock can hold and what it cannot."""

    pins: dict[str, str]  # normalized name -> exact version
    skipped: tuple[str, ...]  # the project (editable / local folder) and other unlockable lines
    wheel_dirs: tuple[str, ...] = ()  # folders of wheels installed by path (`torch @ file:///w/torch-….whl`)


def freeze(uv: str, python: Path, env: Mapping[str, str]) -> Frozen:
    from mw_env.sources.uv import run_streaming, uv_env

    res = run_streaming([uv, "pip", "freeze", "--python", str(python)], env=uv_env(env), timeout=120)
    if not res.ok:
        raise StepFailed(
            f"`uv pip freeze` failed for {python} (exit {res.returncode}): {safe(res.tail(3), limit=400)}",
            hint="is this a working venv? `mw-env doctor` says what is wrong with it",
        )
    return parse_freeze(res.output)


def read_installed(venv: Path) -> Frozen | None:
    """What `uv pip freeze` says of the venv, read from its dist-info folders as uv reads them: the name and
    version from the folder's name, a direct_url.json making the line `name @ URL` (parse_freeze's rules apply
    to it). It saves the lock step a uv start and an interpreter query; the doctor's drift check reads the
    same folders (drift.installed). None where the venv holds what this reader does not take exactly as uv
    does (a legacy .egg-info or .egg-link install, a folder with an unusable name or an unreadable
    direct_url.json): `uv pip freeze` answers then. tests/envlock compares the two on real venvs."""
    import json
    import os
    import re

    from packaging.version import InvalidVersion, Version

    from mw_env.venv.venvinfo import site_packages

    site = site_packages(venv)
    if site is None:
        return None
    try:
        names = sorted(os.listdir(site))
    except OSError:
        return None
    lines: list[str] = []
    for entry in names:
        if entry.endswith((".egg-info", ".egg-link")):
            return None
        if not entry.endswith(".dist-info"):
            continue
        name, _, version = entry[: -len(".dist-info")].rpartition("-")
        if not re.fullmatch(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?", name):
            return None  # pip's "~orch-…" left over from an interrupted uninstall, and such
        try:
            Version(version)
        except InvalidVersion:
            return None
        direct = site / entry / "direct_url.json"
        if not direct.exists():
            lines.append(f"{normalize(name)}=={version}")
            continue
        try:
            data = json.loads(direct.read_text(encoding="utf-8"))
            url, editable = data["url"], bool((data.get("dir_info") or {}).get("editable"))
            vcs = data.get("vcs_info")
            if vcs:  # PEP 610: written back as uv writes it, `git+URL@COMMIT`
                url = f"{vcs['vcs']}+{url}@{vcs['commit_id']}"
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
        lines.append(f"-e {url}" if editable else f"{normalize(name)} @ {url}")
    return parse_freeze("\n".join(lines))


def parse_freeze(output: str) -> Frozen:
    from urllib.parse import unquote, urlsplit

    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    pins: dict[str, str] = {}
    skipped: list[str] = []
    dirs: list[str] = []
    for line in output.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "Using Python", "warning:")):
            continue
        name, sep, version = line.partition("==")
        if sep and " " not in name and "@" not in name:
            pins[normalize(name)] = version.strip()
            continue
        name, at, url = line.partition(" @ ")
        path = Path(unquote(urlsplit(url.strip()).path)) if at and url.startswith("file:") else None
        if path is not None and path.suffix == ".whl":
            try:  # a wheel installed by its path: locked by version, its folder searched like a wheelhouse
                pins[normalize(name)] = str(parse_wheel_filename(path.name)[1])
                dirs.append(str(path.parent))
                continue
            except InvalidWheelFilename:
                pass
        # `-e file:///src/mw-env`, `mw-env @ file:///src/mw-env`: the project, installed from a folder
        skipped.append(line)
    return Frozen(pins, tuple(skipped), tuple(dict.fromkeys(dirs)))


def compile_lock(
    *,
    uv: str,
    python: Path,
    pins: Mapping[str, str],
    env: Mapping[str, str],
    source_args: Sequence[str],
    torch_index: str | None = None,
    companions: Sequence[str] = (),
    offline: bool = False,
    local: Mapping[str, Path] | None = None,
    best_match: Sequence[str] = (),
) -> str:
    """uv's pylock.toml for exactly `pins` (no resolution beyond them), torch's group from `torch_index`.
    `local`: name -> the wheel file it was installed from, whose entry is written here (localwheel.py).
    `best_match`: the packages pip installed, locked from whichever index holds their version."""
    from mw_env.venv.lock.localwheel import entry

    torch_group = {"torch", *(normalize(c) for c in companions)}
    own = {n: path for n, path in (local or {}).items() if n in pins}
    if len(own) == len(pins):  # nothing left for uv, which writes the file's header: let it lock them all
        own = {}
    rest = {n: v for n, v in pins.items() if n not in torch_group and n not in own}
    by_pip = set(best_match) & set(rest)
    # Each group resolved as it was installed: torch from its index (first-index), what uv installed with
    # the user's own uv settings, what pip installed as pip resolves (the best version of all indexes: pandas
    # from PyPI beside a corporate mirror that holds older ones; issue 40).
    groups: list[tuple[dict[str, str], str | None, list[str]]] = [
        ({n: v for n, v in pins.items() if n in torch_group and n not in own}, torch_index, []),
        ({n: v for n, v in rest.items() if n not in by_pip}, None, []),
        ({n: v for n, v in rest.items() if n in by_pip}, None, ["--index-strategy", "unsafe-best-match"]),
    ]
    header, blocks = "", []
    with tempfile.TemporaryDirectory(prefix="mw-env-lock-") as tmp:
        for i, (group, index, strategy) in enumerate(groups):
            mine = [n for n in sorted(own) if (n in torch_group) == (i == 0)] if i < 2 else []
            extra = [entry(n, pins[n], own[n], _sha256(own[n])) for n in mine]
            if not group:
                blocks.extend(extra)
                continue
            req = Path(tmp) / f"requirements-{i}.txt"
            req.write_text("".join(f"{n}=={v}\n" for n, v in sorted(group.items())), encoding="utf-8")
            out = Path(tmp) / f"pylock.{i}.toml"
            argv = [uv, "pip", "compile", "--quiet", "--format", "pylock.toml", "--no-header", "--no-deps"]
            argv += ["--python", str(python), *(["--offline"] if offline else [])]
            if index:
                # As bootstrap's torch step: the torch index first (uv asks `--index`es in the order given),
                # first-index so that no other index's torch (PyPI's CUDA build) can answer for it.
                argv += ["--index", index, "--index-strategy", "first-index"]
            argv += [*strategy, *source_args, str(req), "-o", str(out)]
            text = _run_compile(argv, env, out, Path(python).parent.parent)
            head, _, body = text.partition("[[packages]]")
            header = header or head
            found = [
                "[[packages]]" + b.rstrip() + "\n"
                for b in ("\n[[packages]]" + body).split("\n[[packages]]")[1:]
            ]
            blocks.extend(sorted([*found, *extra], key=_block_name) if extra else found)
    return HEADER + header.rstrip() + "\n\n" + "\n".join(blocks)


def _block_name(block: str) -> str:
    line = block.split("\n", 2)[1]  # `name = "torch"`, uv's first key of a [[packages]] block
    return line.partition("=")[2].strip().strip('"')


def _sha256(path: Path) -> str:
    from mw_env.sources import wheelhash

    try:
        return wheelhash.sha256(path)
    except OSError as exc:
        raise StepFailed(
            f"cannot read {path} to hash it for the lock: {exc.strerror or exc}",
            hint="the wheelhouse file torch was installed from must stay readable until the lock is written",
        ) from None


def _run_compile(argv: list[str], env: Mapping[str, str], out: Path, venv: Path) -> str:
    from mw_env.sources.uv import run_streaming, uv_env
    from mw_env.venv.lock import lockfail

    res = run_streaming(argv, env=uv_env(env), timeout=600)
    if not res.ok or not out.is_file():
        # uv's cause whole, each sentence once (it repeats its index-strategy advice for every package).
        raise StepFailed(
            f"uv could not lock the venv's packages (exit {res.returncode}): "
            + safe(lockfail.cause(res.output), limit=None),
            hint=lockfail.hint(res.output, venv),
        )
    return out.read_text(encoding="utf-8")


def pip_installed(venv: Path, names: Sequence[str]) -> set[str]:
    """The packages of `names` that pip installed (their dist-info's INSTALLER)."""
    from mw_env.venv.venvinfo import site_packages

    site = site_packages(venv)
    found: set[str] = set()
    if site is None:
        return found
    wanted = set(names)
    for d in site.glob("*.dist-info"):
        name = normalize(d.name[: -len(".dist-info")].rpartition("-")[0])
        if name in wanted:
            try:
                if (d / "INSTALLER").read_text(encoding="utf-8").strip() == "pip":
                    found.add(name)
            except OSError:
                continue
    return found


def tool_table(meta: LockMeta) -> str:
    """`[tool.mw-env]` as TOML (strings quoted by json, which TOML's basic strings accept)."""
    lines = ["[tool.mw-env]", f"format = {FORMAT}"]
    for name in LockMeta.__dataclass_fields__:
        if name == "env":
            continue
        value = getattr(meta, name)
        if value:
            lines.append(f"{name.replace('_', '-')} = {json.dumps(redact(value), ensure_ascii=False)}")
    lines.append("")
    lines.append("[tool.mw-env.env]")
    lines += [f"{k} = {json.dumps(v, ensure_ascii=False)}" for k, v in sorted(meta.env.items())]
    return "\n".join(lines) + "\n"


def render(packages_text: str, meta: LockMeta, *, source: str) -> Lock:
    """The whole lock text, validated by the same reader that reads it back."""
    text = packages_text.rstrip() + "\n\n" + tool_table(meta)
    return parse_lock(text, source=source)


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def machine_platform() -> str:
    return f"{sys.platform}-{platform.machine()}"


def write_lock(lock: Lock, output: Path) -> Path:
    from mw_env.base.atomic import write_text_atomic

    output = Path(output).expanduser()
    if output.is_dir():
        raise InputError(f"--output {output} is a folder", hint="name the lock file, e.g. pylock.mw-env.toml")
    write_text_atomic(output, lock.text)
    return output


def lock_venv(
    *,
    venv: Path,
    selection: Selection | None,
    env: Mapping[str, str],
    uv: str | None = None,
    find_links: Sequence[str] = (),
    offline: bool = False,
    torch_index: str | None = None,
    target: Mapping[str, str] | None = None,
    companions: Sequence[str] | None = None,
    source_args: Sequence[str] | None = None,
    wheels: Sequence[Path] = (),
) -> Lock:
    """The lock of a venv bootstrap made (its record says the profile and torch), on this machine.
    `wheels`: local wheel files bootstrap installed (torch from a wheelhouse); their entries are written
    without uv where that is certain (localwheel.py)."""
    import mw_env
    from mw_env.sources.uv import find_uv
    from mw_env.sources.wheelhouse import discover
    from mw_env.venv.lock.match import meta_for, target_of
    from mw_env.venv.record import RECORD_FILE as RECORD
    from mw_env.venv.record import create_command, read_record

    venv = Path(venv).expanduser().absolute()
    python = venv / "bin" / "python"
    record = read_record(venv) if python.exists() else None
    if record is None:
        raise InputError(
            f"{venv} is not a venv made by mw-env bootstrap (no {python if not python.exists() else RECORD})",
            hint=f"bootstrap it first ({create_command(venv)}); the lock names its profile and torch",
        )
    if record.adopted:
        raise InputError(
            f"{venv} uses the base image's torch (outside the venv): a lock cannot rebuild it",
            hint="lock the image instead (its Dockerfile), or bootstrap with --no-adopt-torch",
        )
    uv = uv or find_uv(env)
    if uv is None:
        raise InputError(
            "uv is not installed, and the lock is written by uv", hint="run `mw-env bootstrap` once"
        )
    frozen = read_installed(venv) or freeze(uv, python, env)
    if "torch" not in frozen.pins:
        raise InputError(f"{venv} holds no torch", hint=f"re-run `mw-env bootstrap --venv {sh(venv)}`")
    sources = discover(env=env, find_links=find_links)
    args = list(source_args) if source_args is not None else sources.uv_args()
    for folder in frozen.wheel_dirs:
        args += _find_links(args, folder)
    index = torch_index or _torch_index(record.torch_index, selection)
    if index and "://" not in index:  # torch came from a wheel file: its folder is a wheelhouse
        args += _find_links(args, str(Path(index).parent))
        wheels = (*wheels, Path(index))
        index = None
    local = _local(venv, frozen.pins, wheels, _folders(args))  # every folder uv is given, and only those
    if companions is None:
        companions = tuple(getattr(getattr(selection, "torch", None), "companions", ()) or ())
    text = compile_lock(
        uv=uv,
        python=python,
        pins=frozen.pins,
        env=env,
        source_args=args,
        torch_index=index,
        companions=companions,
        offline=offline or sources.no_index,
        local=local,
        best_match=sorted(pip_installed(venv, list(frozen.pins))),
    )
    if target is None:
        assert selection is not None, "lock_venv needs the target hardware or the selection it comes from"
        target = target_of(selection)
    meta = meta_for(
        record,
        target,
        mw_env_version=mw_env.__version__,
        created=now_iso(),
        platform=machine_platform(),
    )
    return render(text, meta, source=f"the lock of {venv}")


def _folders(args: Sequence[str]) -> list[str]:
    """The `--find-links` values of uv arguments."""
    return [a for i, a in enumerate(args) if i and args[i - 1] == "--find-links"]


def _find_links(args: Sequence[str], folder: str) -> list[str]:
    """`--find-links folder` unless `args` has it already: uv lists a wheel once per time it finds it."""
    have = {Path(a).resolve() for a in _folders(args) if "://" not in a}
    return [] if Path(folder).resolve() in have else ["--find-links", folder]


def _local(
    venv: Path, pins: Mapping[str, str], wheels: Sequence[Path], folders: Sequence[str]
) -> dict[str, Path]:
    from mw_env.venv.lock.localwheel import local_entries
    from mw_env.venv.venvinfo import site_packages, venv_python_version

    python = venv_python_version(venv) if wheels else None
    if not python:
        return {}
    return local_entries(pins, wheels, site=site_packages(venv), folders=folders, python=python)


def _torch_index(recorded: str | None, selection: Selection | None) -> str | None:
    """The record keeps the index URL with its credentials hidden; the profile's own URL restores them."""
    profile_url = getattr(getattr(selection, "torch", None), "index_url", None)
    if recorded and profile_url and redact(profile_url) == recorded:
        return profile_url
    return recorded
