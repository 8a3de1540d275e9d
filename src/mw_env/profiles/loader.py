"""Load profile YAML files (shipped, --profiles-dir, MW_ENV_PROFILES) and validate them strictly.

Every problem is an InputError that names the file, the key (dotted path) and what is allowed, because a
profile typo must never silently fall back to a default: a wrong index URL costs a multi-GB download.
The rules live in schema.py; this module finds the files and merges the folders.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from mw_env.base.errors import InputError
from mw_env.profiles import torchsources
from mw_env.profiles.model import Profile
from mw_env.profiles.schema import Ctx, parse_profile
from mw_env.profiles.torchsources import CATALOGUE_FILE, Entries

SHIPPED_DIR = Path(__file__).resolve().parent
PROFILES_ENV = "MW_ENV_PROFILES"


def load_profile_file(path: Path, *, shipped: bool = False, catalogue: Entries | None = None) -> Profile:
    """Read and validate one profile file (a bounded read of a regular UTF-8 file, then strict YAML); its
    source ids are looked up in `catalogue` (the shipped source catalogue by default)."""
    from mw_env.base.userfile import load_yaml, read_text

    text = read_text(path, what="profile")
    data = _shipped_data(path, text) if shipped else None
    if data is None:
        data = load_yaml(text, source=f"profile {path}", shipped=shipped)
    if isinstance(data, Mapping) and "sources" in data:
        # Named sources become the catalogue's entries: the rest of the loader sees whole sources.
        entries = torchsources.load() if catalogue is None else catalogue
        data = {**data, "sources": torchsources.expand(data["sources"], entries, path=path, shipped=shipped)}
    profile = parse_profile(data, path=path, shipped=shipped)
    if profile.name != path.stem:
        raise Ctx(path).fail(
            "name", f"{profile.name!r} differs from the file name {path.stem!r}", f"name: {path.stem}"
        )
    return profile


def _shipped_data(path: Path, text: str) -> object | None:
    # A shipped file's data from the JSON index (profiles/index.py) while the file is unchanged: no PyYAML
    # import or parse for the files every command reads.
    if path.parent != SHIPPED_DIR:
        return None
    from mw_env.profiles.index import cached

    return cached(path.name, text)


def _dir_profiles(folder: Path, *, shipped: bool, catalogue: Entries) -> list[Profile]:
    if not folder.is_dir():
        raise InputError(
            f"profiles folder {folder} does not exist or is not a folder",
            hint=f"pass an existing folder to --profiles-dir / {PROFILES_ENV}",
        )
    # sources.yaml is the folder's source catalogue (torchsources.py), not a profile.
    files = sorted(f for f in [*folder.glob("*.yaml"), *folder.glob("*.yml")] if f.name != CATALOGUE_FILE)
    seen: dict[str, Path] = {}
    out = []
    for f in files:
        if f.stem in seen:
            raise InputError(
                f"profiles folder {folder}: {seen[f.stem].name} and {f.name} both define {f.stem!r}",
                hint="keep one of them",
            )
        seen[f.stem] = f
        out.append(load_profile_file(f, shipped=shipped, catalogue=catalogue))
    return out


def profile_dirs_from_env(env: Mapping[str, str] | None) -> list[Path]:
    """The folders named by MW_ENV_PROFILES (':'-separated; empty entries ignored)."""
    value = (os.environ if env is None else env).get(PROFILES_ENV, "")
    return [Path(p).expanduser() for p in value.split(os.pathsep) if p.strip()]


def load_profiles(
    *, extra_dirs: Sequence[Path | str] = (), env: Mapping[str, str] | None = None
) -> dict[str, Profile]:
    """Shipped profiles, then MW_ENV_PROFILES folders, then `extra_dirs` (--profiles-dir); later ones replace
    earlier ones with the same name. Every file is validated the same way."""
    folders = [*profile_dirs_from_env(env), *(Path(d).expanduser() for d in extra_dirs)]
    # One catalogue for every profile: the shipped sources.yaml, then each folder's own (a mirror, a new index).
    catalogue = torchsources.load([f for f in folders if f.is_dir()])
    profiles: dict[str, Profile] = {
        p.name: p for p in _dir_profiles(SHIPPED_DIR, shipped=True, catalogue=catalogue)
    }
    for folder in folders:
        for p in _dir_profiles(folder, shipped=False, catalogue=catalogue):
            profiles[p.name] = p
    names = set(profiles)
    for p in profiles.values():
        for alias in p.aliases:
            if alias in names:
                raise InputError(
                    f"profile {p.path}: aliases: {alias!r} is already a profile name",
                    hint="choose another alias",
                )
    return profiles
