"""From CLI options to a selection: the one call every command makes."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from mw_env.profiles.model import Resolved


def resolve(
    *,
    root: str | os.PathLike[str] | None = None,
    profile: str | None = None,
    profiles_dirs: Sequence[str | Path] = (),
    gpu: int | None = None,
    source: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Resolved:
    """Machine (root / MW_ENV_ROOT) -> detect() -> load_profiles() -> select()."""
    from mw_env.detect import detect
    from mw_env.machine import Machine
    from mw_env.profiles.loader import load_profiles
    from mw_env.profiles.select import select

    machine = Machine.from_env(root, env=env)
    # Load (and validate) profiles first: a broken --profiles-dir should fail before any probing.
    profiles = load_profiles(extra_dirs=[Path(d) for d in profiles_dirs], env=machine.env)
    hardware = detect(machine, gpu=gpu)
    selection = select(hardware, profiles, name=profile, source=source)
    return Resolved(machine=machine, hardware=hardware, selection=selection, profiles=profiles)
