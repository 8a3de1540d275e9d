"""From CLI options to a selection: the one call every command makes."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from mw_env.base.errors import InputError
from mw_env.profiles.model import Resolved


def resolve(
    *,
    root: str | os.PathLike[str] | None = None,
    profile: str | None = None,
    profiles_dirs: Sequence[str | Path] = (),
    gpu: int | None = None,
    source: str | None = None,
    env: Mapping[str, str] | None = None,
    interpreters: bool = True,
) -> Resolved:
    """Machine (root / MW_ENV_ROOT) -> detect() -> load_profiles() -> select().

    A root that is not a folder is bad input (a typo must not read as "an empty machine, CPU profile").
    `interpreters=False` skips listing the Pythons on PATH (see detect()).
    """
    from mw_env.hardware.detect import detect
    from mw_env.hardware.machine import Machine
    from mw_env.profiles.loader import load_profiles
    from mw_env.profiles.select import select

    machine = Machine.from_env(root, env=env)
    if root or machine.env.get("MW_ENV_ROOT"):
        from_env = not root or str(root) == machine.env.get("MW_ENV_ROOT")
        _check_root(machine.root, given_as="MW_ENV_ROOT" if from_env else "--root")
    # Load (and validate) profiles first: a broken --profiles-dir should fail before any probing.
    profiles = load_profiles(extra_dirs=[Path(d) for d in profiles_dirs], env=machine.env)
    hardware = detect(machine, gpu=gpu, interpreters=interpreters)
    selection = select(hardware, profiles, name=profile, source=source)
    return Resolved(machine=machine, hardware=hardware, selection=selection, profiles=profiles)


def resolve_for_venv(
    *,
    record: object | None,
    root: str | os.PathLike[str] | None = None,
    profile: str | None = None,
    profiles_dirs: Sequence[str | Path] = (),
    gpu: int | None = None,
    source: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Resolved:
    """resolve() for work in an existing venv (doctor, train), given its bootstrap record (or None).

    The profile is never taken from the record: it is detected (or given), so a venv built for another profile
    (a CPU venv on a machine that has since got its GPU) is flagged by the doctor instead of trusted and trained
    on the CPU. When the record's profile is the one selected, the torch source bootstrap installed is kept, so
    a venv built with `--source` is judged against that source. Pythons on PATH are not listed (not needed).
    """
    resolved = resolve(
        root=root,
        profile=profile,
        profiles_dirs=profiles_dirs,
        gpu=gpu,
        env=env,
        source=source,
        interpreters=False,
    )
    recorded = getattr(record, "torch_source", None)
    same_profile = record is not None and getattr(record, "profile", None) == resolved.selection.profile.name
    if source is None and recorded and same_profile and resolved.selection.torch.id != recorded:
        from dataclasses import replace

        from mw_env.profiles.select import select

        try:
            # The same machine and profiles, another source: select again, never detect again.
            again = select(resolved.hardware, resolved.profiles, name=profile, source=recorded)
        except InputError:
            return resolved  # the profile no longer has that source: judge against today's choice
        return replace(resolved, selection=again)
    return resolved


def _check_root(root: Path, *, given_as: str) -> None:
    if not root.is_dir():
        what = "does not exist" if not root.exists() else "is not a folder"
        raise InputError(
            f"{given_as} {root}: {what}",
            hint="pass the folder that holds the machine's sys/, proc/, dev/ (a fake machine root), or omit it "
            "to read this machine",
        )
