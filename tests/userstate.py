"""The suite never touches its user's state (issue 40): `make test` had recorded a pytest temp venv as "the venv
bootstrap built last" in the user's state file, and `mw-env env` then exported that temp venv.

- Every test process runs with HOME, the XDG folders and MW_ENV_STATE_DIR in the session's temp folder
  (`redirected_env`), set before collection. What stays shared is read-mostly and costly to rebuild: uv's
  cache (a cold one per worker would make every install test download and unpack again), uv's managed
  Pythons, and pyenv's root (the shims on PATH find it through HOME). The user's pip and uv configuration
  files are copied in, so the tests read the sources they always read.
- The process that is not an xdist worker records the user's mw-env state (the state file, mw-env's folders
  under HOME) and the names in HOME's top folders at the start (`snapshot`: a few listdirs and stats). A
  change of mw-env's state by the end fails the session (`changes`); a new name in HOME's top folders is
  reported, not failed: other processes of the same user write there too (a `top` made ~/.config/procps
  during a run on the shared development machine), and no test can write there with HOME moved.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

XDG = {
    "XDG_CONFIG_HOME": ".config",
    "XDG_CACHE_HOME": ".cache",
    "XDG_DATA_HOME": ".local/share",
    "XDG_STATE_HOME": ".local/state",
}
_DEEP_LIMIT = 500  # files recorded under one of mw-env's own folders (a state folder holds a few)


def _home(env: Mapping[str, str]) -> Path:
    return Path(env.get("HOME") or Path.home())


def _xdg(env: Mapping[str, str], var: str) -> Path:
    return Path(env.get(var) or _home(env) / XDG[var])


def shared(env: Mapping[str, str]) -> dict[str, str]:
    """The user's folders the tests keep using: uv's cache and Pythons, pyenv's root."""
    out = {"UV_CACHE_DIR": env.get("UV_CACHE_DIR") or str(_xdg(env, "XDG_CACHE_HOME") / "uv")}
    pythons = env.get("UV_PYTHON_INSTALL_DIR") or str(_xdg(env, "XDG_DATA_HOME") / "uv" / "python")
    if Path(pythons).is_dir():
        out["UV_PYTHON_INSTALL_DIR"] = pythons
    pyenv = env.get("PYENV_ROOT") or str(_home(env) / ".pyenv")
    if Path(pyenv).is_dir():
        out["PYENV_ROOT"] = pyenv
    return out


def redirected_env(real: Mapping[str, str], home: Path) -> dict[str, str]:
    """The variables that put a test process's HOME and state into `home` (made here), the user's pip and uv
    configuration copied in."""
    home.mkdir(parents=True, exist_ok=True)
    out = {"HOME": str(home), **{var: str(home / rel) for var, rel in XDG.items()}}
    out["MW_ENV_STATE_DIR"] = str(home / ".local" / "state" / "mw-env")
    out.update(shared(real))
    config = _xdg(real, "XDG_CONFIG_HOME")
    for src, dst in (
        (config / "pip" / "pip.conf", home / ".config" / "pip" / "pip.conf"),
        (_home(real) / ".pip" / "pip.conf", home / ".pip" / "pip.conf"),
        (config / "uv" / "uv.toml", home / ".config" / "uv" / "uv.toml"),
    ):
        if src.is_file() and not dst.exists():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
    return out


def _watched(real: Mapping[str, str]) -> tuple[list[Path], list[Path], list[Path]]:
    """(mw-env's own places, recorded file by file; mw-env's own folders whose entries' names are recorded;
    HOME's top folders whose entries' names are recorded)."""
    from mw_env.venv.record import last_venv_file

    home = _home(real)
    deep = [last_venv_file(real).parent, home / ".local" / "share" / "mw-env", home / ".local" / "bin" / "uv"]
    own = [home / "training-venv"]
    tops = [home, home / ".local", home / ".local" / "bin", *(_xdg(real, var) for var in XDG)]
    return deep, own, list(dict.fromkeys(tops))


def snapshot(real: Mapping[str, str]) -> dict[str, dict[str, object]]:
    """{"mw-env": mw-env's own state, "home": the names in HOME's top folders}."""
    deep, own, tops = _watched(real)
    allowed = {Path(p) for p in shared(real).values()}
    mine: dict[str, object] = {}
    for top in deep:
        for path in _files(top):
            try:
                st = path.stat()
            except OSError:
                continue
            mine[str(path)] = (st.st_size, st.st_mtime_ns, path.read_bytes() if st.st_size < 4096 else b"")
    mine.update(_names(own, allowed))
    return {"mw-env": mine, "home": _names(tops, allowed)}


def _names(folders: list[Path], allowed: set[Path]) -> dict[str, object]:
    out: dict[str, object] = {}
    for folder in folders:
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            names = None
        # A shared folder (uv's cache) may be made by the suite where it did not exist yet.
        kept = [n for n in names or () if not any(_holds(folder / n, a) for a in allowed)]
        out[f"{folder}/"] = kept if names is not None else None
    return out


def _holds(path: Path, inner: Path) -> bool:
    return inner == path or path in inner.parents


def _files(top: Path) -> list[Path]:
    if top.is_file():
        return [top]
    found: list[Path] = []
    for root, dirs, files in os.walk(top):
        dirs.sort()
        found += [Path(root) / f for f in sorted(files)]
        if len(found) >= _DEEP_LIMIT:
            break
    return found[:_DEEP_LIMIT]


def changes(before: Mapping[str, object], after: Mapping[str, object]) -> list[str]:
    """What differs between two parts of a snapshot, one line each (a file's new content shown when it is
    short text)."""
    out = []
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key), after.get(key)
        if old == new or (key.endswith("/") and not old and not new):
            continue  # a folder made empty (or only for a shared one) is no change of the user's
        if key.endswith("/"):
            gone = sorted(set(old or ()) - set(new or ()))  # type: ignore[arg-type]
            made = sorted(set(new or ()) - set(old or ()))  # type: ignore[arg-type]
            out.append(f"{key}: new {made}, removed {gone}")
        elif new is None:
            out.append(f"{key}: removed")
        else:
            text = new[2].decode(errors="replace").strip()[:200]  # type: ignore[index]
            out.append(f"{key}: {'created' if old is None else 'changed'} ({text!r})")
    return out
