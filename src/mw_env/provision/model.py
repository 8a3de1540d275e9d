"""The plan's data: options, steps and the plan itself (plain frozen dataclasses)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from mw_env.base.textsafe import redact
from mw_env.provision.choose import AdoptCandidate, Interpreter, Problem, TorchChoice
from mw_env.sources.uvconfig import NO_CONFIG, UvConfig
from mw_env.sources.wheelhouse import Sources

if TYPE_CHECKING:
    from mw_env.profiles.disk import DiskNeed
    from mw_env.provision.archtruth import ArchPolicy, WheelVerdict
    from mw_env.provision.torchindex import StepIndex
    from mw_env.provision.torchpick import IndexPick
    from mw_env.venv.lock.lockfile import Lock

GiB = 1024**3


class TorchSourceLike(Protocol):
    """What a plan reads of a profile's torch source (profiles.model.TorchSource, frozen: read-only here)."""

    @property
    def build(self) -> str: ...
    @property
    def index_url(self) -> str | None: ...
    @property
    def version(self) -> str: ...
    @property
    def local_tag(self) -> str: ...


@dataclass(frozen=True)
class BootstrapOptions:
    venv: Path
    python: str = "3.12"
    python_explicit: bool = False  # an explicit --python never falls back
    project: Path | None = None  # whose [extras]; None = mw-env itself
    extras: tuple[str, ...] = ("train",)
    torch_index: str | None = None  # replaces the profile's index
    find_links: tuple[str, ...] = ()
    offline: bool = False
    recreate: bool = False
    adopt: bool | None = None  # reuse an image's torch: True, False, None = not decided (plan reports it)
    doctor: bool = True
    # `bootstrap --lock FILE`: the validated lock (envlock.lockfile.Lock); its packages are installed exactly.
    lock: Lock | None = None
    # The hardware the venv's lock names (gpu, arch, required_arch, driver_floor: envlock.match.target_of).
    lock_target: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Step:
    id: str
    title: str
    command: tuple[str, ...] | None
    done: bool
    detail: str = ""

    def to_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "title": self.title,
            # The commands hold an index URL as given; what is shown or written hides its credentials.
            "command": [redact(a) for a in self.command] if self.command else None,
            "done": self.done,
        }


@dataclass(frozen=True)
class Plan:
    profile: str
    venv: Path  # where the venv ends up
    build_venv: Path  # where the steps build it (beside the old one with --recreate)
    steps: tuple[Step, ...]
    build: str  # "rocm" | "cuda" | "cpu"
    local_tag: str
    version_spec: str
    python: Interpreter | None
    torch: TorchChoice | None
    uv: str | None
    sources: Sources
    runtime_env: dict[str, str]
    project_args: tuple[str, ...]  # ("-e", "/src/mw-env[train]") or ("mw-env[train]==0.1.0",)
    companions: tuple[str, ...] = ()
    # torch's extras that select GPU kernels (("device-gfx1103",) on AMD's multi-arch index), and the
    # per-GPU packages they install (pinned with torch, so the extras step can never swap in PyPI's placeholder).
    torch_extras: tuple[str, ...] = ()
    device_packages: tuple[str, ...] = ()
    arch_policy: ArchPolicy | None = None  # the GPU target and the table's override (AMD)
    wheel: WheelVerdict | None = None  # what the installed wheel said (set once torch is in)
    index_pick: IndexPick | None = None  # the exact torch the index serves, and its stated size
    reason: str = ""  # the selection's reason: the profile, and why its torch source won
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # one-line facts about the choices (no action needed)
    # Found while planning: the dry run shows it, the preflight step stops on it.
    problem: Problem | None = None
    # The index torch comes from when no wheelhouse holds it (--torch-index wins over the profile's).
    torch_index: str | None = None
    torch_source: str | None = None  # the profile's source id ("rocm6.4"), recorded for doctor/train
    # The torch step's indexes in uv's order, each with how it answers (its generated uv.toml, torchindex.py).
    torch_indexes: tuple[StepIndex, ...] = ()
    torch_uv: UvConfig = NO_CONFIG  # the user's uv configuration that file carries (sources/uvconfig.py)
    adoptable: AdoptCandidate | None = None  # an image torch the caller may offer to reuse
    adopted: AdoptCandidate | None = None
    disk_need: int = 0  # bytes the preflight wants free (disk.need_bytes for a fresh install)
    disk: DiskNeed | None = None  # what the chosen source installs (profiles/disk.py), shared with the doctor
    options: BootstrapOptions | None = None
    proj_key: str = ""
    env: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def lock(self) -> Lock | None:
        """The lock this bootstrap installs from (`--lock`), or None."""
        return self.options.lock if self.options else None

    @property
    def lock_target(self) -> dict[str, str]:
        """The hardware the lock written for this venv names."""
        return dict(self.options.lock_target) if self.options else {}

    @property
    def venv_python(self) -> Path:
        return self.build_venv / "bin" / "python"

    def step(self, step_id: str) -> Step:
        return next(s for s in self.steps if s.id == step_id)

    def to_dict(self) -> dict[str, object]:
        """The `bootstrap --dry-run --json` contract (design.md), plus a few extra fields."""
        return {
            "profile": self.profile,
            "venv": str(self.venv),
            "steps": [s.to_dict() for s in self.steps],
            "build_venv": str(self.build_venv),
            "python": self.python.path if self.python else None,
            "python_version": self.python.version if self.python else None,
            "torch": {
                "requirement": self.torch.requirement,
                "origin": self.torch.origin,
                "location": redact(self.torch.location) if self.torch.location else None,
            }
            if self.torch
            else None,
            "torch_source": self.torch_source,
            "reason": self.reason,
            "torch_extras": list(self.torch_extras),
            "device_packages": list(self.device_packages),
            "torch_version": (self.index_pick.version if self.index_pick else None)
            or (
                self.torch.requirement.split("==", 1)[1]
                if self.torch and "==" in self.torch.requirement
                else None
            ),
            "index": redact(self.torch_index) if self.torch_index else None,
            "indexes": [ix.to_dict() for ix in self.torch_indexes],
            "uv_config_files": list(self.torch_uv.files),  # the user's, carried into the torch step's file
            "disk": {**self.disk.to_dict(), "preflight_bytes": self.disk_need} if self.disk else None,
            "download_bytes": self.index_pick.download_bytes if self.index_pick else None,
            "download_note": (
                "stated by the index"
                if self.index_pick and self.index_pick.sizes_stated
                else "not stated by the index"
                if self.index_pick
                else None
            ),
            "override": self._override(),
            "env": dict(self.runtime_env),  # what the env step writes to mw-env.env
            "warnings": list(self.warnings),
            "notes": list(self.notes),
            "problem": self.problem.message if self.problem else None,
            "adoptable": {"python": self.adoptable.python.path, "torch": self.adoptable.version}
            if self.adoptable
            else None,
            "lock": {
                "source": self.lock.source,
                "sha256": self.lock.sha256,
                "hardware": self.lock.meta.hardware(),
            }
            if self.lock
            else None,
        }

    def _override(self) -> dict[str, Any] | None:
        """The HSA_OVERRIDE_GFX_VERSION decision and why (AMD plans with a known GPU target)."""
        if self.arch_policy is None:
            return None
        value = self.runtime_env.get("HSA_OVERRIDE_GFX_VERSION")
        out = {"value": value, "set": value is not None, "gfx": self.arch_policy.gfx}
        out["reason"] = self.wheel.decision if self.wheel is not None else self.arch_policy.reason
        out["decided_by"] = (
            "the installed wheel" if self.wheel is not None else "the profile's table (checked after install)"
        )
        return out
