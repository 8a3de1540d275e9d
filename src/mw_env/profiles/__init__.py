"""Hardware profiles: the model, the YAML loader, selection for a machine, and `resolve()`.

Importing this package is cheap (dataclasses only): YAML parsing and hardware detection are imported when
`load_profiles()` / `resolve()` run. The functions are bound here explicitly because their modules share
their names (`select`, `resolve`); the explicit import keeps the function, not the module, on the package.
"""

from __future__ import annotations

from mw_env.profiles.loader import PROFILES_ENV, SHIPPED_DIR, load_profile_file, load_profiles
from mw_env.profiles.model import (
    ArchOverride,
    DoctorExpectations,
    HostSpec,
    Match,
    Profile,
    Resolved,
    Selection,
    TorchSource,
    TrainerDefaults,
)
from mw_env.profiles.resolve import resolve, resolve_for_venv
from mw_env.profiles.select import get_profile, runtime_env, select

__all__ = [
    "PROFILES_ENV",
    "SHIPPED_DIR",
    "ArchOverride",
    "DoctorExpectations",
    "HostSpec",
    "Match",
    "Profile",
    "Resolved",
    "Selection",
    "TorchSource",
    "TrainerDefaults",
    "get_profile",
    "load_profile_file",
    "load_profiles",
    "resolve",
    "resolve_for_venv",
    "runtime_env",
    "select",
]
